/*
 * handover_bench.c - what handing the training state to a process that
 * joins costs: one ddp_broadcast of one contiguous buffer from rank 0, as
 * ddp-train's hand-over does (worker/train/handover.c). Run under ddplaunch
 * with 2 ranks (DDP_CPU_TRANSPORT or the nodes' shape picks shared memory
 * or the TCP ring). argv[1]: megabytes (default 100), argv[2]: repeats
 * (default 5).
 *
 * Each repeat: a barrier, then the broadcast; its time is the slowest
 * rank's (all-reduce MAX), i.e. until the receiver holds every byte. The
 * receiver checks every byte of the first and last repeat (each repeat
 * sends another pattern). Rank 0 prints one line per repeat and a summary:
 *   RESULT transport bytes seconds GB/s
 *   SUMMARY transport bytes best_s median_s median_GBps
 */
#include <stdint.h>
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

static uint32_t pattern(size_t i, int repeat)
{
	return (uint32_t)(i * 2654435761u) ^ (uint32_t)repeat;
}

static void fill(uint32_t *w, size_t n, int repeat)
{
	for (size_t i = 0; i < n; i++)
		w[i] = pattern(i, repeat);
}

static size_t wrong_words(const uint32_t *w, size_t n, int repeat)
{
	size_t bad = 0;

	for (size_t i = 0; i < n; i++)
		bad += w[i] != pattern(i, repeat);
	return bad;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* One repeat: the slowest rank's seconds in *secs. */
static int one_repeat(struct ddp_ctx *ctx, uint32_t *w, size_t n, int repeat, int check,
		      double *secs)
{
	double t[1];
	int rank = ddp_rank(ctx), rc;

	if (rank == 0)
		fill(w, n, repeat);
	else
		memset(w, 0, n * sizeof(*w));
	if ((rc = ddp_barrier(ctx)) < 0)
		return rc;
	t[0] = now();
	rc = ddp_broadcast(ctx, w, n, DDP_FLOAT32, 0);
	t[0] = now() - t[0];
	if (rc < 0)
		return rc;
	if (check && rank != 0 && wrong_words(w, n, repeat)) {
		fprintf(stderr, "rank %d: repeat %d: %zu words differ from rank 0's\n", rank,
			repeat, wrong_words(w, n, repeat));
		return -1;
	}
	if ((rc = ddp_allreduce(ctx, t, 1, DDP_FLOAT64, DDP_MAX)) < 0)
		return rc;
	*secs = t[0];
	return 0;
}

static int run(struct ddp_ctx *ctx, size_t bytes, int repeats)
{
	size_t n = bytes / 4;
	uint32_t *w = malloc(n * sizeof(*w));
	double *secs = calloc((size_t)repeats, sizeof(double));
	const char *tr = ddp_backend_name(ctx);
	int rc = 0;

	if (!w || !secs)
		return 1;
	for (int r = 0; r < repeats && rc == 0; r++) {
		rc = one_repeat(ctx, w, n, r, r == 0 || r == repeats - 1, &secs[r]);
		if (rc == 0 && ddp_rank(ctx) == 0)
			printf("RESULT %s %zu %.4f %.2f\n", tr, n * 4, secs[r],
			       (double)(n * 4) / secs[r] / 1e9);
	}
	if (rc == 0 && ddp_rank(ctx) == 0) {
		double med;

		qsort(secs, (size_t)repeats, sizeof(double), cmp_double);
		med = secs[repeats / 2];
		printf("SUMMARY %s %zu %.4f %.4f %.2f\n", tr, n * 4, secs[0], med,
		       (double)(n * 4) / med / 1e9);
	}
	free(w);
	free(secs);
	return rc < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
	size_t mb = argc > 1 ? strtoul(argv[1], NULL, 10) : 100;
	int repeats = argc > 2 ? atoi(argv[2]) : 5, rc;
	struct ddp_ctx *ctx;
	char err[1024];

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (mb == 0 || repeats < 1 || ddp_init(NULL, &ctx, err, sizeof(err)) < 0) {
		fprintf(stderr, "handover_bench: %s\n", mb && repeats > 0 ? err : "bad arguments");
		return 1;
	}
	rc = run(ctx, mb * 1000 * 1000, repeats);
	if (rc)
		fprintf(stderr, "handover_bench: %s\n", ddp_error(ctx));
	ddp_free(ctx);
	return rc;
}
