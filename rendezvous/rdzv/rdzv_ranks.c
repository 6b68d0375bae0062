/*
 * rdzv_ranks.c - who is in a round and with which group rank (see
 * rdzv_assign_ranks in rdzv_codec.h).
 */
#include <errno.h>
#include <stdlib.h>

#include "rdzv_codec.h"

/* Sort key of one candidate: class 0 asked for a rank, 1 ran before, 2 new. */
struct prio {
	uint32_t cls;
	uint64_t k1, k2;
	uint32_t idx;
};

static int cmp_prio(const void *a, const void *b)
{
	const struct prio *x = a, *y = b;
	if (x->cls != y->cls)
		return x->cls < y->cls ? -1 : 1;
	if (x->k1 != y->k1)
		return x->k1 < y->k1 ? -1 : 1;
	if (x->k2 != y->k2)
		return x->k2 < y->k2 ? -1 : 1;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static void prio_of(const struct rdzv_slot *s, uint32_t idx, struct prio *p)
{
	p->idx = idx;
	if (s->node_rank >= 0) {
		p->cls = 0;
		p->k1 = (uint64_t)s->node_rank;
		p->k2 = 0;
	} else if (s->prev_round > 0) {
		p->cls = 1;
		p->k1 = UINT32_MAX - (uint64_t)s->prev_round; /* most recent round first */
		p->k2 = s->prev_rank;
	} else {
		p->cls = 2;
		p->k1 = 0;
		p->k2 = 0;
	}
}

/* The rank a selected candidate would like, or -1. */
static int64_t wanted(const struct rdzv_slot *s, uint32_t pass)
{
	if (pass == 0)
		return s->node_rank;
	return s->prev_round > 0 ? (int64_t)s->prev_rank : -1;
}

static void give_ranks(const struct rdzv_slot *slots, const struct prio *p, uint32_t size,
		       uint32_t *order, uint8_t *taken, uint8_t *placed)
{
	/* Pass 0: asked-for ranks; pass 1: old ranks; both only where they fit. */
	for (uint32_t pass = 0; pass < 2; pass++)
		for (uint32_t i = 0; i < size; i++) {
			int64_t r = wanted(&slots[p[i].idx], pass);
			if (placed[i] || r < 0 || r >= size || taken[r])
				continue;
			taken[r] = 1;
			placed[i] = 1;
			order[r] = p[i].idx;
		}
	uint32_t next = 0;
	for (uint32_t i = 0; i < size; i++) {
		if (placed[i])
			continue;
		while (taken[next])
			next++;
		taken[next] = 1;
		order[next] = p[i].idx;
	}
}

int rdzv_assign_ranks(const struct rdzv_slot *slots, uint32_t n, uint32_t max_nodes,
		      uint32_t *order, uint32_t *size, uint32_t *dup_a, uint32_t *dup_b)
{
	int rc = 0;
	*size = 0;
	if (n == 0)
		return 0;
	struct prio *p = malloc(n * sizeof(*p));
	uint8_t *flags = calloc(2, n);
	if (!p || !flags) {
		rc = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < n; i++)
		prio_of(&slots[i], i, &p[i]);
	qsort(p, n, sizeof(*p), cmp_prio);
	for (uint32_t i = 1; i < n && p[i].cls == 0; i++)
		if (p[i].k1 == p[i - 1].k1) {
			*dup_a = p[i - 1].idx;
			*dup_b = p[i].idx;
			rc = -EEXIST;
			goto out;
		}
	*size = n < max_nodes ? n : max_nodes;
	give_ranks(slots, p, *size, order, flags, flags + n);
out:
	free(p);
	free(flags);
	return rc;
}
