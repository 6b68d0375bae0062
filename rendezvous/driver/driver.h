/*
 * rdzv_multi.h - the multi-node rendezvous driver: runs the rendezvous
 * state machine (rdzv_machine.h) on the agent's libuv loop over a store
 * backend (rdzv_prims.h), hosts the rendezvous store when this node is its
 * host, and gives the workers of each round a fresh store of their own
 * (MASTER_PORT changes every round, so no key of an earlier round is ever
 * seen). The calls are those of rdzv.h, which forwards them here; their
 * contracts are there.
 *
 * Who hosts the rendezvous store: in static mode the node with node rank 0,
 * at --master_addr:--master_port (a taken port is refused at once, naming
 * its owner: the nodes can then never disagree about where the store is);
 * in c10d mode by torchrun's rule, every agent on the endpoint's machine
 * (rdzv_host_is_self: an interface's address, any loopback address,
 * localhost, the hostname), is_host in --rdzv_conf overriding it, and node
 * 0 where the endpoint came from a Slurm step: each binds the endpoint, the
 * first wins, and the others find the port taken and join the store there
 * (as they do a ddp-rdzvd's, or another job's agent's); by the rule a bind
 * that fails otherwise joins as a client too. The store listens on that
 * one address only. Until the session is open, a line every time the wait
 * has doubled (from 3 s) says that the store does not answer and what to
 * do.
 */
#ifndef DDP_LAUNCHER_RDZV_MULTI_H
#define DDP_LAUNCHER_RDZV_MULTI_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "opts_rdzv.h"
#include "rdzv.h"

struct rdzv_multi;

/* Copies what it needs of cfg; decides whether this node hosts the store
 * (name resolution). Returns 0, -ENOENT (a name that does not resolve; err
 * says which), -EINVAL or -ENOMEM. */
int rdzv_multi_new(const struct opts_rdzv *cfg, int nproc, int max_restarts,
		   struct rdzv_multi **out, char *err, size_t errlen);
int rdzv_multi_attach(struct rdzv_multi *d, uv_loop_t *loop, const struct rdzv_events *ev,
		      void *arg);
int rdzv_multi_join(struct rdzv_multi *d, rdzv_joined_fn done, void *arg);
void rdzv_multi_group_exited(struct rdzv_multi *d, bool success);
void rdzv_multi_leave(struct rdzv_multi *d);
void rdzv_multi_shutdown(struct rdzv_multi *d, int exit_status);
void rdzv_multi_free(struct rdzv_multi *d);

#endif
