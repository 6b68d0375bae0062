/*
 * replica_check_int.h - the replica check's parts (replica_check.h): the
 * digest and the exchange (replica_check.c), the mismatch's naming and
 * heal (replica_heal.c). Private to those two files.
 */
#ifndef DDP_WORKER_TRAIN_REPLICA_CHECK_INT_H
#define DDP_WORKER_TRAIN_REPLICA_CHECK_INT_H

#include "replica_check.h"
#include "replica_vote.h"
#include "train_state.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <xxhash.h>

/* A state this large is digested on the helper thread beside the next
 * step's compute; a smaller one right after its step. */
#define REPLICA_THREAD_BYTES (1u << 20)

struct replica_check {
	int64_t every;
	/* DDP_TEST_FLIP: rank and step; flip_step 0: none */
	int flip_rank;
	uint64_t flip_step;
	bool flipped;
	/* The state digested: its header and segments (host memory). */
	struct train_state_header hdr;
	const float *seg[TRAIN_STATE_NSEGS];
	size_t n[TRAIN_STATE_NSEGS];
	float *host; /* staging when the kernels' memory is not the host's */
	XXH3_state_t *xs;
	/* The pending digest: the helper thread's result (threaded) or made
	 * on the training thread (a state under REPLICA_THREAD_BYTES, or no
	 * thread could start). */
	bool pending, threaded, warned;
	pthread_t th;
	uint64_t digest, hash_ns; /* hash_ns: the helper thread's CPU time */
	/* Totals for the closing line and the benchmark: the main thread's
	 * wait for the helper (join_ns) and in the comparison (gather_ns: the
	 * last step's all-gather; the others ride in the step's all-reduce). */
	uint64_t checks, mismatches, healed, skipped;
	uint64_t join_ns, gather_ns, hash_total_ns, heal_ns;
	/* replica_check_put wrote a digest into this step's exchange. */
	bool sent;
	/* Every rank's digest, read from the exchange (capacity all_cap). */
	uint64_t *all;
	int all_cap;
};

/* XXH3_64 of rc's header and segments, in the layout's order. */
uint64_t replica_digest(struct replica_check *rc);
/* Points rc at t's state now: the kernels' host memory itself, or a host
 * copy of device memory. Returns 0 or the kernels' negative errno. */
int replica_view(struct trainer *t, struct replica_check *rc);
/* n words of every rank into all (world x n), in rank order. Returns 0 or
 * the collective's error. */
int replica_gather(struct trainer *t, const uint64_t *mine, uint64_t *all, size_t n);
/* Every rank's digest into all (world words) and the vote. */
int replica_compare(struct trainer *t, uint64_t digest, uint64_t *all, struct replica_vote *v);
/* The digests all[] differ (v): names every replica that differs on every
 * rank (per-tensor digests), records it, then heals the minority from
 * v->root (REPLICA_HEALED) or, with no majority, stops (-EIO); or a
 * collective's error. */
int replica_mismatch(struct trainer *t, struct replica_check *rc, const uint64_t *all,
		     const struct replica_vote *v);

#endif
