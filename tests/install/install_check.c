/*
 * install_check.c - a program built against an installed libddp with
 * nothing but `pkg-config --cflags --libs ddp`, run as 2 ranks under the
 * installed ddplaunch (tests/install/install_test.sh). Each rank
 * all-reduces rank + 1 (the sum is W (W + 1) / 2 everywhere), passes a
 * value to the next rank through the job's store (ddp_store_set /
 * ddp_store_get) and reports where libddp and its parent process (the
 * launcher's guard, ddp-exec) were loaded from, so the script can check
 * that both are the installed copies.
 */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ddp.h>

static int fail(struct ddp_ctx *ctx, const char *what)
{
	fprintf(stderr, "install_check: %s: %s\n", what, ctx ? ddp_error(ctx) : "");
	ddp_free(ctx);
	return 1;
}

/* Rank r sets "from_r" to "hello from rank r"; reads its predecessor's. */
static int check_store(struct ddp_ctx *ctx, int rank, int world)
{
	char key[32], want[64];
	void *val = NULL;
	size_t len = 0;
	int prev = (rank + world - 1) % world, ok;

	snprintf(key, sizeof(key), "from_%d", rank);
	snprintf(want, sizeof(want), "hello from rank %d", rank);
	if (ddp_store_set(ctx, key, want, strlen(want)) < 0)
		return -1;
	snprintf(key, sizeof(key), "from_%d", prev);
	snprintf(want, sizeof(want), "hello from rank %d", prev);
	if (ddp_store_get(ctx, key, &val, &len) < 0)
		return -1;
	ok = len == strlen(want) && memcmp(val, want, len) == 0 && ((char *)val)[len] == '\0';
	if (!ok)
		fprintf(stderr, "install_check: rank %d read '%.*s' under '%s', not '%s'\n", rank,
			(int)len, (char *)val, key, want);
	free(val);
	return ok ? 0 : -1;
}

int main(void)
{
	char err[1024], parent[4096], link[64];
	struct ddp_ctx *ctx;
	Dl_info lib;
	double x;
	int rank, world;
	ssize_t n;

	if (ddp_init(NULL, &ctx, err, sizeof(err)) < 0) {
		fprintf(stderr, "install_check: %s\n", err);
		return 1;
	}
	rank = ddp_rank(ctx);
	world = ddp_world_size(ctx);
	if (ddp_local_rank(ctx) != rank || ddp_local_world_size(ctx) != world)
		return fail(ctx, "local rank and size differ from the global ones on one node");
	x = rank + 1;
	if (ddp_allreduce(ctx, &x, 1, DDP_FLOAT64, DDP_SUM) < 0)
		return fail(ctx, "all-reduce");
	if (x != world * (world + 1) / 2.0) {
		fprintf(stderr, "install_check: rank %d: all-reduce gave %g, not %g\n", rank, x,
			world * (world + 1) / 2.0);
		return fail(ctx, "all-reduce result");
	}
	if (check_store(ctx, rank, world) < 0)
		return fail(ctx, "store");
	if (ddp_barrier(ctx) < 0)
		return fail(ctx, "barrier");
	snprintf(link, sizeof(link), "/proc/%d/exe", (int)getppid());
	n = readlink(link, parent, sizeof(parent) - 1);
	parent[n > 0 ? n : 0] = '\0';
	if (!dladdr((void *)ddp_init, &lib) || !lib.dli_fname)
		lib.dli_fname = "?";
	printf("rank %d of %d: all-reduce %g ok, store ok\n", rank, world, x);
	printf("rank %d libddp %s\n", rank, lib.dli_fname);
	printf("rank %d parent %s\n", rank, parent);
	ddp_free(ctx);
	return 0;
}
