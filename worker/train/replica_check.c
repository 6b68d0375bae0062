/*
 * replica_check.c - every replica's state compared after committed steps
 * (replica_check.h): the digest on a helper thread, its words in the
 * step's all-reduce (the last step's in an all-gather) and the vote, the
 * closing line, and the test flip. A mismatch: replica_heal.c.
 */
#include "replica_check_int.h"

#include "log.h"
#include "timeutil.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
	/* No device-side digest yet: each check copies the state out. */
	if (rc->host && rc->every > 0 && t->shards && t->rank == 0)
		log_info(
		    "replica check: the state is in GPU memory; each check copies its %.1f MB "
		    "to the host to digest it (--replica_check_every N checks every N steps, 0 "
		    "turns it off)",
		    (double)train_state_floats(&t->model) * 4.0 / 1e6);
	return 0;
}

void replica_check_cancel(struct trainer *t)
{
	struct replica_check *rc = t->replica;

	if (!rc || (!rc->pending && !rc->sent))
		return;
	if (rc->pending && rc->threaded)
		pthread_join(rc->th, NULL);
	rc->pending = rc->sent = rc->threaded = false;
	rc->skipped++;
}

void replica_check_release(struct trainer *t)
{
	struct replica_check *rc = t->replica;

	if (!rc)
		return;
	replica_check_cancel(t);
	XXH3_freeState(rc->xs);
	free(rc->host);
	free(rc->all);
	free(rc);
	t->replica = NULL;
}

/* A failure that skips a check, said once per run (only a mismatch stops
 * the run). */
static void replica_warn_once(struct replica_check *rc, uint64_t step, const char *what, int err)
{
	if (rc->warned)
		return;
	rc->warned = true;
	log_warn("replica check at step %" PRIu64 ": %s: %s; training goes on "
		 "(--replica_check_every 0 turns the check off)",
		 step, what, strerror(-err));
}

/* XXH3_64 of the header and the segments, in the layout's order. */
uint64_t replica_digest(struct replica_check *rc)
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
int replica_view(struct trainer *t, struct replica_check *rc)
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
	if (ret < 0) {
		/* Only a mismatch stops the run: this check is skipped. */
		replica_warn_once(rc, t->step, "cannot copy the state out to digest it", ret);
		rc->skipped++;
		return 0;
	}
	rc->pending = true;
	rc->threaded = false;
	/* A small state costs less to digest here than a thread's start and
	 * its wake-up on a busy machine (ddplaunch.torch's replicas.py does
	 * the same). */
	if (train_state_floats(&t->model) * sizeof(float) >= REPLICA_THREAD_BYTES) {
		ret = -pthread_create(&rc->th, NULL, replica_thread, rc);
		rc->threaded = ret == 0;
		if (ret < 0)
			replica_warn_once(rc, t->step,
					  "cannot start its helper thread (digesting on the "
					  "training thread instead)",
					  ret);
	}
	if (!rc->threaded)
		replica_thread(rc);
	return 0;
}

/* n words of every rank into all (world x n), in rank order; the words are
 * moved as float64 elements, which an all-gather copies bit for bit. */
int replica_gather(struct trainer *t, const uint64_t *mine, uint64_t *all, size_t n)
{
	uint64_t t0 = time_now_ns();
	int ret = ddp_allgather(t->ddp, mine, all, n, DDP_FLOAT64);

	t->comm_wait_s += (double)(time_now_ns() - t0) * 1e-9;
	return ret;
}

/* Every rank's digest of the state viewed now, and the vote. */
int replica_compare(struct trainer *t, uint64_t digest, uint64_t *all, struct replica_vote *v)
{
	int ret = replica_gather(t, &digest, all, 1);

	if (ret == 0)
		replica_vote(all, t->world, v);
	return ret;
}

/* Waits for the pending digest (its cost counted). */
static void replica_join(struct replica_check *rc)
{
	uint64_t t0 = time_now_ns();

	if (rc->threaded)
		pthread_join(rc->th, NULL);
	rc->pending = rc->threaded = false;
	rc->hash_total_ns += rc->hash_ns;
	rc->join_ns += time_now_ns() - t0;
}

/* The digest's words: bits 0-21, 22-43, 44-63 with the "sent" bit 20. */
#define REPLICA_WORD_BITS 22
#define REPLICA_SENT	  (1u << 20)
_Static_assert(REPLICA_FLOATS == 3, "three words of a 64-bit digest");

static void replica_encode(uint64_t d, float w[REPLICA_FLOATS])
{
	uint32_t mask = (1u << REPLICA_WORD_BITS) - 1;

	w[0] = (float)(uint32_t)(d & mask);
	w[1] = (float)(uint32_t)((d >> REPLICA_WORD_BITS) & mask);
	w[2] = (float)((uint32_t)(d >> (2 * REPLICA_WORD_BITS)) | REPLICA_SENT);
}

/* Returns 1 and the digest when the run holds one, else 0. */
static int replica_decode(const float w[REPLICA_FLOATS], uint64_t *d)
{
	uint32_t w2 = (uint32_t)w[2];

	if (!(w2 & REPLICA_SENT))
		return 0;
	*d = (uint64_t)(uint32_t)w[0] | (uint64_t)(uint32_t)w[1] << REPLICA_WORD_BITS |
	     (uint64_t)(w2 & ~REPLICA_SENT) << (2 * REPLICA_WORD_BITS);
	return 1;
}

void replica_check_put(struct trainer *t, float *x)
{
	struct replica_check *rc = t->replica;

	if (!rc || !rc->pending)
		return;
	rc->sent = true;
	replica_join(rc);
	replica_encode(rc->digest, x + (size_t)t->rank * REPLICA_FLOATS);
}

/* rc->all for the current world. */
static int replica_all(struct trainer *t, struct replica_check *rc)
{
	uint64_t *a;

	if (rc->all_cap >= t->world)
		return 0;
	a = realloc(rc->all, (size_t)t->world * sizeof(*a));
	if (!a)
		return -ENOMEM;
	rc->all = a;
	rc->all_cap = t->world;
	return 0;
}

/* The vote over rc->all; a mismatch named and healed (or the run stops). */
static int replica_judge(struct trainer *t, struct replica_check *rc)
{
	struct replica_vote v;

	rc->checks++;
	replica_vote(rc->all, t->world, &v);
	return v.agree ? 0 : replica_mismatch(t, rc, rc->all, &v);
}

int replica_check_take(struct trainer *t, const float *x)
{
	struct replica_check *rc = t->replica;
	uint64_t t0 = time_now_ns();
	int sent = 0, ret;

	/* Every rank decides from the same sums, so all take the same path
	 * (replica_mismatch's collectives included). */
	if (!rc)
		return 0;
	rc->sent = false;
	ret = replica_all(t, rc);
	for (int r = 0; ret == 0 && r < t->world; r++)
		sent += replica_decode(x + (size_t)r * REPLICA_FLOATS, &rc->all[r]);
	if (ret < 0 || sent == 0)
		return ret;
	if (sent < t->world) {
		rc->skipped++;
		return 0;
	}
	ret = replica_judge(t, rc);
	rc->gather_ns += time_now_ns() - t0;
	return ret;
}

int replica_check_finish(struct trainer *t)
{
	struct replica_check *rc = t->replica;
	uint64_t t0;
	int ret;

	if (!rc || !rc->pending)
		return 0;
	replica_join(rc);
	ret = replica_all(t, rc);
	if (ret < 0)
		return ret;
	t0 = time_now_ns();
	ret = replica_gather(t, &rc->digest, rc->all, 1);
	if (ret == 0)
		ret = replica_judge(t, rc);
	rc->gather_ns += time_now_ns() - t0;
	return ret;
}

void replica_check_report_skipped(const struct trainer *t)
{
	const struct replica_check *rc = t->replica;

	if (rc && rc->skipped)
		log_warn("replica check: rank %d skipped %" PRIu64 " check(s): a re-formation "
			 "dropped the digest (the hand-over gave every rank one state; the next "
			 "check compares it)",
			 t->rank, rc->skipped);
}

void replica_check_report(const struct trainer *t, double step_s)
{
	const struct replica_check *rc = t->replica;
	double n, join, cmp, hash;

	if (!rc || t->rank != 0)
		return;
	if (!rc->checks) {
		if (rc->every > 0 && t->shards && t->world > 1)
			log_info("replica check: none ran (every %" PRId64 " steps)", rc->every);
		return;
	}
	n = (double)rc->checks;
	join = (double)rc->join_ns * 1e-6 / n;
	cmp = (double)rc->gather_ns * 1e-6 / n;
	hash = (double)rc->hash_total_ns * 1e-6 / n;
	log_info("replica check: %" PRIu64 " check(s) (every %" PRId64 " steps), %" PRIu64
		 " mismatch(es), %" PRIu64 " replica(s) healed; per check: digest %.3f ms of "
		 "the helper thread's CPU (%.2f%% of a %.2f ms step), the step waited %.3f ms "
		 "for it and %.3f ms comparing (the digests ride in the step's all-reduce)",
		 rc->checks, rc->every, rc->mismatches, rc->healed, hash,
		 step_s > 0 ? 100.0 * hash * 1e-3 / step_s : 0.0, step_s * 1e3, join, cmp);
	if (rc->heal_ns)
		log_info("replica check: healing took %.3f s in all", (double)rc->heal_ns * 1e-9);
}
