/*
 * test_model.c - the MLP: tensor names as torch's nn.Sequential, gradients
 * of the whole network (Linear, BatchNorm, ReLU, cross-entropy) against
 * finite differences, the order in which gradients are announced ready, and
 * model_memory_bytes against what model_init really allocates.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "model.h"
#include "rng.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { ROWS = 8 };

static struct model_config small_config(bool bn)
{
	struct model_config c = {.ndims = 4,
				 .dims = {5, 7, 6, 3},
				 .batchnorm = bn,
				 .bn_eps = 1e-5f,
				 .bn_momentum = 0.1f,
				 .max_batch = ROWS};
	return c;
}

static void test_names_follow_torch_sequential(void **state)
{
	struct kernel_ctx *kc;
	struct model m;
	struct model_config cfg = small_config(true);
	const char *want[] = {"0.weight",	"0.bias",	 "1.weight",	   "1.bias",
			      "1.running_mean", "1.running_var", "3.weight",	   "3.bias",
			      "4.weight",	"4.bias",	 "4.running_mean", "4.running_var",
			      "6.weight",	"6.bias"};

	kernel_ops_cpu.ctx_new(0, &kc);
	assert_int_equal(model_init(&m, &kernel_ops_cpu, kc, &cfg, NULL, 1), 0);
	assert_int_equal(m.ntensors, 14);
	for (int i = 0; i < 14; i++)
		assert_string_equal(m.tensors[i].name, want[i]);
	assert_int_equal(m.tensors[0].shape[0], 7);
	assert_int_equal(m.tensors[0].shape[1], 5);
	assert_true(m.tensors[0].decay && !m.tensors[1].decay && m.tensors[4].is_buffer);
	assert_int_equal(m.nparams, 7 * 5 + 7 + 7 + 7 + 6 * 7 + 6 + 6 + 6 + 3 * 6 + 3);
	/* torch's init: BN weight 1, running_var 1; Linear within 1/sqrt(in) */
	assert_true(model_tensor_data(&m, 2)[0] == 1.0f && model_tensor_data(&m, 5)[3] == 1.0f);
	for (int i = 0; i < 35; i++)
		assert_true(fabsf(m.params[i]) <= 1.0f / sqrtf(5.0f));
	model_release(&m);
	kernel_ops_cpu.ctx_free(kc);
}

static double loss_at(struct model *m, const float *x, const int32_t *y)
{
	const float *logits;
	float out[2];

	/* Training-mode forward: batch statistics, as in the gradient. */
	model_forward(m, x, ROWS, true, &logits);
	model_loss_backward(m, x, y, ROWS, false, out);
	return out[0] / ROWS;
}

static int ready_log[64], nready;

static int record_ready(void *arg, int index)
{
	ready_log[nready++] = index;
	return 0;
}

static void check_gradients(bool bn)
{
	struct kernel_ctx *kc;
	struct model m;
	struct model_config cfg = small_config(bn);
	struct model_comm comm = {.grad_ready = record_ready};
	struct rng r;
	float x[ROWS * 5], out[2], *grad;
	int32_t y[ROWS];
	const float *logits;

	kernel_ops_cpu.ctx_new(0, &kc);
	assert_int_equal(model_init(&m, &kernel_ops_cpu, kc, &cfg, &comm, 7), 0);
	rng_seed(&r, 11);
	for (int i = 0; i < ROWS * 5; i++)
		x[i] = rng_normal(&r);
	for (int i = 0; i < ROWS; i++)
		y[i] = (int32_t)rng_below(&r, 3);
	nready = 0;
	assert_int_equal(model_forward(&m, x, ROWS, true, &logits), 0);
	assert_int_equal(model_loss_backward(&m, x, y, ROWS, true, out), 0);
	grad = malloc(sizeof(float) * m.nparams);
	memcpy(grad, m.grads, sizeof(float) * m.nparams);
	/* Every parameter announced exactly once, last layer first. */
	assert_int_equal(nready, bn ? 10 : 6);
	assert_int_equal(ready_log[0], m.layers[2].b);
	assert_int_equal(ready_log[nready - 1], m.layers[0].w);
	for (size_t i = 0; i < m.nparams; i++) {
		float save = m.params[i], h = 2e-3f;
		double lp, lm;

		m.params[i] = save + h;
		lp = loss_at(&m, x, y);
		m.params[i] = save - h;
		lm = loss_at(&m, x, y);
		m.params[i] = save;
		if (fabs((lp - lm) / (2 * h) - grad[i]) > 2e-3 + 2e-2 * fabs(grad[i]))
			fail_msg("param %zu: finite difference %.6g, backward %.6g", i,
				 (lp - lm) / (2 * h), grad[i]);
	}
	free(grad);
	model_release(&m);
	kernel_ops_cpu.ctx_free(kc);
}

static void test_gradients_with_batchnorm(void **state)
{
	check_gradients(true);
}

static void test_gradients_without_batchnorm(void **state)
{
	check_gradients(false);
}

static void test_bad_configs_are_refused(void **state)
{
	struct kernel_ctx *kc;
	struct model m;
	struct model_config cfg = small_config(true);

	kernel_ops_cpu.ctx_new(0, &kc);
	cfg.dims[3] = 1; /* one class */
	assert_int_equal(model_init(&m, &kernel_ops_cpu, kc, &cfg, NULL, 1), -EINVAL);
	cfg = small_config(true);
	cfg.max_batch = 0;
	assert_int_equal(model_init(&m, &kernel_ops_cpu, kc, &cfg, NULL, 1), -EINVAL);
	cfg = small_config(true);
	assert_int_equal(model_init(&m, &kernel_ops_cpu, kc, &cfg, NULL, 1), 0);
	{
		const float *logits;
		float x[(ROWS + 1) * 5] = {0};

		assert_int_equal(model_forward(&m, x, ROWS + 1, true, &logits), -EINVAL);
	}
	model_release(&m);
	kernel_ops_cpu.ctx_free(kc);
}

/* kernel_ops_cpu counting what is allocated through it. */
static size_t counted;
static int counting_alloc(struct kernel_ctx *ctx, size_t bytes, void **out)
{
	counted += bytes;
	return kernel_ops_cpu.alloc(ctx, bytes, out);
}

static void test_memory_estimate_is_exact(void **state)
{
	struct kernel_ops ops = kernel_ops_cpu;
	struct kernel_ctx *kc;
	struct model m;
	size_t np = 0;

	ops.alloc = counting_alloc;
	kernel_ops_cpu.ctx_new(0, &kc);
	for (int bn = 0; bn < 2; bn++) {
		struct model_config cfg = small_config(bn);

		counted = 0;
		assert_int_equal(model_init(&m, &ops, kc, &cfg, NULL, 1), 0);
		assert_int_equal(model_memory_bytes(&cfg, &np), counted);
		assert_int_equal(np, m.nparams);
		model_release(&m);
	}
	/* --hidden 100000,100000 on the digits: 10^10 weights, no overflow. */
	struct model_config big = small_config(true);
	big.dims[1] = big.dims[2] = 100000;
	assert_true(model_memory_bytes(&big, &np) > 80000000000ull);
	assert_true(np > 10000000000ull);
	kernel_ops_cpu.ctx_free(kc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_names_follow_torch_sequential),
	    cmocka_unit_test(test_gradients_with_batchnorm),
	    cmocka_unit_test(test_gradients_without_batchnorm),
	    cmocka_unit_test(test_bad_configs_are_refused),
	    cmocka_unit_test(test_memory_estimate_is_exact),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
