/*
 * shm_barrier.c - the shared-memory transport's barrier: per-rank arrival
 * counters in the segment, a short spin, then a futex sleep; while waiting,
 * the deadline, an abort by another rank and the peers' liveness (pidfds)
 * are checked, so a dead or stuck rank is named instead of hanging.
 */
#include <errno.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "progress_page.h"
#include "shm.h"
#include "timeutil.h"
#include "transport.h"

static int shm_name(const struct cpu_shm *s, int r)
{
	return s->name_base + r * s->name_stride;
}

size_t shm_header_bytes(int world)
{
	size_t n = sizeof(struct shm_header) + (size_t)world * sizeof(struct shm_rank);

	return (n + 4095) & ~(size_t)4095;
}

static void shm_futex_wake(_Atomic uint32_t *addr)
{
	syscall(SYS_futex, addr, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

static void shm_futex_wait(_Atomic uint32_t *addr, uint32_t val, long ns)
{
	struct timespec ts = {0, ns};

	syscall(SYS_futex, addr, FUTEX_WAIT, val, &ts, NULL, 0);
}

void shm_mark_aborted(struct cpu_shm *s)
{
	int32_t none = -1;

	atomic_compare_exchange_strong(&s->h->aborted_by, &none, s->base.rank);
	atomic_fetch_add(&s->h->gen, 1);
	shm_futex_wake(&s->h->gen);
}

/* 1 when every rank reached seq. */
static int shm_all_arrived(struct cpu_shm *s, uint64_t seq)
{
	for (int r = 0; r < s->base.world_size; r++)
		if (atomic_load_explicit(&s->h->ranks[r].seq, memory_order_acquire) < seq)
			return 0;
	return 1;
}

/* The first rank (in rank order) that has not reached seq, by its job-wide
 * number, or -1: whose slot the progress page says this rank waits for. */
static int shm_first_missing(struct cpu_shm *s, uint64_t seq)
{
	for (int r = 0; r < s->base.world_size; r++)
		if (atomic_load_explicit(&s->h->ranks[r].seq, memory_order_acquire) < seq)
			return shm_name(s, r);
	return -1;
}

/* 1 if rank r's process has ended (a zombie counts: its parent may not
 * have reaped it yet, so kill(pid, 0) alone would still succeed). */
static int shm_rank_dead(struct cpu_shm *s, int r)
{
	pid_t pid = s->h->ranks[r].pid;

	if (s->pidfds && s->pidfds[r] >= 0) {
		struct pollfd pf = {.fd = s->pidfds[r], .events = POLLIN};

		return poll(&pf, 1, 0) == 1;
	}
	return pid > 0 && kill(pid, 0) < 0 && errno == ESRCH;
}

/* Names the ranks not at seq yet; returns how many are dead. */
static int shm_describe_missing(struct cpu_shm *s, uint64_t seq, char *list, size_t len)
{
	size_t off = 0;
	int dead = 0;

	list[0] = '\0';
	for (int r = 0; r < s->base.world_size; r++) {
		pid_t pid = s->h->ranks[r].pid;
		int gone;

		if (atomic_load(&s->h->ranks[r].seq) >= seq)
			continue;
		gone = shm_rank_dead(s, r);
		dead += gone;
		if (off < len)
			off += (size_t)snprintf(list + off, len - off, "%s%d (pid %d%s)",
						off ? ", " : "", shm_name(s, r), (int)pid,
						gone ? ", dead" : "");
	}
	return dead;
}

/* Checks abort, death and deadline while waiting; <0 ends the wait. */
static int shm_check(struct cpu_shm *s, uint64_t seq, uint64_t deadline, int kind, int liveness)
{
	int32_t by = atomic_load(&s->h->aborted_by);
	char list[256];

	if (by >= 0) {
		int32_t dead = atomic_load(&s->h->dead_rank);

		if (dead >= 0)
			snprintf(s->base.err, sizeof(s->base.err),
				 "%s: rank %d died (noticed by rank %d); re-form with ddp_reform "
				 "or restart the group",
				 cpu_op_name(kind), shm_name(s, dead), shm_name(s, by));
		else
			snprintf(s->base.err, sizeof(s->base.err),
				 "%s: rank %d failed or aborted, so this rank stops too",
				 cpu_op_name(kind), shm_name(s, by));
		return -ECANCELED;
	}
	if (liveness && shm_describe_missing(s, seq, list, sizeof(list)) > 0) {
		for (int r = 0; r < s->base.world_size; r++) {
			int32_t none = -1;

			if (atomic_load(&s->h->ranks[r].seq) < seq && shm_rank_dead(s, r))
				atomic_compare_exchange_strong(&s->h->dead_rank, &none, r);
		}
		snprintf(s->base.err, sizeof(s->base.err),
			 "%s: waiting for rank %s: it died; re-form with ddp_reform or restart the "
			 "group",
			 cpu_op_name(kind), list);
		return -ECONNRESET;
	}
	if (time_left_ms(deadline) == 0) {
		shm_describe_missing(s, seq, list, sizeof(list));
		snprintf(s->base.err, sizeof(s->base.err),
			 "%s: timed out after %llu ms waiting for rank %s (DDP_TIMEOUT_MS sets "
			 "the deadline)",
			 cpu_op_name(kind), (unsigned long long)s->timeout_ms, list);
		return -ETIMEDOUT;
	}
	return 0;
}

static inline void shm_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

int shm_barrier(struct cpu_shm *s, int kind)
{
	uint64_t seq = ++s->seq, deadline = time_now_ms() + s->timeout_ms;
	uint64_t next_live = time_now_ms() + SHM_LIVENESS_MS;
	struct shm_header *h = s->h;
	int rc;

	atomic_store_explicit(&h->ranks[s->base.rank].seq, seq, memory_order_release);
	atomic_fetch_add(&h->gen, 1);
	if (atomic_load(&h->waiters))
		shm_futex_wake(&h->gen);
	for (int spin = 0; spin < SHM_SPINS; spin++) {
		if (shm_all_arrived(s, seq))
			return 0;
		shm_cpu_relax();
	}
	for (;;) {
		uint32_t g = atomic_load(&h->gen);
		int live = time_now_ms() >= next_live;
		int missing = shm_first_missing(s, seq);

		progress_waiting(missing);
		if (missing < 0)
			return 0;
		rc = shm_check(s, seq, deadline, kind, live);
		if (rc < 0) {
			shm_mark_aborted(s);
			return rc;
		}
		if (live)
			next_live = time_now_ms() + SHM_LIVENESS_MS;
		atomic_fetch_add(&h->waiters, 1);
		if (!shm_all_arrived(s, seq))
			shm_futex_wait(&h->gen, g, 5 * 1000 * 1000);
		atomic_fetch_sub(&h->waiters, 1);
	}
}
