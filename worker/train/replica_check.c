/*
 * replica_check.c - every replica's state compared after committed steps
 * (replica_check.h): the digest on a helper thread, the all-gather, the
 * vote, the first tensor that differs, the heal from the majority's
 * memory, and the test flip.
 */
#include "replica_check.h"
#include "replica_vote.h"
#include "train_state.h"

#include "log.h"
#include "timeutil.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

struct replica_check {
	int64_t every;
	/* DDP_TEST_FLIP: rank and step; flip_step 0: none */
	int flip_rank;
	uint64_t flip_step;
	bool flipped;
	/* The state digested: its header and segments (host memory). */
	struct train_state_header hdr;
	const float *seg[TRAIN_STATE_NSEGS];
	size_t n[TRAIN_STATE_NSEGS];
	float *host; /* staging when the kernels' memory is not the host's */
	XXH3_state_t *xs;
	/* The pending digest: the helper thread's result. */
	bool pending;
	pthread_t th;
	uint64_t digest, hash_ns; /* hash_ns: the helper thread's CPU time */
	/* Totals for the closing line and the benchmark: the main thread's
	 * wait for the helper (join_ns) and in the all-gather (gather_ns). */
	uint64_t checks, mismatches, healed;
	uint64_t join_ns, gather_ns, hash_total_ns, heal_ns;
};

/* DDP_TEST_FLIP=RANK:STEP. Returns 0 (unset: flip_step 0) or -EINVAL. */
static int replica_parse_flip(struct replica_check *rc)
{
	const char *s = getenv("DDP_TEST_FLIP");
	unsigned long long step;
	int rank, used = 0;

	if (!s || !s[0])
		return 0;
	if (sscanf(s, "%d:%llu%n", &rank, &step, &used) != 2 || s[used] || rank < 0 || !step) {
		log_error("DDP_TEST_FLIP '%s' is not RANK:STEP (a rank and a step from 1, as "
			  "'1:5'): fix or unset it",
			  s);
		return -EINVAL;
	}
	rc->flip_rank = rank;
	rc->flip_step = step;
	return 0;
}

int replica_check_init(struct trainer *t)
{
	struct replica_check *rc;
	int ret;

	t->replica = NULL;
	if (t->cfg.replica_check_every <= 0 && !getenv("DDP_TEST_FLIP"))
		return 0;
	rc = calloc(1, sizeof(*rc));
	if (!rc)
		return -ENOMEM;
	t->replica = rc;
	rc->every = t->cfg.replica_check_every;
	ret = replica_parse_flip(rc);
	if (ret < 0)
		return ret;
	rc->xs = XXH3_createState();
	if (t->ops != &kernel_ops_cpu)
		rc->host = malloc(train_state_floats(&t->model) * sizeof(float));
	if (!rc->xs || (t->ops != &kernel_ops_cpu && !rc->host))
		return -ENOMEM;
	return 0;
}

void replica_check_cancel(struct trainer *t)
{
	struct replica_check *rc = t->replica;

	if (!rc || !rc->pending)
		return;
	pthread_join(rc->th, NULL);
	rc->pending = false;
}

void replica_check_release(struct trainer *t)
{
	struct replica_check *rc = t->replica;

	if (!rc)
		return;
	replica_check_cancel(t);
	XXH3_freeState(rc->xs);
	free(rc->host);
	free(rc);
	t->replica = NULL;
}

/* XXH3_64 of the header and the segments, in the layout's order. */
static uint64_t replica_digest(struct replica_check *rc)
{
	XXH3_64bits_reset(rc->xs);
	XXH3_64bits_update(rc->xs, &rc->hdr, sizeof(rc->hdr));
	for (int i = 0; i < TRAIN_STATE_NSEGS; i++)
		XXH3_64bits_update(rc->xs, rc->seg[i], rc->n[i] * sizeof(float));
	return XXH3_64bits_digest(rc->xs);
}

/* This thread's CPU time, ns. */
static uint64_t replica_thread_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *replica_thread(void *arg)
{
	struct replica_check *rc = arg;
	uint64_t t0 = replica_thread_ns();

	rc->digest = replica_digest(rc);
	rc->hash_ns = replica_thread_ns() - t0;
	return NULL;
}

/* Points rc at t's state now: the kernels' host memory itself, or a host
 * copy of device memory. */
static int replica_view(struct trainer *t, struct replica_check *rc)
{
	int ret = 0;

	train_state_header_of(t, &rc->hdr);
	rc->n[TRAIN_STATE_PARAMS] = t->model.nparams;
	rc->n[TRAIN_STATE_BUFFERS] = t->model.nbuffers;
	rc->n[TRAIN_STATE_MOMENTUM] = t->model.nparams;
	if (!rc->host) {
		rc->seg[TRAIN_STATE_PARAMS] = t->model.params;
		rc->seg[TRAIN_STATE_BUFFERS] = t->model.buffers;
		rc->seg[TRAIN_STATE_MOMENTUM] = t->optim.mom;
		return 0;
	}
	ret = train_state_stage(t, rc->host, true);
	rc->seg[TRAIN_STATE_PARAMS] = rc->host;
	rc->seg[TRAIN_STATE_BUFFERS] = rc->host + t->model.nparams;
	rc->seg[TRAIN_STATE_MOMENTUM] = rc->host + t->model.nparams + t->model.nbuffers;
	return ret;
}

/* The bit DDP_TEST_FLIP flips: mantissa bit 16, a relative change of
 * about 2^-7, which the loss does not show and the final weights do. */
#define REPLICA_FLIP_BIT 16

/* The last parameter tensor's first float, bit REPLICA_FLIP_BIT, on rank
 * flip_rank after step flip_step (attempt 0, once). */
static int replica_flip(struct trainer *t, struct replica_check *rc)
{
	int attempt = t->ddp ? ddp_attempt(t->ddp) : t->attempt, i = t->model.ntensors - 1;
	float *p;
	uint32_t bits;
	float v;
	int ret;

	if (rc->flipped || !rc->flip_step || t->step != rc->flip_step || t->rank != rc->flip_rank ||
	    attempt != 0)
		return 0;
	while (i > 0 && t->model.tensors[i].is_buffer)
		i--;
	p = t->model.params + t->model.tensors[i].offset;
	ret = t->ops->copy_d2h(t->kctx, &v, p, sizeof(v));
	memcpy(&bits, &v, sizeof(bits));
	bits ^= 1u << REPLICA_FLIP_BIT;
	memcpy(&v, &bits, sizeof(v));
	if (ret == 0)
		ret = t->ops->copy_h2d(t->kctx, p, &v, sizeof(v));
	rc->flipped = true;
	fprintf(stderr,
		"ddp-train: rank %d: DDP_TEST_FLIP: flipped bit %d of '%s'[0] after "
		"step %" PRIu64 "\n",
		t->rank, REPLICA_FLIP_BIT, t->model.tensors[i].name, t->step);
	return ret;
}

int replica_check_after_step(struct trainer *t)
{
	struct replica_check *rc = t->replica;
	int ret;

	if (!rc)
		return 0;
	ret = replica_flip(t, rc);
	if (ret < 0 || rc->every <= 0 || !t->shards || !t->ddp || t->world < 2 ||
	    t->step % (uint64_t)rc->every != 0)
		return ret;
	replica_check_cancel(t);
	ret = replica_view(t, rc);
	if (ret == 0)
		ret = -pthread_create(&rc->th, NULL, replica_thread, rc);
	rc->pending = ret == 0;
	return ret;
}

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

/* n words of every rank into all (world x n), in rank order; the words are
 * moved as float64 elements, which an all-gather copies bit for bit. */
static int replica_gather(struct trainer *t, const uint64_t *mine, uint64_t *all, size_t n)
{
	uint64_t t0 = time_now_ns();
	int ret = ddp_allgather(t->ddp, mine, all, n, DDP_FLOAT64);

	t->comm_wait_s += (double)(time_now_ns() - t0) * 1e-9;
	return ret;
}

/* Every rank's digest of the state viewed now, and the vote. */
static int replica_compare(struct trainer *t, uint64_t digest, uint64_t *all,
			   struct replica_vote *v)
{
	int ret = replica_gather(t, &digest, all, 1);

	if (ret == 0)
		replica_vote(all, t->world, v);
	return ret;
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
static int replica_mismatch(struct trainer *t, struct replica_check *rc, const uint64_t *all,
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
		 * the others at the first exit). */
		ddp_barrier(t->ddp);
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

int replica_check_finish(struct trainer *t)
{
	struct replica_check *rc = t->replica;
	struct replica_vote v;
	uint64_t t0, *all;
	int ret;

	if (!rc || !rc->pending)
		return 0;
	t0 = time_now_ns();
	pthread_join(rc->th, NULL);
	rc->pending = false;
	rc->checks++;
	rc->hash_total_ns += rc->hash_ns;
	rc->join_ns += time_now_ns() - t0;
	all = calloc((size_t)t->world, sizeof(*all));
	if (!all)
		return -ENOMEM;
	t0 = time_now_ns();
	ret = replica_compare(t, rc->digest, all, &v);
	rc->gather_ns += time_now_ns() - t0;
	if (ret == 0 && !v.agree)
		ret = replica_mismatch(t, rc, all, &v);
	free(all);
	return ret;
}

void replica_check_report(const struct trainer *t, double step_s)
{
	const struct replica_check *rc = t->replica;
	double n, join, gather, hash;

	if (!rc || t->rank != 0)
		return;
	if (!rc->checks) {
		if (rc->every > 0 && t->shards && t->world > 1)
			log_info("replica check: none ran (every %" PRId64 " steps)", rc->every);
		return;
	}
	n = (double)rc->checks;
	join = (double)rc->join_ns * 1e-6 / n;
	gather = (double)rc->gather_ns * 1e-6 / n;
	hash = (double)rc->hash_total_ns * 1e-6 / n;
	log_info("replica check: %" PRIu64 " check(s) (every %" PRId64 " steps), %" PRIu64
		 " mismatch(es), %" PRIu64 " replica(s) healed; per check: digest %.3f ms of "
		 "the helper thread's CPU (%.2f%% of a %.2f ms step), the step waited %.3f ms "
		 "for it and %.3f ms in the all-gather",
		 rc->checks, rc->every, rc->mismatches, rc->healed, hash,
		 step_s > 0 ? 100.0 * hash * 1e-3 / step_s : 0.0, step_s * 1e3, join, gather);
	if (rc->heal_ns)
		log_info("replica check: healing took %.3f s in all", (double)rc->heal_ns * 1e-9);
}
