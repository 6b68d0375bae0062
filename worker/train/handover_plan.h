/*
 * handover_plan.h - who hands the training state to whom (pure): the
 * decision trainer_state_sync takes over every rank's step.
 */
#ifndef DDP_TRAIN_HANDOVER_PLAN_H
#define DDP_TRAIN_HANDOVER_PLAN_H

struct handover_plan {
	int root;    /* the lowest rank at the highest step; -1: none holds state */
	double max;  /* that step; -1 when no rank holds state */
	int behind;  /* ranks below max (those without state included) */
	int lo_rank; /* the lowest rank at the lowest step held (-1: none) */
	double lo;   /* that step */
};

/* steps[0..world): each rank's step, or -1 for a rank that holds no state
 * (a fresh process, which takes any step). Fills p and returns 0, or
 * -EPROTO when two ranks that hold state are more than one step apart
 * (p->lo at p->lo_rank, p->max at p->root: a hand-over bridges at most the
 * one step a re-formation interrupted, more means ranks of another run). */
int handover_plan(const double *steps, int world, struct handover_plan *p);

#endif
