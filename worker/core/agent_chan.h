/*
 * agent_chan.h - libddp's end of the launcher's agent channel (see
 * agent_chan.c; next_round.c gives it to the program: ddp_next_round in
 * ddp.h). Not installed.
 */
#ifndef DDP_WORKER_AGENT_CHAN_H
#define DDP_WORKER_AGENT_CHAN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* One round as the agent sends it. */
struct agent_round {
	int round, rank, world_size, local_rank, local_world_size;
	char master_addr[64];
	int master_port, group_rank, group_world_size;
};

/* Inside struct ddp_ctx. fd -1 and started false: no channel. */
struct agent_chan {
	bool inited; /* the lock and cond exist */
	int fd;
	bool started; /* the reader thread runs */
	bool fixed;   /* ddp_set_resizable(ctx, 0): the agent restarts it */
	/* Called by the reader thread when a round comes (not while a
	 * re-formation runs): ends the collective in flight (ddp_abort). */
	void (*abort)(void *arg);
	void *abort_arg;
	pthread_t thread;
	pthread_mutex_t lock; /* guards what follows */
	pthread_cond_t cond;
	struct agent_round next; /* the latest round heard */
	uint64_t seq, taken;	 /* rounds heard, and the last one taken */
	bool closed;		 /* the agent's end closed */
	bool reforming;		 /* ddp_reform runs: no abort, but... */
	int superseded_round;	 /* ...the round that superseded it */
	/* ...a round heard meanwhile sets this flag, which ddp_reform's
	 * waits (the store's connect and keys, the transport's set-up) poll:
	 * they end with -ECANCELED. Read without the lock. */
	atomic_int superseded;
};

/* In ddp_init: with DDP_AGENT_FD set (by ddplaunch), says "resizable" to
 * the agent and starts the reader, which calls abort(arg) for each round
 * heard. Without it, or on any failure, there is no channel (started
 * false: ddp_next_round -ENOTSUP) and nothing is said: the agent restarts
 * the worker as it restarts any program. */
void agent_chan_open(struct agent_chan *c, void (*abort)(void *arg), void *arg);
/* In ddp_free: stops the reader. Safe after a channel-less open. */
void agent_chan_close(struct agent_chan *c);
/* Around ddp_reform's rebuild: a round heard then does not abort (not
 * concurrently with the rebuild, ddp_abort's contract) but sets
 * chan.superseded. on: clears the flag, or sets it at once when a round
 * the program has not taken yet is waiting. off: clears it and returns
 * the round that superseded this re-formation, or 0 when none did. */
int agent_chan_reforming(struct agent_chan *c, bool on);
/* Waits up to timeout_ms for a round later than the one taken last: 0
 * with *r (now taken), or -ENOTSUP (no channel), -ETIMEDOUT, -EPIPE (the
 * agent's end closed). */
int agent_chan_wait(struct agent_chan *c, struct agent_round *r, uint64_t timeout_ms);
/* Says "took R": this process re-forms in round R (a worker sent a round
 * that exits before saying so is restarted with its group instead). A
 * failed write means the agent is gone; the re-formation then fails by
 * itself. */
void agent_chan_took(struct agent_chan *c, int round);
/* Writes one line ("resizable\n", "fixed\n"): 0, -ENOTSUP (no channel)
 * or -EPIPE. */
int agent_chan_say(struct agent_chan *c, const char *line);

#endif
