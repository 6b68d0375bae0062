/*
 * comm.c - the communication thread of a context. Every collective is
 * queued here and run in issue order, so asynchronous bucket all-reduces and
 * blocking collectives keep the same order on every rank.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctx.h"
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
		failed = c->failed;
		pthread_mutex_unlock(&c->lock);

		w->start_ns = time_now_ns();
		w->rc = failed ? -ECANCELED : comm_run(ctx, w);
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

int comm_wait(struct ddp_work *w)
{
	struct ddp_ctx *ctx = w->ctx;
	struct comm *c = &ctx->comm;
	int rc;

	pthread_mutex_lock(&c->lock);
	while (!w->done)
		pthread_cond_wait(&c->done, &c->lock);
	rc = w->rc;
	if (rc == -ECANCELED && !ctx->backend->err[0])
		snprintf(ctx->err, sizeof(ctx->err),
			 "communicator aborted by an earlier error; restart the group");
	else if (rc < 0)
		snprintf(ctx->err, sizeof(ctx->err), "%s", ctx->backend->err);
	pthread_mutex_unlock(&c->lock);
	return rc;
}
