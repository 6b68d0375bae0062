/*
 * status_view.h - what `ddplaunch status` shows, from what it read in the
 * rendezvous store (status_main.c reads; this is pure: no I/O but the
 * stream it writes to): the job's state (rdzv_codec.h's), the members of
 * its last formed round, and each member's status record (agent_status.c's
 * JSON, or none: the node is gone).
 */
#ifndef DDP_LAUNCHER_STATUS_VIEW_H
#define DDP_LAUNCHER_STATUS_VIEW_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>

#include "rdzv_codec.h"

struct status_node {
	char id[RDZV_ID_MAX + 1];
	char addr[RDZV_ADDR_MAX + 1];
	unsigned nproc;
	json_t *rec; /* its record (owned), or NULL: none in the store */
};

struct status_snap {
	const char *run_id, *endpoint;
	const char *backend; /* "etcd" (its endpoint list), or NULL: our store */
	struct rdzv_state st;
	unsigned world_round; /* the round the nodes are of (0: none formed yet) */
	struct status_node *nodes;
	size_t nnodes;
};

/* Frees the records and the nodes. */
void status_snap_release(struct status_snap *s);

/* The screen: a line for the job (at "etcd ENDPOINTS" for etcd), a table of the nodes (rank, id,
 * address, state, ranks, step, steps per second, step and wait times, time
 * lost, when its record was written), the last re-formations and why.
 * `now`: wall clock seconds, for the records' ages. Returns 0 or -EIO. */
int status_render_text(FILE *f, const struct status_snap *s, time_t now);

/* The same as one JSON object, for scripts: {"run_id", "endpoint",
 * "phase", "round", "reason", "subject", "nodes_min", "nodes_max",
 * "restarts", "max_restarts", "message", "world_round", "backend" ("store"
 * or "etcd"), "nodes":[{"id",
 * "addr", "nproc", "record": {...} or null}]}. Returns 0 or -EIO. */
int status_render_json(FILE *f, const struct status_snap *s);

/* Words for enum rdzv_phase and enum rdzv_reason. */
const char *status_phase_word(enum rdzv_phase p);
const char *status_reason_text(enum rdzv_reason r);

#endif
