/*
 * test_train_sampler.c - libddp's distributed sampler as ddp-train relies on it:
 * the shares of N ranks are disjoint and cover the data, the order changes
 * from epoch to epoch, and at every step the union of the N ranks' batches
 * of B is exactly the batch of N*B that one rank would take (what makes N
 * ranks x B equivalent to 1 rank x N*B).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "ddp.h"

#include <stdlib.h>
#include <string.h>

enum { N_DATA = 96, BATCH = 4 };

static int cmp_size(const void *a, const void *b)
{
	size_t x = *(const size_t *)a, y = *(const size_t *)b;

	return x < y ? -1 : x > y;
}

static void test_shares_disjoint_and_cover(void **state)
{
	for (size_t world = 2; world <= 4; world += 2) {
		unsigned char seen[N_DATA] = {0};

		for (size_t r = 0; r < world; r++) {
			struct ddp_sampler s;

			assert_int_equal(ddp_sampler_init(&s, N_DATA, world, r, 5, 1, 0), 0);
			assert_int_equal(s.num_samples, N_DATA / world);
			for (size_t i = 0; i < s.num_samples; i++) {
				assert_int_equal(seen[s.indices[i]], 0);
				seen[s.indices[i]] = 1;
			}
			ddp_sampler_release(&s);
		}
		for (int i = 0; i < N_DATA; i++)
			assert_int_equal(seen[i], 1);
	}
}

static void test_epochs_differ_and_repeat(void **state)
{
	struct ddp_sampler s;
	size_t e0[N_DATA / 2], e1[N_DATA / 2];

	assert_int_equal(ddp_sampler_init(&s, N_DATA, 2, 0, 5, 1, 0), 0);
	memcpy(e0, s.indices, sizeof(e0));
	assert_int_equal(ddp_sampler_set_epoch(&s, 1), 0);
	memcpy(e1, s.indices, sizeof(e1));
	assert_memory_not_equal(e0, e1, sizeof(e0));
	/* Seeking back to epoch 0 gives epoch 0's order again (resume). */
	assert_int_equal(ddp_sampler_seek(&s, 0, 3), 0);
	assert_memory_equal(e0, s.indices, sizeof(e0));
	ddp_sampler_release(&s);
}

static void test_union_of_rank_batches_is_the_big_batch(void **state)
{
	const size_t world = 4;
	struct ddp_sampler one, ranks[4];
	size_t big[BATCH * 4], got[BATCH * 4];

	assert_int_equal(ddp_sampler_init(&one, N_DATA, 1, 0, 9, 1, 0), 0);
	for (size_t r = 0; r < world; r++)
		assert_int_equal(ddp_sampler_init(&ranks[r], N_DATA, world, r, 9, 1, 0), 0);
	for (uint64_t epoch = 0; epoch < 2; epoch++)
		for (size_t step = 0; step < N_DATA / (BATCH * world); step++) {
			assert_int_equal(ddp_sampler_seek(&one, epoch, step * BATCH * world), 0);
			assert_int_equal(ddp_sampler_next_batch(&one, big, BATCH * world),
					 BATCH * world);
			for (size_t r = 0; r < world; r++) {
				assert_int_equal(ddp_sampler_seek(&ranks[r], epoch, step * BATCH),
						 0);
				assert_int_equal(
				    ddp_sampler_next_batch(&ranks[r], got + r * BATCH, BATCH),
				    BATCH);
			}
			qsort(big, BATCH * world, sizeof(size_t), cmp_size);
			qsort(got, BATCH * world, sizeof(size_t), cmp_size);
			assert_memory_equal(big, got, sizeof(big));
		}
	ddp_sampler_release(&one);
	for (size_t r = 0; r < world; r++)
		ddp_sampler_release(&ranks[r]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_shares_disjoint_and_cover),
	    cmocka_unit_test(test_epochs_differ_and_repeat),
	    cmocka_unit_test(test_union_of_rank_batches_is_the_big_batch),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
