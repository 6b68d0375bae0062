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
 * when none is. */
static double straggler_median(const double *x, int n)
{
	double buf[n > 0 ? n : 1];
	int k = 0;

	for (int i = 0; i < n; i++)
		if (x[i] > 0.0 && isfinite(x[i]))
			buf[k++] = x[i];
	if (k == 0)
		return 0.0;
	qsort(buf, (size_t)k, sizeof(double), straggler_cmp);
	return buf[(k - 1) / 2];
}

/* The median of every rank's value but rank `self`'s (off: offset of the
 * double in struct straggler_rank). */
static double straggler_others(const struct straggler *s, int self, size_t off)
{
	double buf[s->world];
	int k = 0;

	for (int r = 0; r < s->world; r++)
		if (r != self)
			memcpy(&buf[k++], (const char *)&s->r[r] + off, sizeof(double));
	return straggler_median(buf, k);
}

/* Slot of this sample in the windows; the samples of one rank. */
static void straggler_push(struct straggler *s, const struct straggler_sample *x)
{
	int slot = (int)(s->n % STRAGGLER_WINDOW);
	double slowest = 0.0;

	for (int r = 0; r < s->world; r++)
		slowest = fmax(slowest, x[r].compute_s);
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

/* Which cause rank r is over the threshold for now, and by how much. */
static enum straggler_cause straggler_judge(struct straggler *s, int r, double band)
{
	struct straggler_rank *q = &s->r[r];
	double oc = straggler_others(s, r, offsetof(struct straggler_rank, cost));
	double ol = straggler_others(s, r, offsetof(struct straggler_rank, link));
	double rc = oc > 0.0 && q->cost > 0.0 ? q->cost / oc : 0.0;
	double rl = ol > 0.0 && q->link > 0.0 ? q->link / ol : 0.0;
	double os = straggler_others(s, r, offsetof(struct straggler_rank, step));

	q->slower = rc;
	if (rc > band)
		return STRAGGLER_COMPUTE;
	if (rl > band && q->link - ol >= fmax(STRAGGLER_LINK_MIN_S, STRAGGLER_LINK_SHARE * os)) {
		q->slower = rl;
		return STRAGGLER_LINK;
	}
	return STRAGGLER_NONE;
}

int straggler_update(struct straggler *s, const struct straggler_sample *x)
{
	double clear = 1.0 + (s->ratio - 1.0) / 2.0;
	int changed = 0;

	straggler_push(s, x);
	s->n++;
	if (s->world < 2)
		return 0;
	for (int r = 0; r < s->world; r++) {
		struct straggler_rank *q = &s->r[r];
		enum straggler_cause over = straggler_judge(s, r, s->ratio);
		bool under = straggler_judge(s, r, clear) == STRAGGLER_NONE;

		/* judge() with the clearing band last set q->slower from it:
		 * the same value (the ratio does not depend on the band), and
		 * the cause is the one over the naming threshold. */
		q->cause = over;
		q->over = over != STRAGGLER_NONE ? q->over + 1 : 0;
		q->under = under ? q->under + 1 : 0;
		if (!q->named && q->over >= s->persist) {
			q->named = over;
			q->since = s->n;
			changed++;
		} else if (q->named && q->under >= s->persist) {
			q->named = STRAGGLER_NONE;
			changed++;
		}
	}
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
