/*
 * replica_vote.c - which replicas hold the job's state (pure).
 */
#include "replica_vote.h"

#include <string.h>

/* Ranks holding rank r's digest. */
static int replica_count(const uint64_t *d, int world, int r)
{
	int n = 0;

	for (int k = 0; k < world; k++)
		n += d[k] == d[r];
	return n;
}

int replica_vote(const uint64_t *d, int world, struct replica_vote *v)
{
	memset(v, 0, sizeof(*v));
	v->root = -1;
	v->first_bad = -1;
	v->agree = world > 0 && replica_count(d, world, 0) == world;
	if (v->agree) {
		v->root = 0;
		v->majority = world;
		return 1;
	}
	for (int r = 0; r < world && v->root < 0; r++)
		if (2 * replica_count(d, world, r) > world)
			v->root = r;
	if (v->root >= 0)
		v->majority = replica_count(d, world, v->root);
	for (int r = 0; r < world; r++) {
		int ref = v->root >= 0 ? v->root : 0;

		if (d[r] == d[ref])
			continue;
		v->bad++;
		if (v->first_bad < 0)
			v->first_bad = r;
	}
	return 0;
}

int replica_first_diff(const uint64_t *a, const uint64_t *b, int n)
{
	for (int i = 0; i < n; i++)
		if (a[i] != b[i])
			return i;
	return -1;
}
