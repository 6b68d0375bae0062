/*
 * agent_decide.h - the agent's decisions, pure (no loop, no process): the
 * states of its one machine, and what it does with an event given this
 * node's view of its workers. agent.c and agent_machine_workers.c own the
 * machine and act; this file only answers. Table-tested in
 * tests/launcher/agent/test_agent_decide.c.
 *
 * The machine (agent.c, agent_machine_workers.c), one value of enum
 * agent_state at a time, plus the round that is joined in place for the
 * running group (enum agent_next):
 *
 *   JOINING --joined--> RUNNING --a worker died, rdzv_renew--> REPLACING
 *   RUNNING, REPLACING --round_over, every worker in place--> REFORMING
 *   REFORMING --joined (agent_decide_joined: HAND_OUT)--> RUNNING
 *   RUNNING.. --failure, round_over not in place, end, signal--> STOPPING
 *   REFORMING, STOPPING --every handle closed, join in flight--> AWAITING
 *   STOPPING, AWAITING --the group's end--> JOINING (or the kept round) or DONE
 *
 * Each worker has its own small state (enum agent_worker_state): a worker
 * replaced alone is REPLACING until the next round is joined, then RESPAWN
 * until its dead process' handles close, then RUNNING again. Where the
 * rendezvous can count fewer workers for this node (many nodes,
 * rdzv_set_nproc) and another local worker re-forms, the replacement
 * starts early instead: the others re-form without it at once, its new
 * process starts as soon as the dead one's handles close (AWAITING: it
 * runs outside any round), and once it says "resizable" the agent asks
 * for one more round (rdzv_renew), which it is handed with the others
 * (then RUNNING). A new Python process spends seconds importing torch:
 * the first step without the dead worker no longer waits for that.
 */
#ifndef DDP_LAUNCHER_AGENT_DECIDE_H
#define DDP_LAUNCHER_AGENT_DECIDE_H

#include <stdbool.h>

enum agent_state {
	AGENT_JOINING,	 /* no group: a round is being joined */
	AGENT_RUNNING,	 /* the group runs in its round */
	AGENT_REPLACING, /* it runs; a dead worker waits for the round rdzv_renew asked */
	AGENT_REFORMING, /* it runs; the next round is being joined for it in place */
	AGENT_STOPPING,	 /* stop signal sent, grace timer running */
	AGENT_AWAITING,	 /* every handle closed; the group's end waits for the round
			  * being joined in place */
	AGENT_DONE,
};

/* The round after the group's: none, being joined in place while the group
 * runs or stops, or joined and kept for the next group to start in. */
enum agent_next {
	AGENT_NEXT_NONE,
	AGENT_NEXT_JOINING,
	AGENT_NEXT_KEPT,
};

/* How the group's end is charged, in rising order (the group keeps the
 * highest it was given). */
enum agent_charge {
	AGENT_CHARGE_NONE,	/* nothing: finished, or stopped for a stop signal or the end */
	AGENT_CHARGE_ROUND,	/* stopped to start again in the next round, uncharged */
	AGENT_CHARGE_FAILURE,	/* a failure: the rendezvous may count a restart */
	AGENT_CHARGE_PERMANENT, /* a failure that will repeat: no restart */
};

enum agent_worker_state {
	AGENT_W_IDLE,	   /* no process in this attempt yet */
	AGENT_W_RUNNING,   /* its process runs */
	AGENT_W_EXITED,	   /* its process exited (finished, failed or stopped) */
	AGENT_W_REPLACING, /* dead (or killed to start again), waits for the next round */
	AGENT_W_RESPAWN,   /* that round came: starts once its handles close */
	AGENT_W_AWAITING,  /* its process runs outside any round (it replaces a dead
			    * worker while the others re-formed without it); it is
			    * handed the next round once it says "resizable" */
};

/* Whether the group's processes run (or are being replaced) in `s`. */
bool agent_group_runs(enum agent_state s);

/* One local worker as the decisions see it. */
struct agent_worker_view {
	enum agent_worker_state state;
	bool resizable;	  /* its process said "resizable" on its channel */
	bool replacement; /* started to replace a worker that said "resizable" */
	bool early;	  /* replaced alone with its new process started outside the
			   * rounds (AWAITING): the others re-form without it */
};

/* What becomes of a worker when the next round is handed out in place. */
enum agent_in_round {
	AGENT_IN_ROUND_HANDED,	/* it runs and re-forms: it is handed the round */
	AGENT_IN_ROUND_STARTS,	/* a new process starts in the round: it waits to be
				 * replaced, or it is a replacement that has not said
				 * "resizable" yet (killed now, uncharged) */
	AGENT_IN_ROUND_BLOCKS,	/* it cannot (a plain program, "fixed", finished): the
				 * node's group starts again in the round */
	AGENT_IN_ROUND_OUTSIDE, /* it stays out of the round, blocking nothing: replaced
				 * early and not started yet, or AWAITING and not said
				 * "resizable" yet (a later round takes it) */
};
enum agent_in_round agent_decide_in_round(const struct agent_worker_view *w);

/* round_over heard: what this node does. */
enum agent_round_over {
	AGENT_RO_LOG,  /* nothing: the group does not run, or a join is in flight */
	AGENT_RO_JOIN, /* join the next round while the workers run */
	AGENT_RO_STOP, /* stop the group to start it again in the next round */
};
/* `blocked`: some local worker is AGENT_IN_ROUND_BLOCKS. */
enum agent_round_over agent_decide_round_over(enum agent_state s, enum agent_next next,
					      bool blocked);

/* The answer to a join made in place (AGENT_NEXT_JOINING). */
enum agent_joined {
	AGENT_JOINED_FAIL,	/* the join failed: the job fails (stop, then end) */
	AGENT_JOINED_HAND_OUT,	/* hand the round to the workers; they stay */
	AGENT_JOINED_STOP_KEEP, /* it follows a restart elsewhere, or a worker can no longer
				 * re-form (it said "fixed", or it ended while the round
				 * was joined): stop the group, uncharged, and start the
				 * next group in it */
	AGENT_JOINED_KEEP,	/* the group stops to start again: the next group starts in it */
	AGENT_JOINED_ADOPT,	/* the group stops for a failure or the end: its end is
				 * reported in this round */
};
/* `same_restarts`: the round has the restart count of the group's round (no
 * restart happened elsewhere); `blocked`: a local worker is
 * AGENT_IN_ROUND_BLOCKS now (it changed while the round was joined);
 * `charge`: the group's so far. */
enum agent_joined agent_decide_joined(enum agent_state s, int status, bool same_restarts,
				      bool blocked, enum agent_charge charge);

/* A worker's process ended (or could not be started). */
struct agent_exit_view {
	enum agent_state state;	  /* the agent's */
	enum agent_charge charge; /* the group's so far */
	bool stopped;		  /* ddplaunch signalled it: the group stops */
	bool started;		  /* false: it could not be started */
	int exit_code, term_signal;
	bool permanent;		/* its failure will repeat (policy.h: exit 78, no space) */
	bool resizable;		/* it said "resizable" */
	bool round_not_taken;	/* it was handed a round and never said "took" it */
	bool outside;		/* it ran outside the rounds (AGENT_W_AWAITING): no round
				 * was in its way */
	bool others_in_place;	/* no other local worker is AGENT_IN_ROUND_BLOCKS */
	bool replacements_left; /* this node's replacements (--max_restarts) are not spent */
};

enum agent_exit_action {
	AGENT_EXIT_NONE,	  /* nothing more (finished, stopped, the group stops already) */
	AGENT_EXIT_REPLACE_RENEW, /* replace it alone in a new round of the same nodes
				   * (rdzv_renew; a failure when that is refused) */
	AGENT_EXIT_REPLACE,	  /* replace it alone in the round already coming */
	AGENT_EXIT_NEXT_ROUND,	  /* it left instead of re-forming: the node's group starts
				   * again in the next round */
	AGENT_EXIT_STOP,	  /* stop the group */
};

struct agent_exit_decision {
	enum agent_exit_action action;
	/* What the group's end is charged with, or AGENT_CHARGE_NONE; a
	 * replacement is counted apart (against --max_restarts, on its node). */
	enum agent_charge charge;
	bool replacement; /* counts one replacement */
};

/*
 * The rule, first match wins:
 *   1. exited 0 without a signal: it finished; nothing.
 *   2. stopped by ddplaunch: nothing (its status is the stop's).
 *   3. the group is charged with a failure already, or does not run
 *      (stopping): nothing more to do; charged as a failure (permanent if
 *      its failure is).
 *   4. a failure that will repeat: stop, charged permanent.
 *   5. a death by a signal (SIGKILL, SIGSEGV, ...) is a death, whatever
 *      round was in its way: replaced alone when it said "resizable", no
 *      other local worker blocks a round in place and the node has
 *      replacements left (in a new round when the group is RUNNING, in the
 *      round already coming when REPLACING or REFORMING); else stop,
 *      charged as a failure.
 *   6. an exit with a code and no signal, by a worker that said
 *      "resizable" and ran in the rounds (not outside), while a round was in its way (handed to it
 * and never taken, or being joined for it: REFORMING): it left instead of re-forming (a program
 * that does not call ddp_next_round, exiting on the collective error the round caused). The node's
 * group starts again in the next round, uncharged.
 *   7. any other exit with a code: as 5.
 */
struct agent_exit_decision agent_decide_exit(const struct agent_exit_view *v);

/* The higher of two charges. */
enum agent_charge agent_charge_max(enum agent_charge a, enum agent_charge b);

#endif
