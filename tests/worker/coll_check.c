/*
 * coll_check.c - a worker program for the collective tests: every rank
 * runs all-reduce (sum, avg, max), broadcast and all-gather on float32 and
 * float64 buffers of odd sizes (0, 1, primes, sizes not divisible by the
 * world size, sizes spanning several shared-memory rounds), checks the
 * values against a reference computed locally in the same order, and checks
 * that every rank holds the same bits (hashes all-gathered). Rank 0 prints
 * "digest HEX" of all results, so two runs can be compared.
 *
 * Modes (argv[1]): "check" (default); "mixed": as check, but rank 0 puts
 * its all-reduce buffers in ordinary memory where the others use
 * ddp_mem_alloc (and the reverse), so the in-place path must be refused; "die R MS": rank R kills
 * itself (SIGKILL) MS milliseconds after start while everyone loops over large all-reduces; the
 * survivors must report a clear error; "stall R": rank R stays alive but never calls a collective,
 * the others must time out. Exit 0 on success, 3 for the expected failure of a survivor.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ddp.h"

static const size_t sizes[] = {0, 1, 2, 3, 5, 7, 13, 31, 97, 1009, 4099, 65537, 262147, 600011};

static int mixed; /* "mixed" mode: rank 0 allocates the other way round */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *c = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ c[i]) * 1099511628211ull;
	return h;
}

static double value(int rank, size_t i)
{
	/* Values with many significant bits, so the summation order shows. */
	return sin((double)rank * 12.9898 + (double)i * 78.233) * 1000.0 + 1.0 / (double)(i + 3);
}

static void fill(void *buf, enum ddp_dtype dt, int rank, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (dt == DDP_FLOAT32)
			((float *)buf)[i] = (float)value(rank, i);
		else
			((double *)buf)[i] = value(rank, i);
	}
}

static double get(const void *buf, enum ddp_dtype dt, size_t i)
{
	return dt == DDP_FLOAT32 ? ((const float *)buf)[i] : ((const double *)buf)[i];
}

static int fail(struct ddp_ctx *ctx, const char *what, int rc)
{
	fprintf(stderr, "coll_check rank %d: %s failed (%d): %s\n", ddp_rank(ctx), what, rc,
		ddp_error(ctx));
	return 1;
}

/* All ranks must hold the same hash; returns 0 if so. */
static int same_everywhere(struct ddp_ctx *ctx, uint64_t h, const char *what)
{
	int w = ddp_world_size(ctx);
	double mine[2] = {(double)(h >> 32), (double)(h & 0xffffffffu)}, all[2 * 64];
	int rc = ddp_allgather(ctx, mine, all, 2, DDP_FLOAT64);

	if (rc < 0)
		return fail(ctx, "allgather of hashes", rc);
	for (int r = 0; r < w; r++) {
		if (all[2 * r] != mine[0] || all[2 * r + 1] != mine[1]) {
			fprintf(stderr, "rank %d: %s differs from rank %d's bits\n", ddp_rank(ctx),
				what, r);
			return 1;
		}
	}
	return 0;
}

static int check_allreduce(struct ddp_ctx *ctx, enum ddp_dtype dt, enum ddp_op op, size_t n,
			   uint64_t *digest)
{
	int w = ddp_world_size(ctx), me = ddp_rank(ctx), rc;
	size_t esz = ddp_dtype_size(dt);
	/* Sum and max on ddp_mem_alloc memory (in place on shared memory),
	 * avg on malloc'ed memory (copying path); in "mixed" mode rank 0
	 * swaps, so the ranks disagree and must all take the copying path. */
	int arena = (op != DDP_AVG) ^ (mixed && me == 0);
	void *buf = arena ? NULL : malloc(n * esz + 8);

	if (arena && ddp_mem_alloc(ctx, n * esz + 8, &buf) < 0)
		return fail(ctx, "ddp_mem_alloc", -1);
	double eps = dt == DDP_FLOAT32 ? 1.2e-7 : 2.3e-16;
	char what[96];

	fill(buf, dt, me, n);
	rc = ddp_allreduce(ctx, buf, n, dt, op);
	if (rc < 0)
		return fail(ctx, "allreduce", rc);
	for (size_t i = 0; i < n; i++) {
		double ref = op == DDP_MAX ? -INFINITY : 0, got = get(buf, dt, i), mag = 0;

		for (int r = 0; r < w; r++) {
			double v = dt == DDP_FLOAT32 ? (double)(float)value(r, i) : value(r, i);

			ref = op == DDP_MAX ? fmax(ref, v) : ref + v;
			mag += fabs(v);
		}
		if (op == DDP_AVG) {
			ref /= w;
			mag /= w;
		}
		/* Rounding bound of w - 1 additions in the dtype (a max is exact). */
		if (fabs(got - ref) > (op == DDP_MAX ? 0 : 2.0 * w * eps * mag)) {
			fprintf(stderr,
				"rank %d: allreduce op %d dtype %d n %zu: [%zu] = %.17g, "
				"expected %.17g\n",
				me, (int)op, (int)dt, n, i, got, ref);
			return 1;
		}
	}
	snprintf(what, sizeof(what), "allreduce op %d dtype %d n %zu", (int)op, (int)dt, n);
	*digest = fnv(*digest, buf, n * esz);
	rc = same_everywhere(ctx, fnv(1469598103934665603ull, buf, n * esz), what);
	if (arena)
		ddp_mem_free(ctx, buf);
	else
		free(buf);
	return rc;
}

static int check_broadcast_allgather(struct ddp_ctx *ctx, enum ddp_dtype dt, size_t n)
{
	int w = ddp_world_size(ctx), me = ddp_rank(ctx), root = (int)(n % (size_t)w), rc;
	size_t esz = ddp_dtype_size(dt);
	char *buf = malloc(n * esz + 8), *ref = malloc(n * esz + 8);
	char *all = malloc((size_t)w * n * esz + 8);

	fill(buf, dt, me, n);
	fill(ref, dt, root, n);
	rc = ddp_broadcast(ctx, buf, n, dt, root);
	if (rc < 0)
		return fail(ctx, "broadcast", rc);
	if (memcmp(buf, ref, n * esz) != 0) {
		fprintf(stderr, "rank %d: broadcast n %zu from %d: wrong data\n", me, n, root);
		return 1;
	}
	fill(buf, dt, me, n);
	rc = ddp_allgather(ctx, buf, all, n, dt);
	if (rc < 0)
		return fail(ctx, "allgather", rc);
	for (int r = 0; r < w; r++) {
		fill(ref, dt, r, n);
		if (memcmp(all + (size_t)r * n * esz, ref, n * esz) != 0) {
			fprintf(stderr, "rank %d: allgather n %zu: block %d wrong\n", me, n, r);
			return 1;
		}
	}
	free(buf);
	free(ref);
	free(all);
	return 0;
}

/* One all-reduce above the shared-memory streaming threshold (16 MiB),
 * with small integers so the expected sums are exact. */
static int check_big(struct ddp_ctx *ctx, uint64_t *digest)
{
	size_t n = 4194319; /* a prime: 16 MiB + 60 bytes of float32 */
	int w = ddp_world_size(ctx), me = ddp_rank(ctx), rc;
	float *buf;

	if (ddp_mem_alloc(ctx, n * sizeof(float), (void **)&buf) < 0)
		return fail(ctx, "ddp_mem_alloc", -1);
	for (size_t i = 0; i < n; i++)
		buf[i] = (float)((me + 1) * (int)(i % 1000));
	rc = ddp_allreduce(ctx, buf, n, DDP_FLOAT32, DDP_SUM);
	if (rc < 0)
		return fail(ctx, "big allreduce", rc);
	for (size_t i = 0; i < n; i++) {
		if (buf[i] != (float)(w * (w + 1) / 2 * (int)(i % 1000))) {
			fprintf(stderr, "rank %d: big allreduce [%zu] = %g\n", me, i, buf[i]);
			return 1;
		}
	}
	*digest = fnv(*digest, buf, n * sizeof(float));
	ddp_mem_free(ctx, buf);
	return 0;
}

static int run_checks(struct ddp_ctx *ctx)
{
	static const enum ddp_op ops[] = {DDP_SUM, DDP_AVG, DDP_MAX};
	uint64_t digest = 1469598103934665603ull;

	for (int d = 0; d < 2; d++) {
		for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
			for (int o = 0; o < 3; o++)
				if (check_allreduce(ctx, (enum ddp_dtype)d, ops[o], sizes[s],
						    &digest))
					return 1;
			if (check_broadcast_allgather(ctx, (enum ddp_dtype)d, sizes[s]))
				return 1;
		}
	}
	if (check_big(ctx, &digest))
		return 1;
	if (ddp_barrier(ctx) < 0)
		return fail(ctx, "barrier", -1);
	if (ddp_rank(ctx) == 0)
		printf("backend %s world %d digest %016llx\n", ddp_backend_name(ctx),
		       ddp_world_size(ctx), (unsigned long long)digest);
	return 0;
}

static void *killer(void *arg)
{
	struct timespec ts = {(long)(intptr_t)arg / 1000, ((long)(intptr_t)arg % 1000) * 1000000};

	nanosleep(&ts, NULL);
	raise(SIGKILL);
	return NULL;
}

/* Loops over 8 MiB all-reduces until one fails; the dying rank kills
 * itself from a thread at an arbitrary point inside one. */
static int run_die(struct ddp_ctx *ctx, int die_rank, long ms)
{
	size_t n = 2u << 20;
	float *buf = calloc(n, sizeof(*buf));
	pthread_t t;
	struct timespec t0, t1;
	int rc = 0;

	if (ddp_rank(ctx) == die_rank)
		pthread_create(&t, NULL, killer, (void *)(intptr_t)ms);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int it = 0; it < 100000 && rc == 0; it++)
		rc = ddp_allreduce(ctx, buf, n, DDP_FLOAT32, DDP_SUM);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (rc == 0) {
		fprintf(stderr, "rank %d: no error although a rank died or stalled\n",
			ddp_rank(ctx));
		return 1;
	}
	/* Every later collective must fail at once too. */
	if (ddp_barrier(ctx) != -ECANCELED) {
		fprintf(stderr, "rank %d: barrier after a failure did not say -ECANCELED\n",
			ddp_rank(ctx));
		return 1;
	}
	printf("rank %d: all-reduce failed as expected (rc %d) after %.2f s: %s\n", ddp_rank(ctx),
	       rc, (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9,
	       ddp_error(ctx));
	free(buf);
	return 3;
}

int main(int argc, char **argv)
{
	struct ddp_options opts;
	struct ddp_ctx *ctx;
	char err[1024];
	int rc;

	ddp_options_init(&opts);
	opts.init_method = getenv("DDP_TEST_INIT_METHOD");
	rc = ddp_init(&opts, &ctx, err, sizeof(err));

	if (rc < 0) {
		fprintf(stderr, "coll_check: %s\n", err);
		return 1;
	}
	if (argc >= 3 && strcmp(argv[1], "stall") == 0 && ddp_rank(ctx) == atoi(argv[2])) {
		/* Alive but never calls a collective: the others must time out
		 * naming this rank. The harness kills it afterwards. */
		for (;;)
			pause();
	}
	if (argc >= 3 && strcmp(argv[1], "stall") == 0)
		rc = run_die(ctx, -1, 0);
	else if (argc >= 4 && strcmp(argv[1], "die") == 0)
		rc = run_die(ctx, atoi(argv[2]), atol(argv[3]));
	else {
		mixed = argc >= 2 && strcmp(argv[1], "mixed") == 0;
		rc = run_checks(ctx);
	}
	ddp_free(ctx);
	return rc;
}
