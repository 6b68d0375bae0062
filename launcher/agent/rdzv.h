/*
 * rdzv.h - the agent's seam for the rendezvous: the step at the top of
 * each attempt that tells this node its place in the job (group rank,
 * world size, first global rank, where the workers' store is), and, across
 * nodes, what happens to the job while it runs.
 *
 * Single node (rdzv_local.c): every round has this node alone and is
 * answered at once; the agent's own policy restarts the group.
 *
 * Multi-node (rdzv_multi.c, --nnodes > 1 or c10d with an endpoint): the
 * rendezvous state machine (rendezvous/rdzv/) runs on the agent's loop over
 * the store; the job's restart budget is the machine's, not the agent's.
 * The agent:
 *   rdzv_new -> rdzv_attach (hosts the store if this node is its host,
 *   starts connecting) -> per attempt: rdzv_join -> spawn with the round ->
 *   the workers end on their own: rdzv_group_exited -> rdzv_join again ...
 * and hears, through struct rdzv_events:
 *   round_over  the running round is over (a node died, left or joined,
 *               workers failed elsewhere, or this node lost its session with
 *               the store and joins again as a new node): stop the local
 *               workers (SIGTERM, grace) without counting a failure, then
 *               rdzv_join
 *   ended       FINISHED (exit 0), LEFT (after rdzv_leave), FAILED (msg
 *               is the user-facing reason) or REFUSED (another job's store
 *               or run id; exit 2): stop any workers and exit
 * On a stop signal the agent calls rdzv_leave (the others re-form at once);
 * when it is done it calls rdzv_shutdown, which closes the session (and a
 * hosted store, once its clients have gone: see rdzv_shutdown).
 */
#ifndef DDP_LAUNCHER_RDZV_H
#define DDP_LAUNCHER_RDZV_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

struct launch_opts;

struct rdzv_round {
	int round;	      /* local: the attempt (0, 1, ...); multi-node: the
				 machine's round (1, 2, ...) */
	int restart_count;    /* TORCHELASTIC_RESTART_COUNT: restarts used (the
				 job's, across nodes, for multi-node) */
	int group_rank;	      /* this node's rank among the nodes */
	int group_world_size; /* nodes in the round */
	int rank_base;	      /* global rank of local rank 0 */
	int world_size;	      /* workers in the whole job */
	const char *master_addr;
	int master_port;
	const char *local_addr; /* multi-node: this node's address as the
				   others reach it (DDP_LOCAL_ADDR), else NULL */
};

/* Called once per join; status 0 or a negative errno. `r` is valid during
 * the call. */
typedef void (*rdzv_joined_fn)(void *arg, int status, const struct rdzv_round *r);

enum rdzv_outcome {
	RDZV_OUT_FINISHED = 0, /* the job (or this node's part) is done: exit 0 */
	RDZV_OUT_LEFT,	       /* this node left after rdzv_leave */
	RDZV_OUT_FAILED,       /* the job failed; msg says why */
	RDZV_OUT_REFUSED,      /* this node is not of the job it reached (msg names
				  both; that job is left alone): exit 2 */
};

struct rdzv_events {
	void (*round_over)(void *arg, const char *why);
	void (*ended)(void *arg, enum rdzv_outcome how, const char *msg);
};

struct rdzv;

/* Picks the backend for the options (opts_rdzv.h): local, or multi-node
 * (static or c10d), after checking what a run would refuse (the options,
 * the store's host name); DDP_RDZV_TOKEN is read from environ_in.
 * `master_addr`/`master_port`: where a single-node launcher's store listens
 * (unused across nodes). Returns 0, or -EINVAL/-ENOTSUP/-ENOENT with err
 * filled, or -ENOMEM. Nothing is bound or connected yet. */
int rdzv_new(const struct launch_opts *o, char **environ_in, int nproc, const char *master_addr,
	     int master_port, struct rdzv **out, char *err, size_t errlen);

/* Whether r runs across nodes (then the agent hosts no store of its own). */
bool rdzv_multinode(const struct rdzv *r);

/* Multi-node: runs on `loop` from now on. Hosts the rendezvous store when
 * this node is its host, then starts connecting. Returns 0, or
 * -EADDRINUSE (static mode: node 0's port is taken; the owner was named in
 * the log), or another negative errno (reported). Local: does nothing. */
int rdzv_attach(struct rdzv *r, uv_loop_t *loop, const struct rdzv_events *ev, void *arg);

/* Joins the next round; `done` runs exactly once (possibly before this
 * returns). Returns 0 or a negative errno (then `done` does not run;
 * -ECANCELED: the rendezvous has ended, `ended` was or will be heard). */
int rdzv_join(struct rdzv *r, int round, rdzv_joined_fn done, void *arg);

/* Multi-node: the local workers of the current round ended on their own
 * (not stopped because of round_over): success, or a failure that asks the
 * job for a restart. Then call rdzv_join; `ended` may come instead. */
void rdzv_group_exited(struct rdzv *r, bool success);

/* Multi-node: leave the job (a stop signal); `ended` (LEFT) follows within
 * close_timeout. */
void rdzv_leave(struct rdzv *r);

/* The agent is done (its exit status given): the rendezvous ends (leaving
 * first if still a member, within close_timeout) and no event is heard any
 * more. A node that hosts the rendezvous store keeps it while other agents
 * are connected: shortly after, if some still are, the process forks, the
 * parent exits at once with exit_status and the child serves them until
 * the last one has gone. Keep the loop running. */
void rdzv_shutdown(struct rdzv *r, int exit_status);

/* After the loop has ended. NULL allowed. */
void rdzv_free(struct rdzv *r);

#endif
