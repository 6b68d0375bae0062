/*
 * test_summary_hangs.c - summary.json's "hangs" and their "waiters": each
 * node's waiters added to the hang they are of (completed after the hang is
 * first recorded), a node that says again replacing what it said, none for
 * a hang not recorded, and "waits_on" null where the rank is unknown.
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
#include <string.h>
#include <unistd.h>

static struct summary_waiter waiter(int node, int rank, int on, const char *state, double for_s)
{
	struct summary_waiter w = {
	    .node = node, .rank = rank, .waits_on = on, .seq = 812, .for_s = for_s};

	snprintf(w.state, sizeof(w.state), "%s", state);
	snprintf(w.op, sizeof(w.op), "allreduce");
	snprintf(w.phase, sizeof(w.phase), "collective");
	return w;
}

static json_t *at(json_t *a, size_t i, const char *k)
{
	return json_object_get(json_array_get(a, i), k);
}

static void test_waiters_of_every_node(void **state)
{
	struct summary s;
	struct summary_hang h = {.round = 4, .node = 1, .rank = 3, .seq = 812, .cut = true};
	struct summary_hang other = {.round = 4, .node = 2, .rank = 5, .seq = 900};
	struct summary_waiter n0[] = {waiter(0, 0, 5, "waits", 1.1), waiter(0, 1, 0, "waits", 1.0)};
	struct summary_waiter n1[] = {waiter(1, 2, 3, "waits", 1.2)};
	struct summary_waiter n1b[] = {waiter(1, 2, -1, "waited", 1.3)};
	json_t *root, *hangs, *ws;

	(void)state;
	summary_init(&s);
	snprintf(h.line, sizeof(h.line), "hang: node 1 rank 3 pid 42 has not left allreduce #812");
	assert_int_equal(summary_add_waiters(&s, 4, 3, 812, 0, n0, 2), -ENOENT);
	assert_int_equal(summary_add_hang(&s, &h), 0);
	assert_int_equal(summary_add_hang(&s, &other), 0);
	assert_int_equal(summary_add_waiters(&s, 4, 3, 812, 1, n1, 1), 0);
	assert_int_equal(summary_add_waiters(&s, 4, 3, 812, 0, n0, 2), 0);
	assert_int_equal(summary_add_waiters(&s, 4, 3, 812, 1, n1b, 1), 0); /* said again */
	assert_int_equal(summary_add_waiters(&s, 4, 3, 813, 2, n0, 2), -ENOENT);
	root = summary_written(&s);
	hangs = json_object_get(root, "hangs");
	assert_int_equal(json_array_size(hangs), 2);
	ws = at(hangs, 0, "waiters");
	assert_int_equal(json_array_size(ws), 3);
	assert_int_equal(json_integer_value(at(ws, 0, "node")), 0);
	assert_int_equal(json_integer_value(at(ws, 0, "rank")), 0);
	assert_int_equal(json_integer_value(at(ws, 0, "waits_on")), 5);
	assert_string_equal(json_string_value(at(ws, 0, "state")), "waits");
	assert_string_equal(json_string_value(at(ws, 0, "op")), "allreduce");
	assert_string_equal(json_string_value(at(ws, 0, "phase")), "collective");
	assert_int_equal(json_integer_value(at(ws, 0, "seq")), 812);
	assert_true(json_real_value(at(ws, 0, "for_s")) > 1.09);
	assert_int_equal(json_integer_value(at(ws, 1, "rank")), 1);
	assert_int_equal(json_integer_value(at(ws, 2, "node")), 1);
	assert_string_equal(json_string_value(at(ws, 2, "state")), "waited");
	assert_true(json_is_null(at(ws, 2, "waits_on")));
	assert_int_equal(json_array_size(at(hangs, 1, "waiters")), 0);
	assert_string_equal(json_string_value(at(hangs, 0, "line")), h.line);
	{ /* who waits on whom, by rank, for the end summary and the status */
		char buf[64];

		summary_hang_waits(&s.hangs[0], 32, buf, sizeof(buf));
		assert_string_equal(buf, "0>5 1>0 2>?");
		summary_hang_waits(&s.hangs[0], 2, buf, sizeof(buf));
		assert_string_equal(buf, "0>5 1>0");
		summary_hang_waits(&s.hangs[0], 32, buf, 6);
		assert_string_equal(buf, "0>5 1");
		summary_hang_waits(&s.hangs[1], 32, buf, sizeof(buf));
		assert_string_equal(buf, "");
	}
	json_decref(root);
	summary_release(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_waiters_of_every_node),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
