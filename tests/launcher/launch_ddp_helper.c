/*
 * launch_ddp_helper - a libddp worker for the launcher's tests: ddp_init
 * from the launcher's environment (DDP_BACKEND, DDP_CPU_TRANSPORT), one
 * all-reduce, ddp_free.
 *
 *   launch_ddp_helper [--die RANK US] [--note DIR]
 *
 * --die: rank RANK kills itself (SIGKILL) US microseconds after it started,
 * wherever it is then (the set-up of the transport, the all-reduce, or
 * already past them). --note: each rank writes "PID TAG" (TAG from
 * DDP_JOB_TAG, "-" without one) to DIR/note.RANK first.
 * Exit 0, or 1 with libddp's message when a call fails.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ddp.h"

static long die_us;

static void *die_later(void *arg)
{
	struct timespec ts = {die_us / 1000000, (die_us % 1000000) * 1000};

	nanosleep(&ts, NULL);
	kill(getpid(), SIGKILL);
	return NULL;
}

static void note(const char *dir, int rank)
{
	const char *tag = getenv("DDP_JOB_TAG");
	char path[4096], tmp[4200];
	FILE *f;

	snprintf(path, sizeof(path), "%s/note.%d", dir, rank);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f)
		exit(90);
	fprintf(f, "%d %s\n", (int)getpid(), tag && *tag ? tag : "-");
	fclose(f);
	rename(tmp, path);
}

int main(int argc, char **argv)
{
	const char *rank_env = getenv("RANK");
	int rank = rank_env ? atoi(rank_env) : 0, die_rank = -1, rc;
	struct ddp_ctx *ctx = NULL;
	char err[512] = "";
	float x = 1.0f;
	pthread_t t;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--die") && i + 2 < argc) {
			die_rank = atoi(argv[i + 1]);
			die_us = atol(argv[i + 2]);
			i += 2;
		} else if (!strcmp(argv[i], "--note") && i + 1 < argc) {
			note(argv[++i], rank);
		}
	}
	if (rank == die_rank && pthread_create(&t, NULL, die_later, NULL))
		return 91;
	rc = ddp_init(NULL, &ctx, err, sizeof(err));
	if (rc == 0)
		rc = ddp_allreduce(ctx, &x, 1, DDP_FLOAT32, DDP_SUM);
	if (rc)
		fprintf(stderr, "launch_ddp_helper: rank %d: %s\n", rank, err[0] ? err : "failed");
	ddp_free(ctx);
	return rc ? 1 : 0;
}
