/*
 * opts.h - the launcher's settings: one table of options (a settings_table,
 * common/settings.h) shared by the command line (args.c) and INI job files
 * (jobfile.c), so every flag has exactly one name, one parser and one
 * default.
 *
 * Pure module: no I/O. Strings are owned by struct launch_opts and freed by
 * opts_release().
 */
#ifndef DDP_LAUNCHER_OPTS_H
#define DDP_LAUNCHER_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "settings.h"

#define OPTS_MAX_SIGNALS    16
#define OPTS_ERR_LEN	    256
#define OPTS_SLURM_USED_MAX 768
#define OPTS_PET_USED_MAX   768

/* --pass_local_rank: no argument, --local_rank=N (torch.distributed.launch
 * before torch 2.0), --local-rank=N (torch 2.x). */
enum {
	OPTS_LOCAL_RANK_NONE = 0,
	OPTS_LOCAL_RANK_UNDERSCORE = 1,
	OPTS_LOCAL_RANK_DASH = 2,
};

/* Where a value came from, in rising precedence: a value is never
 * overridden by one from a source below it (a Slurm value by a PET_* one,
 * either by a job-file one, any of them by a command-line one); defaults
 * are set unconditionally. */
enum opts_source {
	OPTS_SRC_DEFAULT = 0,
	OPTS_SRC_SLURM = 1, /* the Slurm step (opts_slurm.h) */
	OPTS_SRC_PET = 2,   /* torchrun's PET_<FLAG> variables (opts_pet.h) */
	OPTS_SRC_FILE = 3,
	OPTS_SRC_CLI = 4,
};

/* Per-local-rank stream selection of -r/--redirects and -t/--tee:
 * bit 0 = stdout, bit 1 = stderr (torchrun's 0..3). */
struct opts_streams {
	int all; /* applies to ranks not listed, -1: not given */
	int n;	 /* entries in rank[]/mask[] */
	int rank[64];
	int mask[64];
};

/* A NULL-terminated list of strings (v[n] == NULL once non-empty); grows
 * by doubling, so n pushes cost O(n). */
struct opts_strv {
	char **v;
	size_t n;
	size_t cap; /* entries allocated in v, the NULL included */
};

/* --metrics_port: where the agent serves /metrics (metrics_http.h). */
struct opts_metrics {
	int port;      /* -1: off (the default); 0: a free port */
	char addr[64]; /* a literal, or "": every interface */
};

#define OPTS_HANG_AUTO 0.0
#define OPTS_HANG_OFF  (-1.0)
#define OPTS_HANG_MIN  0.5

struct launch_opts {
	/* the launch */
	char *nproc_spec; /* "4", "gpu", "cpu", "auto" */
	int nnodes_min, nnodes_max;
	int node_rank; /* -1: not given (static: 0, see opts_rdzv.h) */
	char *master_addr;
	int master_port; /* -1: not given (29500 if free) */
	bool standalone;
	char *rdzv_backend, *rdzv_endpoint, *rdzv_id, *rdzv_conf;
	char *rdzv_token; /* never printed (opts_rdzv.h) */
	int max_restarts;
	double monitor_interval; /* accepted; supervision is event-driven */
	char *log_dir;
	struct opts_streams redirects, tee;
	char *local_ranks_filter; /* "0,2" or NULL: every rank on the console */
	char *role;
	bool no_python, module;
	char *local_addr;
	char *start_method;
	int pass_local_rank; /* OPTS_LOCAL_RANK_*, see opts_local_rank_arg */
	int use_env;	     /* -1: not given; 0, 1: given false, true */
	bool strict_port;
	double grace_period; /* seconds */
	/* --hang_timeout: how long a worker may make no progress (outside or
	 * inside a collective) before it is named and cut out; OPTS_HANG_AUTO
	 * (learned from the job: launcher/agent/hang_deadline.h), OPTS_HANG_OFF,
	 * or seconds >= OPTS_HANG_MIN */
	double hang_timeout;
	int signals[OPTS_MAX_SIGNALS]; /* passed on, then the job stops */
	int nsignals;
	int forward_signals[OPTS_MAX_SIGNALS]; /* passed on, the job goes on */
	int nforward;
	double backoff_initial, backoff_max; /* seconds */
	bool no_prefix;
	char *prefix; /* format, "%r" = rank, "%l" = local rank */
	char *config;
	bool dry_run; /* print the resolved job and exit */
	struct opts_metrics metrics;

	/* Slurm (opts_slurm.h) */
	bool no_slurm;			      /* --no_slurm: take nothing from Slurm */
	unsigned slurm_port_range[2];	      /* LO, HI; 0, 0: 29500-29999 */
	char slurm_used[OPTS_SLURM_USED_MAX]; /* what came from Slurm (one line), or "" */
	bool slurm_endpoint; /* --rdzv_endpoint is the step's first node's (node 0's) */

	/* torchrun's environment (opts_pet.h) */
	char pet_used[OPTS_PET_USED_MAX]; /* what came from PET_* (one line), or "" */

	/* the program */
	char *program;
	struct opts_strv args;
	bool program_from_cli;
	/* extra environment, "NAME=VALUE" */
	struct opts_strv env;

	/* Per source (set_by[OPTS_SRC_DEFAULT] stays 0), a bit per table
	 * entry that the source set. */
	uint64_t set_by[OPTS_SRC_CLI + 1];
	uint64_t pet_by_alias; /* entries set by PET_<ALIAS>, not PET_<NAME> */
};

/* The option table (opts_values.c): names, aliases, types (for "did you mean" and the
 * command line's words). */
extern const struct settings_table opts_settings;

/* Fills defaults. Returns 0 or -ENOMEM. */
int opts_init(struct launch_opts *o);
void opts_release(struct launch_opts *o);

/* Sets option `name` (underscores or dashes; no leading "--") to `value`
 * (NULL for a flag given without a value: booleans become true).
 * A value from a source other than OPTS_SRC_DEFAULT is ignored (returns 0)
 * when a source above it already set the key. Returns 0; -ENOENT unknown name; -EINVAL bad value
 * (err filled with a message naming the value and what is expected); -ENOMEM. */
int opts_set(struct launch_opts *o, const char *name, const char *value, enum opts_source src,
	     char *err, size_t errlen);

/* Where entry `i` of opts_settings got its value. */
enum opts_source opts_source_of(const struct launch_opts *o, size_t i);

/* Whether option `name` (canonical or alias) takes a value on the command
 * line. Returns 1 yes, 0 no (a boolean), -ENOENT unknown. */
int opts_takes_value(const char *name);

/* Appends a copy of s to v. Returns 0 or -ENOMEM. */
int opts_strv_push(struct opts_strv *v, const char *s);
/* Appends printf-formatted text to the NUL-terminated string in buf (len
 * bytes in all), cut to fit: the one-line notices (opts_pet, opts_slurm). */
void opts_line_add(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void opts_strv_clear(struct opts_strv *v);

/* Parses "0:1,1:2" or "3" into *s. Returns 0 or -EINVAL. */
int opts_parse_streams(const char *text, struct opts_streams *s);
/* The stream mask (0..3) for local rank `lr`. */
int opts_streams_mask(const struct opts_streams *s, int lr);

/* Resolves nproc_spec: a positive number, "cpu" (online CPUs, `ncpu`),
 * "gpu" (`ngpu`, error if 0), "auto" (gpus if any, else cpus).
 * Returns the count or -EINVAL with err filled. */
int opts_nproc(const struct launch_opts *o, int ncpu, int ngpu, char *err, size_t errlen);

/* GPUs a worker can use: `ndev` devices, narrowed by CUDA_VISIBLE_DEVICES
 * (`cvd`, NULL when unset) as CUDA does: "" or a list starting with a
 * negative index gives 0, else the number of comma-separated entries. */
int opts_visible_gpus(const char *cvd, int ndev);

/* Whether local rank `lr` passes --local_ranks_filter (true when no filter). */
bool opts_rank_shown(const struct launch_opts *o, int lr);

/* The argument each worker gets for its local rank, "--local_rank" or
 * "--local-rank" (then "=N" follows), or NULL for none: what
 * --pass_local_rank says, else --use_env=false asks for torch.distributed
 * .launch's default, --local_rank. */
const char *opts_local_rank_arg(const struct launch_opts *o);

/* Whether `sig` is one of --forward_signals. */
bool opts_forward_only(const struct launch_opts *o, int sig);

/* Checks combinations after every source is applied (e.g. -m with
 * --no_python, a program is required). Returns 0 or -EINVAL with err. */
int opts_check(const struct launch_opts *o, char *err, size_t errlen);

#endif
