/*
 * shm.h - the shared-memory transport's segment layout and barrier, shared
 * by cpu_shm.c (set-up and collectives) and shm_barrier.c. Not installed.
 */
#ifndef DDP_WORKER_SHM_H
#define DDP_WORKER_SHM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu.h"

#define SHM_STREAM_BYTES                                                                           \
	(16u << 20) /* all-reduces from this size copy out with streaming stores                   \
		     */
#define SHM_MAGIC	 0x314d485350444444ull /* "DDDPSHM1" */
#define SHM_DEFAULT_SLOT (4u << 20)  /* fewer barriers per MiB: they cost most under load */
#define SHM_BUDGET	 (32u << 20) /* bytes of /dev/shm a job may use by default */
#define SHM_MIN_SLOT	 (256u << 10)
#define SHM_SPINS	 2000
#define SHM_LIVENESS_MS	 20

struct shm_rank {
	_Atomic uint64_t seq;
	int32_t pid;
	char pad[52];
};

struct shm_header {
	uint64_t magic;
	uint32_t world;
	uint32_t slot_bytes;
	_Atomic uint32_t gen;	  /* futex word: bumped at every arrival */
	_Atomic uint32_t waiters; /* ranks sleeping on gen */
	_Atomic int32_t aborted_by;
	_Atomic int32_t dead_rank; /* a rank found dead, or -1 */
	char pad[32];
	struct shm_rank ranks[];
};

struct cpu_shm {
	struct ddp_backend base;
	struct shm_header *h;
	size_t map_len;
	char *slots;
	char *out[2];
	size_t slot;
	uint64_t seq;
	int toggle;
	uint64_t timeout_ms;
	int *pidfds;		    /* [world]: pidfd of each peer (-1: none, use kill) */
	int name_base, name_stride; /* how messages number ranks */
};

/* Segment bytes before the slots (header and per-rank records, page
 * aligned). */
size_t shm_header_bytes(int world);
/* Marks the segment aborted by this rank and wakes every waiter. */
void shm_mark_aborted(struct cpu_shm *s);
/* 1 if rank r's process has ended. */
int shm_rank_dead(struct cpu_shm *s, int r);
/* Waits until every rank has reached this barrier (0), or fails with
 * -ECANCELED (another rank aborted), -ECONNRESET (a rank died) or
 * -ETIMEDOUT, with s->base.err naming the ranks; `kind` names the
 * collective in messages. A failure marks the segment aborted. */
int shm_barrier(struct cpu_shm *s, int kind);

#endif
