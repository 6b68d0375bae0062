/*
 * progress_bench.c - what the progress page costs a collective.
 *
 *   progress_bench writer [N]
 *       one process: N (default 1 million) pairs of progress_enter and
 *       progress_leave (libddp's writer, what the communication thread does
 *       around every collective) into a mapped page, then the same with no
 *       page (the branch every collective takes without DDP_PROGRESS_FILE);
 *       each 15 times, the fastest kept (the least disturbed on a shared
 *       machine). Prints "WRITER ns_per_collective_page
 *       ns_per_collective_nopage".
 *   progress_bench coll page|nopage [ITERS]
 *       a rank under ddplaunch: ITERS (default 20000) all-reduces of one
 *       float after a warm-up; "page" creates this rank's page in /tmp first
 *       and points DDP_PROGRESS_FILE at it. Rank 0 prints
 *       "COLL page|nopage ns_per_allreduce" (the slowest rank's time).
 *
 * tests/bench/progress_bench.py runs both and interleaves the two
 * collective runs.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ddp.h"
#include "progress_writer.h"

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double time_pairs(long n)
{
	double best = 1e30;

	for (int rep = 0; rep < 15; rep++) {
		double t0 = now_ns(), dt;

		for (long i = 0; i < n; i++) {
			progress_enter((uint64_t)i + 1, DDP_OP_ALLREDUCE, 4, -1);
			progress_leave();
		}
		dt = (now_ns() - t0) / (double)n;
		best = dt < best ? dt : best;
	}
	return best;
}

static int writer(long n)
{
	char path[] = "/tmp/ddp-progress-bench-XXXXXX";
	int fd = mkstemp(path);
	double with, without;

	if (fd < 0 || ftruncate(fd, DDP_PROGRESS_SIZE) < 0) {
		perror("page");
		return 1;
	}
	close(fd);
	/* Without a page first: progress_open maps at most once. */
	unsetenv(DDP_PROGRESS_ENV);
	without = time_pairs(n);
	setenv(DDP_PROGRESS_ENV, path, 1);
	progress_open();
	unlink(path);
	if (!progress_on()) {
		fprintf(stderr, "progress_bench: the page was not mapped\n");
		return 1;
	}
	progress_round(1, 0, 1);
	with = time_pairs(n);
	printf("WRITER %.1f %.2f\n", with, without);
	return 0;
}

static int coll(int page, long iters)
{
	char path[128], err[512];
	struct ddp_ctx *ctx;
	double t0, dt[1];
	float x = 1;
	int rc;

	snprintf(path, sizeof(path), "/tmp/ddp-progress-bench-%d", (int)getpid());
	if (page) {
		int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);

		if (fd < 0 || ftruncate(fd, DDP_PROGRESS_SIZE) < 0) {
			perror(path);
			return 1;
		}
		close(fd);
		setenv(DDP_PROGRESS_ENV, path, 1);
	} else {
		unsetenv(DDP_PROGRESS_ENV);
	}
	rc = ddp_init(NULL, &ctx, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	for (int i = 0; i < 2000 && rc == 0; i++)
		rc = ddp_allreduce(ctx, &x, 1, DDP_FLOAT32, DDP_SUM);
	rc = rc ? rc : ddp_barrier(ctx);
	t0 = now_ns();
	for (long i = 0; i < iters && rc == 0; i++)
		rc = ddp_allreduce(ctx, &x, 1, DDP_FLOAT32, DDP_SUM);
	dt[0] = (now_ns() - t0) / (double)iters;
	rc = rc ? rc : ddp_allreduce(ctx, dt, 1, DDP_FLOAT64, DDP_MAX);
	if (rc < 0) {
		fprintf(stderr, "progress_bench: %s\n", ddp_error(ctx));
		return 1;
	}
	if (ddp_rank(ctx) == 0)
		printf("COLL %s %.0f\n", page ? "page" : "nopage", dt[0]);
	ddp_free(ctx);
	if (page)
		unlink(path);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "writer") == 0)
		return writer(argc > 2 ? atol(argv[2]) : 1000000L);
	if (argc >= 3 && strcmp(argv[1], "coll") == 0)
		return coll(strcmp(argv[2], "page") == 0, argc > 3 ? atol(argv[3]) : 20000L);
	fprintf(stderr, "usage: progress_bench writer [N] | coll page|nopage [ITERS]\n");
	return 2;
}
