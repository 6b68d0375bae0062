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

void shard_plan_optimal(int v, int w, const double *cost, int *counts)
{
	double fill = plan_fill(w, cost);
	int left = v;

	/* One shard to each first (when there are enough), then each next
	 * shard to the rank whose run would end first with it: for shards of
	 * one size on ranks of different speeds this minimises the longest
	 * run (the classic greedy for uniform machines). */
	for (int r = 0; r < w; r++) {
		counts[r] = v >= w ? 1 : 0;
		left -= counts[r];
	}
	while (left-- > 0) {
		int best = 0;
		double bt = INFINITY;

		for (int r = 0; r < w; r++) {
			double t = (double)(counts[r] + 1) * plan_cost(cost, r, fill);

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
