/*
 * test_sampler.c - the distributed sampler: disjoint equal shares,
 * padding and drop_last like torch's DistributedSampler, (seed, epoch)
 * shuffles, automatic epoch advance, save/restore of the position.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ddp.h"

/* Takes one epoch of rank r's indices into out (n of them). */
static size_t take_epoch(size_t len, size_t reps, size_t r, uint64_t seed, uint64_t epoch,
			 int shuffle, int drop_last, size_t *out)
{
	struct ddp_sampler s;
	size_t n = 0, idx;

	assert_int_equal(ddp_sampler_init(&s, len, reps, r, seed, shuffle, drop_last), 0);
	assert_int_equal(ddp_sampler_set_epoch(&s, epoch), 0);
	while (ddp_sampler_next(&s, &idx) == 1)
		out[n++] = idx;
	assert_int_equal(s.epoch, epoch + 1); /* advanced by itself */
	ddp_sampler_release(&s);
	return n;
}

static void test_padding_covers_all(void **state)
{
	size_t counts[10] = {0}, got[16];

	for (size_t r = 0; r < 3; r++) {
		size_t n = take_epoch(10, 3, r, 7, 0, 1, 0, got);

		assert_int_equal(n, 4); /* ceil(10 / 3) */
		for (size_t i = 0; i < n; i++) {
			assert_true(got[i] < 10);
			counts[got[i]]++;
		}
	}
	/* 12 slots for 10 samples: every sample at least once, 2 repeated. */
	size_t twice = 0;
	for (size_t i = 0; i < 10; i++) {
		assert_true(counts[i] >= 1);
		twice += counts[i] - 1;
	}
	assert_int_equal(twice, 2);
}

static void test_drop_last_disjoint(void **state)
{
	int seen[10] = {0};
	size_t got[16];

	for (size_t r = 0; r < 3; r++) {
		size_t n = take_epoch(10, 3, r, 7, 2, 1, 1, got);

		assert_int_equal(n, 3); /* floor(10 / 3) */
		for (size_t i = 0; i < n; i++) {
			assert_int_equal(seen[got[i]], 0);
			seen[got[i]] = 1;
		}
	}
}

static void test_no_shuffle_is_strided(void **state)
{
	size_t got[8];
	size_t n = take_epoch(10, 4, 1, 0, 0, 0, 0, got);

	/* torch: indices [0..9] + [0, 1] padded, rank 1 takes 1, 5, 9. */
	assert_int_equal(n, 3);
	assert_int_equal(got[0], 1);
	assert_int_equal(got[1], 5);
	assert_int_equal(got[2], 9);
	n = take_epoch(10, 4, 3, 0, 0, 0, 0, got);
	assert_int_equal(got[2], 1); /* the padding repeats the start */
}

static void test_epochs_and_seeds_change_order(void **state)
{
	size_t a[100], b[100], c[100], d[100];

	take_epoch(100, 2, 0, 42, 0, 1, 0, a);
	take_epoch(100, 2, 0, 42, 1, 1, 0, b);
	take_epoch(100, 2, 0, 43, 0, 1, 0, c);
	take_epoch(100, 2, 0, 42, 0, 1, 0, d);
	assert_true(memcmp(a, b, sizeof(a) / 2) != 0);
	assert_true(memcmp(a, c, sizeof(a) / 2) != 0);
	assert_memory_equal(a, d, 50 * sizeof(size_t));
}

static void test_every_epoch_disjoint_across_ranks(void **state)
{
	for (uint64_t e = 0; e < 5; e++) {
		int seen[1000] = {0};
		size_t got[300];

		for (size_t r = 0; r < 4; r++) {
			size_t n = take_epoch(1000, 4, r, 1, e, 1, 0, got);

			assert_int_equal(n, 250);
			for (size_t i = 0; i < n; i++)
				seen[got[i]]++;
		}
		for (int i = 0; i < 1000; i++)
			assert_int_equal(seen[i], 1);
	}
}

static void test_auto_advance_and_restore(void **state)
{
	struct ddp_sampler s, t;
	size_t batch[8], first[8], again[8], n;

	assert_int_equal(ddp_sampler_init(&s, 50, 2, 1, 9, 1, 0), 0);
	/* Run through epoch 0 in batches; the empty batch ends it. */
	while ((n = ddp_sampler_next_batch(&s, batch, 8)) > 0)
		;
	assert_int_equal(s.epoch, 1);
	assert_int_equal(s.pos, 0);
	ddp_sampler_next_batch(&s, batch, 8);
	/* Save mid-epoch, continue, then restore in a fresh sampler. */
	uint64_t ep = s.epoch;
	size_t pos = s.pos;
	assert_int_equal(ddp_sampler_next_batch(&s, first, 8), 8);
	assert_int_equal(ddp_sampler_init(&t, 50, 2, 1, 9, 1, 0), 0);
	assert_int_equal(ddp_sampler_seek(&t, ep, pos), 0);
	assert_int_equal(ddp_sampler_next_batch(&t, again, 8), 8);
	assert_memory_equal(first, again, sizeof(first));
	assert_int_equal(ddp_sampler_seek(&t, ep, 26), -EINVAL);
	ddp_sampler_release(&s);
	ddp_sampler_release(&t);
}

static void test_small_dataset_and_refusals(void **state)
{
	struct ddp_sampler s;
	size_t idx;

	/* Fewer samples than ranks: each rank still gets one (padding). */
	assert_int_equal(ddp_sampler_init(&s, 2, 5, 4, 0, 1, 0), 0);
	assert_int_equal(s.num_samples, 1);
	assert_int_equal(ddp_sampler_next(&s, &idx), 1);
	assert_true(idx < 2);
	ddp_sampler_release(&s);
	assert_int_equal(ddp_sampler_init(&s, 2, 5, 4, 0, 1, 1), -EINVAL);
	assert_int_equal(ddp_sampler_init(&s, 10, 0, 0, 0, 1, 0), -EINVAL);
	assert_int_equal(ddp_sampler_init(&s, 10, 2, 2, 0, 1, 0), -EINVAL);
	assert_int_equal(ddp_sampler_init(&s, 0, 2, 0, 0, 1, 0), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_padding_covers_all),
	    cmocka_unit_test(test_drop_last_disjoint),
	    cmocka_unit_test(test_no_shuffle_is_strided),
	    cmocka_unit_test(test_epochs_and_seeds_change_order),
	    cmocka_unit_test(test_every_epoch_disjoint_across_ranks),
	    cmocka_unit_test(test_auto_advance_and_restore),
	    cmocka_unit_test(test_small_dataset_and_refusals),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
