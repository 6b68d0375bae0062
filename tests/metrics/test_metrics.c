/* Unit tests for metrics/metrics.c: Prometheus' text format, compared
 * whole with what it must be. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "metrics.h"

static const char *text(struct metrics_out *o)
{
	size_t len;
	const char *t = metrics_out_text(o, &len);

	assert_non_null(t);
	return t;
}

static void test_gauge_and_counter(void **state)
{
	struct metrics_out o;
	struct metrics_label l[2] = {{"node", "n1"}, {"reason", "dead"}};

	(void)state;
	metrics_out_init(&o);
	assert_int_equal(metrics_family(&o, "ddp_round", METRICS_GAUGE, "The round."), 0);
	assert_int_equal(metrics_sample(&o, NULL, 0, 3), 0);
	assert_int_equal(metrics_family(&o, "ddp_reformations_total", METRICS_COUNTER,
					"Re-formations, by cause."),
			 0);
	assert_int_equal(metrics_sample(&o, l, 2, 12), 0);
	assert_string_equal(text(&o), "# HELP ddp_round The round.\n"
				      "# TYPE ddp_round gauge\n"
				      "ddp_round 3\n"
				      "# HELP ddp_reformations_total Re-formations, by cause.\n"
				      "# TYPE ddp_reformations_total counter\n"
				      "ddp_reformations_total{node=\"n1\",reason=\"dead\"} 12\n");
	metrics_out_release(&o);
}

static void test_values(void **state)
{
	struct metrics_out o;

	(void)state;
	metrics_out_init(&o);
	metrics_family(&o, "x_seconds", METRICS_GAUGE, "h");
	metrics_sample(&o, NULL, 0, 0.25);
	metrics_sample(&o, NULL, 0, 0.1);
	metrics_sample(&o, NULL, 0, -2);
	metrics_sample(&o, NULL, 0, 1e300);
	metrics_sample(&o, NULL, 0, NAN);
	metrics_sample(&o, NULL, 0, INFINITY);
	metrics_sample(&o, NULL, 0, -INFINITY);
	metrics_sample(&o, NULL, 0, 9007199254740991.0);
	assert_string_equal(text(&o), "# HELP x_seconds h\n# TYPE x_seconds gauge\n"
				      "x_seconds 0.25\nx_seconds 0.1\nx_seconds -2\n"
				      "x_seconds 1e+300\nx_seconds NaN\nx_seconds +Inf\n"
				      "x_seconds -Inf\nx_seconds 9007199254740991\n");
	metrics_out_release(&o);
}

static void test_escapes(void **state)
{
	struct metrics_out o;
	struct metrics_label l = {"why", "a \"b\"\\c\nd"};

	(void)state;
	metrics_out_init(&o);
	metrics_family(&o, "e", METRICS_GAUGE, "line\\one\ntwo \"q\"");
	metrics_sample(&o, &l, 1, 1);
	assert_string_equal(text(&o), "# HELP e line\\\\one\\ntwo \"q\"\n# TYPE e gauge\n"
				      "e{why=\"a \\\"b\\\"\\\\c\\nd\"} 1\n");
	metrics_out_release(&o);
}

static void test_bad_names(void **state)
{
	struct metrics_out o;
	struct metrics_label bad[] = {{"1x", "v"}, {"__x", "v"}, {"a-b", "v"}};
	size_t len;

	(void)state;
	const char *names[] = {"", "1abc", "a-b", "a b", "counter_without_suffix"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		metrics_out_init(&o);
		assert_int_equal(
		    metrics_family(&o, names[i], i == 4 ? METRICS_COUNTER : METRICS_GAUGE, "h"),
		    -EINVAL);
		metrics_out_release(&o);
	}
	/* a gauge named like a counter */
	metrics_out_init(&o);
	assert_int_equal(metrics_family(&o, "g_total", METRICS_GAUGE, "h"), -EINVAL);
	metrics_out_release(&o);
	for (size_t i = 0; i < 3; i++) {
		metrics_out_init(&o);
		assert_int_equal(metrics_family(&o, "ok:name_1", METRICS_GAUGE, "h"), 0);
		assert_int_equal(metrics_sample(&o, &bad[i], 1, 1), -EINVAL);
		/* sticky */
		assert_int_equal(metrics_sample(&o, NULL, 0, 1), -EINVAL);
		assert_null(metrics_out_text(&o, &len));
		assert_int_equal(len, 0);
		metrics_out_release(&o);
	}
	/* a sample before any family */
	metrics_out_init(&o);
	assert_int_equal(metrics_sample(&o, NULL, 0, 1), -EINVAL);
	metrics_out_release(&o);
}

static void test_histogram(void **state)
{
	struct metrics_out o;
	struct metrics_hist h;
	struct metrics_label l = {"local_rank", "0"};
	const double b[] = {0.01, 0.1, 1};
	const double bad[] = {1, 1};

	(void)state;
	assert_int_equal(metrics_hist_init(&h, bad, 2), -EINVAL);
	assert_int_equal(metrics_hist_init(&h, b, 3), 0);
	metrics_hist_observe(&h, 0.005);
	metrics_hist_observe(&h, 0.1); /* le is inclusive */
	metrics_hist_observe(&h, 0.5);
	metrics_hist_observe(&h, 4);
	metrics_out_init(&o);
	/* not a histogram family */
	metrics_family(&o, "g", METRICS_GAUGE, "h");
	assert_int_equal(metrics_hist_write(&o, NULL, 0, &h), -EINVAL);
	metrics_out_release(&o);
	metrics_out_init(&o);
	metrics_family(&o, "ddp_step_seconds", METRICS_HISTOGRAM, "Step time.");
	assert_int_equal(metrics_sample(&o, NULL, 0, 1), -EINVAL);
	metrics_out_release(&o);
	metrics_out_init(&o);
	metrics_family(&o, "ddp_step_seconds", METRICS_HISTOGRAM, "Step time.");
	assert_int_equal(metrics_hist_write(&o, &l, 1, &h), 0);
	assert_string_equal(text(&o), "# HELP ddp_step_seconds Step time.\n"
				      "# TYPE ddp_step_seconds histogram\n"
				      "ddp_step_seconds_bucket{local_rank=\"0\",le=\"0.01\"} 1\n"
				      "ddp_step_seconds_bucket{local_rank=\"0\",le=\"0.1\"} 2\n"
				      "ddp_step_seconds_bucket{local_rank=\"0\",le=\"1\"} 3\n"
				      "ddp_step_seconds_bucket{local_rank=\"0\",le=\"+Inf\"} 4\n"
				      "ddp_step_seconds_sum{local_rank=\"0\"} 4.605\n"
				      "ddp_step_seconds_count{local_rank=\"0\"} 4\n");
	metrics_out_release(&o);
}

/* Many steps between two reads: exact _sum and _count, in their mean's
 * bucket, at O(1) whatever their number (2^62 here). */
static void test_histogram_many(void **state)
{
	struct metrics_out o;
	struct metrics_hist h;
	const double b[] = {0.01, 0.1, 1};

	(void)state;
	assert_int_equal(metrics_hist_init(&h, b, 3), 0);
	metrics_hist_observe_n(&h, 0.6, 3); /* mean 0.2 */
	metrics_hist_observe_n(&h, 1, 0);   /* nothing */
	assert_int_equal(h.count, 3);
	assert_int_equal(h.counts[2], 3);
	metrics_hist_observe_n(&h, 0, 1ull << 62);
	assert_true(h.counts[0] == 1ull << 62);
	assert_true(h.count == (1ull << 62) + 3);
	metrics_out_init(&o);
	assert_int_equal(metrics_single(&o, "ddp_x_total", METRICS_COUNTER, "X.", 7), 0);
	assert_string_equal(text(&o), "# HELP ddp_x_total X.\n"
				      "# TYPE ddp_x_total counter\n"
				      "ddp_x_total 7\n");
	assert_int_equal(metrics_single(&o, "ddp_bad", METRICS_COUNTER, "X.", 7), -EINVAL);
	metrics_out_release(&o);
}

static void test_grows(void **state)
{
	struct metrics_out o;
	size_t len;

	(void)state;
	metrics_out_init(&o);
	metrics_family(&o, "many", METRICS_GAUGE, "h");
	for (int i = 0; i < 10000; i++)
		assert_int_equal(metrics_sample(&o, NULL, 0, i), 0);
	assert_non_null(metrics_out_text(&o, &len));
	/* "many N\n": 6 bytes and N's digits (10 of 1, 90 of 2, 900 of 3,
	 * 9000 of 4) */
	assert_int_equal(len, strlen("# HELP many h\n# TYPE many gauge\n") + 10000 * 6 + 10 + 180 +
				  2700 + 36000);
	metrics_out_release(&o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_gauge_and_counter),
	    cmocka_unit_test(test_values),
	    cmocka_unit_test(test_escapes),
	    cmocka_unit_test(test_bad_names),
	    cmocka_unit_test(test_histogram),
	    cmocka_unit_test(test_histogram_many),
	    cmocka_unit_test(test_grows),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
