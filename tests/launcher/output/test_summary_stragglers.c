/*
 * test_summary_stragglers.c - summary.json's "stragglers": each "straggler"
 * line kept once however many workers tell it, a clearing closing the
 * rank's entry, a re-naming opening a new one, the per-cause counts /metrics
 * reads, and the list bounded (the rest counted in "stragglers_more").
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "summary.h"
#include "summary_written.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* One line told by `tellers` workers. */
static void tell(struct summary *s, int step, int rank, int node, int cause, double slower,
		 int tellers)
{
	struct summary_straggler g = {.step = step,
				      .rank = rank,
				      .node = node,
				      .cause = cause,
				      .slower = slower,
				      .cleared_step = -1};

	assert_int_equal(summary_add_straggler(s, &g), 1);
	for (int i = 1; i < tellers; i++)
		assert_int_equal(summary_add_straggler(s, &g), 0);
}

static json_t *field(json_t *a, size_t i, const char *k)
{
	return json_object_get(json_array_get(a, i), k);
}

static void test_named_cleared(void **state)
{
	struct summary s;
	json_t *root, *a;

	(void)state;
	summary_init(&s);
	tell(&s, 40, 1, 1, 1, 1.85, 4); /* rank 1 named for compute */
	tell(&s, 52, 1, 1, 0, 1.02, 4); /* cleared */
	tell(&s, 60, 2, 1, 2, 3.5, 4);	/* rank 2 named for its link, never cleared */
	assert_int_equal(s.stragglers_named[1], 1);
	assert_int_equal(s.stragglers_named[2], 1);
	root = summary_written(&s);
	a = json_object_get(root, "stragglers");
	assert_int_equal(json_array_size(a), 2);
	assert_int_equal(json_integer_value(field(a, 0, "step")), 40);
	assert_int_equal(json_integer_value(field(a, 0, "rank")), 1);
	assert_int_equal(json_integer_value(field(a, 0, "node")), 1);
	assert_string_equal(json_string_value(field(a, 0, "cause")), "compute");
	assert_true(json_real_value(field(a, 0, "slower")) > 1.84 &&
		    json_real_value(field(a, 0, "slower")) < 1.86);
	assert_int_equal(json_integer_value(field(a, 0, "cleared_step")), 52);
	assert_string_equal(json_string_value(field(a, 1, "cause")), "link");
	assert_true(json_is_null(field(a, 1, "cleared_step")));
	assert_int_equal(json_integer_value(json_object_get(root, "stragglers_more")), 0);
	json_decref(root);
	summary_release(&s);
}

/* Named for its compute, then for its link with no clearing between: the
 * first entry is closed at the second's step. */
static void test_renamed(void **state)
{
	struct summary s;

	(void)state;
	summary_init(&s);
	tell(&s, 10, 0, 0, 1, 2.0, 2);
	tell(&s, 30, 0, 0, 2, 2.5, 2);
	assert_int_equal(s.nstragglers, 2);
	assert_int_equal(s.stragglers[0].cleared_step, 30);
	assert_int_equal(s.stragglers[1].cleared_step, -1);
	assert_int_equal(summary_add_straggler(&s, &(struct summary_straggler){.cause = 3}),
			 -EINVAL);
	summary_release(&s);
}

/* A rank that flaps for 10000 steps: the list stays at the cap. */
static void test_bounded(void **state)
{
	const int flaps = 10000;
	struct summary s;
	json_t *root;

	(void)state;
	summary_init(&s);
	for (int i = 0; i < flaps; i++) {
		tell(&s, 2 * i, 3, 1, 1, 1.5, 3);
		tell(&s, 2 * i + 1, 3, 1, 0, 1.0, 3);
	}
	assert_int_equal(s.nstragglers, SUMMARY_STRAGGLERS_MAX);
	assert_int_equal(s.stragglers_more, flaps - SUMMARY_STRAGGLERS_MAX);
	assert_int_equal(s.stragglers_named[1], flaps);
	root = summary_written(&s);
	assert_int_equal(json_array_size(json_object_get(root, "stragglers")),
			 SUMMARY_STRAGGLERS_MAX);
	assert_int_equal(json_integer_value(json_object_get(root, "stragglers_more")),
			 flaps - SUMMARY_STRAGGLERS_MAX);
	json_decref(root);
	summary_release(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_named_cleared),
	    cmocka_unit_test(test_renamed),
	    cmocka_unit_test(test_bounded),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
