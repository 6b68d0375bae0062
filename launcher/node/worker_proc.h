/*
 * worker_proc.h - one supervised process on a libuv loop: spawn it in its own
 * session and process group, read its stdout and stderr as whole lines (to a
 * log file, and with a prefix to a console), keep the last stderr lines, learn
 * the real worker's pid from fd 3, signal its group, and report its exit and
 * the end of all its handles through two callbacks.
 *
 * Partial lines: a line still without its '\n' (a prompt, a progress bar
 * redrawn with '\r') is shown once its stream was quiet for
 * WORKER_PROC_QUIET_MS, and at the latest WORKER_PROC_SHOW_MS after it
 * began; its rest follows when it comes. Two workers' text never shares a
 * console line: while a shown partial line is unfinished, output of any
 * other stream first ends that console line with '\n', and the rest of the
 * interrupted line later starts a console line of its own, with its prefix.
 * On the console each '\r' inside a line is followed by the prefix again.
 * The log files get the bytes as they came.
 *
 * The module knows nothing of its caller: what to run and where lines go come
 * in a config, and what happens next is the caller's (as tmux's job_run).
 *
 * Lifetime of one run:
 *   worker_proc_init -> worker_proc_spawn -> on_exit (only if the spawn
 *   succeeded) -> on_closed (always, once every handle has closed)
 * A struct worker_proc may be spawned again after on_closed has run.
 *
 * Single-threaded: every worker_proc shares one read buffer, so all of them
 * must run on loops of one thread.
 */
#ifndef DDP_LAUNCHER_WORKER_PROC_H
#define DDP_LAUNCHER_WORKER_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "agent_wire.h"
#include "linebuf.h"
#include "progress.h"

#define WORKER_PROC_TAIL_LINES 10  /* stderr lines kept for the summary */
#define WORKER_PROC_TAIL_LEN   240 /* bytes kept of each, with the NUL */
#define WORKER_PROC_MAX_LINE   65536
#define WORKER_PROC_PREFIX_LEN (LINEBUF_PREFIX_MAX + 1)
#define WORKER_PROC_QUIET_MS   100  /* a partial line is shown after this quiet time */
#define WORKER_PROC_SHOW_MS    1000 /* and at the latest this long after it began */

struct worker_proc;

/* Called once when the process has exited; its exit_code, term_signal and
 * exit_time_ms are set. Output may still arrive until on_closed. */
typedef void (*worker_proc_exit_fn)(struct worker_proc *p, void *arg);

/* Called once when every handle of the run has closed: no more output, and
 * the log and console fds of the config are no longer used. */
typedef void (*worker_proc_closed_fn)(struct worker_proc *p, void *arg);

/* Called for each "replica" line (common/agent_wire.h) the worker wrote
 * on its agent channel: a replica whose state differed from the others'. */
typedef void (*worker_proc_replica_fn)(struct worker_proc *p, const struct agent_wire_replica *r,
				       void *arg);

/* Called for each "straggler" line the worker wrote on its agent channel:
 * a rank named slow or cleared. */
typedef void (*worker_proc_straggler_fn)(struct worker_proc *p,
					 const struct agent_wire_straggler *g, void *arg);

/* Called when the worker says it can be resized in place ("hello 1
 * resizable", or "resizable" after "fixed"): p->resizable is true. */
typedef void (*worker_proc_declare_fn)(struct worker_proc *p, void *arg);

/* The worker's end of the agent channel. */
#define WORKER_PROC_CHAN_FD 4

struct worker_proc_config {
	uv_loop_t *loop;
	const char *file;   /* the program, found as execvp(3) finds it */
	char **argv;	    /* NULL-terminated, argv[0] first */
	char **env;	    /* NULL-terminated; NULL inherits ddplaunch's */
	const char *prefix; /* put before each console line; NULL for none */
	int console_fd[2];  /* stdout, stderr lines with the prefix; -1: not shown */
	int log_fd[2];	    /* stdout, stderr lines as they came; -1: not logged */
	worker_proc_exit_fn on_exit;
	worker_proc_closed_fn on_closed;
	worker_proc_replica_fn on_replica;     /* NULL: such lines are skipped */
	worker_proc_straggler_fn on_straggler; /* NULL: such lines are skipped */
	worker_proc_declare_fn on_declare;     /* NULL: not told */
	void *arg;			       /* passed to the callbacks */
	/* The progress page to make for this run (progress_page.h), its path
	 * named to the program by the caller's env (DDP_PROGRESS_ENV); NULL:
	 * none. */
	const char *progress_path;
};

/* Read-only for the caller, except through the calls below. */
struct worker_proc {
	uv_process_t proc;
	uv_pipe_t out, err, pidp;
	uv_pipe_t chan;	     /* the agent channel, the worker's WORKER_PROC_CHAN_FD */
	uv_timer_t quiet[2]; /* shows a partial stdout, stderr line */
	struct linebuf lb_out, lb_err, lb_pid;
	struct agent_wire_reader chan_rd; /* the channel's lines (common/agent_wire.h) */
	int chan_version;		  /* the version its "hello" said, or 0 */
	bool chan_warned;		  /* a worker of another version was reported */
	bool resizable; /* it said "hello 1 resizable" (or "resizable" after it) */
	int sent_round; /* the latest round worker_proc_send_round handed it, or -1 */
	int took_round; /* the latest round it took, or -1: only ever sent_round */
	/* The latest "numerics PROMISE TEXT" it said (enum agent_wire_numerics),
	 * or -1; numerics_text its TEXT. */
	int numerics;
	char numerics_text[AGENT_WIRE_TEXT_MAX + 1];
	bool pending[2];	   /* a partial line waits to be shown, since: */
	uint64_t pending_since[2]; /* (loop time, ms) */
	bool console_open[2];	   /* the console line is this stream's, unfinished */
	int nhandles;		   /* handles of this run not yet closed */
	bool running;		   /* spawned and not yet exited */
	int shim_pid;		   /* the process spawned: its session and group id */
	int pid;		   /* reported on fd 3 (ddp-exec's worker), or 0 */
	int unsent_sig;		   /* signalled before pid was known: sent again then */
	int exit_code, term_signal;
	int64_t exit_time_ms; /* wall clock */
	int console_fd[2], log_fd[2];
	uint64_t log_lost[2]; /* bytes that could not be written to log_fd[s] */
	int log_errno[2];     /* the first such write's errno, or 0 */
	char prefix[WORKER_PROC_PREFIX_LEN];
	size_t prefix_len;
	char tail[WORKER_PROC_TAIL_LINES][WORKER_PROC_TAIL_LEN];
	int tail_n, tail_next;
	worker_proc_exit_fn on_exit;
	worker_proc_closed_fn on_closed;
	worker_proc_replica_fn on_replica;
	worker_proc_straggler_fn on_straggler;
	worker_proc_declare_fn on_declare;
	void *arg;
	/* The run's progress page, mapped read-only, or NULL: kept after the
	 * process ended, until the next spawn or worker_proc_drop_progress. */
	const struct ddp_progress *progress;
};

/* Puts p in the state of a process never started (nothing to signal, no
 * handle open, no progress page: one still mapped is forgotten, not
 * unmapped, so call worker_proc_drop_progress first on a p that ran). Not
 * while worker_proc_busy(p). */
void worker_proc_init(struct worker_proc *p);

/* Starts cfg->file with stdin inherited, stdout and stderr on pipes, and a
 * pipe on fd 3 on which the program may write its worker's pid as one
 * decimal line, and the agent channel, a socket on WORKER_PROC_CHAN_FD
 * (the worker finds its number in DDP_AGENT_FD; ddp-exec names the
 * socket's creator, this process, in DDP_AGENT_PID), on which the program
 * speaks the grammar of common/agent_wire.h: "hello 1 resizable" or
 * "hello 1 fixed" first, then "resizable" / "fixed" (p->resizable) and
 * "took R" (p->took_round, only for the round sent: a "took" of any other
 * round is ignored and logged at debug). A program that speaks another
 * version, or none, is reported once (warning) and stays not resizable:
 * restarted with its group. It hears worker_proc_send_round. cfg and what
 * it points to
 * are used only during the call, except the fds, which stay in use until
 * on_closed.
 *
 * With cfg->progress_path, the page of the last run is unmapped and a fresh
 * one (DDP_PROGRESS_SIZE zero bytes) is made there and mapped before the
 * program starts; a page that cannot be made is reported (warning) and the
 * run goes on without one: progress is a report, never a condition.
 *
 * Returns 0, or a negative errno (libuv's, e.g. UV_ENOENT) when the program
 * could not be started: then on_exit does not run, and on_closed still runs
 * later from the loop. Not while worker_proc_busy(p). */
int worker_proc_spawn(struct worker_proc *p, const struct worker_proc_config *cfg);

/* The prefix of the console lines from now on (a worker re-formed in place
 * under a new rank). */
void worker_proc_set_prefix(struct worker_proc *p, const char *prefix);

/* Writes msg (one or more whole lines) on the worker's agent channel, at
 * once and without blocking. Returns 0, -EPIPE when the process no longer
 * runs or the channel is closed, -EAGAIN when it did not all fit (the
 * worker reads nothing), or libuv's negative errno. */
int worker_proc_send(struct worker_proc *p, const char *msg, size_t len);

/* Hands the worker round r (a "round" line of common/agent_wire.h): the one
 * way the agent sends a round. Records it in p->sent_round first, whether
 * the write then works or not. Returns 0, -ERANGE for a field the grammar
 * refuses (then nothing is sent and sent_round is unchanged), or
 * worker_proc_send's errors. */
int worker_proc_send_round(struct worker_proc *p, const struct agent_wire_round *r);

/* Sends sig to the process group while the process runs. */
void worker_proc_signal(struct worker_proc *p, int sig);

/* Sends SIGKILL to the process group, also after the process exited: a
 * grandchild may still hold the group and its pipes. */
void worker_proc_kill_group(struct worker_proc *p);

/* Closes the output pipes still open (a process outside the group may hold
 * them), passing on a last partial line first. */
void worker_proc_close_pipes(struct worker_proc *p);

/* Whether some handle of the run is still open (on_closed has not run). */
bool worker_proc_busy(const struct worker_proc *p);

/* A consistent copy of the run's progress page (common/progress.h) into
 * *out, also after the process ended. Returns 0, -ENOENT (no page, or
 * nothing written yet) or -EAGAIN (no consistent copy now: the writer is
 * inside a write, or was stopped inside one). */
int worker_proc_progress(const struct worker_proc *p, struct ddp_progress *out);

/* Unmaps the run's progress page (p->progress = NULL); its file's name is
 * the footprint's to remove. */
void worker_proc_drop_progress(struct worker_proc *p);

/* The kept stderr lines, oldest first, joined by '\n', into buf (always
 * NUL-terminated; whole lines only). Returns the length written. */
size_t worker_proc_tail(const struct worker_proc *p, char *buf, size_t len);

#endif
