/*
 * rdzv_int.h - inside the agent's rendezvous seam (rdzv.h): its many-nodes
 * backend (rdzv_nodes.c), the rendezvous driver of rendezvous/driver/
 * (driver.h) given the resolved options (opts_rdzv.h) and heard through
 * rdzv.h's events, which rdzv_many.c forwards the calls to. The calls are
 * those of rdzv.h; their contracts are there.
 */
#ifndef DDP_LAUNCHER_RDZV_INT_H
#define DDP_LAUNCHER_RDZV_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "opts_rdzv.h"
#include "rdzv.h"

struct rdzv_nodes;

/* Gives the driver what it needs of cfg (etcd's password from
 * OPTS_ETCD_PASSWORD_ENV when only its user is given). Returns 0, -ENOENT
 * (a name that does not resolve; err says which), -EINVAL, -EADDRNOTAVAIL
 * or -ENOMEM. */
int rdzv_nodes_new(const struct opts_rdzv *cfg, int nproc, int max_restarts,
		   struct rdzv_nodes **out, char *err, size_t errlen);
int rdzv_nodes_attach(struct rdzv_nodes *n, uv_loop_t *loop, const struct rdzv_events *ev,
		      void *arg);
int rdzv_nodes_join(struct rdzv_nodes *n, rdzv_joined_fn done, void *arg);
void rdzv_nodes_group_exited(struct rdzv_nodes *n, bool success);
void rdzv_nodes_renew(struct rdzv_nodes *n);
int rdzv_nodes_set_nproc(struct rdzv_nodes *n, int nproc);
void rdzv_nodes_grow(struct rdzv_nodes *n);
int rdzv_nodes_node_of(const struct rdzv_nodes *n, int rank);
int rdzv_nodes_publish(struct rdzv_nodes *n, const void *rec, size_t len);
struct store_server *rdzv_nodes_hosted_store(struct rdzv_nodes *n);
int rdzv_nodes_post(struct rdzv_nodes *n, const char *text);
int rdzv_nodes_put(struct rdzv_nodes *n, const char *name, const char *value);
int rdzv_nodes_get(struct rdzv_nodes *n, const char *name,
		   void (*got)(void *arg, const char *value), void *arg);
void rdzv_nodes_evict(struct rdzv_nodes *n, int node);
void rdzv_nodes_leave(struct rdzv_nodes *n);
/* Leaves with a failure that will repeat (driver.h: rdzv_driver_leave_permanent). */
void rdzv_nodes_leave_permanent(struct rdzv_nodes *n, const char *cause);
void rdzv_nodes_shutdown(struct rdzv_nodes *n, int exit_status);
/* NULL allowed. */
void rdzv_nodes_free(struct rdzv_nodes *n);

#endif
