/*
 * test_optim.c - learning-rate schedules, parameter groups (biases at
 * bias_lr_mult x lr without weight decay) and clipping by global norm.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "optim.h"

#include <errno.h>
#include <math.h>
#include <string.h>

static void test_schedules(void **state)
{
	struct optim_config c = {.lr = 0.1f, .poly_power = 2.0f, .min_lr = 0.01f};
	enum optim_schedule s;

	assert_int_equal(optim_schedule_parse("poly", &s), 0);
	assert_int_equal(s, OPTIM_POLY);
	assert_int_equal(optim_schedule_parse("linear", &s), -EINVAL);
	c.schedule = OPTIM_CONSTANT;
	assert_float_equal(optim_lr_at(&c, 50, 100), 0.1, 1e-7);
	c.schedule = OPTIM_POLY;
	assert_float_equal(optim_lr_at(&c, 0, 100), 0.1, 1e-7);
	assert_float_equal(optim_lr_at(&c, 50, 100), 0.1 * 0.25, 1e-7);
	assert_float_equal(optim_lr_at(&c, 100, 100), 0.0, 1e-9);
	assert_float_equal(optim_lr_at(&c, 500, 100), 0.0, 1e-9);
	c.schedule = OPTIM_COSINE;
	assert_float_equal(optim_lr_at(&c, 0, 100), 0.1, 1e-7);
	assert_float_equal(optim_lr_at(&c, 50, 100), 0.01 + 0.09 * 0.5, 1e-7);
	assert_float_equal(optim_lr_at(&c, 100, 100), 0.01, 1e-7);
	c.warmup_steps = 4;
	assert_float_equal(optim_lr_at(&c, 0, 100), 0.025, 1e-7);
	assert_float_equal(optim_lr_at(&c, 3, 100), 0.1, 1e-7);
}

static void setup_model(struct model *m, struct kernel_ctx **kc)
{
	struct model_config mc = {.ndims = 2, .dims = {2, 2}, .max_batch = 1};

	kernel_ops_cpu.ctx_new(0, kc);
	assert_int_equal(model_init(m, &kernel_ops_cpu, *kc, &mc, NULL, 3), 0);
	/* 0.weight (2x2) at 0..3, 0.bias at 4..5 */
	for (int i = 0; i < 6; i++) {
		m->params[i] = 1.0f;
		m->grads[i] = 1.0f;
	}
}

static void test_groups_lr_and_decay(void **state)
{
	struct kernel_ctx *kc;
	struct model m;
	struct optim o;
	struct optim_config c = {.lr = 0.1f,
				 .weight_decay = 0.5f,
				 .bias_lr_mult = 2.0f,
				 .bias_weight_decay = 0.0f,
				 .schedule = OPTIM_CONSTANT};

	setup_model(&m, &kc);
	assert_int_equal(optim_init(&o, &c, &m), 0);
	assert_int_equal(optim_step(&o, &m, 0, 10), 0);
	/* weight: 1 - 0.1 * (1 + 0.5 * 1); bias: 1 - 0.2 * 1 */
	assert_float_equal(m.params[0], 0.85, 1e-6);
	assert_float_equal(m.params[4], 0.8, 1e-6);
	optim_release(&o, &m);
	model_release(&m);
	kernel_ops_cpu.ctx_free(kc);
}

static void test_clipping_by_global_norm(void **state)
{
	struct kernel_ctx *kc;
	struct model m;
	struct optim o;
	struct optim_config c = {.lr = 1.0f, .bias_lr_mult = 1.0f, .clip_norm = 1.0f};

	setup_model(&m, &kc);
	/* six gradients of 1: norm sqrt(6) -> scaled to norm 1 */
	assert_int_equal(optim_init(&o, &c, &m), 0);
	assert_int_equal(optim_step(&o, &m, 0, 10), 0);
	assert_float_equal(o.last_norm, sqrt(6.0), 1e-5);
	assert_float_equal(m.params[0], 1.0 - 1.0 / sqrt(6.0), 1e-5);
	/* below the threshold nothing changes */
	c.clip_norm = 100.0f;
	o.cfg = c;
	assert_int_equal(optim_step(&o, &m, 0, 10), 0);
	assert_float_equal(m.params[5], 1.0 - 1.0 / sqrt(6.0) - 1.0, 1e-5);
	optim_release(&o, &m);
	model_release(&m);
	kernel_ops_cpu.ctx_free(kc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_schedules),
	    cmocka_unit_test(test_groups_lr_and_decay),
	    cmocka_unit_test(test_clipping_by_global_norm),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
