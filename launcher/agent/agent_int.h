/*
 * agent_int.h - the agent's state, shared by agent.c (the state machine),
 * agent_worker.c (one worker: spawn, pipes, output, exit) and
 * agent_setup.c (store socket, run directory, program argv).
 */
#ifndef DDP_LAUNCHER_AGENT_INT_H
#define DDP_LAUNCHER_AGENT_INT_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "linebuf.h"
#include "opts.h"
#include "rdzv.h"
#include "summary.h"

#define AGENT_TAIL_LINES 10
#define AGENT_TAIL_LEN	 240
#define AGENT_MAX_LINE	 65536
#define AGENT_DRAIN_MS	 2000

struct agent;

struct agent_worker {
	struct agent *ag;
	int local_rank, rank;
	uv_process_t proc;
	uv_pipe_t out, err, pidp;
	struct linebuf lb_out, lb_err, lb_pid;
	int nhandles; /* handles of this worker not yet closed */
	bool running; /* spawned and not yet exited */
	bool exited;
	int shim_pid; /* ddp-exec: the process group id */
	int pid;      /* the worker itself, once ddp-exec told us */
	int exit_code, term_signal;
	int exit_seq; /* order of exit in the attempt, 1 = first */
	bool stopped; /* exited after ddplaunch stopped the group */
	int64_t exit_time_ms;
	int log_fd[2];	 /* stdout.log, stderr.log, or -1 */
	bool console[2]; /* stream shown on the console */
	char prefix[64];
	size_t prefix_len;
	char tail[AGENT_TAIL_LINES][AGENT_TAIL_LEN];
	int tail_n, tail_next;
	char dir[PATH_MAX];	   /* run_dir/attempt_N/RANK */
	char error_file[PATH_MAX]; /* dir/error.json */
};

enum agent_state {
	AGENT_JOINING,
	AGENT_RUNNING,
	AGENT_STOPPING, /* stop signal sent, grace timer running */
	AGENT_BACKOFF,
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
	struct store_server *store;
	int port;
	struct rdzv *rdzv;
	struct rdzv_round round;
	enum agent_state state;
	int attempt;
	struct agent_worker *w;
	int nrunning, nhandles, nexited;
	bool failed;	 /* this attempt has a failed worker */
	int stop_signal; /* ddplaunch got this signal: finish */
	bool set_omp;
	uv_timer_t grace, drain, backoff;
	uv_signal_t sig[OPTS_MAX_SIGNALS];
	int nsig;
	struct summary summary;
	int exit_status;
	char run_dir[PATH_MAX];
	bool run_dir_is_tmp; /* remove it at the end */
	bool files;	     /* per-rank log files */
	int64_t last_fail_ns;
};

/* agent_setup.c */
int agent_bind_store(struct agent *ag);
int agent_build_argv(struct agent *ag);
int agent_prepare_run_dir(struct agent *ag);
int agent_prepare_attempt_dirs(struct agent *ag);
void agent_cleanup_run_dir(struct agent *ag);
int agent_find_shim(struct agent *ag);

/* agent_worker.c */
int agent_worker_spawn(struct agent_worker *w);
void agent_worker_signal(struct agent_worker *w, int sig);
void agent_worker_kill_group(struct agent_worker *w);
void agent_worker_close_pipes(struct agent_worker *w);
void agent_worker_release(struct agent_worker *w);
int agent_worker_record(struct agent_worker *w, struct summary_rec *rec, char **errmsg,
			char *tailbuf, size_t taillen);

/* agent.c: called by agent_worker.c */
void agent_on_worker_exit(struct agent *ag, struct agent_worker *w);
void agent_on_handle_closed(struct agent *ag);

#endif
