/*
 * loop_balance.c - stragglers in shard mode: every rank's step timings
 * travel in the step's first all-reduce (a run of TRAINER_BALANCE_FLOATS
 * floats per rank beside the shards' slots; each rank writes its own, the
 * others are 0, so the sum is a copy), every rank feeds them to the same
 * detector (straggler.h) and plan (shard_plan.h), and so names the same
 * stragglers and takes the same plan at the same step, with no other
 * message. A plan decided in step s is used from step s + 1.
 *
 * Exchange layout per rank: compute seconds, wait seconds, shards (of its
 * last completed step), node (GROUP_RANK, -1 unknown), then its host
 * (DDP_LOCAL_ADDR, else the host name) as up to BAL_HOST_MAX bytes, three
 * to a float (integers below 2^24, exact).
 */
#include "shard_plan.h"
#include "shards.h"
#include "straggler.h"
#include "trainer.h"

#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BAL_HOST_MAX 45	  /* (TRAINER_BALANCE_FLOATS - 4) x 3 */
#define BAL_PERSIST  4	  /* samples over the threshold before naming */
#define BAL_GAIN     0.10 /* a plan must predict a step this much shorter */
#define BAL_HISTORY  16	  /* stragglers the end line lists */

_Static_assert((TRAINER_BALANCE_FLOATS - 4) * 3 == BAL_HOST_MAX, "host bytes per exchange");

struct bal_named {
	int rank, node;
	char host[BAL_HOST_MAX + 1];
	enum straggler_cause cause;
	double slower;
	uint64_t from, to; /* steps; to 0: still named */
};

struct trainer_balance {
	int world;
	struct straggler det;
	int *counts;		      /* the plan in use */
	int *next;		      /* the plan for the next step */
	enum straggler_cause *said;   /* per rank: what the lines said last */
	double *cost;		      /* scratch: per-shard seconds */
	int dwell;		      /* samples before the next plan change may come */
	struct straggler_sample last; /* this rank's last completed step */
	bool have_last;
	int node;
	char host[BAL_HOST_MAX + 1];
	/* Over the whole run (kept across re-formations). */
	struct bal_named hist[BAL_HISTORY];
	int nhist;
	unsigned plan_changes;
	bool multi; /* more than one rank at some point */
};

static void bal_identity(struct trainer_balance *b)
{
	const char *addr = getenv("DDP_LOCAL_ADDR"), *gr = getenv("GROUP_RANK");

	if (addr && addr[0])
		snprintf(b->host, sizeof(b->host), "%s", addr);
	else if (gethostname(b->host, sizeof(b->host)) < 0)
		snprintf(b->host, sizeof(b->host), "?");
	b->host[BAL_HOST_MAX] = '\0';
	b->node = gr && gr[0] ? atoi(gr) : -1;
}

int trainer_balance_init(struct trainer *t)
{
	struct trainer_balance *b = t->balance;
	int w = t->world > 0 ? t->world : 1, ret;

	if (!b) {
		b = calloc(1, sizeof(*b));
		if (!b)
			return -ENOMEM;
		t->balance = b;
	}
	bal_identity(b); /* again after a re-formation: the node's number may change */
	straggler_release(&b->det);
	free(b->counts);
	free(b->next);
	free(b->cost);
	free(b->said);
	b->said = calloc((size_t)w, sizeof(*b->said));
	b->counts = calloc((size_t)w, sizeof(int));
	b->next = calloc((size_t)w, sizeof(int));
	b->cost = calloc((size_t)w, sizeof(double));
	if (!b->counts || !b->next || !b->cost || !b->said)
		return -ENOMEM;
	ret = straggler_init(&b->det, w, t->cfg.straggler_ratio, BAL_PERSIST);
	if (ret < 0)
		return ret;
	b->world = w;
	b->multi = b->multi || w > 1;
	b->have_last = false;
	b->dwell = 0;
	/* The even spread: what shards_range gives, and the plan every rank
	 * starts from (a fresh process too). */
	for (int r = 0; r < w; r++) {
		int first;

		shards_range((int)t->cfg.virtual_shards, w, r, &first, &b->counts[r]);
	}
	memcpy(b->next, b->counts, (size_t)w * sizeof(int));
	for (int i = 0; i < b->nhist; i++)
		if (!b->hist[i].to)
			b->hist[i].to = t->step; /* a new membership: named again if still slow */
	return 0;
}

void trainer_balance_release(struct trainer *t)
{
	struct trainer_balance *b = t->balance;

	if (!b)
		return;
	straggler_release(&b->det);
	free(b->counts);
	free(b->next);
	free(b->cost);
	free(b->said);
	free(b);
	t->balance = NULL;
}

void trainer_balance_share(struct trainer *t, int *first, int *count)
{
	struct trainer_balance *b = t->balance;

	memcpy(b->counts, b->next, (size_t)b->world * sizeof(int));
	*first = shard_plan_first(b->counts, t->rank);
	*count = b->counts[t->rank];
}

void trainer_balance_put(const struct trainer *t, float *x)
{
	const struct trainer_balance *b = t->balance;
	float *me = x + (size_t)t->rank * TRAINER_BALANCE_FLOATS;

	if (b->have_last) {
		me[0] = (float)b->last.compute_s;
		me[1] = (float)b->last.wait_s;
		me[2] = (float)b->last.shards;
	}
	me[3] = (float)b->node;
	for (int i = 0; i < BAL_HOST_MAX && b->host[i]; i++)
		me[4 + i / 3] += (float)((unsigned char)b->host[i] << (8 * (i % 3)));
}

/* Rank r's node and host from the exchange. */
static void bal_who(const float *x, int r, int *node, char *host)
{
	const float *e = x + (size_t)r * TRAINER_BALANCE_FLOATS;

	*node = (int)e[3];
	for (int i = 0; i < BAL_HOST_MAX; i++)
		host[i] = (char)(((unsigned)e[4 + i / 3] >> (8 * (i % 3))) & 0xff);
	host[BAL_HOST_MAX] = '\0';
	if (!host[0])
		snprintf(host, BAL_HOST_MAX + 1, "?");
}

/* A record in rank 0's metrics file. */
static void bal_record(struct trainer *t, const char *rec)
{
	if (t->rank == 0 && t->rank0_duties)
		metrics_log_raw(&t->metrics, NULL, rec);
}

/* The run's history: rank r named now, or its open entry closed. */
static void bal_history(struct trainer_balance *b, int r, int node, const char *host, uint64_t step)
{
	const struct straggler_rank *q = &b->det.r[r];

	for (int i = 0; i < b->nhist; i++)
		if (b->hist[i].rank == r && !b->hist[i].to)
			b->hist[i].to = step;
	if (q->named && b->nhist < BAL_HISTORY) {
		struct bal_named *h = &b->hist[b->nhist++];

		*h = (struct bal_named){
		    .rank = r, .node = node, .cause = q->named, .slower = q->slower, .from = step};
		snprintf(h->host, sizeof(h->host), "%s", host);
	}
}

/* Rank r named or cleared: one line on every rank, a record from rank 0,
 * a "straggler" line to the agent, and the run's history. */
static void bal_say(struct trainer *t, const float *x, int r)
{
	struct trainer_balance *b = t->balance;
	const struct straggler_rank *q = &b->det.r[r];
	unsigned long long step = (unsigned long long)t->step + 1;
	char host[BAL_HOST_MAX + 1], rec[512];
	int node;

	bal_who(x, r, &node, host);
	if (q->named)
		log_warn(
		    "step %llu: straggler: rank %d (node %d, host %s) is %.2fx slower than the "
		    "others (%s)%s",
		    step, r, node, host, q->slower, straggler_cause_name(q->named),
		    q->named == STRAGGLER_COMPUTE && t->cfg.rebalance
			? ": moving shards to the faster ranks"
			: "");
	else
		log_info("step %llu: straggler: rank %d (node %d, host %s) is no longer slower "
			 "(%.2fx)",
			 step, r, node, host, q->slower);
	bal_history(b, r, node, host, t->step + 1);
	snprintf(rec, sizeof(rec),
		 "{\"kind\": \"straggler\", \"step\": %llu, \"rank\": %d, \"node\": %d, "
		 "\"host\": \"%s\", \"slower\": %.4g, \"cause\": \"%s\", \"state\": \"%s\"}\n",
		 step, r, node, host, q->slower,
		 straggler_cause_name(q->named ? q->named : b->said[r]),
		 q->named ? "named" : "cleared");
	bal_record(t, rec);
	/* Every rank tells its agent (the agents keep one of each): the
	 * launcher's summary.json and /metrics. No agent: nothing to tell. */
	ddp_agent_straggler(t->ddp, step, r, node,
			    q->named == STRAGGLER_COMPUTE ? 1
			    : q->named == STRAGGLER_LINK  ? 2
							  : 0,
			    q->slower);
	b->said[r] = q->named;
}

/* The next plan into b->next: while a rank is named for its compute, the
 * optimal plan for the measured per-shard times when it predicts a step
 * BAL_GAIN shorter than the current one; while none is, the even spread.
 * The naming's own band and streaks are the hysteresis between the two.
 * Returns 1 when the plan changes. */
static int bal_decide(struct trainer *t)
{
	struct trainer_balance *b = t->balance;
	int v = (int)t->cfg.virtual_shards;
	bool slow = false;

	for (int r = 0; r < b->world; r++)
		slow = slow || b->det.r[r].named == STRAGGLER_COMPUTE;
	straggler_costs(&b->det, b->cost);
	if (slow)
		return shard_plan_decide(v, b->world, b->cost, b->counts, BAL_GAIN, b->next);
	/* Nobody slow: the even spread (shards_range's), nothing to weigh. */
	for (int r = 0; r < b->world; r++) {
		int first;

		shards_range(v, b->world, r, &first, &b->next[r]);
	}
	return memcmp(b->next, b->counts, (size_t)b->world * sizeof(int)) != 0;
}

/* The plan for the next step, when moving shards is on. */
static void bal_plan(struct trainer *t)
{
	struct trainer_balance *b = t->balance;
	char list[256], rec[512];
	double was, now;
	size_t n = 0;

	if (!t->cfg.rebalance || b->world < 2 || b->det.n < STRAGGLER_WINDOW)
		return;
	if (b->dwell > 0) {
		b->dwell--;
		return;
	}
	if (!bal_decide(t))
		return;
	/* The medians must see the new plan's steps before the next move. */
	b->dwell = STRAGGLER_WINDOW;
	b->plan_changes++;
	straggler_costs(&b->det, b->cost);
	was = shard_plan_time(b->world, b->counts, b->cost);
	now = shard_plan_time(b->world, b->next, b->cost);
	list[0] = '\0';
	for (int r = 0; r < b->world && n < sizeof(list) - 16; r++)
		n +=
		    (size_t)snprintf(list + n, sizeof(list) - n, "%s%d", r ? ", " : "", b->next[r]);
	if (t->rank == 0)
		log_info("step %llu: shard plan [%s] from step %llu (compute %.1f ms a step "
			 "predicted, was %.1f ms)",
			 (unsigned long long)t->step + 1, list, (unsigned long long)t->step + 2,
			 now * 1e3, was * 1e3);
	snprintf(rec, sizeof(rec),
		 "{\"kind\": \"plan\", \"step\": %llu, \"shards\": [%s], \"predicted_s\": %.6g, "
		 "\"was_s\": %.6g}\n",
		 (unsigned long long)t->step + 2, list, now, was);
	bal_record(t, rec);
}

void trainer_balance_take(struct trainer *t, const float *x)
{
	struct trainer_balance *b = t->balance;
	struct straggler_sample s[b->world];

	if (b->world < 2)
		return;
	for (int r = 0; r < b->world; r++) {
		const float *e = x + (size_t)r * TRAINER_BALANCE_FLOATS;

		s[r] = (struct straggler_sample){e[0], e[1], (int)e[2]};
	}
	if (straggler_update(&b->det, s) > 0)
		for (int r = 0; r < b->world; r++)
			if (b->det.r[r].named != b->said[r])
				bal_say(t, x, r);
	bal_plan(t);
}

void trainer_balance_record(struct trainer *t, double compute_s, double wait_s, int shards)
{
	struct trainer_balance *b = t->balance;

	b->last = (struct straggler_sample){compute_s, wait_s, shards};
	b->have_last = true;
}

void trainer_balance_report(const struct trainer *t)
{
	const struct trainer_balance *b = t->balance;
	char line[1024];
	size_t n = 0;

	if (!b || !b->multi || t->rank != 0)
		return;
	if (b->nhist == 0) {
		log_info("stragglers: none (%u shard plan change(s))", b->plan_changes);
		return;
	}
	for (int i = 0; i < b->nhist && n < sizeof(line) - 200; i++) {
		const struct bal_named *h = &b->hist[i];
		char to[32];

		if (h->to)
			snprintf(to, sizeof(to), "%llu", (unsigned long long)h->to);
		else
			snprintf(to, sizeof(to), "the end");
		n += (size_t)snprintf(line + n, sizeof(line) - n,
				      "%srank %d (node %d, host %s) %.2fx slower (%s) from step "
				      "%llu to %s",
				      i ? "; " : "", h->rank, h->node, h->host, h->slower,
				      straggler_cause_name(h->cause), (unsigned long long)h->from,
				      to);
	}
	log_info("stragglers: %s (%u shard plan change(s))", line, b->plan_changes);
}
