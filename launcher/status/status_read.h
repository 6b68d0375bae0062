/*
 * status_read.h - `ddplaunch status`'s reading: the job's state, the world
 * of its last formed round and each member's status record, read through
 * the rendezvous primitives (rdzv_prims.h: our store through an agent
 * session, or etcd v3 reading only, without a lease), shown with
 * status_view.h once, or again every `watch` seconds until ^C.
 */
#ifndef DDP_LAUNCHER_STATUS_READ_H
#define DDP_LAUNCHER_STATUS_READ_H

#include <stdbool.h>

#include "rdzv_prims.h"

struct status_read_opts {
	const struct rdzv_prims_ops *ops; /* rdzv_prims_session or rdzv_prims_etcd */
	struct rdzv_prims_config cfg;	  /* its loop and read_only are set by status_read_run */
	const char *run_id;
	const char *endpoint; /* for the screen and the messages */
	const char *backend;  /* "etcd", or NULL: our store */
	double watch;	      /* seconds; 0: once */
	bool json;
};

/* Runs the reading on a loop of its own until it ends. Returns ddplaunch's
 * exit status: 0 (shown; --watch: ended by ^C), 1 (the job is not there,
 * the store cannot be reached or read: one line says which). */
int status_read_run(struct status_read_opts *o);

#endif
