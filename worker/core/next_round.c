/*
 * next_round.c - the public face of the agent channel (ddp.h): a worker
 * resized in place takes the launcher's next round (ddp_next_round), says
 * whether it can be resized (ddp_resizable, ddp_set_resizable), what
 * became of its promise of a 1-rank run's bits (ddp_say_numerics), and
 * tells of a replica that differed (ddp_agent_replica). The
 * channel itself is agent_chan.c.
 */
#include "agent_chan.h"
#include "ctx.h"
#include "progress_writer.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
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

int ddp_say_numerics(struct ddp_ctx *ctx, enum ddp_numerics promise, const char *text)
{
	struct agent_wire_msg m = {.kind = AGENT_WIRE_NUMERICS};

	if (!ctx || !text)
		return -EINVAL;
	switch (promise) {
	case DDP_NUMERICS_KEPT:
		m.numerics = AGENT_WIRE_NUMERICS_KEPT;
		break;
	case DDP_NUMERICS_DROPPED:
		m.numerics = AGENT_WIRE_NUMERICS_DROPPED;
		break;
	case DDP_NUMERICS_REFUSED:
		m.numerics = AGENT_WIRE_NUMERICS_REFUSED;
		break;
	default:
		return -EINVAL;
	}
	agent_wire_set_text(&m, text);
	return agent_chan_say(&ctx->chan, &m);
}

int ddp_agent_replica(struct ddp_ctx *ctx, uint64_t step, int rank, int healed, const char *tensor)
{
	struct agent_wire_msg m = {.kind = AGENT_WIRE_REPLICA};
	struct agent_wire_replica *r = &m.replica;

	if (!ctx)
		return -ENOTSUP;
	if (step > INT32_MAX || rank < 0 || !tensor ||
	    snprintf(r->tensor, sizeof(r->tensor), "%s", tensor) >= (int)sizeof(r->tensor))
		return -ERANGE;
	r->rank = rank;
	r->healed = healed != 0;
	r->step = (int)step;
	return agent_chan_say(&ctx->chan, &m);
}

int ddp_agent_straggler(struct ddp_ctx *ctx, uint64_t step, int rank, int node, int cause,
			double slower)
{
	struct agent_wire_msg m = {.kind = AGENT_WIRE_STRAGGLER};
	struct agent_wire_straggler *g = &m.straggler;

	if (!ctx)
		return -ENOTSUP;
	if (cause < AGENT_WIRE_CAUSE_NONE || cause > AGENT_WIRE_CAUSE_LINK)
		return -EINVAL;
	if (step > INT32_MAX || rank < 0 || node < 0 || !isfinite(slower) || slower < 0 ||
	    slower > INT32_MAX / 100.0)
		return -ERANGE;
	g->step = (int)step;
	g->rank = rank;
	g->node = node;
	g->cause = (enum agent_wire_cause)cause;
	g->slower_x100 = (int)lround(slower * 100);
	if (g->slower_x100 < 0)
		g->slower_x100 = INT32_MAX;
	return agent_chan_say(&ctx->chan, &m);
}
