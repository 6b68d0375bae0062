/*
 * allreduce_bench.c - libddp all-reduce bandwidth, one process per rank
 * (run under ddplaunch; DDP_CPU_TRANSPORT picks shm or ring). For each size
 * from MIN to MAX bytes (x4 steps): warm-up, then iterations until about
 * 0.25 s have passed (at least 3); the time per iteration is the slowest
 * rank's (all-reduce MAX of the times). argv[3] "arena" allocates the
 * buffer with ddp_mem_alloc. Rank 0 prints one line per size:
 *   RESULT bytes usec algbw_GBps busbw_GBps
 * with nccl-tests' definitions: algbw = bytes / time, busbw = algbw *
 * 2 (n - 1) / n. float32 sum.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddp.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int bench_one(struct ddp_ctx *ctx, float *buf, size_t bytes, double *usec)
{
	size_t n = bytes / sizeof(float);
	double t0, t, dt[1];
	int iters = 0, rc;

	for (int w = 0; w < 2; w++)
		if ((rc = ddp_allreduce(ctx, buf, n, DDP_FLOAT32, DDP_SUM)) < 0)
			return rc;
	/* Every rank runs the same number of iterations: rank 0 decides. */
	double plan[1] = {0};
	if ((rc = ddp_barrier(ctx)) < 0)
		return rc;
	t0 = now();
	rc = ddp_allreduce(ctx, buf, n, DDP_FLOAT32, DDP_SUM);
	plan[0] = now() - t0;
	if (rc < 0 || (rc = ddp_broadcast(ctx, plan, 1, DDP_FLOAT64, 0)) < 0)
		return rc;
	iters = plan[0] > 0 ? (int)(0.25 / plan[0]) : 1000;
	if (iters < 3)
		iters = 3;
	if (iters > 2000)
		iters = 2000;
	if ((rc = ddp_barrier(ctx)) < 0)
		return rc;
	t0 = now();
	for (int i = 0; i < iters; i++)
		if ((rc = ddp_allreduce(ctx, buf, n, DDP_FLOAT32, DDP_SUM)) < 0)
			return rc;
	t = (now() - t0) / iters;
	dt[0] = t;
	if ((rc = ddp_allreduce(ctx, dt, 1, DDP_FLOAT64, DDP_MAX)) < 0)
		return rc;
	*usec = dt[0] * 1e6;
	return 0;
}

int main(int argc, char **argv)
{
	size_t lo = argc > 1 ? strtoull(argv[1], NULL, 0) : 1024;
	size_t hi = argc > 2 ? strtoull(argv[2], NULL, 0) : (size_t)256 << 20;
	struct ddp_ctx *ctx;
	char err[1024];
	float *buf;
	int rc = ddp_init(NULL, &ctx, err, sizeof(err));

	if (rc < 0) {
		fprintf(stderr, "allreduce_bench: %s\n", err);
		return 1;
	}
	/* argv[3] "arena": buffers from ddp_mem_alloc (in-place shared-memory
	 * all-reduce); default: malloc, like any application buffer. */
	int arena = argc > 3 && strcmp(argv[3], "arena") == 0;
	if (arena ? ddp_mem_alloc(ctx, hi, (void **)&buf) < 0 : !(buf = malloc(hi)))
		return 1;
	for (size_t i = 0; i < hi / sizeof(float); i++)
		buf[i] = (float)(i % 7) * 1e-3f;
	int w = ddp_world_size(ctx);
	for (size_t bytes = lo; bytes <= hi; bytes *= 4) {
		double us;

		rc = bench_one(ctx, buf, bytes, &us);
		if (rc < 0) {
			fprintf(stderr, "allreduce_bench: %s\n", ddp_error(ctx));
			break;
		}
		double alg = (double)bytes / (us * 1e-6) / 1e9;
		if (ddp_rank(ctx) == 0)
			printf("RESULT %zu %.1f %.3f %.3f\n", bytes, us, alg,
			       alg * 2.0 * (w - 1) / w);
		fflush(stdout);
	}
	if (arena)
		ddp_mem_free(ctx, buf);
	else
		free(buf);
	ddp_free(ctx);
	return rc < 0 ? 1 : 0;
}
