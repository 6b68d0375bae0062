/*
 * ctx.h - libddp's context from the inside: struct ddp_ctx (ranks, the
 * attempt's key prefix, the store, the backend) and its communication
 * thread, which runs every queued collective in issue order (comm_submit,
 * comm_wait), so the same sequence reaches the backend on every rank.
 *
 * Threads: the application thread owns the context (ctx->err is its last
 * error); the store is shared with the communication thread, so every use
 * of ctx->kv holds ctx->kv_lock; the queue and its flags are under
 * ctx->comm.lock. Not installed.
 */
#ifndef DDP_WORKER_CTX_H
#define DDP_WORKER_CTX_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "agent_chan.h"
#include "backend.h"
#include "ddp.h"
#include "kv.h"

enum comm_kind {
	COMM_ALLREDUCE,
	COMM_BROADCAST,
	COMM_ALLGATHER,
	COMM_BARRIER,
	COMM_CALL, /* runs fn(arg) on the communication thread */
};

/* One queued operation; owned by whoever waits for it (ddp_work_wait). */
struct ddp_work {
	struct ddp_work *next;
	enum comm_kind kind;
	void *buf;
	const void *send;
	size_t count;
	enum ddp_dtype dtype;
	enum ddp_op op;
	int root;
	int bucket; /* the reducer's bucket it reduces, -1 for none (the progress page) */
	int (*fn)(struct ddp_ctx *ctx, void *arg);
	void *arg;
	struct ddp_ctx *ctx;
	int done;
	int rc;
	uint64_t start_ns, end_ns; /* time on the communication thread */
};

struct comm {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond; /* queue not empty, or stop */
	pthread_cond_t done; /* some work finished */
	struct ddp_work *head, *tail;
	int stop;
	int started;
	int failed;    /* a collective failed: later ones return -ECANCELED */
	int explained; /* the first failure's cause was published/looked up */
	/* ddp_abort was called: set without the lock (async-signal-safe), read
	 * by the thread before each operation. */
	atomic_int aborted;
};

struct ddp_ctx {
	int rank, world_size, local_rank, local_world_size, attempt;
	bool nodes_even; /* every rank's LOCAL_WORLD_SIZE is this one's (ddp_arrive) */
	uint64_t timeout_ms;
	char prefix[256]; /* "/ddp/<run_id>/attempt_<n>" */
	struct kv *kv;
	pthread_mutex_t kv_lock;
	struct ddp_backend *backend;
	struct comm comm;
	int nreducers;	      /* reducers created, to namespace their keys */
	char first_err[1400]; /* the first failure, explained (comm_explain) */
	char err[1600];
	struct agent_chan chan; /* the launcher's agent channel, if any */
	/* Collectives run since the communicator was built (the
	 * communication thread's; the progress page's seq). */
	uint64_t progress_seq;
};

/* DDP_TIMEOUT_MS's value: a whole number of milliseconds ("60000") or a
 * whole number with a unit: ms, s, min or h ("500ms", "90s", "5min", "2h"),
 * from 1 ms to 30 days. 0 with *ms set, or -EINVAL (*ms untouched) for
 * anything else: a sign, a fraction, spaces, another unit, 0, too long.
 * Pure (ddp.c). */
#define DDP_MAX_TIMEOUT_MS (30ull * 24 * 3600 * 1000) /* 30 days */
int ddp_parse_timeout(const char *s, uint64_t *ms);

/* ddp_allreduce_async for the reducer's bucket `bucket` (-1: none), which
 * the progress page names (collectives.c). */
int coll_allreduce_async(struct ddp_ctx *ctx, void *buf, size_t count, enum ddp_dtype dtype,
			 enum ddp_op op, int bucket, struct ddp_work **out);

/* Starts the thread with an empty queue and no failure recorded. */
int comm_start(struct ddp_ctx *ctx);
/* Waits for queued work, stops the thread. */
void comm_stop(struct ddp_ctx *ctx);
/* Queues work (allocated by the caller with calloc; kind/args filled). */
int comm_submit(struct ddp_ctx *ctx, struct ddp_work *w);
/* Waits for w; returns its rc; does not free it. On failure copies the
 * backend's message to ctx->err. */
int comm_wait(struct ddp_work *w);

/* How long the first failure waits for the other ranks' reasons (comm.c):
 * short, so that a collective still fails within a second of a peer's
 * death; a rank slower than this to report is named as silent. */
#define COMM_EXPLAIN_MS 250

#endif
