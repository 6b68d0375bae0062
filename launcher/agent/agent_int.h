/*
 * agent_int.h - the agent's state (one node's supervising loop, see agent.h)
 * and the set-up steps it runs before and between attempts. Internal to the
 * agent library; each worker's process is a worker_proc (worker_proc.h).
 */
#ifndef DDP_LAUNCHER_AGENT_INT_H
#define DDP_LAUNCHER_AGENT_INT_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "footprint.h"
#include "opts.h"
#include "rdzv.h"
#include "rundir.h"
#include "summary.h"
#include "worker_proc.h"

/* How long output pipes may stay open after the whole group exited. */
#define AGENT_DRAIN_MS 2000
/* The exit code recorded for a worker that could not be started, as a
 * shell's for a command not found. */
#define AGENT_START_FAILED 127

struct agent;

/* One local worker across the attempts. */
struct agent_worker {
	struct agent *ag;
	int local_rank, rank;
	struct worker_proc proc;
	/* How it ended in this attempt: its process's status, or exit code
	 * AGENT_START_FAILED when it could not be started. */
	int exit_code, term_signal;
	int64_t exit_time_ms;
	int exit_seq;  /* order of exit in the attempt, 1 = first; 0: none */
	bool stopped;  /* exited after ddplaunch stopped the group */
	int log_fd[2]; /* stdout.log, stderr.log, or -1 */
	/* In place (agent_inplace.c): the round last handed to it, or -1; it
	 * died and waits for the next round to be replaced alone; that round
	 * came, and its process starts once the dead one's handles close. */
	int sent_round;
	bool replacing, respawn;
	char dir[PATH_MAX];	   /* run_dir/attempt_N/RANK */
	char error_file[PATH_MAX]; /* dir/error.json */
};

enum agent_state {
	AGENT_JOINING,
	AGENT_RUNNING,
	AGENT_STOPPING, /* stop signal sent, grace timer running */
	AGENT_DONE,
};

struct agent {
	uv_loop_t *loop;
	const struct launch_opts *o;
	char **environ_in;
	int nproc;
	char shim[PATH_MAX];
	char **argv; /* the worker command line, without --local_rank */
	size_t argc;
	struct rdzv *rdzv;
	struct rdzv_round round;
	enum agent_state state;
	int attempt;
	struct agent_worker *w;
	int nrunning, nexited; /* workers of the attempt not exited, exited */
	bool failed;	       /* this attempt has a failed worker */
	bool permanent;	       /* ... and its failure will repeat: no restart */
	int stop_signal;       /* ddplaunch got this signal: finish */
	bool set_omp;
	uv_timer_t grace;		       /* then SIGKILL for a stopped group */
	uv_timer_t drain;		       /* ends an attempt: pipes held open, or no process */
	uv_signal_t sig[2 * OPTS_MAX_SIGNALS]; /* --signals, then --forward_signals */
	int nsig;
	struct summary summary;
	int exit_status;
	struct rundir rd;
	struct footprint fp; /* the job's cgroup and shared-memory names */
	bool files;	     /* per-rank log files */
	bool lost_output;    /* a worker log or summary write failed */
	bool round_over;     /* the group was stopped because its round is over */
	int end;	     /* enum rdzv_outcome once the rendezvous ended, else -1 */
	int fail_status;     /* exit status of this node's last failed group, or 0 */
	int shown;	     /* the last attempt whose summary was printed, or -1 */
	int64_t last_fail_ns;
	/* In place (every local worker said "resizable"): the next round is
	 * being joined while the workers run; their group's end waits for it. */
	bool inplace_join, group_end_pending;
	int64_t inplace_since_ns;     /* when the round was heard over */
	int nreform;		      /* rounds the workers re-formed in place */
	int nreplacing;		      /* workers waiting to be replaced alone */
	int nreplaced;		      /* workers replaced alone so far */
	struct summary_reform reform; /* the one being made */
	/* A round joined in place while the group must stop: the next group
	 * starts in it (its strings copied here). */
	bool have_kept;
	struct rdzv_round kept;
	char kept_master[256], kept_local[256];
};

/* The rendezvous' events (agent.c). */
extern const struct rdzv_events agent_rdzv_events;

/* Set-up before the first attempt: the number of workers, ddp-exec, the
 * worker command line, the rendezvous (attached: one node's workers' store
 * is bound), the run directory, the job's footprint (cgroup, tag),
 * OMP_NUM_THREADS. Returns 0, or ddplaunch's exit status (1; 2 for a usage
 * problem such as a taken --strict_port) after reporting why. */
int agent_setup(struct agent *ag);

/* Per attempt: each worker's directory (w->dir), with no error file
 * (w->error_file) in it yet. */
int agent_prepare_attempt_dirs(struct agent *ag);

/* Per worker and attempt: opens the log files (w->log_fd) when the run
 * keeps them (keep: appends to what is there, for a worker replaced alone,
 * else empties them); agent_worker_close_logs closes them (-1 stays -1) and returns 0, or
 * the negative errno of a close that failed (reported here). */
int agent_worker_open_logs(struct agent_worker *w, bool keep);
int agent_worker_close_logs(struct agent_worker *w);

/* The worker's command line: ddp-exec [--cgroup DIR] PARENT PROGRAM
 * [--local_rank=N] ARGS..., NULL-terminated; free() it (the strings are ag's or the
 * caller's). NULL when out of memory. */
char **agent_worker_argv(struct agent_worker *w, char *parent, char *local_rank_arg);

/* The worker's environment for this attempt (see worker_env_build). */
int agent_worker_env(struct agent_worker *w, char ***env);

/* agent.c's steps that the in-place path takes too. */
/* Stops the group: `sig` to every running worker, the grace, SIGKILL. */
void agent_stop_group(struct agent *ag, int sig);
/* Every handle of the attempt closed: the rendezvous answers what next. */
void agent_group_ended(struct agent *ag);
/* Worker w exited, or could not be started (exit code AGENT_START_FAILED). */
void agent_worker_exited(struct agent *ag, struct agent_worker *w);
/* Starts worker w in ag->round through ddp-exec (keep_logs: see
 * agent_worker_open_logs). Returns 0 or a negative errno (reported). */
int agent_worker_start(struct agent_worker *w, bool keep_logs);
/* The rendezvous answered a join (rdzv_joined_fn). */
void agent_on_joined(void *arg, int status, const struct rdzv_round *r);

/* In place (agent_inplace.c; see there). */
/* round_over heard while the workers run: true when every local worker
 * re-forms in place and the next round is being joined for them (its
 * answer goes to agent_inplace_joined), false: stop them as before. */
bool agent_inplace_round_over(struct agent *ag, const char *why);
/* The answer to that join. */
void agent_inplace_joined(struct agent *ag, int status, const struct rdzv_round *r);
/* Worker w failed on its own (`how` says how): true when the in-place path
 * handles it, i.e. it is replaced alone (w->replacing; the group goes on)
 * or it left instead of re-forming (the group stops, to start again in
 * the next round without a charge); false: an ordinary failure. */
bool agent_inplace_worker_failed(struct agent *ag, struct agent_worker *w, const char *how);
/* Every handle of worker w closed: a replacement that waited starts. */
void agent_inplace_closed(struct agent *ag, struct agent_worker *w);
/* Whether a worker waits to be replaced. */
bool agent_inplace_pending(const struct agent *ag);
/* Forgets the replacements (the group stops or starts afresh). */
void agent_inplace_drop(struct agent *ag);

#endif
