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

#include "agent_wire.h"

/* Inside struct ddp_ctx: one context's hold on the process's channel.
 * fd -1 and started false: no channel. */
struct agent_chan {
	bool inited;  /* the lock and cond exist */
	int fd;	      /* the process's channel (not this context's to close) */
	int stop_fd;  /* an eventfd that ends the reader (agent_chan_close) */
	bool started; /* the reader thread runs */
	bool fixed;   /* ddp_set_resizable(ctx, 0): the agent restarts it */
	/* Called by the reader thread when a round comes (not while a
	 * re-formation runs): ends the collective in flight (ddp_abort). */
	void (*abort)(void *arg);
	void *abort_arg;
	pthread_t thread;
	pthread_mutex_t lock; /* guards what follows */
	pthread_cond_t cond;
	struct agent_wire_round next; /* the latest round heard */
	uint64_t seq, taken;	      /* rounds heard, and the last one taken */
	bool closed;		      /* the agent's end closed */
	bool reforming;		      /* ddp_reform runs: no abort, but... */
	int superseded_round;	      /* ...the round that superseded it */
	/* ...a round heard meanwhile sets this flag, which ddp_reform's
	 * waits (the store's connect and keys, the transport's set-up) poll:
	 * they end with -ECANCELED. Read without the lock. */
	atomic_int superseded;
};

/* In ddp_init. The process takes the channel once, at the first open:
 * DDP_AGENT_FD names the fd and DDP_AGENT_PID the agent (ddp-exec sets
 * it: the launcher, which made the socket pair); the fd is taken only if
 * it is a socket whose peer (SO_PEERCRED) is that process, so a socket of
 * the program's own that happens to have the number is never written to.
 * Both variables are then removed from the environment and the fd marked
 * close-on-exec, whatever the outcome: the program's children neither
 * hold the channel nor look for it. The fd stays open for the life of the
 * process; a later open (a ddp_init after ddp_free) holds it again.
 *
 * With the channel, starts the reader, which calls abort(arg) for each
 * round heard, and only then says "hello 1 resizable" the first time
 * ("resizable" later). Without it, or while another context holds it, or on any
 * failure, there is no channel for this context (started false:
 * ddp_next_round -ENOTSUP) and nothing is said: the agent restarts the
 * worker as it restarts any program. */
void agent_chan_open(struct agent_chan *c, void (*abort)(void *arg), void *arg);
/* In ddp_free: stops the reader and lets the channel go for a later
 * context; the fd stays open. Safe after a channel-less open. */
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
int agent_chan_wait(struct agent_chan *c, struct agent_wire_round *r, uint64_t timeout_ms);
/* Says "took R": this process re-forms in round R (a worker sent a round
 * that exits before saying so is restarted with its group instead). A
 * failed write means the agent is gone; the re-formation then fails by
 * itself. */
void agent_chan_took(struct agent_chan *c, int round);
/* Says "resizable" or "fixed": 0, -ENOTSUP (no channel) or -EPIPE (the
 * agent is gone; never SIGPIPE: every write is send(MSG_NOSIGNAL)). */
int agent_chan_declare(struct agent_chan *c, bool resizable);
/* Says "replica STEP RANK ACTION TENSOR" (common/agent_wire.h): 0,
 * -ENOTSUP (no channel), -ERANGE (a field the grammar refuses) or -EPIPE
 * (the agent is gone). */
int agent_chan_replica(struct agent_chan *c, const struct agent_wire_replica *r);

#endif
