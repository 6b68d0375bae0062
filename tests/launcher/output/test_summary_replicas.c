/*
 * test_summary_replicas.c - summary.json's "replicas": each replica that
 * differed kept once however many workers tell it, the first
 * SUMMARY_REPLICAS_MAX listed and the rest counted in "replicas_more" (a
 * replica healed at every step must not grow the list without bound).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "summary.h"
#include "summary_written.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Rank `rank` healed after `step`, told by `tellers` workers. */
static void tell(struct summary *s, int step, int rank, int tellers)
{
	struct summary_replica r = {.step = step, .rank = rank, .healed = true};

	snprintf(r.tensor, sizeof(r.tensor), "fc%d.weight", rank);
	assert_int_equal(summary_add_replica(s, &r), 1);
	for (int i = 1; i < tellers; i++)
		assert_int_equal(summary_add_replica(s, &r), 0);
}

static void test_kept_once(void **state)
{
	struct summary s;
	json_t *root, *a;

	(void)state;
	summary_init(&s);
	tell(&s, 5, 1, 8);
	tell(&s, 5, 2, 8);
	tell(&s, 6, 1, 8);
	root = summary_written(&s);
	a = json_object_get(root, "replicas");
	assert_int_equal(json_array_size(a), 3);
	assert_string_equal(json_string_value(json_object_get(json_array_get(a, 1), "tensor")),
			    "fc2.weight");
	assert_int_equal(json_integer_value(json_object_get(root, "replicas_more")), 0);
	json_decref(root);
	summary_release(&s);
}

/* A flaky replica healed at each of 100000 steps, told by 4 workers: the
 * list stays at the cap, the rest counted. */
static void test_bounded(void **state)
{
	const int steps = 100000;
	struct summary s;
	json_t *root;

	(void)state;
	summary_init(&s);
	for (int step = 1; step <= steps; step++)
		tell(&s, step, 3, 4);
	assert_int_equal(s.nreplicas, SUMMARY_REPLICAS_MAX);
	assert_int_equal(s.replicas_more, steps - SUMMARY_REPLICAS_MAX);
	root = summary_written(&s);
	assert_int_equal(json_array_size(json_object_get(root, "replicas")), SUMMARY_REPLICAS_MAX);
	assert_int_equal(json_integer_value(json_object_get(root, "replicas_more")),
			 steps - SUMMARY_REPLICAS_MAX);
	json_decref(root);
	summary_release(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_kept_once),
	    cmocka_unit_test(test_bounded),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
