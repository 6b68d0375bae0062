/*
 * replica_vote.h - which replicas hold the job's state (pure): the decision
 * the replica check (replica_check.h) takes over every rank's digest.
 */
#ifndef DDP_TRAIN_REPLICA_VOTE_H
#define DDP_TRAIN_REPLICA_VOTE_H

#include <stdint.h>

struct replica_vote {
	int agree;     /* 1: every rank's digest is the same (nothing else is set) */
	int root;      /* the lowest rank holding the majority's digest; -1: no majority */
	int majority;  /* ranks holding root's digest (0 without a majority) */
	int bad;       /* ranks whose digest differs from root's (all but root's peers) */
	int first_bad; /* the lowest of them; without a majority, the lowest rank whose
			  digest differs from rank 0's */
};

/* d[0..world): each rank's digest. A majority is more than half of the
 * ranks holding one digest: with 3 or more ranks one corrupted replica is
 * outvoted; with 2 (or a tie) nobody can tell the good replica. Fills v;
 * returns 1 when every digest is equal, 0 when they differ. */
int replica_vote(const uint64_t *d, int world, struct replica_vote *v);

/* The first index (in the order of the items) where a and b differ, or -1
 * when the n items are all equal. */
int replica_first_diff(const uint64_t *a, const uint64_t *b, int n);

#endif
