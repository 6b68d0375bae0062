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

#include "agent_decide.h"
#include "agent_hang.h"
#include "metrics.h"
#include "footprint.h"
#include "opts.h"
#include "progress_page.h"
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
struct metrics_http;

/* Per local rank, what the metrics keep between scrapes (agent_metrics.c). */
struct agent_rank_stats {
	int32_t pid;			   /* the page's writer seen last, 0: none */
	uint64_t steps_total, step_ns_sum; /* its page's counts then */
	uint64_t rate_steps, rate_ns; /* its steps_total at the rate window's start, and when */
	double steps_per_s;	      /* over the last window; < 0: none yet */
	struct metrics_hist times;    /* step times, one per step the writers counted */
};

/* A round this node joined, for the status record. */
struct agent_round_note {
	int64_t time;	    /* wall clock, s */
	int round, nodes;   /* the round, its nodes */
	const char *reason; /* rdzv_reasons' */
	char subject[72];   /* the node it is about, or "" */
	bool in_place;	    /* handed to the running workers */
};
#define AGENT_ROUND_NOTES 3

/* What the agent counts for /metrics and the status record
 * (agent_metrics.c); events add to it, the scrape reads it. */
struct agent_stats {
	struct metrics_http *http; /* --metrics_port's server, or NULL */
	uv_timer_t sample;	   /* reads the progress pages */
	bool sampling;
	unsigned ticks;				 /* reads so far */
	bool no_publish;			 /* no rendezvous store to publish in (one node) */
	uint64_t rounds[RDZV_REASONS];		 /* rounds joined, by why they were opened */
	uint64_t reforms[RDZV_REASONS];		 /* of them, handed to the workers in place */
	uint64_t failures_exit, failures_signal; /* this node's workers that failed */
	double lost_s;				 /* time lost to failures and membership changes */
	int64_t lost_since_ns;			 /* the loss being counted, or 0 */
	struct agent_rank_stats *ranks;		 /* nproc */
	struct agent_round_note notes[AGENT_ROUND_NOTES]; /* the last rounds, a ring */
	unsigned nnotes;				  /* rounds noted, ever */
};

/* One local worker across the attempts. */
struct agent_worker {
	struct agent *ag;
	int local_rank, rank;
	struct worker_proc proc;
	/* How it ended in this attempt: its process's status, or exit code
	 * AGENT_START_FAILED when it could not be started. */
	int exit_code, term_signal;
	int64_t exit_time_ms;
	int exit_seq; /* order of exit in the attempt, 1 = first; 0: none */
	bool stopped; /* exited after ddplaunch stopped the group */
	/* Cut out by the hang watch in shutdown after a worker of this node
	 * finished it (exit 0): its work was done, its end counts as exit 0
	 * (agent_hang_host.finished). */
	bool done_cut;
	int log_fd[2];		       /* stdout.log, stderr.log, or -1 */
	enum agent_worker_state state; /* agent_decide.h */
	/* Started to replace a worker that said "resizable": counted as
	 * resizable in a round that comes before it says so itself. */
	bool replacement;
	/* Replaced alone with its new process started outside the rounds
	 * (agent_decide.h: AGENT_W_AWAITING), the others re-forming without
	 * it. */
	bool early;
	/* Counted in the round being joined in place (agent_inplace_count):
	 * handed it, or started in it. */
	bool counted;
	char dir[PATH_MAX];	   /* run_dir/attempt_N/RANK */
	char error_file[PATH_MAX]; /* dir/error.json */
	/* its progress page (progress_page.h), made afresh at each start; ""
	 * when the job has no tag */
	char progress_path[PROGRESS_PAGE_PATH_MAX];
};

struct agent {
	uv_loop_t *loop;
	const struct launch_opts *o;
	char **environ_in;
	int nproc;
	int round_local; /* this node's workers in ag->round (LOCAL_WORLD_SIZE) */
	bool can_shrink; /* the rendezvous counts fewer workers on request (rdzv_set_nproc) */
	char shim[PATH_MAX];
	char **argv; /* the worker command line, without --local_rank */
	size_t argc;
	struct rdzv *rdzv;
	struct rdzv_round round;
	enum agent_state state;	  /* the machine: agent_decide.h */
	enum agent_next next;	  /* the round after the group's */
	enum agent_charge charge; /* how the group's end is charged */
	int attempt;
	struct agent_worker *w;
	int nrunning, nexited; /* workers of the attempt not exited, exited */
	int stop_signal;       /* ddplaunch got this signal: finish */
	bool set_omp;
	uv_timer_t grace;		       /* then SIGKILL for a stopped group */
	uv_timer_t drain;		       /* ends an attempt: pipes held open, or no process */
	uv_signal_t sig[2 * OPTS_MAX_SIGNALS]; /* --signals, then --forward_signals */
	int nsig;
	struct summary summary;
	int exit_status;
	struct rundir rd;
	struct footprint fp;	/* the job's cgroup and shared-memory names */
	struct agent_hang hang; /* the watch for hangs (agent_hang.h) */
	bool files;		/* per-rank log files */
	bool lost_output;	/* a worker log or summary write failed */
	int end;		/* enum rdzv_outcome once the rendezvous ended, else -1 */
	int fail_status;	/* exit status of this node's last failed group, or 0 */
	int shown;		/* the last attempt whose summary was printed, or -1 */
	int64_t last_fail_ns;
	/* In place (agent_inplace.c) */
	int64_t inplace_since_ns;     /* when the round was heard over */
	int nreform;		      /* rounds the workers re-formed in place */
	int nreplaced;		      /* workers replaced alone so far */
	struct summary_reform reform; /* the one being made */
	/* next == AGENT_NEXT_KEPT: the round the next group starts in (its
	 * strings copied here). */
	struct rdzv_round kept;
	char kept_master[256], kept_local[256];
	struct agent_stats stats;
	char subject[72]; /* the round's subject (rdzv_round's), copied */
};

/* Set-up before the first attempt (agent_setup.c): the number of workers,
 * ddp-exec, the worker command line, the rendezvous (attached with `events`:
 * one node's workers' store is bound), the run directory, the job's
 * footprint (cgroup, tag), OMP_NUM_THREADS. Returns 0, or ddplaunch's exit
 * status (1; 2 for a usage problem such as a taken --strict_port) after
 * reporting why. */
int agent_setup(struct agent *ag, const struct rdzv_events *events);

/* After agent_setup: the timers, a handler per --signals and
 * --forward_signals signal (on_signal), the workers' slots. */
void agent_init_handles(struct agent *ag, uv_signal_cb on_signal);

/* The node's end (agent_setup.c): the re-formations said, summary.json
 * written (a failed write or lost output turns a success into 1), the run
 * directory and the footprint closed, the handles closed, the rendezvous
 * shut down with ag->exit_status. */
void agent_teardown(struct agent *ag);

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

/* The group's processes (agent_workers.c): mechanics only, no decision and
 * no change of ag->state; they call nothing of the machine (agent.c,
 * agent_machine_workers.c). */
/* Starts worker w in ag->round through ddp-exec (keep_logs: see
 * agent_worker_open_logs; w->state AGENT_W_AWAITING: outside any round,
 * DDP_AWAIT_ROUND=1); on_exit, on_closed and on_declare get w. Returns 0
 * or a negative errno (reported). */
int agent_worker_start(struct agent_worker *w, bool keep_logs, worker_proc_exit_fn on_exit,
		       worker_proc_closed_fn on_closed, worker_proc_declare_fn on_declare);
/* Hands round r to worker w on its agent channel; the one place a round is
 * sent. Returns 0 or a negative errno. */
int agent_worker_send_round(struct agent_worker *w, const struct rdzv_round *r);
/* Whether w was handed a round that it has not said it took. */
bool agent_worker_round_not_taken(const struct agent_worker *w);
/* The console prefix of worker w for its rank now. */
void agent_worker_reprefix(struct agent_worker *w);
/* w as agent_decide.h sees it. */
struct agent_worker_view agent_worker_view(const struct agent_worker *w);
/* Whether a local worker other than `except` (NULL: none) blocks a round in
 * place (AGENT_IN_ROUND_BLOCKS). */
bool agent_workers_block(const struct agent *ag, const struct agent_worker *except);
/* SIGKILL to every worker's process group. */
void agent_kill_all(struct agent *ag);
/* Whether every worker's handles of the attempt have closed. */
bool agent_all_closed(const struct agent *ag);
/* Passes sig on to the running workers (--forward_signals). */
void agent_forward(struct agent *ag, int sig);
/* Records the attempt's workers in the summary, in exit order. */
void agent_record_attempt(struct agent *ag);

/* Metrics (agent_metrics.c): /metrics when --metrics_port is given, and
 * the counts events add to. agent_metrics_start (before agent_setup: only
 * ag->loop and ag->o are read) serves when the option is given; it returns
 * 0, or ddplaunch's exit status (2: the port is taken, or the build has no
 * metrics) after saying why. agent_metrics_init (after agent_init_handles)
 * makes the per-rank counts and starts reading the progress pages: 0 or 1
 * (out of memory, said). agent_metrics_close stops both, whatever was
 * started. */
int agent_metrics_start(struct agent *ag);
int agent_metrics_init(struct agent *ag);
void agent_metrics_close(struct agent *ag);
/* A round was joined: a new group's (in_place false) or handed to the
 * running workers. */
void agent_metrics_round(struct agent *ag, const struct rdzv_round *r, bool in_place);
/* A loss begins (a failure, a round over, a worker replaced): counted from
 * now until agent_metrics_resumed, unless one is being counted. */
void agent_metrics_lost(struct agent *ag);
void agent_metrics_resumed(struct agent *ag);
/* The time lost so far, the loss being counted included. */
double agent_metrics_lost_s(const struct agent *ag);
/* Words for the record and the metrics. */
const char *agent_state_word(enum agent_state s);
const char *agent_phase_word(uint32_t phase);

/* Where this node's workers are or were when they ended (agent_phase.c),
 * from their progress pages, into buf (always NUL-terminated): "collective
 * (allreduce #12) at step 40 (rank 2), compute at step 40 (rank 3)", or
 * "the rendezvous (no worker of this node had started)". For a line that
 * ends the job: the phase it ended in. Returns how many pages were read. */
int agent_phase_words(const struct agent *ag, char *buf, size_t len);

/* Whether every worker of this node's last group finished its part of the
 * job: exited 0 after its progress page said shutdown (past its last step
 * and final save). A node whose rendezvous fails after that (it was
 * stopped while its workers finished, and the store went with the job) is
 * done, not failed. */
bool agent_workers_finished(const struct agent *ag);

/* This node's status record into the rendezvous store (agent_status.c), for
 * `ddplaunch status`: at each event agent_metrics hears, and every 2 s.
 * Nothing for one node. */
void agent_status_publish(struct agent *ag);
/* The hangs' families on /metrics (agent_metrics_hang.c): counted from
 * ag->summary.hangs, the deadlines from ag->hang. */
struct metrics_out;
void agent_metrics_hangs(struct agent *ag, struct metrics_out *o);
/* The stragglers' families on /metrics (agent_metrics_straggler.c): from
 * ag->summary's stragglers. */
void agent_metrics_stragglers(struct agent *ag, struct metrics_out *o);

/* In place (agent_inplace.c): the bookkeeping of re-formations; it calls
 * only agent_workers.c, and the machine (agent.c, agent_machine_workers.c)
 * decides and moves. */
/* A re-formation begins (round_over heard, or a worker died): its time and
 * reason, unless one is already being made. */
void agent_inplace_begin(struct agent *ag, const char *why);
/* Before joining the next round in place: a replacement that has not said
 * "resizable" yet is killed to start again in it (uncharged), one whose
 * round came waits again for the next. */
void agent_inplace_prepare(struct agent *ag);
/* Worker w (dead) is replaced alone: kills what it left, counts it against
 * --max_restarts and says so. Early (w->early) where the rendezvous can
 * count fewer workers and another local worker re-forms: its new process
 * starts outside the rounds once the dead one's handles close, and joins a
 * later round. */
void agent_inplace_replace(struct agent *ag, struct agent_worker *w, const char *how);
/* Before a round is joined in place: marks the workers it counts
 * (w->counted: handed it, or started in it) and tells the rendezvous how
 * many (rdzv_set_nproc). Returns that number. */
int agent_inplace_count(struct agent *ag);
/* Hands round r to the workers counted in it (they re-form in place as
 * ranks r->rank_base, ... in local-rank order; LOCAL_RANK stays theirs),
 * marks those replaced alone to start in it (AGENT_W_RESPAWN), takes in
 * the AWAITING ones counted (RUNNING) and records the re-formation.
 * Returns how many workers could not be told the round. */
int agent_inplace_hand_out(struct agent *ag, const struct rdzv_round *r);
/* A worker AWAITING outside the rounds has said "resizable" and was not
 * counted in the round of ag: whether one is. */
bool agent_inplace_ready(const struct agent *ag);
/* A worker of this node finished the job (exited 0): the replacements
 * outside the rounds are not needed any more; those running are ended
 * (stopped, uncharged), those not started yet are not. Returns how many. */
int agent_inplace_release(struct agent *ag);
/* Keeps round r for the next group (ag->next = AGENT_NEXT_KEPT). */
void agent_keep_round(struct agent *ag, const struct rdzv_round *r);
/* Whether a worker waits to be replaced (REPLACING or RESPAWN). */
bool agent_inplace_pending(const struct agent *ag);
/* Forgets the replacements (the group stops or starts afresh). */
void agent_inplace_drop(struct agent *ag);

/* The machine (agent.c: the attempts and rounds; agent_machine_workers.c:
 * the workers' processes' events): the only files that change ag->state,
 * and nothing else of the agent calls them. What the two halves share: */
/* -> STOPPING: sig, then SIGCONT, to every running worker; SIGKILL after the grace. */
void agent_stop_group(struct agent *ag, int sig);
/* JOINING -> RUNNING: every worker starts in ag->round. */
void agent_spawn_all(struct agent *ag);
/* Worker w, replaced alone, starts (RUNNING) in the round handed out. */
void agent_respawn(struct agent *ag, struct agent_worker *w);
/* Worker w, replaced early, starts outside the rounds (AWAITING). */
void agent_start_outside(struct agent *ag, struct agent_worker *w);
/* RUNNING -> REPLACING: asks a round that takes in a ready replacement, if one is. */
void agent_grow(struct agent *ag);
/* Every handle of the attempt closed: tells the rendezvous, or starts in the round kept. */
void agent_group_ended(struct agent *ag);

#endif
