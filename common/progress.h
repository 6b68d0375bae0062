/*
 * progress.h - a worker's progress page: one page of shared memory per
 * worker, written only by the worker (libddp, or the Python package) and
 * read by its agent, at no system-call cost per collective.
 *
 * The agent creates the page (a file of DDP_PROGRESS_SIZE zero bytes, in
 * the job's shared-memory namespace, removed with the group) before the
 * worker starts and names it in the worker's environment, DDP_PROGRESS_ENV.
 * The worker maps it once, shared, and writes `magic` and `version` last
 * of its first write. A worker started without the variable, or one whose
 * mapping failed, writes nothing: progress is a report, never a condition
 * for training.
 *
 * Consistency is a sequence lock: the writer makes `gen` odd, stores the
 * fields, then makes `gen` even again; a reader copies the page and keeps
 * the copy only when `gen` was even and unchanged across the copy. One
 * writer per page (libddp's calls of one context are made from one thread).
 *
 * Times are CLOCK_MONOTONIC nanoseconds: the agent runs on the same machine,
 * so it compares them with its own clock. Sequence numbers count the
 * collectives of the current round's communicator from 1: ranks of one
 * round agree on them, so "rank 3 has not entered allreduce #812" means the
 * same collective on every node. The layout is part of the Python
 * package's contract (python/ddplaunch/torch/progress.py mirrors it); a
 * change of a field's meaning or place bumps DDP_PROGRESS_VERSION.
 */
#ifndef DDP_COMMON_PROGRESS_H
#define DDP_COMMON_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define DDP_PROGRESS_MAGIC   0x50504444u /* "DDPP", little-endian */
#define DDP_PROGRESS_VERSION 1
#define DDP_PROGRESS_SIZE    4096
#define DDP_PROGRESS_ENV     "DDP_PROGRESS_FILE"

/* The phases' count, outside the guard: whichever header's enum a file
 * got, worker/core/progress_writer.c (ddp.h's) and
 * launcher/agent/hang_deadline.c (this one's) assert it has this many, so
 * the two copies cannot drift apart in length. */
#define DDP_PROGRESS_PHASES 10

/* What the worker is doing (worker/ddp.h repeats it, for programs that
 * include only that header: whichever comes first defines it). */
#ifndef DDP_PROGRESS_PHASE_DEFINED
#define DDP_PROGRESS_PHASE_DEFINED
enum ddp_progress_phase {
	DDP_PHASE_NONE = 0,   /* nothing reported yet */
	DDP_PHASE_STARTUP,    /* before its first round: rendezvous, transport set-up */
	DDP_PHASE_REFORM,     /* re-forming in place: waiting for or joining a round */
	DDP_PHASE_HANDOVER,   /* giving or taking state */
	DDP_PHASE_COMPUTE,    /* in a step, outside any collective */
	DDP_PHASE_COLLECTIVE, /* inside the collective (op, seq) */
	DDP_PHASE_CHECKPOINT, /* saving or loading a checkpoint */
	DDP_PHASE_EVAL,	      /* evaluating */
	DDP_PHASE_FINAL,      /* the final save */
	DDP_PHASE_SHUTDOWN,   /* training is over, tearing down */
	DDP_PHASE_COUNT
};
#endif

/* The collective in, or last finished. */
enum ddp_progress_op {
	DDP_OP_NONE = 0,
	DDP_OP_ALLREDUCE,
	DDP_OP_BROADCAST,
	DDP_OP_BARRIER,
	DDP_OP_ALLGATHER,
	DDP_OP_OTHER,
	DDP_OP_COUNT
};

/* The page's first bytes; the rest of the page is zero, kept for later
 * fields (appended, never moved). */
struct ddp_progress {
	uint32_t magic;	  /* DDP_PROGRESS_MAGIC once the worker wrote */
	uint32_t version; /* DDP_PROGRESS_VERSION */
	uint64_t gen;	  /* the sequence lock: odd while written */

	int32_t pid;	     /* the writer's */
	int32_t round;	     /* the round of its communicator, -1 before one */
	int32_t rank, world; /* in that round, -1 before one */
	uint32_t phase;	     /* enum ddp_progress_phase */
	uint32_t op;	     /* enum ddp_progress_op: in phase COLLECTIVE, the one it is in */
	uint64_t seq;	     /* that collective's number in the round, from 1; 0: none yet */
	uint64_t bytes;	     /* its payload */
	int32_t bucket;	     /* the gradient bucket it reduces, -1 for none */
	int32_t waiting_on;  /* inside it: the rank whose data it waits for, -1 unknown */
	uint64_t entered_ns; /* when it entered collective seq */
	uint64_t left_ns;    /* when it left it; < entered_ns while inside */
	uint64_t phase_ns;   /* when the current phase began */
	uint64_t step;	     /* training steps committed (ddp-train, Elastic); 0 before */
	uint64_t step_ns;    /* the last committed step's duration */
	uint64_t compute_ns; /* of that step: time outside collectives */
	uint64_t wait_ns;    /* of that step: time inside collectives */
	uint64_t written_ns; /* the last write: a heartbeat */
	uint32_t shards;     /* of that step: virtual shards it computed (0: not shard mode) */
	uint32_t reserved0;
	/* Appended (version 1 still: a page of an older writer has them 0). */
	uint64_t steps_total; /* steps this process (pid) reported, counted by the writer */
	uint64_t step_ns_sum; /* the sum of their step_ns: a reader's exact _sum/_count */
};

_Static_assert(sizeof(struct ddp_progress) <= DDP_PROGRESS_SIZE, "progress fits its page");

/* Writer side: brackets every change of the page. */
static inline void ddp_progress_write_begin(struct ddp_progress *p)
{
	__atomic_store_n(&p->gen, p->gen + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

static inline void ddp_progress_write_end(struct ddp_progress *p)
{
	__atomic_store_n(&p->gen, p->gen + 1, __ATOMIC_RELEASE);
}

/* Reader side: copies *p into *out when a consistent copy is had within a
 * few tries. Returns true then; false while the worker has not written yet
 * (no magic) or kept writing. */
static inline bool ddp_progress_read(const struct ddp_progress *p, struct ddp_progress *out)
{
	for (int tries = 0; tries < 8; tries++) {
		uint64_t g = __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE);
		if (g & 1)
			continue;
		memcpy(out, (const void *)p, sizeof(*out));
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&p->gen, __ATOMIC_RELAXED) == g)
			return out->magic == DDP_PROGRESS_MAGIC &&
			       out->version == DDP_PROGRESS_VERSION;
	}
	return false;
}

#endif
