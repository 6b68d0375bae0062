/*
 * cpu_shm.c - the CPU backend's shared-memory transport (every rank on one
 * node). One segment holds a header (per-rank barrier counters and pids),
 * two sets of slots (one slot per rank each) and two output buffers. An
 * all-reduce goes over chunks of at most one slot: each rank copies its
 * chunk into its slot; barrier; rank r reduces slice r of the chunk over all
 * ranks in rank order (a fixed order: every rank gets the same bits, run
 * after run) into the output buffer; everyone copies the output out after
 * the next chunk's barrier. Slots and outputs alternate between chunks, so
 * one barrier per chunk suffices.
 *
 * Clean-up: the segment's name is unlinked by every rank as soon as all
 * ranks have mapped it (and on any failure before that), so nothing is left
 * in /dev/shm when a rank dies later. A dead rank is noticed while waiting
 * (its pidfd turns readable, zombies included) and a rank that fails marks
 * the segment aborted, so the others fail at once instead of at the
 * deadline.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cpu_shm.h"
#include "reduce.h"
#include "shm.h"
#include "timeutil.h"
#include "transport.h"

/* Slot of rank r in slot set t (0 or 1; all-gather uses set 0). */
static char *shm_slot2(struct cpu_shm *s, int t, int r)
{
	return s->slots + ((size_t)t * (size_t)s->base.world_size + (size_t)r) * s->slot;
}

static char *shm_slot(struct cpu_shm *s, int r)
{
	return shm_slot2(s, 0, r);
}

/* One chunk of an all-reduce: elements [off, off + n) of buf. */
struct shm_chunk {
	char *mine;
	size_t n, lo, hi;
};

static struct shm_chunk shm_chunk_at(struct cpu_shm *s, void *buf, size_t count, size_t per,
				     size_t k, size_t esz)
{
	size_t off = k * per, n = count - off < per ? count - off : per;
	size_t w = (size_t)s->base.world_size, me = (size_t)s->base.rank;

	return (struct shm_chunk){(char *)buf + off * esz, n, n * me / w, n * (me + 1) / w};
}

/* The others need every slice of the chunk but the one this rank reduces
 * itself, which it reads from its own buffer. */
static void shm_copy_in(struct cpu_shm *s, const struct shm_chunk *c, size_t esz)
{
	char *slot = shm_slot2(s, s->toggle, s->base.rank);

	memcpy(slot, c->mine, c->lo * esz);
	memcpy(slot + c->hi * esz, c->mine + c->hi * esz, (c->n - c->hi) * esz);
}

/* Reduces this rank's slice over all ranks, in rank order, into out. */
static void shm_reduce_slice(struct cpu_shm *s, const struct shm_chunk *c, size_t esz,
			     enum ddp_dtype dtype, enum ddp_op op)
{
	int w = s->base.world_size;
	char *out = s->out[s->toggle] + c->lo * esz;
	const void *srcs[w];

	for (int r = 0; r < w; r++)
		srcs[r] = (r == s->base.rank ? c->mine : shm_slot2(s, s->toggle, r)) + c->lo * esz;
	cpu_reduce_many(out, srcs, (size_t)w, c->hi - c->lo, dtype, op);
	if (op == DDP_AVG)
		cpu_divide(out, c->hi - c->lo, dtype, w);
}

/*
 * Pipelined over chunks with double-buffered slots and outputs, one barrier
 * per chunk: copy chunk k in; barrier (chunk k's inputs are complete and
 * chunk k-1 is reduced everywhere); copy chunk k-1 out; reduce chunk k. A
 * buffer set is written again only two barriers after its last readers
 * finished with it.
 */
/*
 * In place, when every rank's buffer is in its arena (all mapped here):
 * rank r reduces slice r, piece by piece, reading every rank's buffer, and
 * writes the result into every rank's buffer; a barrier ends it. Reads n
 * and writes n bytes per rank, where the copying path moves about 4n.
 */
static int shm_allreduce_direct(struct cpu_shm *s, const uint64_t *offs, size_t count,
				enum ddp_dtype dtype, enum ddp_op op)
{
	int w = s->base.world_size, me = s->base.rank;
	size_t esz = ddp_dtype_size(dtype), piece = SHM_PIECE / esz;
	size_t lo = count * (size_t)me / (size_t)w, hi = count * (size_t)(me + 1) / (size_t)w;
	const void *srcs[w];

	for (size_t at = lo; at < hi; at += piece) {
		size_t m = hi - at < piece ? hi - at : piece;

		for (int r = 0; r < w; r++)
			srcs[r] = s->arena.base[r] + offs[r] + at * esz;
		cpu_reduce_many(s->tmp, srcs, (size_t)w, m, dtype, op);
		if (op == DDP_AVG)
			cpu_divide(s->tmp, m, dtype, w);
		for (int r = 0; r < w; r++)
			memcpy(s->arena.base[r] + offs[r] + at * esz, s->tmp, m * esz);
	}
	return shm_barrier(s, COMM_KIND_ALLREDUCE);
}

/* For large all-reduces: publishes where this rank's buffer is in its
 * arena; after a barrier every rank sees the same records, so all take the
 * in-place path or none does. 1: done in place, 0: use the copying path. */
static int shm_try_direct(struct cpu_shm *s, void *buf, size_t count, enum ddp_dtype dtype,
			  enum ddp_op op)
{
	size_t bytes = count * ddp_dtype_size(dtype);
	int w = s->base.world_size;
	uint64_t offs[w];
	int rc;

	atomic_store_explicit(&s->h->ranks[s->base.rank].op_off, shm_arena_offset(s, buf, bytes),
			      memory_order_relaxed);
	rc = shm_barrier(s, COMM_KIND_ALLREDUCE);
	if (rc < 0)
		return rc;
	for (int r = 0; r < w; r++) {
		offs[r] = atomic_load_explicit(&s->h->ranks[r].op_off, memory_order_relaxed);
		if (offs[r] == UINT64_MAX || offs[r] + bytes > s->arena.size)
			return 0;
	}
	rc = shm_allreduce_direct(s, offs, count, dtype, op);
	return rc < 0 ? rc : 1;
}

static int shm_allreduce(struct ddp_backend *b, void *buf, size_t count, enum ddp_dtype dtype,
			 enum ddp_op op)
{
	struct cpu_shm *s = (struct cpu_shm *)b;
	size_t esz = ddp_dtype_size(dtype), per = s->slot / esz;
	size_t nchunks = (count + per - 1) / per;
	struct shm_chunk cur, prev = {0};
	/* A result much larger than the caches goes back with streaming
	 * stores; a smaller one stays cached for the caller. */
	int stream = count * esz >= SHM_STREAM_BYTES;
	int rc;

	if (count * esz >= SHM_DIRECT_MIN_BYTES) {
		rc = shm_try_direct(s, buf, count, dtype, op);
		if (rc != 0)
			return rc < 0 ? rc : 0;
	}

	for (size_t k = 0; k <= nchunks; k++) {
		if (k < nchunks) {
			cur = shm_chunk_at(s, buf, count, per, k, esz);
			shm_copy_in(s, &cur, esz);
		}
		rc = shm_barrier(s, COMM_KIND_ALLREDUCE);
		if (rc < 0)
			return rc;
		if (k > 0 && stream)
			cpu_copy_stream(prev.mine, s->out[s->toggle ^ 1], prev.n * esz);
		else if (k > 0)
			memcpy(prev.mine, s->out[s->toggle ^ 1], prev.n * esz);
		if (k < nchunks) {
			shm_reduce_slice(s, &cur, esz, dtype, op);
			prev = cur;
			s->toggle ^= 1;
		}
	}
	return 0;
}

static int shm_broadcast(struct ddp_backend *b, void *buf, size_t count, enum ddp_dtype dtype,
			 int root)
{
	struct cpu_shm *s = (struct cpu_shm *)b;
	size_t esz = ddp_dtype_size(dtype), per = s->slot / esz;
	int rc;

	for (size_t off = 0; off < count; off += per) {
		size_t n = count - off < per ? count - off : per;
		char *out = s->out[s->toggle];

		if (b->rank == root)
			memcpy(out, (char *)buf + off * esz, n * esz);
		rc = shm_barrier(s, COMM_KIND_BROADCAST);
		if (rc < 0)
			return rc;
		if (b->rank != root)
			memcpy((char *)buf + off * esz, out, n * esz);
		s->toggle ^= 1;
	}
	return 0;
}

static int shm_allgather(struct ddp_backend *b, const void *send, void *recv, size_t count,
			 enum ddp_dtype dtype)
{
	struct cpu_shm *s = (struct cpu_shm *)b;
	size_t esz = ddp_dtype_size(dtype), per = s->slot / esz;
	int rc;

	for (size_t off = 0; off < count; off += per) {
		size_t n = count - off < per ? count - off : per;

		memcpy(shm_slot(s, b->rank), (const char *)send + off * esz, n * esz);
		rc = shm_barrier(s, COMM_KIND_ALLGATHER);
		if (rc < 0)
			return rc;
		for (int r = 0; r < b->world_size; r++)
			memcpy((char *)recv + ((size_t)r * count + off) * esz, shm_slot(s, r),
			       n * esz);
		rc = shm_barrier(s, COMM_KIND_ALLGATHER);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int shm_barrier_op(struct ddp_backend *b)
{
	return shm_barrier((struct cpu_shm *)b, COMM_KIND_BARRIER);
}

static void shm_abort(struct ddp_backend *b)
{
	shm_mark_aborted((struct cpu_shm *)b);
}

static void shm_close(struct ddp_backend *b)
{
	struct cpu_shm *s = (struct cpu_shm *)b;

	if (s->h)
		munmap(s->h, s->map_len);
	shm_arena_release(s);
	free(s->tmp);
	for (int r = 0; s->pidfds && r < b->world_size; r++)
		if (s->pidfds[r] >= 0)
			close(s->pidfds[r]);
	free(s->pidfds);
	free(s);
}

/* pidfds of the peers (read from the segment after all have mapped it). */
static void shm_open_pidfds(struct cpu_shm *s)
{
	s->pidfds = malloc((size_t)s->base.world_size * sizeof(*s->pidfds));
	for (int r = 0; s->pidfds && r < s->base.world_size; r++) {
		s->pidfds[r] = -1;
		if (r != s->base.rank)
			s->pidfds[r] = (int)syscall(SYS_pidfd_open, s->h->ranks[r].pid, 0);
	}
}

/* Arena memory when there is room (all-reduces on it run in place), else
 * ordinary memory. */
static int shm_alloc(struct ddp_backend *b, size_t bytes, void **out)
{
	if (shm_arena_alloc((struct cpu_shm *)b, bytes, out) == 0)
		return 0;
	return cpu_alloc(b, bytes, out);
}

static void shm_free_mem(struct ddp_backend *b, void *ptr)
{
	if (ptr && !shm_arena_free((struct cpu_shm *)b, ptr))
		cpu_free_mem(b, ptr);
}

static const struct ddp_backend_ops shm_ops = {
    .name = "cpu-shm",
    .device_memory = 0,
    .allreduce = shm_allreduce,
    .broadcast = shm_broadcast,
    .allgather = shm_allgather,
    .barrier = shm_barrier_op,
    .synchronize = cpu_synchronize,
    .alloc = shm_alloc,
    .free_mem = shm_free_mem,
    .copy = cpu_copy,
    .abort = shm_abort,
    .close = shm_close,
};

/* Slot size: DDP_SHM_CHUNK_BYTES, else 4 MiB while the segment stays
 * within SHM_BUDGET (small /dev/shm in containers), else smaller. */
static size_t shm_slot_bytes(int world, const char *env)
{
	size_t slot = SHM_DEFAULT_SLOT;

	if (env && atol(env) >= 4096)
		return ((size_t)atol(env) + 63) & ~(size_t)63;
	if ((size_t)(2 * world + 2) * slot > SHM_BUDGET)
		slot = (SHM_BUDGET / (size_t)(2 * world + 2)) & ~(size_t)63;
	return slot < SHM_MIN_SLOT ? SHM_MIN_SLOT : slot;
}

/* Rank 0 creates and initialises the segment and publishes its name. */
static int shm_create(struct cpu_shm *s, const struct ddp_backend_params *p, char *name,
		      size_t namelen, int *fd)
{
	unsigned seed = (unsigned)(time_now_ns() ^ (uint64_t)getpid() << 16);
	char key[320], base[48];
	int rc;

	shm_name_base(base, sizeof(base));
	snprintf(name, namelen, "%s-%08x", base, rand_r(&seed));
	*fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (*fd < 0)
		return -errno;
	if (ftruncate(*fd, (off_t)s->map_len) < 0)
		return -errno;
	/* Reserve the pages now: a full /dev/shm is an error here, not a
	 * SIGBUS in the middle of a collective. */
	rc = posix_fallocate(*fd, 0, (off_t)s->map_len);
	if (rc)
		return -rc;
	s->h = mmap(NULL, s->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
	if (s->h == MAP_FAILED) {
		s->h = NULL;
		return -errno;
	}
	s->h->world = (uint32_t)p->world_size;
	s->h->slot_bytes = (uint32_t)s->slot;
	atomic_store(&s->h->aborted_by, -1);
	atomic_store(&s->h->dead_rank, -1);
	atomic_store_explicit((_Atomic uint64_t *)&s->h->magic, SHM_MAGIC, memory_order_release);
	snprintf(key, sizeof(key), "%s/shm_name", p->prefix);
	rc = kv_set(p->kv, key, name, strlen(name));
	return rc;
}

static int shm_attach(struct cpu_shm *s, const struct ddp_backend_params *p, char *name,
		      size_t namelen, int *fd, char *err, size_t errlen)
{
	char key[320];
	void *val = NULL;
	size_t len;
	int rc;

	snprintf(key, sizeof(key), "%s/shm_name", p->prefix);
	rc = kv_get(p->kv, key, p->timeout_ms, &val, &len);
	if (rc < 0) {
		snprintf(err, errlen, "timed out waiting for rank 0 to create the shared segment");
		return rc;
	}
	snprintf(name, namelen, "%s", (char *)val);
	free(val);
	*fd = shm_open(name, O_RDWR, 0600);
	if (*fd < 0)
		return -errno;
	s->h = mmap(NULL, s->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
	if (s->h == MAP_FAILED) {
		s->h = NULL;
		return -errno;
	}
	if (s->h->magic != SHM_MAGIC || s->h->world != (uint32_t)p->world_size ||
	    s->h->slot_bytes != s->slot) {
		snprintf(err, errlen,
			 "shared segment '%s' does not match this rank's world size or "
			 "DDP_SHM_CHUNK_BYTES; start every rank with the same settings",
			 name);
		return -EINVAL;
	}
	return 0;
}

/* After the segment is mapped: every rank learns the others' arena names
 * (and that they mapped the segment, whose name is then unlinked), maps
 * their arenas, and once all have done so unlinks its own arena's name. */
static int shm_share_arenas(struct cpu_shm *s, const struct ddp_backend_params *p,
			    const char *segname, char *err, size_t errlen)
{
	int w = p->world_size, rc;
	void **vals = calloc((size_t)w, sizeof(*vals));
	size_t *lens = calloc((size_t)w, sizeof(*lens));
	char **names = calloc((size_t)w, sizeof(*names));
	char key[320], mine[96];
	size_t mine_len;

	if (!vals || !lens || !names) {
		rc = -ENOMEM;
		goto out;
	}
	snprintf(key, sizeof(key), "%s/shm_mapped", p->prefix);
	mine_len = (size_t)snprintf(mine, sizeof(mine), "%d ", (int)getpid());
	shm_arena_share_name(s, mine + mine_len, sizeof(mine) - mine_len);
	rc = kv_exchange(p->kv, key, p->rank, w, mine, strlen(mine), p->timeout_ms,
			 "shared-memory set-up", vals, lens, err, errlen);
	if (rc < 0)
		goto out;
	/* Every rank has mapped the segment: its name is no longer needed. */
	shm_unlink(segname);
	for (int r = 0; r < w; r++) {
		char *sp = strchr((char *)vals[r], ' ');

		names[r] = sp ? sp + 1 : "-";
	}
	shm_arena_attach(s, names);
	snprintf(key, sizeof(key), "%s/arena_mapped", p->prefix);
	rc = kv_exchange(p->kv, key, p->rank, w, "1", 1, p->timeout_ms, "shared-memory set-up",
			 NULL, NULL, err, errlen);
	if (rc == 0 && s->arena.name[0]) {
		shm_unlink(s->arena.name);
		s->arena.name[0] = '\0';
	}
	/* A rank died before everyone mapped the arenas: nobody will unlink
	 * its arena's name but us (the set-up fails anyway). */
	for (int r = 0; rc < 0 && r < w; r++)
		if (strcmp(names[r], "-") != 0)
			shm_unlink(names[r]);
	for (int r = 0; r < w; r++)
		free(vals[r]);
out:
	free(vals);
	free(lens);
	free(names);
	return rc;
}

int cpu_shm_new(const struct ddp_backend_params *p, struct ddp_backend **out, char *errbuf,
		size_t errbuf_len)
{
	struct cpu_shm *s = calloc(1, sizeof(*s));
	const char *env = getenv("DDP_SHM_CHUNK_BYTES");
	char name[64] = "", err[512] = "";
	int fd = -1, rc;

	*out = NULL;
	if (!s)
		return -ENOMEM;
	s->base.ops = &shm_ops;
	s->base.rank = p->rank;
	s->base.world_size = p->world_size;
	s->base.device = -1;
	s->timeout_ms = p->timeout_ms;
	s->name_base = backend_rank_name(p, 0);
	s->name_stride = backend_rank_name(p, 1) - s->name_base;
	s->slot = shm_slot_bytes(p->world_size, env);
	s->arena.fd = -1;
	s->tmp = malloc(SHM_PIECE);
	if (!s->tmp) {
		free(s);
		return -ENOMEM;
	}
	s->map_len = shm_header_bytes(p->world_size) + (2 * (size_t)p->world_size + 2) * s->slot;
	if (p->rank == 0)
		rc = shm_create(s, p, name, sizeof(name), &fd);
	else
		rc = shm_attach(s, p, name, sizeof(name), &fd, err, sizeof(err));
	if (rc < 0)
		goto fail;
	s->slots = (char *)s->h + shm_header_bytes(p->world_size);
	s->out[0] = s->slots + 2 * (size_t)p->world_size * s->slot;
	s->out[1] = s->out[0] + s->slot;
	s->h->ranks[p->rank].pid = (int32_t)getpid();
	if (p->prev && p->prev->ops == &shm_ops)
		shm_arena_adopt(s, (struct cpu_shm *)p->prev);
	else
		shm_arena_create(s);
	rc = shm_share_arenas(s, p, name, err, sizeof(err));
	if (rc < 0)
		goto fail;
	shm_open_pidfds(s);
	close(fd);
	*out = &s->base;
	return 0;
fail:
	if (!err[0] && rc == -ENOSPC)
		snprintf(err, sizeof(err),
			 "no room for the %zu MiB shared segment in /dev/shm; enlarge it, lower "
			 "DDP_SHM_CHUNK_BYTES or use DDP_CPU_TRANSPORT=ring",
			 s->map_len >> 20);
	else if (!err[0])
		snprintf(err, sizeof(err), "shared segment '%s': %s", name, strerror(-rc));
	snprintf(errbuf, errbuf_len, "cpu-shm: %s", err);
	if (name[0])
		shm_unlink(name);
	if (fd >= 0)
		close(fd);
	shm_close(&s->base);
	return rc;
}
