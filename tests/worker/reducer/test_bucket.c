/*
 * test_bucket.c - the reducer's bucket plan: reverse parameter order, a
 * small first bucket, the cap, frozen parameters left out, dtype changes,
 * index order inside a bucket.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "bucket.h"

#define KIB 1024u

static void test_reverse_order_and_caps(void **state)
{
	/* float32 params of 100, 300, 300, 200, 50 KiB (index order). */
	size_t numel[] = {25600, 76800, 76800, 51200, 12800};
	enum ddp_dtype dt[] = {DDP_FLOAT32, DDP_FLOAT32, DDP_FLOAT32, DDP_FLOAT32, DDP_FLOAT32};
	int tr[] = {1, 1, 1, 1, 1};
	struct bucket_plan p;

	assert_int_equal(bucket_plan_build(numel, dt, tr, 5, 600 * KIB, 256 * KIB, &p), 0);
	/* First bucket (cap 256 KiB): params 4 (50) + 3 (200) = 250 KiB. */
	assert_int_equal(p.bucket_of[4], 0);
	assert_int_equal(p.bucket_of[3], 0);
	/* Index order inside the bucket: the range of a flat gradient buffer. */
	assert_int_equal(p.offset[3], 0);
	assert_int_equal(p.offset[4], 51200);
	/* Then cap 600 KiB: params 2 + 1 (600), then param 0. */
	assert_int_equal(p.bucket_of[2], 1);
	assert_int_equal(p.bucket_of[1], 1);
	assert_int_equal(p.offset[1], 0);
	assert_int_equal(p.offset[2], 76800);
	assert_int_equal(p.bucket_of[0], 2);
	assert_int_equal(p.nbuckets, 3);
	assert_int_equal(p.bucket_numel[1], 153600);
	assert_int_equal(p.bucket_nparams[0], 2);
	bucket_plan_release(&p);
}

static void test_frozen_and_dtype_and_big(void **state)
{
	size_t numel[] = {10, 1000000, 10, 10};
	enum ddp_dtype dt[] = {DDP_FLOAT32, DDP_FLOAT32, DDP_FLOAT64, DDP_FLOAT64};
	int tr[] = {1, 1, 0, 1};
	struct bucket_plan p;

	assert_int_equal(bucket_plan_build(numel, dt, tr, 4, 1024, 1024, &p), 0);
	assert_int_equal(p.bucket_of[2], BUCKET_NONE); /* frozen */
	assert_int_equal(p.bucket_of[3], 0);
	assert_int_equal(p.bucket_dtype[0], DDP_FLOAT64);
	/* A parameter above the cap gets a bucket of its own. */
	assert_int_equal(p.bucket_of[1], 1);
	assert_int_equal(p.bucket_numel[1], 1000000);
	assert_int_equal(p.bucket_of[0], 2);
	assert_int_equal(p.nbuckets, 3);
	bucket_plan_release(&p);
}

static void test_default_caps_and_refusals(void **state)
{
	size_t numel[] = {1 << 20, 1 << 20, 1 << 20};
	enum ddp_dtype dt[] = {DDP_FLOAT32, DDP_FLOAT32, DDP_FLOAT32};
	int tr[] = {1, 1, 1}, none[] = {0, 0, 0};
	struct bucket_plan p;

	/* 4 MiB each: first bucket (1 MiB cap) holds one, the 25 MiB one the rest. */
	assert_int_equal(bucket_plan_build(numel, dt, tr, 3, DDP_BUCKET_CAP_DEFAULT,
					   DDP_FIRST_BUCKET_CAP_DEFAULT, &p),
			 0);
	assert_int_equal(p.nbuckets, 2);
	assert_int_equal(p.bucket_of[2], 0);
	assert_int_equal(p.bucket_of[1], 1);
	assert_int_equal(p.bucket_of[0], 1);
	bucket_plan_release(&p);
	assert_int_equal(bucket_plan_build(numel, dt, none, 3, 100, 100, &p), 0);
	assert_int_equal(p.nbuckets, 0);
	bucket_plan_release(&p);
	assert_int_equal(bucket_plan_build(numel, dt, tr, 3, 0, 100, &p), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_reverse_order_and_caps),
	    cmocka_unit_test(test_frozen_and_dtype_and_big),
	    cmocka_unit_test(test_default_caps_and_refusals),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
