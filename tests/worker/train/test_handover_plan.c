/*
 * test_handover_plan.c - the hand-over's decision over every rank's step:
 * the lowest rank at the highest step sends, ranks behind take, a fresh
 * process takes any step, and ranks that hold states more than one step
 * apart are refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "handover_plan.h"

#include <errno.h>

static void test_one_behind(void **state)
{
	double steps[] = {7, 8, 8, -1};
	struct handover_plan p;

	(void)state;
	assert_int_equal(handover_plan(steps, 4, &p), 0);
	assert_int_equal(p.root, 1);
	assert_true(p.max == 8.0);
	assert_int_equal(p.behind, 2); /* rank 0 (a step behind) and rank 3 (fresh) */
}

static void test_all_fresh(void **state)
{
	double steps[] = {-1, -1, -1};
	struct handover_plan p;

	(void)state;
	assert_int_equal(handover_plan(steps, 3, &p), 0);
	assert_int_equal(p.root, -1);
	assert_true(p.max < 0.0);
	assert_int_equal(p.behind, 0);
}

static void test_fresh_takes_any_step(void **state)
{
	double steps[] = {-1, 500, 500};
	struct handover_plan p;

	(void)state;
	assert_int_equal(handover_plan(steps, 3, &p), 0);
	assert_int_equal(p.root, 1);
	assert_int_equal(p.behind, 1);
}

static void test_two_apart_refused(void **state)
{
	double steps[] = {10, -1, 12, 11};
	struct handover_plan p;

	(void)state;
	assert_int_equal(handover_plan(steps, 4, &p), -EPROTO);
	assert_int_equal(p.lo_rank, 0);
	assert_true(p.lo == 10.0);
	assert_int_equal(p.root, 2);
	assert_true(p.max == 12.0);
}

static void test_far_apart_refused(void **state)
{
	double steps[] = {1000, 3};
	struct handover_plan p;

	(void)state;
	assert_int_equal(handover_plan(steps, 2, &p), -EPROTO);
	assert_int_equal(p.lo_rank, 1);
	assert_int_equal(p.root, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_one_behind),		 cmocka_unit_test(test_all_fresh),
	    cmocka_unit_test(test_fresh_takes_any_step), cmocka_unit_test(test_two_apart_refused),
	    cmocka_unit_test(test_far_apart_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
