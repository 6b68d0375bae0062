/*
 * test_summary_numerics.c - summary.json's "numerics": the worst promise the
 * workers said (refused over dropped over kept, the first of equals), with
 * its rank and text, or null when no worker said one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "summary.h"
#include "summary_written.h"

#include <jansson.h>
#include <stdlib.h>
#include <unistd.h>

static void test_none_is_null(void **state)
{
	struct summary s;
	json_t *root;

	(void)state;
	summary_init(&s);
	root = summary_written(&s);
	assert_true(json_is_null(json_object_get(root, "numerics")));
	json_decref(root);
	summary_release(&s);
}

static void test_worst_kept(void **state)
{
	struct summary s;
	json_t *root, *n;

	(void)state;
	summary_init(&s);
	summary_note_numerics(&s, 2, SUMMARY_PROMISE_KEPT, "OpenBLAS kernel Haswell");
	summary_note_numerics(&s, 0, SUMMARY_PROMISE_KEPT, "another");
	root = summary_written(&s);
	n = json_object_get(root, "numerics");
	assert_string_equal(json_string_value(json_object_get(n, "promise")), "kept");
	assert_int_equal(json_integer_value(json_object_get(n, "rank")), 2);
	assert_string_equal(json_string_value(json_object_get(n, "identity")),
			    "OpenBLAS kernel Haswell");
	assert_null(json_object_get(n, "why"));
	json_decref(root);
	summary_note_numerics(&s, 1, SUMMARY_PROMISE_REFUSED, "rank 1 uses ...");
	summary_note_numerics(&s, 0, SUMMARY_PROMISE_DROPPED, "not kept");
	root = summary_written(&s);
	n = json_object_get(root, "numerics");
	assert_string_equal(json_string_value(json_object_get(n, "promise")), "refused");
	assert_int_equal(json_integer_value(json_object_get(n, "rank")), 1);
	assert_string_equal(json_string_value(json_object_get(n, "why")), "rank 1 uses ...");
	json_decref(root);
	summary_release(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_none_is_null),
	    cmocka_unit_test(test_worst_kept),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
