/*
 * progress_check.c - the progress page as libddp writes it (started by
 * run_ranks.py, which hosts the store and forks the ranks; exit 0 when
 * every check of this rank holds).
 *
 * Each rank creates its page (4096 zero bytes, as the agent does) in a
 * directory that every rank of the run names the same way, points
 * DDP_PROGRESS_FILE at it, and reads the pages back through
 * common/progress.h's reader, as the agent does:
 *   - after ddp_init: magic, version, pid, round (attempt + 1), rank,
 *     world, phase COMPUTE, no collective yet (seq 0), and the variable
 *     gone from the environment;
 *   - after an all-reduce, a broadcast, an all-gather and a barrier: seq 4,
 *     op and bytes of each, entered <= left, phase COMPUTE, waiting_on -1;
 *   - a stuck rank (the last one, which enters all-reduce #5 only once it
 *     has seen this): every other rank's page says COLLECTIVE, all-reduce
 *     #5, not left, and waiting_on names a rank, and following waiting_on
 *     from any of them ends at the stuck rank, whose page still says #4,
 *     and each waiting rank's heartbeat (written_ns) advances meanwhile;
 *   - the reducer's bucket all-reduces name their bucket and its bytes;
 *   - ddp_progress_phase (CHECKPOINT kept through a barrier, -EINVAL for
 *     COLLECTIVE and NONE) and ddp_progress_step;
 *   - a forked child's reports leave its parent's page alone;
 *   - ddp_reform: a new round, seq from 0 again; ddp_free: SHUTDOWN.
 * "missing": DDP_PROGRESS_FILE names no file: training goes on, nothing
 * is written anywhere.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ddp.h"
#include "progress.h"

#define NREDUCE 1000

static int rank_, world_;
static char dir_[256];
static const struct ddp_progress *pages_[64];

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "rank %d: check failed at line %d: %s: ", rank_, __LINE__, \
				#cond);                                                            \
			fprintf(stderr, __VA_ARGS__);                                              \
			fprintf(stderr, "\n");                                                     \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void page_path(int r, char *buf, size_t len)
{
	snprintf(buf, len, "%s/rank-%d", dir_, r);
}

/* Creates this rank's page, as the agent would. */
static void page_create(void)
{
	char path[300];
	int fd;

	mkdir(dir_, 0700);
	page_path(rank_, path, sizeof(path));
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0, "cannot create %s: %s", path, strerror(errno));
	CHECK(ftruncate(fd, DDP_PROGRESS_SIZE) == 0, "ftruncate: %s", strerror(errno));
	close(fd);
	setenv(DDP_PROGRESS_ENV, path, 1);
}

/* Rank r's page, mapped read-only (the agent's view); NULL until it exists. */
static const struct ddp_progress *page_of(int r)
{
	char path[300];
	void *m;
	int fd;

	if (pages_[r])
		return pages_[r];
	page_path(r, path, sizeof(path));
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return NULL;
	m = mmap(NULL, DDP_PROGRESS_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return NULL;
	pages_[r] = m;
	return m;
}

static struct ddp_progress read_page(int r)
{
	const struct ddp_progress *p = page_of(r);
	struct ddp_progress out;

	CHECK(p, "rank %d's page cannot be mapped", r);
	CHECK(ddp_progress_read(p, &out), "no consistent copy of rank %d's page (magic %#x)", r,
	      p->magic);
	return out;
}

static void check_idle(int seq, enum ddp_progress_op op, uint64_t bytes)
{
	struct ddp_progress p = read_page(rank_);

	CHECK(p.seq == (uint64_t)seq, "seq %llu, want %d", (unsigned long long)p.seq, seq);
	CHECK(p.op == op, "op %u, want %d", p.op, op);
	CHECK(p.bytes == bytes, "bytes %llu, want %llu", (unsigned long long)p.bytes,
	      (unsigned long long)bytes);
	CHECK(p.phase == DDP_PHASE_COMPUTE, "phase %u after a collective", p.phase);
	CHECK(p.entered_ns > 0 && p.left_ns >= p.entered_ns, "entered %llu left %llu",
	      (unsigned long long)p.entered_ns, (unsigned long long)p.left_ns);
	CHECK(p.waiting_on == -1, "waiting_on %d outside a collective", p.waiting_on);
	CHECK(p.bucket == -1, "bucket %d for a plain collective", p.bucket);
}

/* Every other rank's page says it is in all-reduce #seq, waiting, and the
 * chain of waiting_on from each ends at `stuck`. */
static int others_wait_for(int stuck, uint64_t seq)
{
	struct ddp_progress p[64];

	for (int r = 0; r < world_; r++) {
		if (!page_of(r) || !ddp_progress_read(page_of(r), &p[r]))
			return 0;
		if (r == stuck)
			continue;
		if (p[r].seq != seq || p[r].op != DDP_OP_ALLREDUCE ||
		    p[r].phase != DDP_PHASE_COLLECTIVE || p[r].left_ns >= p[r].entered_ns ||
		    p[r].waiting_on < 0 || p[r].waiting_on >= world_)
			return 0;
	}
	for (int r = 0; r < world_; r++) {
		int at = r, hops = 0;

		while (at != stuck && hops++ < world_)
			at = p[at].waiting_on;
		if (at != stuck)
			return 0;
	}
	return p[stuck].seq == seq - 1 && p[stuck].phase == DDP_PHASE_COMPUTE;
}

/* FNV-1a of the bytes, for run_ranks.py's "digest" line. */
static uint64_t fnv(const void *p, size_t n)
{
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
	return h;
}

/* The ranks that wait keep beating: each one's written_ns advances while
 * it stays in all-reduce #5 (a stopped rank's would not). */
static void check_beats(int stuck)
{
	uint64_t first[64], deadline = now_ns() + 10ull * 1000000000u;

	for (int r = 0; r < world_; r++)
		first[r] = read_page(r).written_ns;
	for (int r = 0; r < world_; r++) {
		struct ddp_progress p;

		if (r == stuck)
			continue;
		do {
			struct timespec ts = {0, 10000000};

			CHECK(now_ns() < deadline, "rank %d's page stopped beating while it waits",
			      r);
			nanosleep(&ts, NULL);
			p = read_page(r);
			CHECK(p.seq == 5 && p.left_ns < p.entered_ns, "rank %d left all-reduce #5",
			      r);
		} while (p.written_ns == first[r]);
	}
}

static void stuck_rank(struct ddp_ctx *ctx, float *buf)
{
	int stuck = world_ - 1;
	uint64_t deadline = now_ns() + 20ull * 1000000000u;

	if (rank_ == stuck) {
		/* The fault: this rank is late. It enters only once the pages
		 * have shown what it is checked for (a bounded wait for a
		 * condition, not a pause). */
		while (!others_wait_for(stuck, 5)) {
			struct timespec ts = {0, 1000000};

			CHECK(now_ns() < deadline, "the others' pages never named rank %d", stuck);
			nanosleep(&ts, NULL);
		}
		printf("rank %d: every other rank waits on me (all-reduce #5)\n", rank_);
		check_beats(stuck);
	}
	CHECK(ddp_allreduce(ctx, buf, NREDUCE, DDP_FLOAT32, DDP_SUM) == 0, "%s", ddp_error(ctx));
	check_idle(5, DDP_OP_ALLREDUCE, NREDUCE * sizeof(float));
	if (rank_ == 0)
		printf("digest %016llx\n", (unsigned long long)fnv(buf, NREDUCE * sizeof(float)));
}

static void check_reducer(struct ddp_ctx *ctx)
{
	float w0[256] = {0}, w1[256] = {0}, g[512];
	struct ddp_param params[2] = {{.name = "a",
				       .dtype = DDP_FLOAT32,
				       .ndim = 1,
				       .shape = {256},
				       .data = w0,
				       .grad = g,
				       .requires_grad = 1},
				      {.name = "b",
				       .dtype = DDP_FLOAT32,
				       .ndim = 1,
				       .shape = {256},
				       .data = w1,
				       .grad = g + 256,
				       .requires_grad = 1}};
	struct ddp_reducer_options o = {.bucket_cap_bytes = 1024, .first_bucket_cap_bytes = 1024};
	struct ddp_reducer *r;
	struct ddp_progress p;

	for (int i = 0; i < 512; i++)
		g[i] = (float)(rank_ + i);
	CHECK(ddp_reducer_new(ctx, params, 2, NULL, 0, &o, &r) == 0, "%s", ddp_error(ctx));
	CHECK(ddp_reducer_num_buckets(r) == 2, "%zu buckets", ddp_reducer_num_buckets(r));
	CHECK(ddp_reducer_prepare(r, 1) == 0, "prepare");
	CHECK(ddp_reducer_grad_ready(r, 1) == 0 && ddp_reducer_grad_ready(r, 0) == 0, "%s",
	      ddp_error(ctx));
	CHECK(ddp_reducer_finish(r) == 0, "%s", ddp_error(ctx));
	p = read_page(rank_);
	CHECK(p.op == DDP_OP_ALLREDUCE && p.bucket == ddp_reducer_bucket_of(r, 0) && p.bucket == 1,
	      "last collective op %u bucket %d, want the all-reduce of bucket 1", p.op, p.bucket);
	CHECK(p.bytes == 1024, "bucket bytes %llu", (unsigned long long)p.bytes);
	ddp_reducer_free(r);
}

static void check_phases(struct ddp_ctx *ctx)
{
	struct ddp_progress p, q;

	CHECK(ddp_progress_phase(ctx, DDP_PHASE_COLLECTIVE) == -EINVAL, "COLLECTIVE accepted");
	CHECK(ddp_progress_phase(ctx, DDP_PHASE_NONE) == -EINVAL, "NONE accepted");
	CHECK(ddp_progress_phase(ctx, DDP_PHASE_COUNT) == -EINVAL, "COUNT accepted");
	CHECK(ddp_progress_phase(ctx, DDP_PHASE_CHECKPOINT) == 0, "CHECKPOINT refused");
	p = read_page(rank_);
	CHECK(ddp_barrier(ctx) == 0, "%s", ddp_error(ctx));
	q = read_page(rank_);
	CHECK(q.phase == DDP_PHASE_CHECKPOINT && q.phase_ns == p.phase_ns,
	      "a barrier in CHECKPOINT changed the phase (%u)", q.phase);
	CHECK(q.op == DDP_OP_BARRIER && q.seq == p.seq + 1, "barrier #%llu op %u",
	      (unsigned long long)q.seq, q.op);
	CHECK(ddp_progress_phase(ctx, DDP_PHASE_COMPUTE) == 0, "COMPUTE refused");
	CHECK(ddp_progress_step(ctx, 7, 7000, 5000, 2000, 3) == 0, "step");
	q = read_page(rank_);
	CHECK(q.phase == DDP_PHASE_COMPUTE && q.phase_ns >= p.phase_ns, "phase %u", q.phase);
	CHECK(q.step == 7 && q.step_ns == 7000 && q.compute_ns == 5000 && q.wait_ns == 2000 &&
		  q.shards == 3,
	      "step fields %llu %llu %llu %llu %u", (unsigned long long)q.step,
	      (unsigned long long)q.step_ns, (unsigned long long)q.compute_ns,
	      (unsigned long long)q.wait_ns, q.shards);
	CHECK(q.written_ns >= p.written_ns && q.gen > p.gen && !(q.gen & 1), "gen %llu -> %llu",
	      (unsigned long long)p.gen, (unsigned long long)q.gen);
}

/* A forked child (a data loader) reports nothing on its parent's page. */
static void check_fork(struct ddp_ctx *ctx)
{
	struct ddp_progress p = read_page(rank_), q;
	int status = 0;
	pid_t pid = fork();

	CHECK(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		ddp_progress_step(ctx, 999, 1, 1, 0, 1);
		ddp_progress_phase(ctx, DDP_PHASE_EVAL);
		_exit(0);
	}
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status), "child");
	q = read_page(rank_);
	CHECK(q.step == p.step && q.phase == p.phase && q.gen == p.gen && q.pid == p.pid,
	      "a forked child wrote its parent's page: step %llu phase %u pid %d",
	      (unsigned long long)q.step, q.phase, (int)q.pid);
}

static void check_reform(struct ddp_ctx *ctx)
{
	struct ddp_options o;
	struct ddp_progress p;
	char err[512];
	float x = 1;
	int attempt = ddp_attempt(ctx);

	ddp_options_init(&o);
	o.attempt = attempt + 1;
	CHECK(ddp_reform(ctx, &o, err, sizeof(err)) == 0, "reform: %s", err);
	p = read_page(rank_);
	CHECK(p.round == attempt + 2 && p.seq == 0 && p.op == DDP_OP_NONE &&
		  p.phase == DDP_PHASE_COMPUTE,
	      "after ddp_reform: round %d seq %llu op %u phase %u", p.round,
	      (unsigned long long)p.seq, p.op, p.phase);
	CHECK(ddp_allreduce(ctx, &x, 1, DDP_FLOAT32, DDP_SUM) == 0, "%s", ddp_error(ctx));
	check_idle(1, DDP_OP_ALLREDUCE, sizeof(float));
	CHECK(x == (float)world_, "all-reduce after ddp_reform: %g", x);
}

static int run(void)
{
	struct ddp_ctx *ctx;
	struct ddp_progress p;
	char err[512];
	float *buf = calloc(NREDUCE * (size_t)world_, sizeof(float));
	int rc;

	for (int i = 0; i < NREDUCE; i++)
		buf[i] = (float)(rank_ * NREDUCE + i);
	page_create();
	rc = ddp_init(NULL, &ctx, err, sizeof(err));
	CHECK(rc == 0, "ddp_init: %s", err);
	CHECK(!getenv(DDP_PROGRESS_ENV), "DDP_PROGRESS_FILE still in the environment");
	p = read_page(rank_);
	CHECK(p.pid == (int32_t)getpid() && p.rank == rank_ && p.world == world_,
	      "pid %d rank %d world %d", p.pid, p.rank, p.world);
	CHECK(p.round == ddp_attempt(ctx) + 1, "round %d, attempt %d", p.round, ddp_attempt(ctx));
	CHECK(p.phase == DDP_PHASE_COMPUTE && p.seq == 0 && p.op == DDP_OP_NONE,
	      "after ddp_init: phase %u seq %llu op %u", p.phase, (unsigned long long)p.seq, p.op);

	CHECK(ddp_allreduce(ctx, buf, NREDUCE, DDP_FLOAT32, DDP_SUM) == 0, "%s", ddp_error(ctx));
	check_idle(1, DDP_OP_ALLREDUCE, NREDUCE * sizeof(float));
	CHECK(ddp_broadcast(ctx, buf, 10, DDP_FLOAT64, 0) == 0, "%s", ddp_error(ctx));
	check_idle(2, DDP_OP_BROADCAST, 10 * sizeof(double));
	CHECK(ddp_allgather(ctx, buf, buf + NREDUCE / 2, 3, DDP_FLOAT32) == 0, "%s",
	      ddp_error(ctx));
	check_idle(3, DDP_OP_ALLGATHER, 3 * sizeof(float));
	CHECK(ddp_barrier(ctx) == 0, "%s", ddp_error(ctx));
	check_idle(4, DDP_OP_BARRIER, 0);

	stuck_rank(ctx, buf);
	check_reducer(ctx);
	check_phases(ctx);
	check_fork(ctx);
	check_reform(ctx);

	ddp_free(ctx);
	p = read_page(rank_);
	CHECK(p.phase == DDP_PHASE_SHUTDOWN, "after ddp_free: phase %u", p.phase);
	free(buf);
	printf("rank %d: progress page ok\n", rank_);
	return 0;
}

/* A name that is no file: ddp_init and the collectives work, nothing is
 * created. */
static int run_missing(void)
{
	struct ddp_ctx *ctx;
	char err[512], path[300];
	float x = 1;

	snprintf(path, sizeof(path), "%s/none/rank-%d", dir_, rank_);
	setenv(DDP_PROGRESS_ENV, path, 1);
	CHECK(ddp_init(NULL, &ctx, err, sizeof(err)) == 0, "ddp_init: %s", err);
	CHECK(ddp_allreduce(ctx, &x, 1, DDP_FLOAT32, DDP_SUM) == 0, "%s", ddp_error(ctx));
	CHECK(ddp_progress_phase(ctx, DDP_PHASE_EVAL) == 0, "phase without a page");
	CHECK(ddp_progress_step(ctx, 1, 1, 1, 0, 0) == 0, "step without a page");
	CHECK(access(path, F_OK) != 0, "%s was created", path);
	ddp_free(ctx);
	printf("rank %d: no page, no harm\n", rank_);
	if (rank_ == 0)
		printf("digest %016llx\n", (unsigned long long)fnv(&x, sizeof(x)));
	return 0;
}

int main(int argc, char **argv)
{
	const char *run_id = getenv("TORCHELASTIC_RUN_ID");
	int rc;

	rank_ = atoi(getenv("RANK") ? getenv("RANK") : "0");
	world_ = atoi(getenv("WORLD_SIZE") ? getenv("WORLD_SIZE") : "1");
	if (world_ < 2 || world_ > 64) {
		fprintf(stderr, "progress_check: 2 to 64 ranks\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	snprintf(dir_, sizeof(dir_), "/tmp/ddp-progress-check-%s", run_id ? run_id : "none");
	rc = argc > 1 && strcmp(argv[1], "missing") == 0 ? run_missing() : run();
	if (argc <= 1 || strcmp(argv[1], "missing") != 0) {
		char path[300];

		page_path(rank_, path, sizeof(path));
		unlink(path);
		rmdir(dir_); /* the last rank out removes it */
	}
	return rc;
}
