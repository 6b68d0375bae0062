/* The learned hang deadline (see hang_deadline.h). */
#include "hang_deadline.h"

#include <stdlib.h>
#include <string.h>

/* progress.h's enum (ddp.h's copy: progress_writer.c). */
_Static_assert(DDP_PHASE_COUNT == DDP_PROGRESS_PHASES &&
		   DDP_PHASE_SHUTDOWN == DDP_PROGRESS_PHASES - 1,
	       "common/progress.h's phases and its DDP_PROGRESS_PHASES disagree");

void hang_deadline_cfg_defaults(struct hang_deadline_cfg *c)
{
	*c = (struct hang_deadline_cfg){
	    .floor_ns = HANG_FLOOR_MIN_NS,
	    .long_floor_ns = HANG_LONG_FLOOR_NS,
	    .k = 4.0,
	    .m = 2.0,
	    .warmup = 20,
	    .long_warmup = 3,
	};
}

void hang_deadline_init(struct hang_deadline *d, const struct hang_deadline_cfg *cfg)
{
	memset(d, 0, sizeof(*d));
	d->cfg = *cfg;
	if (d->cfg.floor_ns < HANG_FLOOR_MIN_NS)
		d->cfg.floor_ns = HANG_FLOOR_MIN_NS;
	if (d->cfg.long_floor_ns < d->cfg.floor_ns)
		d->cfg.long_floor_ns = d->cfg.floor_ns;
	if (d->cfg.fixed_ns && d->cfg.fixed_ns < HANG_FLOOR_MIN_NS)
		d->cfg.fixed_ns = HANG_FLOOR_MIN_NS;
}

static int kind_of(enum ddp_progress_phase phase, enum ddp_progress_op op)
{
	if ((unsigned)phase >= DDP_PHASE_COUNT || phase == DDP_PHASE_NONE)
		return -1;
	if (phase != DDP_PHASE_COLLECTIVE || op == DDP_OP_NONE)
		return (int)phase;
	if ((unsigned)op >= DDP_OP_COUNT)
		return -1;
	return DDP_PHASE_COUNT + (int)op;
}

static bool is_long(enum ddp_progress_phase phase)
{
	return phase != DDP_PHASE_COMPUTE && phase != DDP_PHASE_COLLECTIVE;
}

void hang_deadline_add(struct hang_deadline *d, enum ddp_progress_phase phase,
		       enum ddp_progress_op op, uint64_t ns)
{
	int k = kind_of(phase, op);
	struct hang_ring *r;

	if (k < 0)
		return;
	r = &d->ring[k];
	r->v[r->next] = ns;
	r->next = (r->next + 1) % HANG_RING;
	if (r->n < HANG_RING)
		r->n++;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

uint64_t hang_ring_p99(const struct hang_ring *r)
{
	uint64_t s[HANG_RING];
	uint32_t idx;

	if (!r->n)
		return 0;
	memcpy(s, r->v, r->n * sizeof(s[0]));
	qsort(s, r->n, sizeof(s[0]), cmp_u64);
	/* nearest rank: ceil(0.99 n), 1-based */
	idx = (uint32_t)((99u * r->n + 99u) / 100u);
	return s[idx - 1];
}

static uint64_t ring_max(const struct hang_ring *r)
{
	uint64_t mx = 0;

	for (uint32_t i = 0; i < r->n; i++)
		if (r->v[i] > mx)
			mx = r->v[i];
	return mx;
}

/* One ring's deadline, or 0 before its warm-up. */
static uint64_t ring_deadline(const struct hang_deadline *d, const struct hang_ring *r,
			      uint32_t warmup, uint64_t floor_ns)
{
	double a, b;
	uint64_t dl = floor_ns;

	if (r->n < warmup || !r->n)
		return 0;
	a = d->cfg.k * (double)hang_ring_p99(r);
	b = d->cfg.m * (double)ring_max(r);
	if (a > (double)dl)
		dl = (uint64_t)a;
	if (b > (double)dl)
		dl = (uint64_t)b;
	return dl;
}

/* The collectives' deadline: the larger of op's ring (DDP_OP_NONE: every
 * op's) and the steps' waits, each once warmed up. */
static uint64_t coll_deadline(const struct hang_deadline *d, enum ddp_progress_op op)
{
	uint64_t dl =
	    ring_deadline(d, &d->ring[DDP_PHASE_COLLECTIVE], d->cfg.warmup, d->cfg.floor_ns);

	for (int o = 1; o < DDP_OP_COUNT; o++) {
		uint64_t x;

		if (op != DDP_OP_NONE && o != (int)op)
			continue;
		x = ring_deadline(d, &d->ring[DDP_PHASE_COUNT + o], d->cfg.warmup, d->cfg.floor_ns);
		if (x > dl)
			dl = x;
	}
	return dl;
}

uint64_t hang_deadline_get(const struct hang_deadline *d, enum ddp_progress_phase phase,
			   enum ddp_progress_op op)
{
	int k = kind_of(phase, op);
	uint64_t a, b;

	if (d->cfg.off || k < 0)
		return 0;
	if (is_long(phase))
		return ring_deadline(d, &d->ring[k], d->cfg.long_warmup, d->cfg.long_floor_ns);
	if (d->cfg.fixed_ns)
		return d->cfg.fixed_ns;
	if (phase == DDP_PHASE_COLLECTIVE)
		return coll_deadline(d, op);
	/* Outside a collective: what its own gaps showed, and at least what the
	 * peers were seen to wait inside one (their wait is a rank's time
	 * outside), once both are warmed up. */
	a = ring_deadline(d, &d->ring[k], d->cfg.warmup, d->cfg.floor_ns);
	b = coll_deadline(d, DDP_OP_NONE);
	if (!a || !b)
		return 0;
	return a > b ? a : b;
}
