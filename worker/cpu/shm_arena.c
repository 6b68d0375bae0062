/*
 * shm_arena.c - each rank's arena for the shared-memory transport: a
 * shared-memory file that every rank of the node maps, from which
 * ddp_mem_alloc hands out blocks (first fit). An all-reduce whose buffers
 * all live in arenas reads the peers' buffers and writes the results into
 * them directly (cpu_shm.c). Pages are reserved with posix_fallocate when a
 * block is allocated, so a full /dev/shm makes the allocation fall back to
 * ordinary memory instead of a SIGBUS later. Any failure here only disables
 * the arena.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "shm.h"
#include "timeutil.h"

#define ARENA_DEFAULT (1ull << 30)
#define ARENA_ALIGN   4096u

void shm_arena_create(struct cpu_shm *s)
{
	struct shm_arena *a = &s->arena;
	const char *env = getenv("DDP_SHM_ARENA_BYTES");
	unsigned seed = (unsigned)(time_now_ns() ^ (uint64_t)getpid() << 20);
	char base[48], *own;

	a->fd = -1;
	pthread_mutex_init(&a->lock, NULL);
	a->base = calloc((size_t)s->base.world_size, sizeof(*a->base));
	a->size = env && *env ? strtoull(env, NULL, 0) : ARENA_DEFAULT;
	a->size &= ~(size_t)(ARENA_ALIGN - 1);
	if (!a->base || a->size == 0)
		goto off;
	shm_name_base(base, sizeof(base));
	snprintf(a->name, sizeof(a->name), "%s-a%08x", base, rand_r(&seed));
	a->fd = shm_open(a->name, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (a->fd < 0 || ftruncate(a->fd, (off_t)a->size) < 0)
		goto off;
	own = mmap(NULL, a->size, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, 0);
	if (own == MAP_FAILED)
		goto off;
	a->base[s->base.rank] = own;
	return;
off:
	if (a->name[0])
		shm_unlink(a->name);
	if (a->fd >= 0)
		close(a->fd);
	a->fd = -1;
	a->name[0] = '\0';
	a->size = 0;
}

void shm_arena_adopt(struct cpu_shm *s, struct cpu_shm *old)
{
	struct shm_arena *a = &s->arena, *o = &old->arena;
	char *own = o->base ? o->base[old->base.rank] : NULL;

	if (!own || o->size == 0) {
		shm_arena_create(s);
		return;
	}
	pthread_mutex_init(&a->lock, NULL);
	a->base = calloc((size_t)s->base.world_size, sizeof(*a->base));
	if (!a->base) {
		a->fd = -1;
		return; /* size 0: no arena; old's close() frees it all */
	}
	/* The mapping, the file and the blocks move; old's close() then
	 * releases only its mappings of the peers' arenas. */
	pthread_mutex_lock(&o->lock);
	a->size = o->size;
	a->fd = o->fd;
	a->base[s->base.rank] = own;
	a->blocks = o->blocks;
	a->nblocks = o->nblocks;
	a->cap = o->cap;
	memcpy(a->name, o->name, sizeof(a->name));
	o->fd = -1;
	o->base[old->base.rank] = NULL;
	o->blocks = NULL;
	o->nblocks = o->cap = 0;
	o->name[0] = '\0';
	pthread_mutex_unlock(&o->lock);
}

void shm_arena_share_name(const struct cpu_shm *s, char *buf, size_t len)
{
	const struct shm_arena *a = &s->arena;

	if (a->name[0])
		snprintf(buf, len, "%s", a->name);
	else if (a->size && a->fd >= 0)
		snprintf(buf, len, "/proc/%d/fd/%d", (int)getpid(), a->fd);
	else
		snprintf(buf, len, "-");
}

/* A peer's arena: a /dev/shm name, or the /proc path of the open file of a
 * rank whose name was unlinked in an earlier round (same user: allowed). */
static int arena_open(const char *name)
{
	if (strncmp(name, "/proc/", 6) == 0)
		return open(name, O_RDWR | O_CLOEXEC);
	return shm_open(name, O_RDWR, 0600);
}

void shm_arena_attach(struct cpu_shm *s, char *const *names)
{
	struct shm_arena *a = &s->arena;
	int mapped = 0;

	for (int r = 0; a->size && r < s->base.world_size; r++) {
		int fd;
		void *m;

		if (r == s->base.rank) {
			mapped++;
			continue;
		}
		if (strcmp(names[r], "-") == 0)
			continue;
		fd = arena_open(names[r]);
		if (fd < 0)
			continue;
		m = mmap(NULL, a->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		close(fd);
		if (m != MAP_FAILED) {
			a->base[r] = m;
			mapped++;
		}
	}
	a->usable = a->size && mapped == s->base.world_size;
}

void shm_arena_release(struct cpu_shm *s)
{
	struct shm_arena *a = &s->arena;

	for (int r = 0; a->base && r < s->base.world_size; r++)
		if (a->base[r])
			munmap(a->base[r], a->size);
	if (a->name[0])
		shm_unlink(a->name);
	if (a->fd >= 0)
		close(a->fd);
	free(a->base);
	free(a->blocks);
	pthread_mutex_destroy(&a->lock);
}

/* First fit in the block list (sorted by offset; gaps are free space). */
static int arena_place(struct shm_arena *a, size_t len, size_t *off, size_t *at)
{
	size_t cur = 0;

	for (size_t i = 0; i <= a->nblocks; i++) {
		size_t end = i < a->nblocks ? a->blocks[i].off : a->size;

		if (end - cur >= len) {
			*off = cur;
			*at = i;
			return 0;
		}
		if (i < a->nblocks)
			cur = a->blocks[i].off + a->blocks[i].len;
	}
	return -ENOMEM;
}

int shm_arena_alloc(struct cpu_shm *s, size_t bytes, void **out)
{
	struct shm_arena *a = &s->arena;
	size_t len = (bytes + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1), off, at;
	int rc = -ENOMEM;

	if (!a->usable || len == 0)
		return -ENOMEM;
	pthread_mutex_lock(&a->lock);
	if (a->nblocks == a->cap) {
		size_t cap = a->cap ? 2 * a->cap : 16;
		struct shm_block *nb = realloc(a->blocks, cap * sizeof(*nb));

		if (!nb)
			goto out;
		a->blocks = nb;
		a->cap = cap;
	}
	if (arena_place(a, len, &off, &at) < 0 || posix_fallocate(a->fd, (off_t)off, (off_t)len))
		goto out;
	memmove(&a->blocks[at + 1], &a->blocks[at], (a->nblocks - at) * sizeof(*a->blocks));
	a->blocks[at] = (struct shm_block){off, len, 1};
	a->nblocks++;
	*out = a->base[s->base.rank] + off;
	rc = 0;
out:
	pthread_mutex_unlock(&a->lock);
	return rc;
}

int shm_arena_free(struct cpu_shm *s, void *ptr)
{
	struct shm_arena *a = &s->arena;
	char *own = a->base ? a->base[s->base.rank] : NULL;

	if (!own || (char *)ptr < own || (char *)ptr >= own + a->size)
		return 0;
	pthread_mutex_lock(&a->lock);
	for (size_t i = 0; i < a->nblocks; i++) {
		if (own + a->blocks[i].off != (char *)ptr)
			continue;
		/* Give the pages back to /dev/shm, then forget the block. */
		fallocate(a->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			  (off_t)a->blocks[i].off, (off_t)a->blocks[i].len);
		memmove(&a->blocks[i], &a->blocks[i + 1],
			(a->nblocks - i - 1) * sizeof(*a->blocks));
		a->nblocks--;
		break;
	}
	pthread_mutex_unlock(&a->lock);
	return 1;
}

uint64_t shm_arena_offset(struct cpu_shm *s, const void *ptr, size_t bytes)
{
	struct shm_arena *a = &s->arena;
	const char *own = a->usable ? a->base[s->base.rank] : NULL;
	const char *p = ptr;
	uint64_t off = UINT64_MAX;

	if (!own || p < own || p + bytes > own + a->size)
		return UINT64_MAX;
	pthread_mutex_lock(&a->lock);
	for (size_t i = 0; i < a->nblocks; i++) {
		const struct shm_block *b = &a->blocks[i];

		if (p >= own + b->off && p + bytes <= own + b->off + b->len) {
			off = (uint64_t)(p - own);
			break;
		}
	}
	pthread_mutex_unlock(&a->lock);
	return off;
}
