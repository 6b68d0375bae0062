/*
 * shm.h - the inside of the shared-memory transport (cpu_shm.h): the
 * segment's layout (a header with per-rank arrival counters and pids, then
 * the slots and outputs), the per-rank arenas of ddp_mem_alloc memory, the
 * barrier that names a dead, stuck or aborting rank, and the start of the
 * rank's /dev/shm names that the segment and the arenas share (shm_name.c,
 * so that cpu_shm.c is called by nothing here). Everything here is
 * used by one rank's communication thread, except shm_mark_aborted (any
 * thread) and the arena allocator (the application thread, under its lock).
 */
#ifndef DDP_WORKER_SHM_H
#define DDP_WORKER_SHM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

/* All-reduces from this size copy their result out with streaming stores. */
#define SHM_STREAM_BYTES (16u << 20)
/* All-reduces from this size first check whether every rank's buffer lives
 * in its arena (one more barrier) to reduce in place. */
#define SHM_DIRECT_MIN_BYTES (64u << 10)
#define SHM_MAGIC	     0x314d485350444444ull /* "DDDPSHM1" */
#define SHM_DEFAULT_SLOT     (4u << 20)	 /* fewer barriers per MiB: they cost most under load */
#define SHM_BUDGET	     (32u << 20) /* bytes of /dev/shm a job may use by default */
#define SHM_MIN_SLOT	     (256u << 10)
#define SHM_SPINS	     2000
#define SHM_LIVENESS_MS	     20

struct shm_rank {
	_Atomic uint64_t seq;
	_Atomic uint64_t op_off; /* this all-reduce's buffer in the rank's arena, or UINT64_MAX */
	int32_t pid;
	char pad[44];
};

/* Block of a rank's arena (its own allocator's bookkeeping). */
struct shm_block {
	size_t off, len;
	int used;
};

/* Every rank's arena: memory from ddp_mem_alloc that the other ranks of the
 * node have mapped too, so an all-reduce on it reads the peers' buffers and
 * writes their results in place, without staging copies. */
struct shm_arena {
	size_t size; /* bytes of each rank's arena; 0: no arena */
	char **base; /* [world]: each rank's arena as mapped here, or NULL */
	int fd;	     /* this rank's arena (pages reserved at allocation) */
	int usable;  /* every rank's arena is mapped here */
	char name[64];
	pthread_mutex_t lock; /* allocation runs on the application thread */
	struct shm_block *blocks;
	size_t nblocks, cap;
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
	struct shm_arena arena;
	char *tmp; /* SHM_PIECE bytes: the in-place all-reduce's staging */
};

#define SHM_PIECE (32u << 10)

/* shm_name.c. The start of this rank's /dev/shm names, "/ddp-TAG-PID",
 * TAG from DDP_JOB_TAG (set by ddplaunch, which removes /dev/shm/ddp-TAG-*
 * after the group ends: a rank that dies during the set-up leaves its
 * names), or "/ddp-PID" without one (a tag of up to 32 letters and
 * digits). */
void shm_name_base(char *buf, size_t len);

/* shm_arena.c. Creates this rank's arena (DDP_SHM_ARENA_BYTES, default
 * 1 GiB of address space, pages reserved only when allocated; 0 disables
 * it); never fails: without an arena everything takes the copying path. */
void shm_arena_create(struct cpu_shm *s);
/* ddp_reform: takes over old's arena (this rank's file, its mapping and
 * its blocks, so the application's ddp_mem_alloc memory stays where it
 * is); old keeps only its mappings of the peers' arenas. Creates a new
 * arena when old has none. */
void shm_arena_adopt(struct cpu_shm *s, struct cpu_shm *old);
/* What the peers open to map this rank's arena: its /dev/shm name, or
 * (adopted, the name long unlinked) "/proc/PID/fd/FD"; "-" without one. */
void shm_arena_share_name(const struct cpu_shm *s, char *buf, size_t len);
/* Maps every rank's arena by name ("-": none); usable if all mapped. */
void shm_arena_attach(struct cpu_shm *s, char *const *names);
void shm_arena_release(struct cpu_shm *s);
/* Memory in this rank's arena: 0, or -ENOMEM (arena full or absent). */
int shm_arena_alloc(struct cpu_shm *s, size_t bytes, void **out);
/* 1 if ptr came from shm_arena_alloc (and is now free), 0 if not. */
int shm_arena_free(struct cpu_shm *s, void *ptr);
/* Offset of [ptr, ptr + bytes) inside an allocated block of this rank's
 * arena, or UINT64_MAX. */
uint64_t shm_arena_offset(struct cpu_shm *s, const void *ptr, size_t bytes);

/* Segment bytes before the slots (header and per-rank records, page
 * aligned). */
size_t shm_header_bytes(int world);
/* Marks the segment aborted by this rank and wakes every waiter. */
void shm_mark_aborted(struct cpu_shm *s);
/* Waits until every rank has reached this barrier (0), or fails with
 * -ECANCELED (another rank aborted), -ECONNRESET (a rank died) or
 * -ETIMEDOUT, with s->base.err naming the ranks; `kind` names the
 * collective in messages. A failure marks the segment aborted. */
int shm_barrier(struct cpu_shm *s, int kind);

#endif
