/*
 * straggler.c - medians over a window of step samples, a threshold with a
 * band and a streak count.
 */
#include "straggler.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

int straggler_init(struct straggler *s, int world, double ratio, int persist)
{
	memset(s, 0, sizeof(*s));
	if (world < 1 || !(ratio > 1.0) || persist < 1)
		return -EINVAL;
	s->r = calloc((size_t)world, sizeof(*s->r));
	if (!s->r)
		return -ENOMEM;
	s->world = world;
	s->ratio = ratio;
	s->persist = persist;
	return 0;
}

void straggler_release(struct straggler *s)
{
	free(s->r);
	memset(s, 0, sizeof(*s));
}

static int straggler_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The median of the positive values of x[0..n) (the lower middle one), 0
 * when none is. n is a window (STRAGGLER_WINDOW): an insertion sort. */
static double straggler_median(const double *x, int n)
{
	double buf[STRAGGLER_WINDOW];
	int k = 0;

	for (int i = 0; i < n && i < STRAGGLER_WINDOW; i++) {
		int j = k++;

		if (!(x[i] > 0.0 && isfinite(x[i]))) {
			k--;
			continue;
		}
		for (; j > 0 && buf[j - 1] > x[i]; j--)
			buf[j] = buf[j - 1];
		buf[j] = x[i];
	}
	return k ? buf[(k - 1) / 2] : 0.0;
}

/* One sample per rank into the windows, and the medians again. */
static void straggler_push(struct straggler *s, const struct straggler_sample *x)
{
	int slot = (int)(s->n % STRAGGLER_WINDOW);
	double slowest = 0.0;

	s->step_s = 0.0;
	for (int r = 0; r < s->world; r++) {
		slowest = fmax(slowest, x[r].compute_s);
		s->step_s = fmax(s->step_s, x[r].compute_s + x[r].wait_s);
	}
	for (int r = 0; r < s->world; r++) {
		struct straggler_rank *q = &s->r[r];
		double skew = slowest - x[r].compute_s;

		q->shard_s[slot] = x[r].shards > 0 ? x[r].compute_s / x[r].shards : 0.0;
		/* A sample with no time in collectives (one rank, the first
		 * step) says nothing about the link: 0 is "unknown". */
		q->link_s[slot] = x[r].wait_s > 0.0 ? fmax(x[r].wait_s - skew, 1e-9) : 0.0;
		q->step_s[slot] = x[r].compute_s + x[r].wait_s;
		q->cost = straggler_median(q->shard_s, STRAGGLER_WINDOW);
		q->link = straggler_median(q->link_s, STRAGGLER_WINDOW);
		q->step = straggler_median(q->step_s, STRAGGLER_WINDOW);
	}
}

/* Every rank's valid values of one kind (off: offset of the double in
 * struct straggler_rank), sorted into buf; returns how many. */
static int straggler_sorted(const struct straggler *s, size_t off, double *buf)
{
	int k = 0;

	for (int r = 0; r < s->world; r++) {
		double x;

		memcpy(&x, (const char *)&s->r[r] + off, sizeof(double));
		if (x > 0.0 && isfinite(x))
			buf[k++] = x;
	}
	qsort(buf, (size_t)k, sizeof(double), straggler_cmp);
	return k;
}

/* The median (the lower middle one) of a[0..n) without one occurrence of
 * x, or of all of them when x is not valid (not among them); 0 when none
 * is left. With x's first occurrence at j, removing it shifts the middle
 * one up exactly when j <= the middle index, i.e. when x <= a[m]. */
static double straggler_without(const double *a, int n, double x)
{
	int m;

	if (!(x > 0.0 && isfinite(x)))
		return n ? a[(n - 1) / 2] : 0.0;
	if (n < 2)
		return 0.0;
	m = (n - 2) / 2;
	return x <= a[m] ? a[m + 1] : a[m];
}

/* The ranks' ratios to the others' medians, for this sample. */
struct straggler_view {
	double *cost, *link, *step;
	int nc, nl, ns;
};

/* Which cause rank r is over `band` for, and by how much (*slower). */
static enum straggler_cause straggler_judge(const struct straggler_view *v,
					    const struct straggler_rank *q, double band,
					    double *slower)
{
	double oc = straggler_without(v->cost, v->nc, q->cost);
	double ol = straggler_without(v->link, v->nl, q->link);
	double os = straggler_without(v->step, v->ns, q->step);
	double rc = oc > 0.0 && q->cost > 0.0 ? q->cost / oc : 0.0;
	double rl = ol > 0.0 && q->link > 0.0 ? q->link / ol : 0.0;

	*slower = rc;
	if (rc > band)
		return STRAGGLER_COMPUTE;
	if (rl > band && q->link - ol >= fmax(STRAGGLER_LINK_MIN_S, STRAGGLER_LINK_SHARE * os)) {
		*slower = rl;
		return STRAGGLER_LINK;
	}
	return STRAGGLER_NONE;
}

/* Rank q's streaks and naming after this sample: 1 when named or cleared. */
static int straggler_judge_rank(const struct straggler *s, const struct straggler_view *v,
				struct straggler_rank *q)
{
	double clear = 1.0 + (s->ratio - 1.0) / 2.0, unused;
	enum straggler_cause over = straggler_judge(v, q, s->ratio, &q->slower);
	bool under =
	    over == STRAGGLER_NONE && straggler_judge(v, q, clear, &unused) == STRAGGLER_NONE;

	q->cause = over;
	q->over = over != STRAGGLER_NONE ? q->over + 1 : 0;
	q->over_s = over != STRAGGLER_NONE ? q->over_s + s->step_s : 0.0;
	q->under = under ? q->under + 1 : 0;
	q->under_s = under ? q->under_s + s->step_s : 0.0;
	if (!q->named && q->over >= s->persist && q->over_s >= STRAGGLER_MIN_S) {
		q->named = over;
		q->since = s->n;
		return 1;
	}
	if (q->named && q->under >= s->persist && q->under_s >= STRAGGLER_MIN_S) {
		q->named = STRAGGLER_NONE;
		return 1;
	}
	return 0;
}

int straggler_update(struct straggler *s, const struct straggler_sample *x)
{
	double buf[3 * (size_t)s->world];
	struct straggler_view v = {buf, buf + s->world, buf + 2 * s->world, 0, 0, 0};
	int changed = 0;

	straggler_push(s, x);
	s->n++;
	if (s->world < 2)
		return 0;
	/* One sort per kind: each rank's "others' median" is then read off
	 * it (O(W log W) per sample, not O(W^2 log W)). */
	v.nc = straggler_sorted(s, offsetof(struct straggler_rank, cost), v.cost);
	v.nl = straggler_sorted(s, offsetof(struct straggler_rank, link), v.link);
	v.ns = straggler_sorted(s, offsetof(struct straggler_rank, step), v.step);
	for (int r = 0; r < s->world; r++)
		changed += straggler_judge_rank(s, &v, &s->r[r]);
	return changed;
}

void straggler_costs(const struct straggler *s, double *cost)
{
	for (int r = 0; r < s->world; r++)
		cost[r] = s->r[r].cost;
}

const char *straggler_cause_name(enum straggler_cause c)
{
	return c == STRAGGLER_COMPUTE ? "compute" : c == STRAGGLER_LINK ? "link" : "none";
}
