/*
 * rdzv.h - joining a rendezvous round: the one step at the top of each
 * attempt of the agent loop that tells this node its place in the job
 * (group rank, world size, first global rank, where the store is).
 *
 * Single node: the local implementation answers at once. Multi-node
 * backends plug in behind the same two calls and answer asynchronously on
 * the agent's loop.
 */
#ifndef DDP_LAUNCHER_RDZV_H
#define DDP_LAUNCHER_RDZV_H

#include <stddef.h>

struct launch_opts;

struct rdzv_round {
	int round;	      /* 0, 1, ...: TORCHELASTIC_RESTART_COUNT */
	int group_rank;	      /* this node's rank among the nodes */
	int group_world_size; /* nodes in the round */
	int rank_base;	      /* global rank of local rank 0 */
	int world_size;	      /* workers in the whole job */
	const char *master_addr;
	int master_port;
};

/* Called once per join; status 0 or a negative errno. `r` is valid during
 * the call. */
typedef void (*rdzv_joined_fn)(void *arg, int status, const struct rdzv_round *r);

struct rdzv;

/* Picks the backend for the options: one node -> local. Multi-node jobs
 * (--nnodes > 1) return -ENOTSUP for now, with err saying so.
 * `master_addr`/`master_port`: where this launcher's store listens. */
int rdzv_new(const struct launch_opts *o, int nproc, const char *master_addr, int master_port,
	     struct rdzv **out, char *err, size_t errlen);

/* Joins round `round`; `done` runs exactly once (possibly before this
 * returns). Returns 0 or a negative errno (then `done` does not run). */
int rdzv_join(struct rdzv *r, int round, rdzv_joined_fn done, void *arg);

void rdzv_free(struct rdzv *r);

#endif
