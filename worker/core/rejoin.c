/*
 * rejoin.c - ddp_rejoin (ddp.h): the loop a resizable worker runs after a
 * collective failed: take the launcher's next round, re-form for it, run
 * the application's hand-over, and again while the membership keeps
 * changing. The decisions are made on codes (ddp_reform's -ESTALE for a
 * superseded round, ddp_rejoin_retryable), never on a message.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "ctx.h"
#include "log.h"
#include "progress_page.h"

int ddp_rejoin_retryable(int rc)
{
	switch (rc) {
	case -ESTALE:
	case -ECANCELED:
	case -ECONNRESET:
	case -ECONNABORTED:
	case -ECONNREFUSED:
	case -EPIPE:
	case -ENOTCONN:
	case -ETIMEDOUT:
	case -EHOSTUNREACH:
	case -ENETUNREACH:
		return 1;
	default:
		return 0;
	}
}

/* A collective of ctx failed (or the communicator was aborted) since it was
 * built: after() failed because the membership changed again, not by
 * itself. */
static bool rejoin_comm_failed(struct ddp_ctx *ctx)
{
	bool failed;

	if (!ctx->comm.started)
		return true;
	pthread_mutex_lock(&ctx->comm.lock);
	failed = ctx->comm.failed || atomic_load(&ctx->comm.aborted);
	pthread_mutex_unlock(&ctx->comm.lock);
	return failed;
}

/* The message of a failed ddp_rejoin, in ctx->err and errbuf. */
static int rejoin_fail(struct ddp_ctx *ctx, int rc, const char *msg, char *errbuf,
		       size_t errbuf_len)
{
	snprintf(ctx->err, sizeof(ctx->err), "ddp_rejoin: %.1500s", msg);
	if (errbuf && errbuf_len)
		snprintf(errbuf, errbuf_len, "%s", ctx->err);
	return rc;
}

/* Why no round came: ddp_next_round's rc, and the failure that made this
 * loop wait (last, "" if none). */
static int rejoin_no_round(struct ddp_ctx *ctx, int rc, uint64_t timeout_ms, const char *last,
			   char *errbuf, size_t errbuf_len)
{
	char msg[1400];
	int n;

	if (rc == -ETIMEDOUT)
		n = snprintf(msg, sizeof(msg), "no new round from the launcher within %llu ms",
			     (unsigned long long)(timeout_ms ? timeout_ms : ctx->timeout_ms));
	else if (rc == -EPIPE)
		n = snprintf(msg, sizeof(msg),
			     "the launcher's agent closed the channel (the launcher ended); exit");
	else if (rc == -ENOTSUP)
		n = snprintf(msg, sizeof(msg),
			     "this worker is not resized in place (no agent channel from "
			     "ddplaunch, or ddp_set_resizable 0); exit and the launcher restarts "
			     "it");
	else
		n = snprintf(msg, sizeof(msg), "cannot take the next round: %s", strerror(-rc));
	if (last[0] && n > 0 && (size_t)n < sizeof(msg))
		snprintf(msg + n, sizeof(msg) - (size_t)n, " (waiting after: %.1000s)", last);
	return rejoin_fail(ctx, rc, msg, errbuf, errbuf_len);
}

/* One round: re-form, then after(). 0 done; 1 the membership changed again
 * (take the next round; the cause in last); < 0 fatal (message set). */
static int rejoin_one(struct ddp_ctx *ctx, struct ddp_round *r,
		      int (*after)(struct ddp_ctx *ctx, void *arg), void *arg, char *last,
		      size_t last_len, char *errbuf, size_t errbuf_len)
{
	int rc = ddp_reform(ctx, &r->opts, last, last_len);

	if (rc < 0) {
		log_debug("ddp_rejoin: round %d: %s", r->round, last);
		if (ddp_rejoin_retryable(rc))
			return 1;
		return rejoin_fail(ctx, rc, last, errbuf, errbuf_len);
	}
	if (!after)
		return 0;
	progress_phase(DDP_PHASE_HANDOVER);
	rc = after(ctx, arg);
	progress_phase(rc >= 0 ? DDP_PHASE_COMPUTE : DDP_PHASE_REFORM);
	if (rc >= 0)
		return 0;
	snprintf(last, last_len, "round %d: after re-forming: %.900s", r->round,
		 ddp_error(ctx)[0] ? ddp_error(ctx) : strerror(-rc));
	log_debug("ddp_rejoin: %s", last);
	if (rejoin_comm_failed(ctx))
		return 1;
	return rejoin_fail(ctx, rc, last, errbuf, errbuf_len);
}

int ddp_rejoin(struct ddp_ctx *ctx, struct ddp_round *out, uint64_t timeout_ms,
	       int (*after)(struct ddp_ctx *ctx, void *arg), void *arg, char *errbuf,
	       size_t errbuf_len)
{
	struct ddp_round r;
	char last[1200] = "";
	int rc;

	if (!ctx)
		return -EINVAL;
	progress_phase(DDP_PHASE_REFORM);
	do {
		rc = ddp_next_round(ctx, &r, timeout_ms);
		if (rc < 0)
			return rejoin_no_round(ctx, rc, timeout_ms, last, errbuf, errbuf_len);
		rc = rejoin_one(ctx, &r, after, arg, last, sizeof(last), errbuf, errbuf_len);
		if (rc < 0)
			return rc;
	} while (rc == 1);
	if (out) {
		*out = r;
		/* opts.init_method points into the struct it belongs to. */
		out->opts.init_method = out->init_method;
	}
	ctx->err[0] = '\0';
	return 0;
}
