/*
 * progress_writer.c - the writer of the process's progress page
 * (progress_writer.h): a shared mapping of DDP_PROGRESS_FILE, written under
 * the page's sequence lock by whichever of the process's threads reports,
 * one at a time (a spin lock: the holders only store a few fields; a
 * waiter yields after PG_SPINS spins).
 *
 * After fork() the child writes nothing (pthread_atfork, progress_child):
 * the page is its parent's (MAP_SHARED, the parent's pid on it), and the
 * lock may have been held by a parent's thread that the child lacks.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddp.h"
#include "log.h"
#include "progress_writer.h"
#include "timeutil.h"

#include <pthread.h>
#include <sched.h>

/* ddp.h came first: its copy of the phases is the one defined here
 * (progress.h's: launcher/agent/hang_deadline.c). */
_Static_assert(DDP_PHASE_COUNT == DDP_PROGRESS_PHASES &&
		   DDP_PHASE_SHUTDOWN == DDP_PROGRESS_PHASES - 1,
	       "worker/ddp.h's phases and common/progress.h's DDP_PROGRESS_PHASES disagree");

/* Spins before the writers' lock yields the CPU: a holder preempted on a
 * busy machine (more threads than cores) would otherwise cost the waiter
 * its whole time slice. */
#define PG_SPINS 100

static struct {
	struct ddp_progress *page; /* NULL: nothing is written */
	atomic_flag lock;
	bool opened;   /* progress_open ran (one thread: ddp_init's) */
	uint32_t base; /* the base phase */
	bool inside;   /* between progress_enter and progress_leave */
} pg = {.lock = ATOMIC_FLAG_INIT};

static inline void pg_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* Takes the writers' lock and opens the page's sequence lock: the fields
 * may be stored until pg_end. */
static struct ddp_progress *pg_begin(void)
{
	struct ddp_progress *p = pg.page;

	for (int spins = 0; atomic_flag_test_and_set_explicit(&pg.lock, memory_order_acquire);)
		if (++spins < PG_SPINS) {
			pg_relax();
		} else {
			spins = 0;
			sched_yield();
		}
	ddp_progress_write_begin(p);
	return p;
}

static void pg_end(struct ddp_progress *p, uint64_t now)
{
	/* Atomic: progress_waiting reads it without the lock. */
	__atomic_store_n(&p->written_ns, now, __ATOMIC_RELAXED);
	ddp_progress_write_end(p);
	atomic_flag_clear_explicit(&pg.lock, memory_order_release);
}

/* The page's phase follows the base phase, but COLLECTIVE while inside a
 * collective entered during COMPUTE. */
static void pg_set_phase(struct ddp_progress *p, uint32_t phase, uint64_t now)
{
	if (p->phase != phase) {
		p->phase = phase;
		p->phase_ns = now;
	}
}

static uint32_t pg_shown(void)
{
	return pg.inside && pg.base == DDP_PHASE_COMPUTE ? DDP_PHASE_COLLECTIVE : pg.base;
}

/* Opens the name as a path, else (ENOENT, a name with no other slash) as a
 * POSIX shared-memory object. */
static int pg_open_fd(const char *name)
{
	int fd = open(name, O_RDWR | O_CLOEXEC);

	if (fd < 0 && errno == ENOENT && name[0] == '/' && !strchr(name + 1, '/'))
		fd = shm_open(name, O_RDWR, 0);
	return fd < 0 ? -errno : fd;
}

static struct ddp_progress *pg_map(const char *name)
{
	struct stat st;
	void *m;
	int fd = pg_open_fd(name);

	if (fd < 0) {
		log_debug("progress page '%s': cannot open it: %s", name, strerror(-fd));
		return NULL;
	}
	if (fstat(fd, &st) < 0 || st.st_size < DDP_PROGRESS_SIZE) {
		log_debug("progress page '%s': not a file of %d bytes", name, DDP_PROGRESS_SIZE);
		close(fd);
		return NULL;
	}
	m = mmap(NULL, DDP_PROGRESS_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED) {
		log_debug("progress page '%s': cannot map it: %s", name, strerror(errno));
		return NULL;
	}
	return m;
}

/* The first write: the identity, then magic and version last. A page left
 * odd by an earlier writer that died mid-write is made even first. */
static void pg_first_write(struct ddp_progress *p)
{
	uint64_t now = time_now_ns();

	if (__atomic_load_n(&p->gen, __ATOMIC_RELAXED) & 1)
		__atomic_store_n(&p->gen, p->gen + 1, __ATOMIC_RELEASE);
	ddp_progress_write_begin(p);
	p->pid = (int32_t)getpid();
	p->round = p->rank = p->world = -1;
	p->phase = DDP_PHASE_NONE;
	p->op = DDP_OP_NONE;
	p->seq = p->bytes = 0;
	p->bucket = p->waiting_on = -1;
	p->entered_ns = p->left_ns = 0;
	p->phase_ns = now;
	p->step = p->step_ns = p->compute_ns = p->wait_ns = 0;
	p->shards = 0;
	p->steps_total = p->step_ns_sum = 0;
	p->written_ns = now;
	p->magic = DDP_PROGRESS_MAGIC;
	p->version = DDP_PROGRESS_VERSION;
	ddp_progress_write_end(p);
}

/* A forked child (a data loader): the parent's page is not its own. */
static void progress_child(void)
{
	pg.page = NULL;
	atomic_flag_clear(&pg.lock);
}

void progress_open(void)
{
	const char *name;

	if (pg.opened)
		return;
	pg.opened = true;
	pthread_atfork(NULL, NULL, progress_child);
	name = getenv(DDP_PROGRESS_ENV);
	if (!name || !name[0])
		return;
	pg.page = pg_map(name);
	unsetenv(DDP_PROGRESS_ENV);
	if (pg.page)
		pg_first_write(pg.page);
}

bool progress_on(void)
{
	return pg.page != NULL;
}

void progress_round(int round, int rank, int world)
{
	struct ddp_progress *p;
	uint64_t now;

	if (!pg.page)
		return;
	now = time_now_ns();
	p = pg_begin();
	p->round = round;
	p->rank = rank;
	p->world = world;
	p->op = DDP_OP_NONE;
	p->seq = p->bytes = 0;
	p->bucket = p->waiting_on = -1;
	p->entered_ns = p->left_ns = 0;
	pg.inside = false;
	pg.base = DDP_PHASE_COMPUTE;
	pg_set_phase(p, pg_shown(), now);
	pg_end(p, now);
}

void progress_phase(enum ddp_progress_phase phase)
{
	struct ddp_progress *p;
	uint64_t now;

	if (!pg.page)
		return;
	now = time_now_ns();
	p = pg_begin();
	pg.base = phase;
	pg_set_phase(p, pg_shown(), now);
	pg_end(p, now);
}

void progress_enter(uint64_t seq, enum ddp_progress_op op, uint64_t bytes, int bucket)
{
	struct ddp_progress *p;
	uint64_t now;

	if (!pg.page)
		return;
	now = time_now_ns();
	p = pg_begin();
	p->op = op;
	p->seq = seq;
	p->bytes = bytes;
	p->bucket = bucket;
	p->waiting_on = -1;
	p->entered_ns = now;
	pg.inside = true;
	pg_set_phase(p, pg_shown(), now);
	pg_end(p, now);
}

void progress_leave(void)
{
	struct ddp_progress *p;
	uint64_t now;

	if (!pg.page)
		return;
	now = time_now_ns();
	p = pg_begin();
	p->left_ns = now;
	p->waiting_on = -1;
	pg.inside = false;
	pg_set_phase(p, pg_shown(), now);
	pg_end(p, now);
}

void progress_waiting(int rank)
{
	struct ddp_progress *p = pg.page;
	uint64_t now;

	if (!p)
		return;
	/* Read without the lock: only the communication thread, the caller,
	 * writes waiting_on; a stale written_ns only beats early. */
	now = time_now_ns();
	if (__atomic_load_n(&p->waiting_on, __ATOMIC_RELAXED) == rank &&
	    now - __atomic_load_n(&p->written_ns, __ATOMIC_RELAXED) < PROGRESS_BEAT_MS * 1000000ull)
		return;
	p = pg_begin();
	p->waiting_on = rank;
	pg_end(p, now);
}

void progress_step(uint64_t step, uint64_t step_ns, uint64_t compute_ns, uint64_t wait_ns,
		   uint32_t shards)
{
	struct ddp_progress *p;
	uint64_t now;

	if (!pg.page)
		return;
	now = time_now_ns();
	p = pg_begin();
	p->step = step;
	p->step_ns = step_ns;
	p->compute_ns = compute_ns;
	p->wait_ns = wait_ns;
	p->shards = shards;
	p->steps_total++;
	p->step_ns_sum += step_ns;
	pg_end(p, now);
}

int ddp_progress_phase(struct ddp_ctx *ctx, enum ddp_progress_phase phase)
{
	(void)ctx;
	if (phase <= DDP_PHASE_NONE || phase >= DDP_PHASE_COUNT || phase == DDP_PHASE_COLLECTIVE)
		return -EINVAL;
	progress_open();
	progress_phase(phase);
	return 0;
}

int ddp_progress_step(struct ddp_ctx *ctx, uint64_t step, uint64_t step_ns, uint64_t compute_ns,
		      uint64_t wait_ns, uint32_t shards)
{
	(void)ctx;
	progress_open();
	progress_step(step, step_ns, compute_ns, wait_ns, shards);
	return 0;
}
