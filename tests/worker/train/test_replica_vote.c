/*
 * test_replica_vote.c - the replica check's decision over every rank's
 * digest: all equal; a minority outvoted by a strict majority (its lowest
 * rank heals the others); no majority with two ranks or a tie; the first
 * item that differs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "replica_vote.h"

static void test_all_equal(void **state)
{
	uint64_t d[] = {7, 7, 7, 7};
	struct replica_vote v;

	(void)state;
	assert_int_equal(replica_vote(d, 4, &v), 1);
	assert_int_equal(v.agree, 1);
	assert_int_equal(v.root, 0);
	assert_int_equal(v.majority, 4);
	assert_int_equal(v.bad, 0);
	assert_int_equal(v.first_bad, -1);
}

static void test_one_of_three(void **state)
{
	uint64_t d[] = {5, 9, 5};
	struct replica_vote v;

	(void)state;
	assert_int_equal(replica_vote(d, 3, &v), 0);
	assert_int_equal(v.root, 0);
	assert_int_equal(v.majority, 2);
	assert_int_equal(v.bad, 1);
	assert_int_equal(v.first_bad, 1);
}

static void test_rank0_outvoted(void **state)
{
	uint64_t d[] = {1, 4, 4, 2, 4};
	struct replica_vote v;

	(void)state;
	assert_int_equal(replica_vote(d, 5, &v), 0);
	assert_int_equal(v.root, 1); /* the lowest rank of the majority sends */
	assert_int_equal(v.majority, 3);
	assert_int_equal(v.bad, 2); /* ranks 0 and 3, whatever they hold */
	assert_int_equal(v.first_bad, 0);
}

static void test_two_ranks_no_majority(void **state)
{
	uint64_t d[] = {3, 8};
	struct replica_vote v;

	(void)state;
	assert_int_equal(replica_vote(d, 2, &v), 0);
	assert_int_equal(v.root, -1);
	assert_int_equal(v.majority, 0);
	assert_int_equal(v.bad, 1);
	assert_int_equal(v.first_bad, 1); /* named against rank 0 */
}

static void test_tie_no_majority(void **state)
{
	uint64_t d[] = {3, 3, 8, 8};
	struct replica_vote v;

	(void)state;
	assert_int_equal(replica_vote(d, 4, &v), 0);
	assert_int_equal(v.root, -1);
	assert_int_equal(v.first_bad, 2);
}

static void test_one_rank(void **state)
{
	uint64_t d[] = {42};
	struct replica_vote v;

	(void)state;
	assert_int_equal(replica_vote(d, 1, &v), 1);
	assert_int_equal(v.root, 0);
}

static void test_first_diff(void **state)
{
	uint64_t a[] = {1, 2, 3, 4}, b[] = {1, 2, 9, 5};

	(void)state;
	assert_int_equal(replica_first_diff(a, b, 4), 2);
	assert_int_equal(replica_first_diff(a, a, 4), -1);
	assert_int_equal(replica_first_diff(a, b, 2), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_all_equal),	    cmocka_unit_test(test_one_of_three),
	    cmocka_unit_test(test_rank0_outvoted),  cmocka_unit_test(test_two_ranks_no_majority),
	    cmocka_unit_test(test_tie_no_majority), cmocka_unit_test(test_one_rank),
	    cmocka_unit_test(test_first_diff),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
