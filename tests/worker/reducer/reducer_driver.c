/*
 * reducer_driver.c - a worker program for the reducer tests (run by
 * ddplaunch with 2-4 ranks). Checks: parameters and buffers broadcast from
 * rank 0 at creation; gradients averaged over ranks, identical bits on
 * every rank, whatever order grad_ready is called in; frozen parameters
 * untouched; no_sync accumulation; buffers synchronised from rank 0;
 * collective checkpoint save (rank 0) and load (every rank) with a
 * "module." prefix. Each check runs with three gradient layouts: one
 * malloc'ed array per parameter, one flat ddp_mem_alloc buffer in
 * parameter order (every bucket reduced in place, with no copies), and the
 * same with a gap between two parameters of a bucket (that bucket copied,
 * and the bits the same as in place). Mode "mismatch": rank 1 declares
 * another shape, and every rank must fail naming the parameter. Exit 0 on
 * success.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp.h"
#include "reducer.h"

#define NP  4
#define BIG 300007
#define GAP 16 /* floats between p1 and p2 in the "gap" layout */
#define CHECK(c, ...)                                                                              \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, "rank %d: ", me);                                          \
			fprintf(stderr, __VA_ARGS__);                                              \
			fputc('\n', stderr);                                                       \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

enum layout { SEPARATE, FLAT, FLAT_GAP, NLAYOUTS };
static const char *const layout_name[NLAYOUTS] = {"separate", "flat", "flat with a gap"};

static int me, world;
static const size_t numel[NP] = {5, 6, BIG, 7};

static float val(int rank, size_t p, size_t i, int salt)
{
	return (float)sin(rank * 3.1 + (double)p * 7.7 + (double)i * 0.37 + salt) * 10.0f;
}

static void fill(float *x, int rank, size_t p, size_t n, int salt)
{
	for (size_t i = 0; i < n; i++)
		x[i] = val(rank, p, i, salt);
}

static uint64_t fnv(const void *p, size_t n, uint64_t h)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
	return h;
}

static void check_same_bits(struct ddp_ctx *ctx, float **grad)
{
	uint64_t h = 1469598103934665603ull;
	double mine[2], all[128];

	/* p0 is frozen: its gradient stays local and differs by design. */
	for (size_t p = 1; p < NP; p++)
		h = fnv(grad[p], numel[p] * sizeof(float), h);
	mine[0] = (double)(h >> 32);
	mine[1] = (double)(h & 0xffffffffu);
	CHECK(ddp_allgather(ctx, mine, all, 2, DDP_FLOAT64) == 0, "allgather");
	for (int r = 0; r < world; r++)
		CHECK(all[2 * r] == mine[0] && all[2 * r + 1] == mine[1],
		      "gradients differ from rank %d's bits", r);
}

/* grad[p][i] must be the average over ranks of the sum of salts' values. */
static void check_avg(float **grad, const int *salts, int nsalts)
{
	for (size_t p = 1; p < NP; p++) {
		for (size_t i = 0; i < numel[p]; i += (p == 2 ? 997 : 1)) {
			double ref = 0;

			for (int r = 0; r < world; r++)
				for (int s = 0; s < nsalts; s++)
					ref += val(r, p, i, salts[s]);
			ref /= world;
			CHECK(fabs(grad[p][i] - ref) < 1e-4 * (1 + fabs(ref)),
			      "grad %zu[%zu] = %g, expected %g", p, i, grad[p][i], ref);
		}
	}
}

static void checkpoint_round_trip(struct ddp_ctx *ctx, float **data, const char *dir)
{
	char path[512], names[NP][32];
	struct ddp_tensor save[NP], load[NP];
	float *back[NP];
	struct ddp_load_report rep;

	snprintf(path, sizeof(path), "%s/reducer-check.safetensors", dir);
	for (size_t p = 0; p < NP; p++) {
		snprintf(names[p], sizeof(names[p]), "module.p%zu", p);
		save[p] =
		    (struct ddp_tensor){names[p], DDP_FLOAT32, 1, {(int64_t)numel[p]}, data[p]};
		back[p] = calloc(numel[p], sizeof(float));
		load[p] = save[p];
		load[p].name = names[p] + strlen("module.");
		load[p].data = back[p];
	}
	struct ddp_meta meta[] = {{"step", "1"}};
	CHECK(ddp_checkpoint_save(ctx, path, save, NP, meta, 1) == 0, "save: %s", ddp_error(ctx));
	CHECK(ddp_checkpoint_load(ctx, path, load, NP, DDP_LOAD_STRICT, &rep, NULL) == 0,
	      "load: %s", ddp_error(ctx));
	CHECK(rep.prefix_stripped == 1 && rep.nloaded == NP, "load report");
	for (size_t p = 0; p < NP; p++)
		CHECK(memcmp(back[p], data[p], numel[p] * sizeof(float)) == 0, "tensor %zu", p);
	ddp_load_report_release(&rep);
	for (size_t p = 0; p < NP; p++)
		free(back[p]);
}

/* One synchronised step, then a no_sync step followed by a synchronised
 * one, then a buffer sync. */
static void run_steps(struct ddp_ctx *ctx, struct ddp_reducer *red, float **grad, float *bn)
{
	/* A synchronised step, grads marked ready in reverse order. */
	for (size_t p = 0; p < NP; p++)
		fill(grad[p], me, p, numel[p], 1);
	CHECK(ddp_reducer_prepare(red, 1) == 0, "prepare");
	for (size_t p = NP; p-- > 0;)
		CHECK(ddp_reducer_grad_ready(red, p) == 0, "grad_ready %zu", p);
	CHECK(ddp_reducer_finish(red) == 0, "finish: %s", ddp_error(ctx));
	int s1[] = {1};
	check_avg(grad, s1, 1);
	check_same_bits(ctx, grad);
	CHECK(grad[0][0] == val(me, 0, 0, 1), "frozen gradient was changed");

	/* no_sync then sync: the accumulated gradients are averaged once. */
	for (size_t p = 0; p < NP; p++)
		fill(grad[p], me, p, numel[p], 2);
	CHECK(ddp_reducer_prepare(red, 0) == 0, "prepare no_sync");
	for (size_t p = NP; p-- > 0;)
		ddp_reducer_grad_ready(red, p);
	CHECK(ddp_reducer_finish(red) == 0, "finish no_sync");
	CHECK(grad[1][0] == val(me, 1, 0, 2), "no_sync step reduced gradients");
	for (size_t p = 0; p < NP; p++)
		for (size_t i = 0; i < numel[p]; i++)
			grad[p][i] += val(me, p, i, 3);
	CHECK(ddp_reducer_prepare(red, 1) == 0, "prepare");
	/* Only some marked ready: finish reduces the rest itself. */
	CHECK(ddp_reducer_grad_ready(red, 3) == 0, "grad_ready 3");
	CHECK(ddp_reducer_finish(red) == 0, "finish: %s", ddp_error(ctx));
	int s23[] = {2, 3};
	check_avg(grad, s23, 2);
	check_same_bits(ctx, grad);

	/* Buffers drift apart, then are synchronised from rank 0. */
	bn[2] = (float)me;
	CHECK(ddp_reducer_sync_buffers(red) == 0, "sync_buffers");
	CHECK(bn[2] == 0.0f, "buffer not synchronised from rank 0");
}

/* The gradients in layout l: grad[p] points into *flat unless SEPARATE. */
static void grads_alloc(struct ddp_ctx *ctx, enum layout l, float **grad, float **flat)
{
	size_t at = 0;

	*flat = NULL;
	if (l == SEPARATE) {
		for (size_t p = 0; p < NP; p++)
			grad[p] = malloc(numel[p] * sizeof(float));
		return;
	}
	CHECK(ddp_mem_alloc(ctx, (5 + 6 + BIG + 7 + GAP) * sizeof(float), (void **)flat) == 0,
	      "ddp_mem_alloc: %s", ddp_error(ctx));
	for (size_t p = 0; p < NP; p++) {
		at += p == 2 && l == FLAT_GAP ? GAP : 0;
		grad[p] = *flat + at;
		at += numel[p];
	}
}

static void grads_free(struct ddp_ctx *ctx, float **grad, float *flat)
{
	for (size_t p = 0; !flat && p < NP; p++)
		free(grad[p]);
	ddp_mem_free(ctx, flat);
}

/* Separate arrays: single-parameter buckets (each a view of its array).
 * Flat: bucket 1 holds p1 and p2 back to back (a view) unless a gap parts
 * them (a copy). */
static void check_in_place(struct ddp_reducer *red, enum layout l)
{
	size_t n = ddp_reducer_num_buckets(red), views = reducer_num_in_place(red);
	size_t want = l == FLAT_GAP ? n - 1 : n;

	CHECK(l == SEPARATE ? n >= 3 : n == 2, "%zu buckets with %s gradients", n, layout_name[l]);
	CHECK(ddp_reducer_bucket_of(red, 1) == ddp_reducer_bucket_of(red, 2) || l == SEPARATE,
	      "p1 and p2 in different buckets");
	CHECK(views == want, "%zu of %zu buckets reduced in place with %s gradients, expected %zu",
	      views, n, layout_name[l], want);
}

static int run(struct ddp_ctx *ctx, int mismatch, const char *dir, enum layout l, float *result)
{
	float *data[NP], *grad[NP], *flat, bn[4];
	struct ddp_param params[NP], buffers[1];
	struct ddp_reducer *red;
	struct ddp_reducer_options o = {.bucket_cap_bytes = l == SEPARATE ? 256 << 10 : 2 << 20,
					.first_bucket_cap_bytes = 64};
	char names[NP][16];
	int rc;

	grads_alloc(ctx, l, grad, &flat);
	for (size_t p = 0; p < NP; p++) {
		data[p] = malloc(numel[p] * sizeof(float));
		fill(data[p], me, p, numel[p], 100);
		snprintf(names[p], sizeof(names[p]), "p%zu", p);
		params[p] = (struct ddp_param){names[p], DDP_FLOAT32, 1,     {(int64_t)numel[p]},
					       data[p],	 grad[p],     p != 0};
	}
	if (mismatch && me == 1) {
		params[1].ndim = 2;
		params[1].shape[0] = 3;
		params[1].shape[1] = 2;
	}
	fill(bn, me, 9, 4, 0);
	buffers[0] = (struct ddp_param){"bn.running_mean", DDP_FLOAT32, 1, {4}, bn, NULL, 0};
	rc = ddp_reducer_new(ctx, params, NP, buffers, 1, &o, &red);
	if (mismatch) {
		CHECK(rc == -EINVAL && strstr(ddp_error(ctx), "'p1'") &&
			  strstr(ddp_error(ctx), "rank 1"),
		      "mismatch not reported: %d %s", rc, ddp_error(ctx));
		printf("rank %d: refused as expected: %s\n", me, ddp_error(ctx));
		return 0;
	}
	CHECK(rc == 0, "reducer_new: %s", ddp_error(ctx));
	CHECK(ddp_reducer_bucket_of(red, 0) == -1, "frozen p0 in a bucket");
	CHECK(ddp_reducer_bucket_of(red, 3) == 0, "last param not in the first bucket");
	check_in_place(red, l);
	for (size_t p = 0; p < NP; p++)
		for (size_t i = 0; i < numel[p]; i += 101)
			CHECK(data[p][i] == val(0, p, i, 100), "param %zu not rank 0's", p);
	CHECK(bn[0] == val(0, 9, 0, 0), "buffer not rank 0's");

	run_steps(ctx, red, grad, bn);

	struct ddp_reducer_stats st;
	ddp_reducer_get_stats(red, &st);
	CHECK(st.steps == 2 && st.bytes_reduced > 0, "stats");
	/* First step: every bucket started from grad_ready (overlapping the
	 * backward pass); last step: only bucket 0 (param 3 marked ready). */
	CHECK(st.early_buckets == ddp_reducer_num_buckets(red) + 1,
	      "%llu buckets started early, expected %zu", (unsigned long long)st.early_buckets,
	      ddp_reducer_num_buckets(red) + 1);
	checkpoint_round_trip(ctx, data, dir);
	if (me == 0)
		printf("reducer ok: %zu buckets (%zu in place), %s gradients, %s\n",
		       ddp_reducer_num_buckets(red), reducer_num_in_place(red), layout_name[l],
		       ddp_backend_name(ctx));
	ddp_reducer_free(red);
	for (size_t p = 0, at = 0; p < NP; at += numel[p++])
		memcpy(result + at, grad[p], numel[p] * sizeof(float));
	for (size_t p = 0; p < NP; p++)
		free(data[p]);
	grads_free(ctx, grad, flat);
	return 0;
}

/* Every layout. Flat and flat with a gap have the same buckets, one reduced
 * in place in the first and copied in the second: the same bits. (Separate
 * arrays use smaller buckets, so the TCP ring may add in another order.) */
static int run_layouts(struct ddp_ctx *ctx, const char *dir)
{
	size_t total = 5 + 6 + BIG + 7;
	float *flat = malloc(total * sizeof(float)), *gap = malloc(total * sizeof(float));

	CHECK(flat && gap, "out of memory");
	run(ctx, 0, dir, SEPARATE, gap);
	run(ctx, 0, dir, FLAT, flat);
	run(ctx, 0, dir, FLAT_GAP, gap);
	CHECK(memcmp(flat, gap, total * sizeof(float)) == 0,
	      "a bucket reduced in place and the same bucket copied gave other bits");
	free(flat);
	free(gap);
	return 0;
}

int main(int argc, char **argv)
{
	struct ddp_ctx *ctx;
	char err[1024];
	int rc = ddp_init(NULL, &ctx, err, sizeof(err));

	if (rc < 0) {
		fprintf(stderr, "reducer_check: %s\n", err);
		return 1;
	}
	me = ddp_rank(ctx);
	world = ddp_world_size(ctx);
	if (argc > 1 && strcmp(argv[1], "mismatch") == 0)
		rc = run(ctx, 1, argc > 2 ? argv[2] : "/tmp", SEPARATE, NULL);
	else
		rc = run_layouts(ctx, argc > 2 ? argv[2] : "/tmp");
	ddp_free(ctx);
	return rc;
}
