/*
 * nccl_worker.c - one rank of the NCCL backend tests, driven by
 * nccl_test.py (which starts WORLD_SIZE of them with RANK, LOCAL_RANK,
 * WORLD_SIZE and the store as argv[2], e.g. file:///tmp/x/store).
 *
 *   nccl_worker collectives INIT   all-reduce (sum, avg, max; float32 and
 *                             float64; sizes 0, 1, primes, 1 Mi + 3),
 *                             broadcast, all-gather, barrier, and the
 *                             same on host buffers (staged); checks the
 *                             values; exit 0 or 1
 *   nccl_worker stall INIT    3 all-reduces, then the last rank stops
 *                             calling collectives (blocks on stdin) and
 *                             the others start one more: it must fail
 *                             (exit 3) with the watchdog's message within
 *                             DDP_TIMEOUT_MS + 20 s (exit 1 otherwise)
 *   nccl_worker die INIT      as stall, but the last rank exits at once
 *                             (a peer dying mid-all-reduce)
 * Exit 77 when no GPU is usable.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "cudak_probe.h"
#include "ddp.h"
#include "timeutil.h"

static struct ddp_ctx *ctx;
static int rank, world;

static void die(const char *what, int rc)
{
	fprintf(stderr, "rank %d: %s failed (%d): %s\n", rank, what, rc, ddp_error(ctx));
	exit(1);
}

static void *dev_alloc(size_t bytes)
{
	void *p = NULL;

	if (cudaMalloc(&p, bytes ? bytes : 8) != cudaSuccess) {
		fprintf(stderr, "rank %d: cudaMalloc(%zu) failed\n", rank, bytes);
		exit(1);
	}
	return p;
}

static void to_dev(void *d, const void *h, size_t bytes)
{
	if (bytes && cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess)
		exit(1);
}

static void to_host(void *h, const void *d, size_t bytes)
{
	if (bytes && cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
		exit(1);
}

/* Rank r's element i: small integers, so sums are exact in float. */
static double value(int r, size_t i)
{
	return (double)(r + 1) * (double)(i % 7 + 1);
}

static int check_allreduce(size_t count, enum ddp_dtype dtype, enum ddp_op op)
{
	size_t es = dtype == DDP_FLOAT32 ? 4 : 8;
	char *h = malloc(count * es + 8);
	void *d = dev_alloc(count * es);
	int bad = 0, rc;

	for (size_t i = 0; i < count; i++) {
		if (dtype == DDP_FLOAT32)
			((float *)h)[i] = (float)value(rank, i);
		else
			((double *)h)[i] = value(rank, i);
	}
	to_dev(d, h, count * es);
	rc = ddp_allreduce(ctx, d, count, dtype, op);
	if (rc < 0)
		die("ddp_allreduce", rc);
	to_host(h, d, count * es);
	for (size_t i = 0; i < count && bad < 3; i++) {
		double got = dtype == DDP_FLOAT32 ? ((float *)h)[i] : ((double *)h)[i];
		double sum = 0, want;

		for (int r = 0; r < world; r++)
			sum += value(r, i);
		want = op == DDP_SUM ? sum : op == DDP_AVG ? sum / world : value(world - 1, i);
		if (fabs(got - want) > 1e-6 * fabs(want)) {
			fprintf(stderr,
				"rank %d: all-reduce op %d dtype %d count %zu [%zu]: %g, want %g\n",
				rank, op, dtype, count, i, got, want);
			bad++;
		}
	}
	cudaFree(d);
	free(h);
	return bad;
}

static int check_broadcast_allgather(size_t count)
{
	float *h = malloc(sizeof(float) * (count * world + 1));
	float *d = dev_alloc(sizeof(float) * count),
	      *all = dev_alloc(sizeof(float) * count * world);
	int bad = 0, rc;

	for (size_t i = 0; i < count; i++)
		h[i] = (float)value(rank, i);
	to_dev(d, h, sizeof(float) * count);
	rc = ddp_allgather(ctx, d, all, count, DDP_FLOAT32);
	if (rc < 0)
		die("ddp_allgather", rc);
	to_host(h, all, sizeof(float) * count * world);
	for (int r = 0; r < world; r++)
		for (size_t i = 0; i < count; i++)
			bad += h[r * count + i] != (float)value(r, i);
	rc = ddp_broadcast(ctx, d, count, DDP_FLOAT32, world - 1);
	if (rc < 0)
		die("ddp_broadcast", rc);
	to_host(h, d, sizeof(float) * count);
	for (size_t i = 0; i < count; i++)
		bad += h[i] != (float)value(world - 1, i);
	if (bad)
		fprintf(stderr, "rank %d: all-gather/broadcast of %zu: %d wrong\n", rank, count,
			bad);
	cudaFree(d);
	cudaFree(all);
	free(h);
	return bad;
}

/* Host buffers (libddp broadcasts a checkpoint's status flag from the
 * stack): the backend stages them through device memory. */
static int check_host_buffers(void)
{
	float flag = rank == 0 ? 1.5f : 0.0f, sum[3] = {1, 2, (float)rank};
	double all[64];
	double mine = rank + 0.25;
	int bad = 0, rc;

	rc = ddp_broadcast(ctx, &flag, 1, DDP_FLOAT32, 0);
	if (rc < 0)
		die("ddp_broadcast (host)", rc);
	bad += flag != 1.5f;
	rc = ddp_allreduce(ctx, sum, 3, DDP_FLOAT32, DDP_SUM);
	if (rc < 0)
		die("ddp_allreduce (host)", rc);
	bad +=
	    sum[0] != world || sum[1] != 2.0f * world || sum[2] != (float)(world * (world - 1) / 2);
	if (world <= 64) {
		rc = ddp_allgather(ctx, &mine, all, 1, DDP_FLOAT64);
		if (rc < 0)
			die("ddp_allgather (host)", rc);
		for (int r = 0; r < world; r++)
			bad += all[r] != r + 0.25;
	}
	if (bad)
		fprintf(stderr, "rank %d: collectives on host buffers: %d wrong\n", rank, bad);
	return bad;
}

static int run_collectives(void)
{
	static const size_t sizes[] = {0, 1, 2, 3, 7, 1031, (1u << 20) + 3};
	int bad = 0;

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		for (int op = DDP_SUM; op <= DDP_MAX; op++) {
			bad += check_allreduce(sizes[s], DDP_FLOAT32, op);
			bad += check_allreduce(sizes[s], DDP_FLOAT64, op);
		}
		bad += check_broadcast_allgather(sizes[s]);
	}
	bad += check_host_buffers();
	if (ddp_barrier(ctx) < 0)
		die("ddp_barrier", -1);
	printf("rank %d: collectives %s on backend %s\n", rank, bad ? "WRONG" : "ok",
	       ddp_backend_name(ctx));
	return bad ? 1 : 0;
}

/* The last rank stops (stall: blocks; die: exits); the others must fail
 * within the deadline instead of hanging. */
static int run_fault(int stall, uint64_t timeout_ms)
{
	size_t count = 1u << 22;
	float *d = dev_alloc(sizeof(float) * count);
	uint64_t t0;
	int rc;

	for (int i = 0; i < 3; i++)
		if ((rc = ddp_allreduce(ctx, d, count, DDP_FLOAT32, DDP_SUM)) < 0)
			die("warm-up all-reduce", rc);
	if (rank == world - 1) {
		char c;

		printf("rank %d: stopping (%s)\n", rank, stall ? "stall" : "die");
		fflush(stdout);
		if (!stall)
			_exit(0);
		/* Blocks until the driver kills this process (it closes stdin
		 * only at cleanup). */
		while (read(0, &c, 1) > 0)
			;
		return 0;
	}
	t0 = time_now_ms();
	rc = ddp_allreduce(ctx, d, count, DDP_FLOAT32, DDP_SUM);
	printf("rank %d: all-reduce returned %d after %llu ms: %s\n", rank, rc,
	       (unsigned long long)(time_now_ms() - t0), ddp_error(ctx));
	if (rc >= 0 || time_now_ms() - t0 > timeout_ms + 20000)
		return 1;
	/* The communicator is aborted: everything later fails at once. */
	rc = ddp_barrier(ctx);
	printf("rank %d: then barrier returned %d\n", rank, rc);
	return rc < 0 ? 3 : 1;
}

int main(int argc, char **argv)
{
	char why[256], err[1024] = "";
	struct ddp_options opts;
	const char *mode = argc > 1 ? argv[1] : "collectives";
	int rc;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (cudak_probe_devices(why, sizeof(why)) == 0) {
		printf("skip: no usable GPU (%s)\n", why);
		return CUDAK_EXIT_SKIP;
	}
	ddp_options_init(&opts);
	opts.backend = DDP_BACKEND_NCCL;
	if (argc > 2)
		opts.init_method = argv[2];
	rc = ddp_init(&opts, &ctx, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "ddp_init failed (%d): %s\n", rc, err);
		return 1;
	}
	rank = ddp_rank(ctx);
	world = ddp_world_size(ctx);
	if (strcmp(mode, "collectives") == 0)
		rc = run_collectives();
	else if (strcmp(mode, "stall") == 0 || strcmp(mode, "die") == 0)
		rc = run_fault(strcmp(mode, "stall") == 0,
			       getenv("DDP_TIMEOUT_MS")
				   ? strtoull(getenv("DDP_TIMEOUT_MS"), NULL, 10)
				   : DDP_DEFAULT_TIMEOUT_MS);
	else
		rc = 2;
	if (rc == 3)
		_exit(3); /* skip ddp_free: its store goodbye would wait for the stopped rank */
	ddp_free(ctx);
	return rc;
}
