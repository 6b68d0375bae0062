/*
 * rdzv_etcd_int.h - the etcd backend of the rendezvous primitives, shared
 * by its two files:
 *   rdzv_prims_etcd.c  the loop's side: the ops, the answers in request
 *                      order, the watches' polls, the lease's renewal timer,
 *                      the end
 *   rdzv_etcd_calls.c  the worker thread: the queue, the blocking etcd calls
 */
#ifndef DDP_LAUNCHER_RDZV_ETCD_INT_H
#define DDP_LAUNCHER_RDZV_ETCD_INT_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "etcd_client.h"
#include "rdzv_prims.h"

/* The session's lease: a node killed is noticed within this. */
#define LEASE_TTL_S 3
enum job_kind {
	J_OPEN,
	J_GET,
	J_CAS,
	J_ADD,
	J_SET,
	J_WATCH,
	J_KEEPALIVE, /* internal: not answered to the sink */
	J_REVOKE,    /* internal, the last one */
};

struct ewatch;

struct ejob {
	struct ejob *next;  /* the worker's queue */
	struct ejob *fnext; /* the loop's FIFO of requests to answer */
	enum job_kind kind;
	uint64_t tag;
	bool session, has_expected;
	char **keys; /* NUL-terminated copies; nkeys of them (1 but for GET) */
	size_t nkeys;
	void *value, *expected;
	size_t vlen, elen;
	int64_t delta;
	struct ewatch *w; /* WATCH */

	/* Results: written by the worker before `done`, read by the loop after. */
	bool done;
	int status;
	char *msg;	    /* why it failed (etcd_error()) */
	struct etcd_kv *kv; /* nkeys values (GET), or 1 (CAS current, WATCH's read) */
	bool swapped;
	int64_t num;	       /* ADD */
	struct etcd_watch *ew; /* WATCH */
};

struct ewatch {
	uv_poll_t poll;
	struct etcd_be *be;
	uint64_t id;	       /* the driver's */
	struct etcd_watch *ew; /* NULL until its WATCH is answered */
	bool cancelled;	       /* unwatched (or closing) */
	bool polling;	       /* poll is initialised: freed in its close callback */
	struct ewatch *prev, *next;
};

struct etcd_be {
	uv_loop_t *loop;
	const struct rdzv_prims_sink *sink;
	void *drv;
	struct etcd_options opt; /* its strings are ours */
	int64_t connect_deadline_ms;
	struct etcd_client *c; /* made and used by the worker; freed at the end */
	char *peer;

	/* Shared with the worker, under mu. */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct ejob *q_head, *q_tail;
	struct ejob *idone; /* finished internal jobs */
	bool quit, worker_exited;

	/* The worker's own. */
	int64_t lease;
	char local[INET6_ADDRSTRLEN];

	/* The loop's own. */
	pthread_t worker;
	bool worker_started;
	struct ejob *fifo, *fifo_tail;
	struct ewatch *watches;
	uv_async_t async;
	uv_timer_t ka;
	int64_t ttl_ms; /* the lease's, as granted */
	bool open, ka_busy, closed, lost, finishing;
	int handles; /* initialised handles not yet closed */
};

/* rdzv_etcd_calls.c */
/* n bytes of p, NUL-terminated (n may be 0, p then NULL), or NULL. */
char *pe_mem_dup(const void *p, size_t n);
/* A job with copies of the keys; NULL when out of memory. */
struct ejob *pe_job_new(enum job_kind kind, uint64_t tag, const struct byteview *keys,
			size_t nkeys);
/* Frees j and what it holds (a watch it set up; its ewatch when that was
 * cancelled before the answer). NULL allowed. */
void pe_job_free(struct ejob *j);
/* Hands j to the worker (ahead of the others when urgent); a request (not
 * KEEPALIVE or REVOKE) also joins the loop's FIFO of answers. Loop only. */
void pe_job_submit(struct etcd_be *be, struct ejob *j, bool urgent);
/* Starts the worker (all signals blocked in it). 0 or a negative errno. */
int pe_worker_start(struct etcd_be *be);

#endif
