/*
 * comm.c - the communication thread of a context. Every collective is
 * queued here and run in issue order, so asynchronous bucket all-reduces and
 * blocking collectives keep the same order on every rank.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctx.h"
#include "progress_page.h"
#include "timeutil.h"

static int comm_run(struct ddp_ctx *ctx, struct ddp_work *w)
{
	struct ddp_backend *b = ctx->backend;
	int rc;

	switch (w->kind) {
	case COMM_ALLREDUCE:
		rc = b->ops->allreduce(b, w->buf, w->count, w->dtype, w->op);
		break;
	case COMM_BROADCAST:
		rc = b->ops->broadcast(b, w->buf, w->count, w->dtype, w->root);
		break;
	case COMM_ALLGATHER:
		rc = b->ops->allgather(b, w->send, w->buf, w->count, w->dtype);
		break;
	case COMM_BARRIER:
		rc = b->ops->barrier(b);
		break;
	case COMM_CALL:
		rc = w->fn(ctx, w->arg);
		break;
	default:
		rc = -EINVAL;
	}
	if (rc >= 0 && w->kind != COMM_CALL)
		rc = b->ops->synchronize(b);
	return rc;
}

/* The progress page's op and payload of a collective. */
static enum ddp_progress_op comm_progress_op(const struct ddp_work *w, uint64_t *bytes)
{
	*bytes = (uint64_t)w->count * ddp_dtype_size(w->dtype);
	switch (w->kind) {
	case COMM_ALLREDUCE:
		return DDP_OP_ALLREDUCE;
	case COMM_BROADCAST:
		return DDP_OP_BROADCAST;
	case COMM_ALLGATHER:
		return DDP_OP_ALLGATHER;
	case COMM_BARRIER:
		*bytes = 0;
		return DDP_OP_BARRIER;
	default:
		return DDP_OP_OTHER;
	}
}

/* Runs w, numbered on the progress page (not a COMM_CALL: not a
 * collective of its own). */
static int comm_run_counted(struct ddp_ctx *ctx, struct ddp_work *w)
{
	enum ddp_progress_op op;
	uint64_t bytes;
	int rc;

	if (w->kind == COMM_CALL)
		return comm_run(ctx, w);
	op = comm_progress_op(w, &bytes);
	progress_enter(++ctx->progress_seq, op, bytes, w->bucket);
	rc = comm_run(ctx, w);
	progress_leave();
	return rc;
}

static void *comm_main(void *arg)
{
	struct ddp_ctx *ctx = arg;
	struct comm *c = &ctx->comm;

	pthread_mutex_lock(&c->lock);
	for (;;) {
		struct ddp_work *w;
		int failed;

		while (!c->head && !c->stop)
			pthread_cond_wait(&c->cond, &c->lock);
		if (!c->head)
			break;
		w = c->head;
		c->head = w->next;
		if (!c->head)
			c->tail = NULL;
		failed = c->failed || atomic_load(&c->aborted);
		pthread_mutex_unlock(&c->lock);

		w->start_ns = time_now_ns();
		w->rc = failed ? -ECANCELED : comm_run_counted(ctx, w);
		/* Aborted mid-way, a transport sees its own sockets shut: the
		 * cause is the abort, not a peer. */
		if (w->rc < 0 && atomic_load(&c->aborted))
			w->rc = -ECANCELED;
		w->end_ns = time_now_ns();

		pthread_mutex_lock(&c->lock);
		if (w->rc < 0)
			c->failed = 1;
		w->done = 1;
		pthread_cond_broadcast(&c->done);
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

int comm_start(struct ddp_ctx *ctx)
{
	struct comm *c = &ctx->comm;
	int rc;

	c->head = c->tail = NULL;
	c->stop = c->failed = c->explained = 0;
	atomic_store(&c->aborted, 0);
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);
	pthread_cond_init(&c->done, NULL);
	rc = pthread_create(&c->thread, NULL, comm_main, ctx);
	if (rc)
		return -rc;
	c->started = 1;
	return 0;
}

void comm_stop(struct ddp_ctx *ctx)
{
	struct comm *c = &ctx->comm;

	if (!c->started)
		return;
	pthread_mutex_lock(&c->lock);
	c->stop = 1;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
	pthread_join(c->thread, NULL);
	c->started = 0;
	pthread_cond_destroy(&c->cond);
	pthread_cond_destroy(&c->done);
	pthread_mutex_destroy(&c->lock);
}

int comm_submit(struct ddp_ctx *ctx, struct ddp_work *w)
{
	struct comm *c = &ctx->comm;

	w->ctx = ctx;
	w->next = NULL;
	pthread_mutex_lock(&c->lock);
	if (c->tail)
		c->tail->next = w;
	else
		c->head = w;
	c->tail = w;
	pthread_cond_signal(&c->cond);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

/* Lists the ranks (other than ours) whose failure key is missing. */
static size_t comm_silent_ranks(struct ddp_ctx *ctx, char *list, size_t len)
{
	size_t off = 0, n = 0;
	char key[400];

	list[0] = '\0';
	for (int r = 0; r < ctx->world_size; r++) {
		const char *one[1] = {key};

		snprintf(key, sizeof(key), "%s/failure/%d", ctx->prefix, r);
		if (r == ctx->rank || kv_check(ctx->kv, one, 1) == 1)
			continue;
		if (off < len)
			off += (size_t)snprintf(list + off, len - off, "%s%d", n ? ", " : "", r);
		n++;
	}
	return n;
}

/* After the first failure: publishes this rank's reason in the store, then
 * gives the others COMM_EXPLAIN_MS to do the same; the ranks that stay
 * silent are the ones stuck or dead, and the message names them (a rank
 * seeing only "rank 3 closed its connection" then learns who really
 * failed). Polls the store, bounded by the deadline. */
static void comm_explain(struct ddp_ctx *ctx)
{
	uint64_t deadline = time_now_ms() + COMM_EXPLAIN_MS;
	char key[400], silent[256];
	size_t n;

	pthread_mutex_lock(&ctx->kv_lock);
	snprintf(key, sizeof(key), "%s/failure/%d", ctx->prefix, ctx->rank);
	kv_set(ctx->kv, key, ctx->err, strlen(ctx->err));
	/* A new round from the agent (ddp_abort) ends the wait: the launcher
	 * already knows who left, and the survivors re-form at once instead
	 * of waiting the whole window for a dead rank's key. */
	while ((n = comm_silent_ranks(ctx, silent, sizeof(silent))) > 0 &&
	       time_left_ms(deadline) > 0 && !atomic_load(&ctx->comm.aborted)) {
		struct timespec ts = {0, 10 * 1000 * 1000};

		nanosleep(&ts, NULL);
	}
	pthread_mutex_unlock(&ctx->kv_lock);
	if (n > 0) {
		size_t off = strlen(ctx->err);

		snprintf(ctx->err + off, sizeof(ctx->err) - off,
			 "; %s %s did not report this failure (stuck or dead)",
			 n == 1 ? "rank" : "ranks", silent);
	}
}

int comm_wait(struct ddp_work *w)
{
	struct ddp_ctx *ctx = w->ctx;
	struct comm *c = &ctx->comm;
	int rc, explain = 0;

	pthread_mutex_lock(&c->lock);
	while (!w->done)
		pthread_cond_wait(&c->done, &c->lock);
	rc = w->rc;
	if (rc < 0 && !ctx->backend)
		snprintf(ctx->err, sizeof(ctx->err),
			 "no communicator: the last ddp_reform failed; call ddp_reform again or "
			 "exit");
	else if (rc < 0 && c->explained)
		snprintf(ctx->err, sizeof(ctx->err), "an earlier collective failed (%.1350s)",
			 ctx->first_err);
	else if (rc == -ECANCELED && (atomic_load(&c->aborted) || !ctx->backend->err[0]))
		snprintf(ctx->err, sizeof(ctx->err),
			 "communicator aborted by ddp_abort; re-form it (ddp_reform) or restart "
			 "the group");
	else if (rc < 0)
		snprintf(ctx->err, sizeof(ctx->err), "%s", ctx->backend->err);
	/* An abort is this rank's own decision: nothing to ask the others. */
	if (rc < 0 && !c->explained && !atomic_load(&c->aborted) && ctx->backend) {
		c->explained = 1;
		explain = 1;
	}
	pthread_mutex_unlock(&c->lock);
	if (explain) {
		comm_explain(ctx);
		snprintf(ctx->first_err, sizeof(ctx->first_err), "%.1390s", ctx->err);
	}
	return rc;
}
