/*
 * replica_heal.c - a replica that differed (replica_check_int.h): the first
 * tensor that differs, from per-tensor digests exchanged once a mismatch is
 * seen; every rank says it; rank 0's metrics record and every rank's agent
 * (summary.json); the minority healed from the majority's memory, or the
 * run stopped without a majority.
 */
#include "replica_check_int.h"

#include "log.h"
#include "timeutil.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* Items of the per-tensor digests: the header, every model tensor (the
 * parameters' and the buffers' segments), every parameter's momentum; the
 * checkpoint's order and names. */
static int replica_nitems(const struct model *m)
{
	int n = 1 + m->ntensors;

	for (int i = 0; i < m->ntensors; i++)
		n += !m->tensors[i].is_buffer;
	return n;
}

static void replica_items(const struct trainer *t, const struct replica_check *rc, uint64_t *out)
{
	const struct model *m = &t->model;
	int k = 0;

	out[k++] = XXH3_64bits(&rc->hdr, sizeof(rc->hdr));
	for (int i = 0; i < m->ntensors; i++) {
		const struct model_tensor *mt = &m->tensors[i];
		int s = mt->is_buffer ? TRAIN_STATE_BUFFERS : TRAIN_STATE_PARAMS;

		out[k++] = XXH3_64bits(rc->seg[s] + mt->offset, mt->numel * sizeof(float));
	}
	for (int i = 0; i < m->ntensors; i++) {
		const struct model_tensor *mt = &m->tensors[i];

		if (!mt->is_buffer)
			out[k++] = XXH3_64bits(rc->seg[TRAIN_STATE_MOMENTUM] + mt->offset,
					       mt->numel * sizeof(float));
	}
}

static void replica_item_name(const struct model *m, int k, char *buf, size_t len)
{
	if (k <= 0) {
		snprintf(buf, len, "%s", k == 0 ? "the state's header (step, RNG)" : "none found");
		return;
	}
	if (k <= m->ntensors) {
		snprintf(buf, len, "%s", m->tensors[k - 1].name);
		return;
	}
	k -= m->ntensors;
	for (int i = 0; i < m->ntensors; i++)
		if (!m->tensors[i].is_buffer && --k == 0)
			snprintf(buf, len, "optimizer.%s.momentum_buffer", m->tensors[i].name);
}

/* One replica that differed: rank 0's metrics record, and every rank's
 * agent's summary. */
static void replica_record(struct trainer *t, int rank, const char *tensor,
			   const struct replica_vote *v, const char *action, double heal_s)
{
	struct metrics_replica r = {
	    .step = t->replica->hdr.step,
	    .rank = rank,
	    .tensor = tensor,
	    .world = t->world,
	    .majority = v->majority,
	    .root = v->root,
	    .action = action,
	    .heal_s = heal_s,
	};

	if (t->rank == 0 && t->rank0_duties)
		metrics_log_replica(&t->metrics, &r);
	/* Every rank tells its agent (each node's summary lists it once);
	 * -ENOTSUP: no launcher's agent, nothing to tell. */
	ddp_agent_replica(t->ddp, r.step, rank, action[0] == 'h', tensor);
}

/* The minority takes root's state; then every rank digests again and all
 * must agree. Returns 0, -EIO (still differing: said) or an error. */
static int replica_heal(struct trainer *t, struct replica_check *rc, const uint64_t *all,
			const struct replica_vote *v)
{
	struct replica_vote again;
	uint64_t *after = calloc((size_t)t->world, sizeof(*after));
	int ret = after ? 0 : -ENOMEM;

	if (ret == 0)
		ret = trainer_state_broadcast(t, v->root, all[t->rank] != all[v->root]);
	if (ret == 0)
		ret = replica_view(t, rc);
	if (ret == 0)
		ret = replica_compare(t, replica_digest(rc), after, &again);
	if (ret == 0 && !again.agree) {
		log_error("step %" PRIu64 ": the replicas still differ after taking rank %d's "
			  "state (rank %d's first): stopping; check this node's memory and CPU",
			  rc->hdr.step, v->root, again.first_bad);
		ret = -EIO;
	}
	free(after);
	return ret;
}

/* With a period above 1 the replica may have gone wrong steps ago. */
static void replica_say_late(const struct replica_check *rc)
{
	uint64_t every = (uint64_t)rc->every, step = rc->hdr.step;

	log_warn("step %" PRIu64 ": the replica may have differed since step %" PRIu64 " and fed "
		 "its gradients into every rank's steps since: the replicas agree again, but the "
		 "bits may differ from an undisturbed run's (--replica_check_every 1 keeps them)",
		 step, step > every ? step - every + 1 : 1);
}

/* Names each replica that differs (every rank says it), then heals them
 * from the majority or stops. */
int replica_mismatch(struct trainer *t, struct replica_check *rc, const uint64_t *all,
		     const struct replica_vote *v)
{
	int n = replica_nitems(&t->model), ref = v->root >= 0 ? v->root : 0;
	uint64_t *mine = calloc((size_t)n, sizeof(*mine));
	uint64_t *items = calloc((size_t)n * (size_t)t->world, sizeof(*items)), t0;
	char name[MODEL_NAME_MAX + 64];
	int ret = mine && items ? 0 : -ENOMEM;
	double heal_s = 0.0;

	rc->mismatches++;
	if (ret == 0) {
		replica_items(t, rc, mine);
		ret = replica_gather(t, mine, items, (size_t)n);
	}
	for (int r = 0; ret == 0 && r < t->world; r++) {
		if (all[r] == all[ref])
			continue;
		replica_item_name(
		    &t->model,
		    replica_first_diff(items + (size_t)r * n, items + (size_t)ref * n, n), name,
		    sizeof(name));
		if (v->root >= 0)
			log_error(
			    "step %" PRIu64 ": rank %d's replica differs from the majority's "
			    "(%d of %d ranks agree): first in '%s'; healing it from rank %d's "
			    "memory",
			    rc->hdr.step, r, v->majority, t->world, name, v->root);
		else
			log_error("step %" PRIu64
				  ": rank %d's replica differs from rank 0's: first "
				  "in '%s'",
				  rc->hdr.step, r, name);
		if (v->root < 0)
			replica_record(t, r, name, v, "stopped", 0.0);
	}
	if (ret == 0 && v->root < 0) {
		log_error("step %" PRIu64 ": the replicas differ and %d ranks hold no majority to "
			  "tell the good one: stopping (ddplaunch restarts the group from the last "
			  "checkpoint when --max_restarts allows; run 3 or more ranks to heal in "
			  "place)",
			  rc->hdr.step, t->world);
		/* Every rank has said it before any exits (the launcher stops
		 * the others at the first exit). The run stops with -EIO either
		 * way: a failed barrier only means a peer left first. */
		(void)ddp_barrier(t->ddp);
		ret = -EIO;
	} else if (ret == 0) {
		t0 = time_now_ns();
		ret = replica_heal(t, rc, all, v);
		heal_s = (double)(time_now_ns() - t0) * 1e-9;
		rc->heal_ns += time_now_ns() - t0;
		for (int r = 0; ret == 0 && r < t->world; r++)
			if (all[r] != all[ref]) {
				replica_item_name(&t->model,
						  replica_first_diff(items + (size_t)r * n,
								     items + (size_t)ref * n, n),
						  name, sizeof(name));
				replica_record(t, r, name, v, "healed", heal_s);
			}
		if (ret == 0) {
			rc->healed += (uint64_t)v->bad;
			log_warn("step %" PRIu64 ": healed %d replica(s) from rank %d's memory in "
				 "%.3f s; redoing step %" PRIu64,
				 rc->hdr.step, v->bad, v->root, heal_s, rc->hdr.step + 1);
			if (rc->every > 1)
				replica_say_late(rc);
		}
	}
	/* A collective failed while healing (the membership changed): this
	 * replica, if it is one that differed, holds no state now, so the
	 * re-formation's hand-over gives it the majority's. */
	if (ret < 0 && v->root >= 0 && all[t->rank] != all[v->root])
		t->has_state = false;
	free(mine);
	free(items);
	return ret < 0 ? ret : REPLICA_HEALED;
}
