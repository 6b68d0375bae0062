/*
 * next_round.c - the public face of the agent channel (ddp.h): a worker
 * resized in place takes the launcher's next round (ddp_next_round), says
 * whether it can be resized (ddp_resizable, ddp_set_resizable). The
 * channel itself is agent_chan.c.
 */
#include "agent_chan.h"
#include "ctx.h"
#include "progress_page.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int ddp_next_round(struct ddp_ctx *ctx, struct ddp_round *out, uint64_t timeout_ms)
{
	struct agent_wire_round r;
	int rc, n;

	if (!ctx || !out)
		return -EINVAL;
	if (ctx->chan.started)
		progress_phase(DDP_PHASE_REFORM);
	rc = agent_chan_wait(&ctx->chan, &r, timeout_ms ? timeout_ms : ctx->timeout_ms);
	if (rc < 0)
		return rc;
	memset(out, 0, sizeof(*out));
	ddp_options_init(&out->opts);
	out->round = r.round;
	out->group_rank = r.group_rank;
	out->group_world_size = r.group_world_size;
	/* Fits (ddp.h sizes it for the channel's longest address): never cut. */
	n = snprintf(out->init_method, sizeof(out->init_method), "tcp://%s:%d", r.master_addr,
		     r.master_port);
	if (n < 0 || (size_t)n >= sizeof(out->init_method))
		return -ERANGE;
	out->opts.init_method = out->init_method;
	out->opts.rank = r.rank;
	out->opts.world_size = r.world_size;
	out->opts.local_rank = r.local_rank;
	out->opts.local_world_size = r.local_world_size;
	out->opts.attempt = r.round > 0 ? r.round - 1 : 0;
	agent_chan_took(&ctx->chan, r.round);
	return 0;
}

int ddp_resizable(const struct ddp_ctx *ctx)
{
	return ctx && ctx->chan.started && !ctx->chan.fixed;
}

int ddp_set_resizable(struct ddp_ctx *ctx, int resizable)
{
	int rc;

	if (!ctx)
		return -ENOTSUP;
	rc = agent_chan_declare(&ctx->chan, resizable != 0);
	if (rc == 0)
		ctx->chan.fixed = !resizable;
	return rc;
}
