/*
 * hang_waiters.h - who waits on whom when a hang is named. Pure: what one
 * worker does with respect to the hang (from its progress page), the
 * notice that carries one node's workers to every other node, and the
 * line every node prints for them.
 *
 * Each node's agent says this of its own workers once a hang is named
 * (named there, or heard: agent_hang_waiters.h), so a hang in the middle
 * of a ring points at one rank on every node: the others wait on their
 * neighbour, the chain ending at the culprit.
 *
 * The notice (one line on the job's notice board, docs/rendezvous.md):
 *   "wait1 ROUND RANK SEQ NODE N" then N entries
 *   " WRANK,STATE,WAITS_ON,OP,PHASE,WSEQ,FOR_MS"
 * ROUND RANK SEQ: the hang's id (its round, the culprit's rank, the
 * collective it named); NODE: the node whose workers these are; each
 * entry one of them (enum hang_waiter_state, enum ddp_progress_op and
 * enum ddp_progress_phase by number). A change of meaning makes "wait2".
 */
#ifndef DDP_LAUNCHER_HANG_WAITERS_H
#define DDP_LAUNCHER_HANG_WAITERS_H

#include <stddef.h>
#include <stdint.h>

#include "progress.h"

#define HANG_WAITERS_MAX 64 /* a node's workers in one notice, at most */

/* What a worker does with respect to the hang's collective S. */
enum hang_waiter_state {
	HANG_W_UNKNOWN = 0, /* no page of it */
	HANG_W_WAITS,	    /* inside S now */
	HANG_W_WAITED,	    /* seen inside S, has left it since (the cut ended it) */
	HANG_W_BEHIND,	    /* inside a collective before S */
	HANG_W_COMPUTING,   /* between collectives, before S */
	HANG_W_DONE,	    /* has left S, or is past it */
	HANG_W_ELSEWHERE,   /* in another phase, or another round */
	HANG_W_PAST,	    /* inside a collective after S */
	HANG_W_COUNT
};

/* One worker's state with respect to a hang. */
struct hang_waiter {
	int rank;
	enum hang_waiter_state state;
	int waits_on;	 /* the rank whose data it waits for, -1 unknown or none */
	uint32_t op;	 /* the collective it is (was) in, or last left */
	uint32_t phase;	 /* its phase (enum ddp_progress_phase) */
	uint64_t seq;	 /* that collective's number */
	uint64_t for_ms; /* how long it has been (was) in that state */
};

/* The hang a node's waiters are of: its id. */
struct hang_ref {
	int round, rank; /* its round, the culprit's rank */
	uint64_t seq;	 /* the collective named */
};

/* Worker `rank`'s state with respect to collective `seq` of `round` (the
 * one the others meet the culprit at), at `now_ns` (CLOCK_MONOTONIC):
 * from cur, its last page (NULL: none), and inside, the last page seen
 * while it was inside a collective (NULL: none), seen at inside_ns. */
struct hang_waiter hang_waiter_of(int rank, const struct ddp_progress *cur,
				  const struct ddp_progress *inside, uint64_t inside_ns, int round,
				  uint64_t seq, uint64_t now_ns);

/* "waits", "waited", "behind", "computing", "done", "elsewhere", "past",
 * "unknown". */
const char *hang_waiter_state_name(enum hang_waiter_state s);

/* Writes node's notice of n waiters of ref into buf: as many as fit in
 * len (the first ones). Returns how many it holds, or -ENOSPC when not
 * even none fits. */
int hang_waiters_encode(const struct hang_ref *ref, int node, const struct hang_waiter *w, int n,
			char *buf, size_t len);

/* Reads a notice: *ref, *node and up to max waiters into w. Returns their
 * count, -ENOENT for another kind of notice, -EINVAL for a malformed one
 * (a count over max, a number out of its range, anything left over). */
int hang_waiters_decode(const char *text, struct hang_ref *ref, int *node, struct hang_waiter *w,
			int max);

/* The line every node prints for node's n waiters of ref:
 *   "waiters of hang ROUND.RANK.SEQ (rank RANK) on node NODE: rank 0 waits
 *    on rank 5 in allreduce #812 for 1.10 s; rank 1 ..."
 * Returns its length (snprintf's); without '\n'. */
int hang_waiters_line(const struct hang_ref *ref, int node, const struct hang_waiter *w, int n,
		      char *buf, size_t len);

/* One waiter in words ("rank 0 waits on rank 5 in allreduce #812 for
 * 1.10 s"), appended at buf + *pos (kept within len). */
void hang_waiter_words(const struct hang_waiter *w, uint64_t seq, char *buf, size_t len,
		       size_t *pos);

#endif
