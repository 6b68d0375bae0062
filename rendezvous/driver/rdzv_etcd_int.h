/*
 * rdzv_etcd_int.h - the etcd backend of the rendezvous primitives, shared
 * by its two files:
 *   rdzv_etcd.c  the ops, the session (lease, renewal), the answers in
 *                      request order, the watches, the end
 *   rdzv_etcd_calls.c  each request as a chain of async etcd calls
 * Everything runs on the agent's loop (etcd_async.h): no thread.
 */
#ifndef DDP_RENDEZVOUS_RDZV_ETCD_INT_H
#define DDP_RENDEZVOUS_RDZV_ETCD_INT_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "etcd_async.h"
#include "rdzv_prims.h"

/* The session's lease: a node killed is noticed within this. */
#define LEASE_TTL_S 3
enum job_kind { J_GET, J_CAS, J_ADD, J_SET, J_WATCH };

struct ewatch {
	struct etcd_be *be;
	uint64_t id;		/* the driver's */
	struct etcd_awatch *aw; /* NULL until its WATCH is answered */
	bool cancelled;		/* unwatched before that */
	struct ewatch *prev, *next;
};

/* A request: its arguments, where its chain of calls is, its results. */
struct ejob {
	struct ejob *next; /* the FIFO of requests to answer */
	struct etcd_be *be;
	enum job_kind kind;
	uint64_t tag;
	bool session, has_expected;
	char **keys; /* NUL-terminated copies; nkeys of them (1 but for GET) */
	size_t nkeys;
	void *value, *expected;
	size_t vlen, elen;
	int64_t delta;
	struct ewatch *w; /* WATCH */
	size_t next_key;  /* GET one key at a time: the next to read */

	bool running, done;
	int status;
	char *msg;	    /* why it failed (etcd_error()) */
	struct etcd_kv *kv; /* nkeys values (GET), or 1 (CAS current, WATCH's read) */
	bool swapped;
	int64_t num; /* ADD */
};

struct pe_lookup;
enum be_state { BE_NEW, BE_NAMES, BE_GRANTING, BE_WAITING, BE_OPEN };

struct etcd_be {
	uv_loop_t *loop;
	const struct rdzv_prims_sink *sink;
	void *drv;
	struct etcd_options opt; /* its strings are ours */
	int64_t connect_timeout_ms, connect_deadline_ms;
	char *peer;
	struct etcd_async *c;
	int64_t lease;
	char local[INET6_ADDRSTRLEN];
	enum be_state state;
	struct ejob *fifo, *fifo_tail;
	struct ewatch *watches;
	uv_timer_t ka;	 /* the lease's renewal */
	uv_timer_t kick; /* the next step, from the loop */
	int64_t ttl_ms;	 /* the lease's, as granted */
	bool ka_busy, closed, lost;
	bool read_only; /* no lease; reads only (rdzv_prims_config's) */
	int handles;	/* initialised handles (and the client, and each name's
			   look-up) not yet closed */
	/* the endpoints' names, looked up before the first request
	 * (rdzv_etcd_names.c) */
	size_t names_pending, names_total;
	struct pe_lookup *lookups;    /* until the last has answered */
	char why[RDZV_PRIMS_MSG_MAX]; /* last_error's answer */
};

/* rdzv_etcd_calls.c */
/* n bytes of p, NUL-terminated (n may be 0, p then NULL), or NULL. */
char *pe_mem_dup(const void *p, size_t n);
/* A job with copies of the keys; NULL when out of memory. */
struct ejob *pe_job_new(enum job_kind kind, uint64_t tag, const struct byteview *keys,
			size_t nkeys);
/* Frees j and what it holds (its ewatch when that was cancelled before the
 * answer). NULL allowed. */
void pe_job_free(struct ejob *j);
/* Starts j's etcd calls. When they end (maybe before this returns), j->done
 * and j->status are set and pe_job_ended() is called. */
void pe_job_run(struct etcd_be *be, struct ejob *j);
/* The watch's events, to the sink (etcd_awatch_cb). */
void pe_on_event(void *arg, int status, struct etcd_event *ev);
/* This machine's address towards endpoint ("" when unknown). */
void pe_local_toward(const char *endpoint, char *out, size_t len);

/* rdzv_etcd_names.c */
/* Looks up each endpoint's host name on the loop; then pe_names_ok(), or,
 * when every endpoint's name is one the resolver says does not exist,
 * pe_open_failed(). 0, or a negative errno (nothing was started then). */
int pe_names_check(struct etcd_be *be);

/* rdzv_etcd.c */
/* The names may resolve: the lease is asked for. */
void pe_names_ok(struct etcd_be *be);
/* The session cannot be opened: the driver hears why, nothing follows. */
void pe_open_failed(struct etcd_be *be, int status, const char *why);
/* One of be's handles (or look-ups) is closed; the last frees it. */
void pe_handle_closed(struct etcd_be *be);
void pe_job_ended(struct etcd_be *be);
/* The session ended by itself: pending requests fail, then lost(). */
void pe_lose(struct etcd_be *be, int status, const char *why);

#endif
