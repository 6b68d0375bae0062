/*
 * agent_hang.h - the agent's watch for hangs: every AGENT_HANG_TICK_MS it
 * reads each local worker's progress page (no system call per collective
 * on the worker's side, one read of a shared page here), learns the job's
 * deadlines from what the pages show (hang_deadline.h), and judges each
 * worker past its deadline (hang_judge.h) with its process's state from
 * /proc (proc_state.h). A worker in a phase that learns no deadline (the
 * final save, shutdown: once a run) is judged by facts instead
 * (agent_hang_rare.c, hang_rare.h).
 *
 * A culprit of this node is named: one line (hang_judge.h's), printed here
 * and posted for every other node (rdzv_post: the job's notice board), put
 * in the summary, and then the worker is cut out: its process group is
 * killed, and the agent's usual path for a dead worker follows (replaced
 * alone in place when it said "resizable", else the group's restart).
 * A worker of this node that waits inside a collective on a rank of
 * another node, with no word of that rank from its node within
 * AGENT_HANG_SILENT_MS after it turned late, asks whether that node's
 * agent is alive: each agent whose workers wait past their deadline says
 * so under its own name ("waitsN" = "ROUND SEQ", rdzv_put), and the asker
 * reads the other node's (rdzv_get). An agent that said nothing of this
 * round and collective is silent: its node is frozen whole (or cut off),
 * the rank is named for it, and, when every local worker can be resized
 * in place, the round re-forms without that node now (rdzv_evict), not at
 * the keep-alive window's end; it joins again when it thaws. Plain
 * workers keep the window. An agent whose own tick came more than a
 * second late was itself stopped: it judges nobody for a while.
 *
 * The watch knows nothing of the agent's state machine (agent.c,
 * agent_machine_workers.c): the agent gives it what it needs at start
 * (struct agent_hang_host) and calls it; it calls back only through the
 * host's functions and moves nothing of the agent's machine (its state,
 * its workers' states): a hang it names
 * or hears goes into the host's summary and is said through `recorded`;
 * a culprit's process group it kills itself (worker_proc), and the agent
 * hears that exit as any other.
 *
 * The notice a node posts: "hang1 ROUND NODE RANK PID SEQ LATE_MS
 * DEADLINE_MS\tLINE"; a reader skips lines of any other kind, and prints a
 * hang once per (round, rank, seq). Then every node, the namer's too, says
 * who of its workers waits on whom ("wait1": below, agent_hang_waiters.c).
 */
#ifndef DDP_LAUNCHER_AGENT_HANG_H
#define DDP_LAUNCHER_AGENT_HANG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "hang_deadline.h"
#include "hang_judge.h"
#include "hang_rare.h"

#define AGENT_HANG_TICK_MS   100
#define AGENT_HANG_SILENT_MS 1000
#define AGENT_HANG_SEEN	     32 /* hangs remembered as printed */

struct rdzv;
struct rdzv_round;
struct summary;
struct summary_hang;
struct worker_proc;

/* Local worker i as the host shows it to the watch. */
struct agent_hang_worker {
	struct worker_proc *proc; /* its process (progress page, kill) */
	int rank, local_rank;	  /* its global and local rank now */
	bool started;		  /* started in this attempt and not yet seen ended */
};

/* What the watch is given at start (agent_hang_start), kept for its life. */
struct agent_hang_host {
	uv_loop_t *loop;
	int nproc;			/* local workers: i in [0, nproc) */
	double hang_timeout;		/* launch_opts' --hang_timeout (OPTS_HANG_OFF, 0, > 0) */
	struct rdzv *rdzv;		/* notices posted, "waitsN" said and asked, evict */
	const struct rdzv_round *round; /* the agent's round now: its group_rank is this node */
	struct summary *summary;	/* the hangs are added to it */
	void *arg;			/* given to every function below */
	/* Fills *out with local worker i now. */
	void (*worker)(void *arg, int i, struct agent_hang_worker *out);
	/* Whether the agent has finished: an answer that comes after is dropped. */
	bool (*done)(void *arg);
	/* A hang was added to summary (named here or heard), or its waiters:
	 * the agent says so (its status record). */
	void (*recorded)(void *arg);
	/* The word for a progress phase in the summary's hangs. */
	const char *(*phase_word)(uint32_t phase);
	/* Local worker i is cut out in shutdown after a worker of its node and
	 * round finished it (exited 0): shutdown comes after its last step and
	 * the final save, so its work was done; its exit (the kill) counts as
	 * exit 0. NULL: counted as the kill. */
	void (*finished)(void *arg, int i);
};

/* One local worker as the watch follows it. */
struct agent_hang_track {
	struct ddp_progress page;    /* the last consistent copy */
	bool have;		     /* page holds one of this process */
	int pid;		     /* the process it is of */
	struct ddp_progress inside;  /* the last page read inside a collective, */
	uint64_t inside_ns;	     /* read then (0: none): whom it waited on */
	uint64_t step;		     /* the last step sampled */
	uint64_t in_seq, in_entered; /* the collective last seen inside, its entry */
	uint32_t in_op;
	uint64_t done_seq;	    /* the last collective sampled finished */
	uint64_t out_seq, out_left; /* seen outside after this collective, left then */
	bool in_late;		    /* ... judged late: no sample */
	uint64_t gap_seq;	    /* the last collective whose gap before it was sampled */
	uint32_t phase;		    /* the phase last seen, */
	uint64_t phase_ns;	    /* since when */
	uint64_t late_key;	    /* the place judged late (no sample of it) */
	uint64_t late_since_ns;	    /* a victim: when it was first seen late */
	bool skip_step;		    /* the next step's times follow a hang: not sampled */

	/* Where no deadline is learned (agent_hang_rare.c). */
	struct hang_rare_track rare;
};

/* The waiters lines a watch printed: (hang, node)s, the last
 * AGENT_HANG_WAITERS_SEEN (agent_hang_waiters.c). */
#define AGENT_HANG_WAITERS_SEEN 64
struct agent_hang_waiters {
	struct {
		int round, rank, node;
		uint64_t seq;
	} seen[AGENT_HANG_WAITERS_SEEN];
	int n;
};

struct agent_hang {
	struct agent_hang_host host;
	uv_timer_t timer;
	bool on;   /* the timer is initialised */
	bool said; /* the learned deadlines were said */
	struct hang_deadline dl;
	struct agent_hang_track *t; /* one per local worker */
	char seen[AGENT_HANG_SEEN][48];
	int nseen;
	uint64_t last_tick_ns; /* when the last tick ran */
	uint64_t quiet_until;  /* after this agent was stopped: no judging till then */
	uint64_t thawed_ns;    /* when a stop of this agent was seen, or 0 */
	uint64_t stopped_from; /* the last tick before that stop */
	uint64_t waits_said;   /* the place this node last said its workers wait in */
	/* The question whether a silent node's agent is alive (one at a time):
	 * asked about rank `q_rank` for victim `q_view` */
	bool asking;
	uint64_t asked_key; /* the (round, rank, seq) last asked, answered alive */
	struct hang_view q_view;
	struct hang_judgement q_j;
	int q_rank;
	struct agent_hang_waiters waiters; /* the waiters lines printed */
};

/* Where a page says its worker is (round, collective, phase): no sample
 * is taken of a place judged late, and a hang is named once per place. */
uint64_t agent_hang_place(const struct ddp_progress *p);

/* ---- who waits on whom (agent_hang_waiters.c) ----
 *
 * When a hang is named (by this watch, or heard from another node's), this
 * node's agent says what each of its own workers does with respect to it
 * (hang_waiters.h: waits on rank Q in OP #SEQ for T s, waits without
 * knowing on whom, computes before it, is done with it ...): one line,
 * printed here after the hang's own line, added to the hang's record in
 * the summary ("waiters"), and posted on the job's notice board ("wait1",
 * docs/rendezvous.md), so every node prints every node's line. Bounded: no
 * node waits for another. A frozen node says nothing; the others print
 * what they have, and a line that comes later is printed and recorded when
 * it comes (while the agent runs). Each (hang, node) is printed once: this
 * node's own line, posted, comes back and is dropped. */

/* Hang sh was named here or heard (after its line was printed and
 * recorded): this node's workers' states with respect to it, printed,
 * recorded and posted. The culprit is not its own waiter; a node with no
 * other worker says nothing. */
void agent_hang_waiters_tell(struct agent_hang *h, const struct summary_hang *sh);

/* A notice heard (rdzv_events.notice): when it is a "wait1", printed and
 * recorded (once per hang and node), and true; false for another kind. */
bool agent_hang_waiters_heard(struct agent_hang *h, const char *text);

/* What the local workers inside a collective wait on, appended to the
 * culprit's line (worker `except` is the culprit): "; rank R waits on rank
 * Q in OP #SEQ for T s" or "; rank R waits in OP #SEQ for T s". */
void agent_hang_waiters_append(struct agent_hang *h, uint64_t now, int except, char *line,
			       size_t len);

/* The judge for a worker in a phase with no learned deadline
 * (agent_hang_rare.c, over hang_rare.h's rule). It gathers the facts the
 * rule needs: the process's state (/proc/PID/task/\*\/stat), whether its
 * main thread slept and its process wrote since the last tick
 * (/proc/PID/task/PID/status voluntary_ctxt_switches, /proc/PID/io wchar
 * and write_bytes), and what the other workers of its node did (their
 * pages, their exits).
 *
 * Called on every tick for a worker judged fine by its deadline; reads
 * /proc only while the worker is in a long phase past the long floor, or
 * in the final save or shutdown (where the "still" measure must be
 * sampled from the phase's start). */

/* v: worker i's view, its deadline 0 (none learned, none fixed). Returns
 * true when the worker is hung by hang_rare.h's rule: then v->deadline_ns
 * is the long phases' floor (the measure it was judged by), v->ps its
 * process's state and v->why the reason in words (hang_rare_words). */
bool agent_hang_rare(struct agent_hang *h, int i, struct hang_view *v, uint64_t now);

/* Whether worker i, in shutdown (v), comes after a worker of its node and
 * round that finished it (exited 0 from shutdown): its own work was done. */
bool agent_hang_rare_finished(struct agent_hang *h, int i, const struct hang_view *v);

/* Fills v->ps and v->wchan from /proc for v->pid. */
void agent_hang_read_proc(struct hang_view *v);

/* Local worker i as the host shows it now (host.worker). */
struct agent_hang_worker agent_hang_worker_of(const struct agent_hang *h, int i);

/* Learns from one consistent read of worker track t's page
 * (agent_hang_learn.c): the deadline's samples, then t->page = *p. */
void agent_hang_learn(struct agent_hang *h, struct agent_hang_track *t,
		      const struct ddp_progress *p);

/* Starts the watch h (zeroed) for host (copied; after the agent made the
 * workers' slots and the rendezvous). Returns 0 or -ENOMEM (then hangs are
 * not watched; said once). */
int agent_hang_start(struct agent_hang *h, const struct agent_hang_host *host);

/* Closes the timer and frees the tracks. */
void agent_hang_stop(struct agent_hang *h);

/* Worker slot i starts a new process: its track starts again. */
void agent_hang_reset(struct agent_hang *h, int i);

/* Whether this agent was stopped (its watch ran more than a second late)
 * in the last AGENT_HANG_THAW_MS: a round over that it hears now went on
 * without its node, whose workers (stopped with it, or waiting for a round
 * since) hold a state the others have left behind. Once true, false until
 * the next stop. */
#define AGENT_HANG_THAW_MS 15000
bool agent_hang_thawed(struct agent_hang *h);

/* A line another node posted (rdzv_events.notice). */
void agent_hang_notice(struct agent_hang *h, const char *text);

#endif
