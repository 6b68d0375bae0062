/* Unit tests: restart policy, backoff, exit status (policy.c), signal
 * names (signames.c) and the summary (summary.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "exit_status.h"
#include "policy.h"
#include "signames.h"
#include "summary.h"

static void test_decide(void **state)
{
	struct policy p = {.max_restarts = 2};

	assert_int_equal(policy_decide(&p, 0, false, false, false), POLICY_SUCCEEDED);
	assert_int_equal(policy_decide(&p, 0, true, false, false), POLICY_RESTART);
	assert_int_equal(policy_decide(&p, 1, true, false, false), POLICY_RESTART);
	assert_int_equal(policy_decide(&p, 2, true, false, false), POLICY_FAILED);
	assert_int_equal(policy_decide(&p, 0, true, false, true), POLICY_STOPPED);
	assert_int_equal(policy_decide(&p, 0, false, false, true), POLICY_STOPPED);
	/* A failure that will repeat spends no restart; a signal still wins. */
	assert_int_equal(policy_decide(&p, 0, true, true, false), POLICY_FAILED);
	assert_int_equal(policy_decide(&p, 0, true, true, true), POLICY_STOPPED);
}

static void test_permanent(void **state)
{
	/* a shortage of descriptors may pass (issue 28): a restart tries again */
	assert_false(policy_start_error_permanent(-EMFILE));
	assert_false(policy_start_error_permanent(-ENFILE));
	assert_true(policy_start_error_permanent(-ENOSPC));
	assert_true(policy_start_error_permanent(-EDQUOT));
	assert_false(policy_start_error_permanent(-EAGAIN));
	assert_false(policy_start_error_permanent(-ENOMEM));
	assert_false(policy_start_error_permanent(-ENOENT));
	/* ...and the workers' rule is the same one (ddp-train exited 78 for a
	 * lack of descriptors, which ended a fixed-size job on every node) */
	for (int err = 1; err < 200; err++)
		assert_int_equal(exit_status_permanent_errno(-err),
				 policy_start_error_permanent(-err));
	assert_true(policy_exit_permanent(78, 0));
	assert_false(policy_exit_permanent(78, SIGKILL));
	assert_false(policy_exit_permanent(1, 0));
	assert_false(policy_exit_permanent(127, 0));
}

static void test_backoff(void **state)
{
	struct policy none = {.max_restarts = 5};
	struct policy p = {.max_restarts = 5, .backoff_initial = 0.5, .backoff_max = 3};

	assert_int_equal(policy_backoff_ms(&none, 1), 0);
	assert_int_equal(policy_backoff_ms(&p, 1), 500);
	assert_int_equal(policy_backoff_ms(&p, 2), 1000);
	assert_int_equal(policy_backoff_ms(&p, 3), 2000);
	assert_int_equal(policy_backoff_ms(&p, 4), 3000);
	assert_int_equal(policy_backoff_ms(&p, 40), 3000);
}

static void test_exit_status(void **state)
{
	assert_int_equal(policy_exit_status(0, false, 0, 0), 0);
	assert_int_equal(policy_exit_status(SIGTERM, false, 0, 0), 128 + SIGTERM);
	assert_int_equal(policy_exit_status(SIGINT, true, 3, 0), 128 + SIGINT);
	assert_int_equal(policy_exit_status(0, true, 3, 0), 3);
	assert_int_equal(policy_exit_status(0, true, 0, SIGSEGV), 128 + SIGSEGV);
	assert_int_equal(policy_exit_status(0, true, 256, 0), 1);
}

static void test_signames(void **state)
{
	assert_int_equal(signame_parse("TERM"), SIGTERM);
	assert_int_equal(signame_parse("sigusr1"), SIGUSR1);
	assert_int_equal(signame_parse("9"), SIGKILL);
	assert_int_equal(signame_parse("NOPE"), -EINVAL);
	assert_int_equal(signame_parse("0"), -EINVAL);
	assert_string_equal(signame_name(SIGSEGV), "SIGSEGV");
}

static void test_error_file(void **state)
{
	char path[] = "/tmp/ddplaunch_test_errXXXXXX";
	int fd = mkstemp(path);
	const char *nested = "{\"message\": {\"message\": \"RuntimeError: boom\", "
			     "\"extraInfo\": {\"py_callstack\": \"...\", \"timestamp\": \"1\"}}}";
	char *msg;

	assert_true(fd >= 0);
	assert_int_equal(write(fd, nested, strlen(nested)), (ssize_t)strlen(nested));
	close(fd);
	assert_int_equal(summary_read_error_file(path, &msg), 0);
	assert_string_equal(msg, "RuntimeError: boom");
	free(msg);
	fd = open(path, O_WRONLY | O_TRUNC);
	assert_int_equal(write(fd, "{\"message\": \"flat\"}", 19), 19);
	close(fd);
	assert_int_equal(summary_read_error_file(path, &msg), 0);
	assert_string_equal(msg, "flat");
	free(msg);
	fd = open(path, O_WRONLY | O_TRUNC);
	assert_int_equal(write(fd, "not json", 8), 8);
	close(fd);
	assert_int_equal(summary_read_error_file(path, &msg), -EINVAL);
	unlink(path);
	assert_int_equal(summary_read_error_file(path, &msg), -ENOENT);
}

static void test_summary_json(void **state)
{
	struct summary s;
	struct summary_rec a = {.attempt = 0,
				.rank = 1,
				.local_rank = 1,
				.pid = 42,
				.exit_code = 3,
				.first = true,
				.time_ms = 1000,
				.error_message = "boom",
				.stderr_tail = "l1\nl2"};
	struct summary_rec b = {.attempt = 0,
				.rank = 0,
				.pid = 41,
				.term_signal = SIGTERM,
				.stopped = true,
				.time_ms = 1001};
	char path[] = "/tmp/ddplaunch_test_sumXXXXXX";
	int fd = mkstemp(path);
	json_t *root, *w;
	char how[64];

	assert_true(fd >= 0);
	close(fd);
	summary_init(&s);
	assert_int_equal(summary_add(&s, &a), 0);
	assert_int_equal(summary_add(&s, &b), 0);
	assert_ptr_equal(summary_first_failure(&s, 0), &s.recs[0]);
	assert_null(summary_first_failure(&s, 1));
	assert_string_equal(summary_describe(&s.recs[1], how, sizeof(how)),
			    "was killed by SIGTERM");
	b.pid = 0; /* never started: no "pid 0" */
	b.term_signal = 0;
	b.exit_code = 127;
	assert_string_equal(summary_describe(&b, how, sizeof(how)),
			    "could not be started (exit code 127)");
	assert_int_equal(summary_write_json(&s, path, 3, 1, 0), 0);
	root = json_load_file(path, 0, NULL);
	assert_non_null(root);
	assert_int_equal(json_integer_value(json_object_get(root, "exit_code")), 3);
	w = json_object_get(root, "workers");
	assert_int_equal(json_array_size(w), 2);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(w, 0), "pid")), 42);
	assert_string_equal(json_string_value(json_object_get(json_array_get(w, 1), "signal")),
			    "SIGTERM");
	assert_true(json_is_true(json_object_get(json_array_get(w, 0), "first_failure")));
	json_decref(root);
	unlink(path);
	summary_release(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_decide),	 cmocka_unit_test(test_permanent),
	    cmocka_unit_test(test_backoff),	 cmocka_unit_test(test_exit_status),
	    cmocka_unit_test(test_signames),	 cmocka_unit_test(test_error_file),
	    cmocka_unit_test(test_summary_json),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
