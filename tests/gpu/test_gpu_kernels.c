/*
 * test_gpu_kernels.c - every kernel of kernel_ops_cuda against its CPU twin
 * (kernel_ops_cpu) on the same random inputs with odd sizes. Exit 0 when all
 * agree, 1 on a mismatch (both values printed), 77 (skipped) when no GPU is
 * usable.
 *
 * Tolerances (relative to the magnitude each result is built from):
 *  - exact (0) where both twins do the same float operations in the same
 *    order: bias add, ReLU, copies, scaling;
 *  - 1e-6 where both accumulate in double and round once to float, or where
 *    nvcc contracts a*b+c into one FMA (one rounding less than the CPU):
 *    column sums, BatchNorm, SGD, squared norms, cross-entropy;
 *  - matrix products: the worst-case error bound of a k-term float dot
 *    product, 2 * k * eps * sum|a||b| (Higham's gamma_k for each twin, with
 *    eps = 2^-23 so truncating tensor-core adds are covered too), plus, for
 *    TF32 and BF16, the conversion of both inputs to 10 or 7 mantissa bits
 *    (4 * 2^-11 and 4 * 2^-8 of sum|a||b|: two inputs, each rounded or
 *    truncated).
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudak_probe.h"
#include "kernels.h"

struct twin {
	const char *name;
	const struct kernel_ops *ops;
	struct kernel_ctx *ctx;
};

static struct twin T[2];
static int failures;
static unsigned long long rng_state = 0x9e3779b97f4a7c15ull;

static float urand(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (float)((rng_state >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static float *host_rand(size_t n)
{
	float *v = malloc(sizeof(float) * (n ? n : 1));

	for (size_t i = 0; i < n; i++)
		v[i] = urand();
	return v;
}

static void check(int ret, const char *what)
{
	if (ret != 0) {
		fprintf(stderr, "FAIL %s returned %d\n", what, ret);
		exit(1);
	}
}

/* Device copy of n host floats on twin t (h NULL: n zeros). */
static float *up(struct twin *t, const void *h, size_t n)
{
	void *d;

	check(t->ops->alloc(t->ctx, n * sizeof(float), &d), "alloc");
	if (n && h)
		check(t->ops->copy_h2d(t->ctx, d, h, n * sizeof(float)), "copy_h2d");
	return d;
}

/* Host copy of n device floats on twin t; frees the device buffer. */
static float *down(struct twin *t, float *d, size_t n)
{
	float *h = malloc(sizeof(float) * (n ? n : 1));

	if (n)
		check(t->ops->copy_d2h(t->ctx, h, d, n * sizeof(float)), "copy_d2h");
	t->ops->free(t->ctx, d);
	return h;
}

/* Compares got (CUDA) with want (CPU): |got - want| <= tol * scale[i] (scale
 * NULL = |want| + 1). Prints the first few mismatches. */
static void compare(const char *what, const float *got, const float *want, size_t n, double tol,
		    const double *scale)
{
	int bad = 0;

	for (size_t i = 0; i < n; i++) {
		double s = scale ? scale[i] : fabs(want[i]) + 1.0;
		double d = fabs((double)got[i] - want[i]);

		if (!(d <= tol * s) && !(isnan(got[i]) && isnan(want[i]))) {
			if (bad < 5)
				fprintf(stderr,
					"FAIL %s [%zu]: cuda %.9g, cpu %.9g (tolerance %g)\n", what,
					i, got[i], want[i], tol * s);
			bad++;
		}
	}
	if (bad) {
		fprintf(stderr, "FAIL %s: %d of %zu elements differ\n", what, bad, n);
		failures++;
	}
}

static void test_gemm_case(int ta, int tb, int m, int n, int k, float beta, double in_eps)
{
	int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
	size_t na = (size_t)(ta ? k : m) * lda, nb = (size_t)(tb ? n : k) * ldb,
	       nc = (size_t)m * ldc;
	float *a = host_rand(na), *b = host_rand(nb), *c = host_rand(nc), *out[2];
	double *scale = calloc(nc ? nc : 1, sizeof(double));
	char what[96];

	for (int i = 0; i < m; i++)
		for (int j = 0; j < n; j++) {
			double s = fabs(beta * c[(size_t)i * ldc + j]);

			for (int p = 0; p < k; p++)
				s += fabs(ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p]) *
				     fabs(tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j]);
			scale[(size_t)i * ldc + j] = s + 1e-30;
		}
	for (int t = 0; t < 2; t++) {
		float *da = up(&T[t], a, na), *db = up(&T[t], b, nb), *dc = up(&T[t], c, nc);

		check(T[t].ops->gemm(T[t].ctx, ta, tb, m, n, k, 0.75f, da, lda, db, ldb, beta, dc,
				     ldc),
		      "gemm");
		out[t] = down(&T[t], dc, nc);
		T[t].ops->free(T[t].ctx, da);
		T[t].ops->free(T[t].ctx, db);
	}
	snprintf(what, sizeof(what), "gemm ta=%d tb=%d %dx%dx%d beta=%g", ta, tb, m, n, k, beta);
	compare(what, out[1], out[0], nc, 2.0 * (k + 2) * FLT_EPSILON + 4.0 * in_eps, scale);
	free(a), free(b), free(c), free(scale), free(out[0]), free(out[1]);
}

static void test_gemm(double in_eps)
{
	for (int ta = 0; ta < 2; ta++)
		for (int tb = 0; tb < 2; tb++) {
			test_gemm_case(ta, tb, 37, 53, 29, 0.0f, in_eps);
			test_gemm_case(ta, tb, 131, 67, 257, 1.5f, in_eps);
		}
	test_gemm_case(0, 0, 5, 7, 0, 2.0f, in_eps); /* empty product: C = beta C */
	test_gemm_case(0, 1, 0, 7, 3, 0.0f, in_eps);
}

static void test_bias_relu(int rows, int cols)
{
	size_t n = (size_t)rows * cols;
	float *y = host_rand(n), *bias = host_rand(cols), *dy = host_rand(n),
	      *dbias = host_rand(cols);
	float *o[2][4];

	for (int t = 0; t < 2; t++) {
		float *dyv = up(&T[t], y, n), *db = up(&T[t], bias, cols), *ddy = up(&T[t], dy, n);
		float *ddb = up(&T[t], dbias, cols), *dy2 = up(&T[t], y, n);

		check(T[t].ops->bias_act_fwd(T[t].ctx, dyv, db, rows, cols, true), "bias_act_fwd");
		check(T[t].ops->bias_act_fwd(T[t].ctx, dy2, NULL, rows, cols, false), "bias_act");
		check(T[t].ops->relu_bwd(T[t].ctx, ddy, dyv, n), "relu_bwd");
		check(T[t].ops->col_sum(T[t].ctx, ddy, rows, cols, ddb, true), "col_sum");
		o[t][0] = down(&T[t], dyv, n);
		o[t][1] = down(&T[t], ddy, n);
		o[t][2] = down(&T[t], ddb, cols);
		o[t][3] = down(&T[t], dy2, n);
		T[t].ops->free(T[t].ctx, db);
	}
	compare("bias_act_fwd relu", o[1][0], o[0][0], n, 0.0, NULL);
	compare("relu_bwd", o[1][1], o[0][1], n, 0.0, NULL);
	compare("col_sum accumulate", o[1][2], o[0][2], cols, 1e-6 * rows, NULL);
	compare("bias_act_fwd no bias", o[1][3], y, n, 0.0, NULL);
	for (int t = 0; t < 2; t++)
		for (int j = 0; j < 4; j++)
			free(o[t][j]);
	free(y), free(bias), free(dy), free(dbias);
}

/* BatchNorm forward (training and inference) and backward. */
static void test_batchnorm(int rows, int cols)
{
	size_t n = (size_t)rows * cols;
	float *x = host_rand(n), *dy = host_rand(n), *gamma = host_rand(cols),
	      *beta = host_rand(cols), *rm = host_rand(cols), *rv = host_rand(cols);
	float *o[2][8];

	for (int c = 0; c < cols; c++)
		rv[c] = fabsf(rv[c]) + 0.5f;
	for (size_t i = 0; i < n; i++)
		x[i] = 3.0f * x[i] + 0.5f; /* a mean away from 0 */
	for (int t = 0; t < 2; t++) {
		struct twin *w = &T[t];
		float *dx = up(w, x, n), *ddy = up(w, dy, n), *dg = up(w, gamma, cols);
		float *dbeta = up(w, beta, cols), *drm = up(w, rm, cols), *drv = up(w, rv, cols);
		float *stats = up(w, NULL, 2 * (size_t)cols),
		      *dstats = up(w, NULL, 2 * (size_t)cols);
		float *inv = up(w, NULL, cols), *xhat = up(w, NULL, n), *y = up(w, NULL, n);
		float *yi = up(w, NULL, n), *gx = up(w, NULL, n);

		check(w->ops->bn_stats(w->ctx, dx, rows, cols, stats), "bn_stats");
		check(w->ops->bn_fwd(w->ctx, dx, stats, rows, cols, rows, dg, dbeta, 1e-5f, 0.1f,
				     drm, drv, inv, xhat, y),
		      "bn_fwd");
		check(w->ops->bn_infer(w->ctx, dx, rows, cols, dg, dbeta, drm, drv, 1e-5f, yi),
		      "bn_infer");
		check(w->ops->bn_bwd_stats(w->ctx, ddy, xhat, rows, cols, dstats), "bn_bwd_stats");
		check(w->ops->bn_bwd_dx(w->ctx, ddy, xhat, inv, dg, dstats, rows, cols, rows, gx),
		      "bn_bwd_dx");
		o[t][0] = down(w, stats, 2 * (size_t)cols);
		o[t][1] = down(w, inv, cols);
		o[t][2] = down(w, y, n);
		o[t][3] = down(w, drm, cols);
		o[t][4] = down(w, drv, cols);
		o[t][5] = down(w, yi, n);
		o[t][6] = down(w, dstats, 2 * (size_t)cols);
		o[t][7] = down(w, gx, n);
		w->ops->free(w->ctx, dx), w->ops->free(w->ctx, ddy), w->ops->free(w->ctx, dg);
		w->ops->free(w->ctx, dbeta), w->ops->free(w->ctx, xhat);
	}
	compare("bn_stats", o[1][0], o[0][0], 2 * (size_t)cols, 1e-6 * rows, NULL);
	compare("bn_fwd invstd", o[1][1], o[0][1], cols, 1e-5, NULL);
	compare("bn_fwd y", o[1][2], o[0][2], n, 1e-5, NULL);
	compare("bn_fwd running_mean", o[1][3], o[0][3], cols, 1e-6, NULL);
	compare("bn_fwd running_var", o[1][4], o[0][4], cols, 1e-5, NULL);
	compare("bn_infer", o[1][5], o[0][5], n, 1e-6, NULL);
	compare("bn_bwd_stats", o[1][6], o[0][6], 2 * (size_t)cols, 1e-5 * rows, NULL);
	compare("bn_bwd_dx", o[1][7], o[0][7], n, 1e-4, NULL);
	for (int t = 0; t < 2; t++)
		for (int j = 0; j < 8; j++)
			free(o[t][j]);
	free(x), free(dy), free(gamma), free(beta), free(rm), free(rv);
}

static void test_xent(int rows, int classes)
{
	size_t n = (size_t)rows * classes;
	float *z = host_rand(n), *o[2][2];
	int32_t *labels = malloc(sizeof(int32_t) * (rows ? rows : 1));

	for (size_t i = 0; i < n; i++)
		z[i] *= 4.0f;
	for (int r = 0; r < rows; r++) {
		urand();
		labels[r] = (int32_t)(rng_state % (unsigned)classes);
	}
	for (int t = 0; t < 2; t++) {
		struct twin *w = &T[t];
		float *dz = up(w, z, n), *dl = up(w, NULL, n), *out = up(w, NULL, 2);
		void *lab;

		check(w->ops->alloc(w->ctx, sizeof(int32_t) * rows, &lab), "alloc");
		check(w->ops->copy_h2d(w->ctx, lab, labels, sizeof(int32_t) * rows), "copy_h2d");
		check(w->ops->xent(w->ctx, dz, lab, rows, classes, 1.0f / rows, dl, out), "xent");
		o[t][0] = down(w, dl, n);
		o[t][1] = down(w, out, 2);
		w->ops->free(w->ctx, dz), w->ops->free(w->ctx, lab);
	}
	compare("xent dlogits", o[1][0], o[0][0], n, 1e-6, NULL);
	compare("xent loss sum", o[1][1], o[0][1], 1, 1e-6, NULL);
	compare("xent correct count", &o[1][1][1], &o[0][1][1], 1, 0.0, NULL);
	for (int t = 0; t < 2; t++)
		free(o[t][0]), free(o[t][1]);
	free(z), free(labels);
}

static void test_sgd_norm_buckets(size_t n)
{
	float *p = host_rand(n), *g = host_rand(n), *m = host_rand(n), *o[2][5];
	size_t lens[3] = {n / 3, 0, n - n / 3};

	for (int t = 0; t < 2; t++) {
		struct twin *w = &T[t];
		float *dp = up(w, p, n), *dg = up(w, g, n), *dm = up(w, m, n),
		      *nrm = up(w, NULL, 2);
		float *flat = up(w, NULL, n), *back = up(w, NULL, n);
		float *srcs[3] = {dg, dg + lens[0], dg + lens[0]};
		float *dsts[3] = {back, back + lens[0], back + lens[0]};
		struct kernel_bucket in = {srcs, lens, 3}, out = {dsts, lens, 3};

		check(w->ops->sgd_update(w->ctx, dp, dg, dm, n, 0.05f, 0.9f, 1e-4f, 0.7f), "sgd");
		check(w->ops->sgd_update(w->ctx, dp, dg, NULL, n, 0.1f, 0.0f, 0.0f, 1.0f), "sgd");
		check(w->ops->sqnorm(w->ctx, dg, n, nrm, false), "sqnorm");
		check(w->ops->sqnorm(w->ctx, dp, n, nrm, true), "sqnorm");
		check(w->ops->scale(w->ctx, dm, n, -0.5f), "scale");
		check(w->ops->bucket_copy_in(w->ctx, flat, &in), "bucket_copy_in");
		check(w->ops->bucket_copy_out(w->ctx, flat, &out, 0.25f), "bucket_copy_out");
		o[t][0] = down(w, dp, n);
		o[t][1] = down(w, dm, n);
		o[t][2] = down(w, nrm, 1);
		o[t][3] = down(w, flat, n);
		o[t][4] = down(w, back, n);
		w->ops->free(w->ctx, dg);
	}
	compare("sgd param", o[1][0], o[0][0], n, 1e-6, NULL);
	compare("sgd momentum + scale", o[1][1], o[0][1], n, 1e-6, NULL);
	compare("sqnorm", o[1][2], o[0][2], 1, 1e-6, NULL);
	compare("bucket_copy_in", o[1][3], g, n, 0.0, NULL);
	compare("bucket_copy_out", o[1][4], o[0][4], n, 0.0, NULL);
	for (int t = 0; t < 2; t++)
		for (int j = 0; j < 5; j++)
			free(o[t][j]);
	free(p), free(g), free(m);
}

/* The TF32/BF16 modes are chosen at ctx_new from DDP_MATMUL_PRECISION. */
static void run_gemm_precision(const char *mode, double in_eps)
{
	struct kernel_ctx *ctx;

	setenv("DDP_MATMUL_PRECISION", mode, 1);
	check(kernel_ops_cuda.ctx_new(0, &ctx), "ctx_new");
	kernel_ops_cuda.ctx_free(T[1].ctx);
	T[1].ctx = ctx;
	test_gemm(in_eps);
	printf("gemm %s: checked\n", mode);
}

int main(void)
{
	char why[256];
	int ndev = cudak_probe_devices(why, sizeof(why));

	if (ndev == 0) {
		printf("skip: no usable GPU (%s)\n", why);
		return CUDAK_EXIT_SKIP;
	}
	T[0] = (struct twin){"cpu", &kernel_ops_cpu, NULL};
	T[1] = (struct twin){"cuda", &kernel_ops_cuda, NULL};
	check(kernel_ops_cpu.ctx_new(0, &T[0].ctx), "cpu ctx_new");
	unsetenv("DDP_MATMUL_PRECISION");
	check(kernel_ops_cuda.ctx_new(0, &T[1].ctx), "cuda ctx_new");
	test_gemm(0.0);
	test_bias_relu(37, 53);
	test_bias_relu(1, 1);
	test_bias_relu(0, 5);
	test_batchnorm(37, 53);
	test_batchnorm(257, 3);
	test_xent(37, 10);
	test_xent(3, 1031);
	test_xent(0, 7);
	test_sgd_norm_buckets(1);
	test_sgd_norm_buckets(100003);
	run_gemm_precision("tf32", 1.0 / 2048);
	run_gemm_precision("bf16", 1.0 / 256);
	kernel_ops_cuda.ctx_free(T[1].ctx);
	kernel_ops_cpu.ctx_free(T[0].ctx);
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("all kernels agree with the CPU twins\n");
	return 0;
}
