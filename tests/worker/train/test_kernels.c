/*
 * test_kernels.c - kernel_ops_cpu against naive references and finite
 * differences, on odd sizes. The CUDA twin's tests compare against the same
 * CPU kernels, so these pin down the contract of kernels.h.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kernels.h"
#include "rng.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const struct kernel_ops *K = &kernel_ops_cpu;
static struct kernel_ctx *C;

static float *rand_vec(struct rng *r, size_t n)
{
	float *v = malloc(sizeof(float) * (n ? n : 1));

	for (size_t i = 0; i < n; i++)
		v[i] = rng_normal(r);
	return v;
}

static void assert_close(double got, double want, double tol)
{
	if (fabs(got - want) > tol * (1.0 + fabs(want)))
		fail_msg("got %.9g, want %.9g (tolerance %g)", got, want, tol);
}

static void test_gemm_all_transposes(void **state)
{
	struct rng r;
	const int m = 7, n = 5, k = 13;

	rng_seed(&r, 1);
	for (int ta = 0; ta < 2; ta++)
		for (int tb = 0; tb < 2; tb++) {
			float *a = rand_vec(&r, m * k), *b = rand_vec(&r, k * n);
			float *c = rand_vec(&r, m * n), *c0 = malloc(sizeof(float) * m * n);
			int lda = ta ? m : k, ldb = tb ? k : n;

			memcpy(c0, c, sizeof(float) * m * n);
			assert_int_equal(
			    K->gemm(C, ta, tb, m, n, k, 0.5f, a, lda, b, ldb, 2.0f, c, n), 0);
			for (int i = 0; i < m; i++)
				for (int j = 0; j < n; j++) {
					double s = 0;

					for (int p = 0; p < k; p++)
						s +=
						    (double)(ta ? a[p * lda + i] : a[i * lda + p]) *
						    (tb ? b[j * ldb + p] : b[p * ldb + j]);
					assert_close(c[i * n + j], 0.5 * s + 2.0 * c0[i * n + j],
						     1e-5);
				}
			free(a);
			free(b);
			free(c);
			free(c0);
		}
}

static void test_gemm_zero_k_and_beta0_ignores_nan(void **state)
{
	float c[6] = {NAN, NAN, NAN, NAN, NAN, NAN}, a[1] = {0}, b[1] = {0};

	assert_int_equal(K->gemm(C, false, false, 2, 3, 0, 1.0f, a, 1, b, 3, 0.0f, c, 3), 0);
	for (int i = 0; i < 6; i++)
		assert_true(c[i] == 0.0f);
	assert_int_equal(K->gemm(C, false, false, -1, 3, 1, 1.0f, a, 1, b, 3, 0.0f, c, 3), -EINVAL);
}

static void test_bias_relu_and_colsum(void **state)
{
	float y[6] = {-1, 2, 0.5f, 3, -4, 0}, bias[3] = {0.5f, -1, 0}, dy[6] = {1, 2, 3, 4, 5, 6};
	float db[3] = {10, 10, 10};

	assert_int_equal(K->bias_act_fwd(C, y, bias, 2, 3, true), 0);
	assert_true(y[0] == 0.0f && y[1] == 1.0f && y[2] == 0.5f);
	assert_true(y[3] == 3.5f && y[4] == 0.0f && y[5] == 0.0f);
	assert_int_equal(K->relu_bwd(C, dy, y, 6), 0);
	assert_true(dy[0] == 0 && dy[1] == 2 && dy[2] == 3 && dy[3] == 4 && dy[4] == 0 &&
		    dy[5] == 0);
	assert_int_equal(K->col_sum(C, dy, 2, 3, db, true), 0);
	assert_true(db[0] == 14 && db[1] == 12 && db[2] == 13);
	assert_int_equal(K->col_sum(C, dy, 2, 3, db, false), 0);
	assert_true(db[0] == 4 && db[1] == 2 && db[2] == 3);
}

/* Loss for BN finite differences: sum_i w_i * BN(x)_i. */
static double bn_loss(const float *x, int rows, int cols, const float *gamma, const float *beta,
		      const float *w)
{
	float *stats = malloc(sizeof(float) * 2 * cols), *inv = malloc(sizeof(float) * cols);
	float *xhat = malloc(sizeof(float) * rows * cols), *y = malloc(sizeof(float) * rows * cols);
	double l = 0;

	K->bn_stats(C, x, rows, cols, stats);
	K->bn_fwd(C, x, stats, rows, cols, rows, gamma, beta, 1e-5f, 0.1f, NULL, NULL, inv, xhat,
		  y);
	for (int i = 0; i < rows * cols; i++)
		l += (double)w[i] * y[i];
	free(stats);
	free(inv);
	free(xhat);
	free(y);
	return l;
}

static void test_batchnorm_forward_matches_naive(void **state)
{
	enum { R = 9, CO = 5 };
	struct rng r;
	float *x, gamma[CO], beta[CO], stats[2 * CO], inv[CO], xhat[R * CO], y[R * CO];
	float rm[CO] = {0}, rv[CO] = {1, 1, 1, 1, 1};

	rng_seed(&r, 2);
	x = rand_vec(&r, R * CO);
	for (int c = 0; c < CO; c++) {
		gamma[c] = 1.0f + 0.1f * c;
		beta[c] = 0.2f * c;
	}
	assert_int_equal(K->bn_stats(C, x, R, CO, stats), 0);
	assert_int_equal(
	    K->bn_fwd(C, x, stats, R, CO, R, gamma, beta, 1e-5f, 0.1f, rm, rv, inv, xhat, y), 0);
	for (int c = 0; c < CO; c++) {
		double mean = 0, var = 0;

		for (int i = 0; i < R; i++)
			mean += x[i * CO + c] / (double)R;
		for (int i = 0; i < R; i++)
			var += pow(x[i * CO + c] - mean, 2) / R;
		assert_close(inv[c], 1.0 / sqrt(var + 1e-5), 1e-5);
		assert_close(rm[c], 0.1 * mean, 1e-5);
		assert_close(rv[c], 0.9 + 0.1 * var * R / (R - 1), 1e-5);
		for (int i = 0; i < R; i++)
			assert_close(y[i * CO + c],
				     gamma[c] * (x[i * CO + c] - mean) / sqrt(var + 1e-5) + beta[c],
				     1e-5);
	}
	/* Inference with the running statistics. */
	assert_int_equal(K->bn_infer(C, x, R, CO, gamma, beta, rm, rv, 1e-5f, y), 0);
	assert_close(y[0], gamma[0] * (x[0] - rm[0]) / sqrt(rv[0] + 1e-5) + beta[0], 1e-5);
	free(x);
}

static void test_batchnorm_backward_matches_finite_differences(void **state)
{
	enum { R = 6, CO = 3 };
	struct rng r;
	float *x, *w, gamma[CO] = {1.5f, 0.7f, 1.0f}, beta[CO] = {0.1f, -0.2f, 0.3f};
	float stats[2 * CO], inv[CO], xhat[R * CO], y[R * CO], dstats[2 * CO], dx[R * CO];

	rng_seed(&r, 3);
	x = rand_vec(&r, R * CO);
	w = rand_vec(&r, R * CO);
	K->bn_stats(C, x, R, CO, stats);
	K->bn_fwd(C, x, stats, R, CO, R, gamma, beta, 1e-5f, 0.1f, NULL, NULL, inv, xhat, y);
	/* dL/dy = w. */
	assert_int_equal(K->bn_bwd_stats(C, w, xhat, R, CO, dstats), 0);
	assert_int_equal(K->bn_bwd_dx(C, w, xhat, inv, gamma, dstats, R, CO, R, dx), 0);
	for (int i = 0; i < R * CO; i++) {
		float save = x[i], h = 1e-2f;
		double lp, lm;

		x[i] = save + h;
		lp = bn_loss(x, R, CO, gamma, beta, w);
		x[i] = save - h;
		lm = bn_loss(x, R, CO, gamma, beta, w);
		x[i] = save;
		assert_close(dx[i], (lp - lm) / (2 * h), 2e-2);
	}
	for (int c = 0; c < CO; c++) {
		double db = 0, dg = 0;

		for (int i = 0; i < R; i++) {
			db += w[i * CO + c];
			dg += w[i * CO + c] * xhat[i * CO + c];
		}
		assert_close(dstats[c], db, 1e-5);
		assert_close(dstats[CO + c], dg, 1e-5);
	}
	free(x);
	free(w);
}

static void test_xent_loss_grad_and_accuracy(void **state)
{
	float z[6] = {1, 2, 3, 0.5f, 0.5f, -1}, d[6], out[2];
	int32_t labels[2] = {2, 1};
	double l0 = log(exp(1) + exp(2) + exp(3)) - 3;
	double l1 = log(exp(0.5) + exp(0.5) + exp(-1)) - 0.5;

	assert_int_equal(K->xent(C, z, labels, 2, 3, 0.5f, d, out), 0);
	assert_close(out[0], l0 + l1, 1e-6);
	/* Row 1's tie goes to the first maximum (index 0), so it is wrong. */
	assert_true(out[1] == 1.0f);
	assert_close(d[2], 0.5 * (exp(3) / (exp(1) + exp(2) + exp(3)) - 1), 1e-6);
	assert_close(d[3], 0.5 * exp(0.5) / (2 * exp(0.5) + exp(-1)), 1e-6);
	labels[0] = 3;
	assert_int_equal(K->xent(C, z, labels, 2, 3, 0.5f, d, out), -EINVAL);
}

static void test_sgd_matches_torch_formula(void **state)
{
	float p[3] = {1, -2, 0.5f}, g[3] = {0.1f, 0.2f, -0.3f}, mom[3] = {0};
	double rp[3] = {1, -2, 0.5}, rb[3] = {0};

	for (int step = 0; step < 3; step++) {
		assert_int_equal(K->sgd_update(C, p, g, mom, 3, 0.1f, 0.9f, 0.01f, 0.5f), 0);
		for (int i = 0; i < 3; i++) {
			double gi = 0.5 * g[i] + 0.01 * rp[i];

			rb[i] = step == 0 ? gi : 0.9 * rb[i] + gi; /* torch: buf = g first */
			rp[i] -= 0.1 * rb[i];
			assert_close(p[i], rp[i], 1e-6);
		}
	}
	/* momentum 0: plain SGD, mom untouched */
	mom[0] = 42;
	K->sgd_update(C, p, g, mom, 1, 1.0f, 0.0f, 0.0f, 1.0f);
	assert_true(mom[0] == 42.0f);
}

static void test_sqnorm_scale_and_buckets(void **state)
{
	float a[3] = {1, 2, 3}, b[2] = {4, 5}, flat[5], norm = 0;
	float *ts[2] = {a, b};
	size_t lens[2] = {3, 2};
	struct kernel_bucket bk = {ts, lens, 2};

	assert_int_equal(K->sqnorm(C, a, 3, &norm, false), 0);
	assert_int_equal(K->sqnorm(C, b, 2, &norm, true), 0);
	assert_true(norm == 55.0f);
	assert_int_equal(K->bucket_copy_in(C, flat, &bk), 0);
	for (int i = 0; i < 5; i++)
		assert_true(flat[i] == (float)(i + 1));
	K->scale(C, flat, 5, 2.0f);
	assert_int_equal(K->bucket_copy_out(C, flat, &bk, 0.5f), 0);
	assert_true(a[0] == 1 && a[2] == 3 && b[0] == 4 && b[1] == 5);
}

static void test_alloc_is_zeroed_and_aligned(void **state)
{
	float *p;

	assert_int_equal(K->alloc(C, 1000, (void **)&p), 0);
	assert_true(((uintptr_t)p & 63) == 0);
	for (int i = 0; i < 250; i++)
		assert_true(p[i] == 0.0f);
	K->free(C, p);
	assert_int_equal(K->alloc(C, 0, (void **)&p), 0);
	K->free(C, p);
	K->free(C, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_gemm_all_transposes),
	    cmocka_unit_test(test_gemm_zero_k_and_beta0_ignores_nan),
	    cmocka_unit_test(test_bias_relu_and_colsum),
	    cmocka_unit_test(test_batchnorm_forward_matches_naive),
	    cmocka_unit_test(test_batchnorm_backward_matches_finite_differences),
	    cmocka_unit_test(test_xent_loss_grad_and_accuracy),
	    cmocka_unit_test(test_sgd_matches_torch_formula),
	    cmocka_unit_test(test_sqnorm_scale_and_buckets),
	    cmocka_unit_test(test_alloc_is_zeroed_and_aligned),
	};
	int ret;

	if (K->ctx_new(0, &C) < 0)
		return 1;
	ret = cmocka_run_group_tests(tests, NULL, NULL);
	K->ctx_free(C);
	return ret;
}
