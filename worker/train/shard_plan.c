/*
 * shard_plan.c - the weighted shard plan: a greedy split that is optimal
 * for shards of one size, and the decision to move to it.
 */
#include "shard_plan.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static int plan_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static bool plan_cost_ok(double c)
{
	return isfinite(c) && c > 0.0;
}

/* The cost that stands in for a missing one: the median of the valid
 * costs (the lower middle one: the same on every rank), or 1. */
static double plan_fill(int w, const double *cost)
{
	double buf[w > 0 ? w : 1];
	int n = 0;

	for (int r = 0; r < w; r++)
		if (plan_cost_ok(cost[r]))
			buf[n++] = cost[r];
	if (n == 0)
		return 1.0;
	qsort(buf, (size_t)n, sizeof(double), plan_cmp_double);
	return buf[(n - 1) / 2];
}

static double plan_cost(const double *cost, int r, double fill)
{
	return plan_cost_ok(cost[r]) ? cost[r] : fill;
}

/* A head start for the greedy: shards it gives each rank anyway. With one
 * shard each first, the greedy takes the v - w smallest of the finish
 * times k x cost[r] (k >= 2, ties to the lower rank). T = v / sum(1 /
 * cost) is the balanced step; when every rank's first shard ends before T,
 * the times below T number at most v in all, so at most v - w with k >= 2,
 * and the greedy takes every one of them whatever the ties. Rank r's are
 * k < T / cost[r]: it gets floor(T / cost[r]) - 1 of them here (one less,
 * against rounding). Returns the shards left to place, or -1 when some
 * rank's first shard ends after T (no head start: the plain greedy). */
static int plan_head_start(int v, int w, const double *cost, double fill, int *counts)
{
	double inv = 0.0, t;
	int left = v;

	for (int r = 0; r < w; r++)
		inv += 1.0 / plan_cost(cost, r, fill);
	t = (double)v / inv;
	for (int r = 0; r < w; r++)
		if (!(t / plan_cost(cost, r, fill) >= 2.0))
			return -1;
	for (int r = 0; r < w; r++) {
		double k = fmin(floor(t / plan_cost(cost, r, fill)) - 1.0, (double)v);

		counts[r] = k > 1.0 ? (int)k : 1;
		left -= counts[r];
	}
	return left;
}

void shard_plan_optimal(int v, int w, const double *cost_in, int *counts)
{
	double fill = plan_fill(w, cost_in), cost[w > 0 ? w : 1];
	int left = v;

	for (int r = 0; r < w; r++)
		cost[r] = plan_cost(cost_in, r, fill);

	/* One shard to each first (when there are enough), then each next
	 * shard to the rank whose run would end first with it: for shards of
	 * one size on ranks of different speeds this minimises the longest
	 * run (the classic greedy for uniform machines). The head start
	 * leaves the greedy at most about 2w shards to place: O(w^2), not
	 * O(v w). */
	for (int r = 0; r < w; r++)
		counts[r] = v >= w ? 1 : 0;
	if (v >= w) {
		left = plan_head_start(v, w, cost, fill, counts);
		if (left < 0) {
			for (int r = 0; r < w; r++)
				counts[r] = 1;
			left = v - w;
		}
	}
	while (left-- > 0) {
		int best = 0;
		double bt = INFINITY;

		for (int r = 0; r < w; r++) {
			double t = (double)(counts[r] + 1) * cost[r];

			if (t < bt) {
				bt = t;
				best = r;
			}
		}
		counts[best]++;
	}
}

double shard_plan_time(int w, const int *counts, const double *cost)
{
	double fill = plan_fill(w, cost), t = 0.0;

	for (int r = 0; r < w; r++)
		t = fmax(t, (double)counts[r] * plan_cost(cost, r, fill));
	return t;
}

int shard_plan_first(const int *counts, int r)
{
	int first = 0;

	for (int i = 0; i < r; i++)
		first += counts[i];
	return first;
}

int shard_plan_decide(int v, int w, const double *cost, const int *current, double gain, int *next)
{
	int sum = 0;
	bool valid = true;

	for (int r = 0; r < w; r++) {
		valid = valid && current[r] >= 0;
		sum += current[r];
	}
	shard_plan_optimal(v, w, cost, next);
	if (valid && sum == v) {
		double now = shard_plan_time(w, current, cost),
		       best = shard_plan_time(w, next, cost);

		if (memcmp(next, current, (size_t)w * sizeof(int)) == 0 ||
		    now < best * (1.0 + gain)) {
			memcpy(next, current, (size_t)w * sizeof(int));
			return 0;
		}
	}
	return 1;
}
