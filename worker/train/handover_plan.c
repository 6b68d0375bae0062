/*
 * handover_plan.c - who hands the training state to whom (pure).
 */
#include "handover_plan.h"

#include <errno.h>

int handover_plan(const double *steps, int world, struct handover_plan *p)
{
	*p = (struct handover_plan){.root = -1, .max = -1.0, .lo_rank = -1, .lo = -1.0};
	for (int r = 0; r < world; r++) {
		if (steps[r] > p->max) {
			p->max = steps[r];
			p->root = r;
		}
		if (steps[r] >= 0.0 && (p->lo_rank < 0 || steps[r] < p->lo)) {
			p->lo = steps[r];
			p->lo_rank = r;
		}
	}
	for (int r = 0; r < world; r++)
		p->behind += steps[r] < p->max;
	return p->lo_rank >= 0 && p->max - p->lo > 1.0 ? -EPROTO : 0;
}
