/* What a process does, from /proc (proc_state.h): the stat parser on lines
 * whose command holds spaces and parentheses, and real processes: this one
 * (running), a child stopped with SIGSTOP, one sleeping in the kernel, and
 * a pid that is gone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proc_state.h"

static void test_parse(void **state)
{
	char s;
	uint64_t t;

	assert_int_equal(proc_state_parse_stat("42 (ddp-train) T 1 42 42 0 -1 4194560 100 0 0 0 "
					       "17 5 0 0 20 0 3 0 123 0 0",
					       &s, &t),
			 0);
	assert_int_equal(s, 'T');
	assert_int_equal(t, 22);
	assert_int_equal(
	    proc_state_parse_stat("7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 3 4 0 0", &s, &t), 0);
	assert_int_equal(s, 'R');
	assert_int_equal(t, 7);
	assert_int_equal(proc_state_parse_stat("7 no-parens S 1", &s, &t), -EIO);
	assert_int_equal(proc_state_parse_stat("7 (x) S 1 2", &s, &t), -EIO);
}

/* A child that waits (in the kernel) until killed. */
static pid_t child_sleeping(void)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		for (;;)
			pause();
	}
	return pid;
}

/* Waits (bounded) until pid's main thread shows state `want`. */
static struct proc_state wait_state(pid_t pid, char want)
{
	struct proc_state ps = {0};

	for (int i = 0; i < 500; i++) {
		if (proc_state_read(pid, &ps) == 0 && ps.main_state == want)
			return ps;
		usleep(10000);
	}
	fail_msg("pid %d never showed state %c (last %c)", (int)pid, want, ps.main_state);
	return ps;
}

static void test_real(void **state)
{
	struct proc_state ps;
	pid_t pid = child_sleeping();
	int st;

	assert_int_equal(proc_state_read(getpid(), &ps), 0);
	assert_int_equal(ps.main_state, 'R');
	assert_true(ps.threads >= 1 && ps.running >= 1);
	ps = wait_state(pid, 'S');
	assert_int_equal(ps.stopped, 0);
	assert_int_equal(ps.blocked, 1);
	kill(pid, SIGSTOP);
	ps = wait_state(pid, 'T');
	assert_int_equal(ps.stopped, 1);
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	assert_int_equal(proc_state_read(pid, &ps), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse),
	    cmocka_unit_test(test_real),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
