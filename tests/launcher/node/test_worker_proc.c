/* worker_proc alone on a real libuv loop: real processes (launch_helper,
 * ddp-exec, /bin/sh), their lines on the console and log fds, the exit
 * callback's status, and the closed callback once every handle has closed.
 * LAUNCH_HELPER and DDP_EXEC name the two programs (set by meson). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "worker_proc.h"

#define WATCHDOG_MS 20000

struct run {
	uv_loop_t loop;
	uv_timer_t watchdog;
	struct worker_proc p;
	FILE *console[2], *log[2];
	int nexit, nclosed;
	bool busy_at_exit, busy_at_close;
	int exit_code, term_signal;
	int took_at_exit; /* the process's took_round when its exit was heard */
	/* What a test does in the callbacks, besides recording. */
	void (*at_exit)(struct run *r);
	void (*at_closed)(struct run *r);
	char **next_argv; /* at_closed_respawn: the second run */
};

static const char *program(const char *var)
{
	const char *v = getenv(var);

	if (!v || !*v)
		fail_msg("%s is not set (run this test through meson)", var);
	return v;
}

static void on_exit_cb(struct worker_proc *p, void *arg)
{
	struct run *r = arg;

	assert_ptr_equal(p, &r->p);
	r->nexit++;
	r->busy_at_exit = worker_proc_busy(p);
	r->exit_code = p->exit_code;
	r->term_signal = p->term_signal;
	r->took_at_exit = p->took_round;
	if (r->at_exit)
		r->at_exit(r);
}

static void on_closed_cb(struct worker_proc *p, void *arg)
{
	struct run *r = arg;

	assert_ptr_equal(p, &r->p);
	r->nclosed++;
	r->busy_at_close = worker_proc_busy(p);
	if (r->at_closed)
		r->at_closed(r);
}

static void on_watchdog(uv_timer_t *t)
{
	fail_msg("the run did not end within %d ms", WATCHDOG_MS);
}

static void run_init(struct run *r)
{
	memset(r, 0, sizeof(*r));
	assert_int_equal(uv_loop_init(&r->loop), 0);
	uv_timer_init(&r->loop, &r->watchdog);
	uv_timer_start(&r->watchdog, on_watchdog, WATCHDOG_MS, 0);
	uv_unref((uv_handle_t *)&r->watchdog); /* only the run keeps the loop alive */
	for (int s = 0; s < 2; s++) {
		r->console[s] = tmpfile();
		r->log[s] = tmpfile();
		assert_non_null(r->console[s]);
		assert_non_null(r->log[s]);
	}
	worker_proc_init(&r->p);
}

static int run_spawn(struct run *r, const char *file, char **argv, char **env)
{
	struct worker_proc_config cfg = {
	    .loop = &r->loop,
	    .file = file,
	    .argv = argv,
	    .env = env,
	    .prefix = "[w] ",
	    .console_fd = {fileno(r->console[0]), fileno(r->console[1])},
	    .log_fd = {fileno(r->log[0]), fileno(r->log[1])},
	    .on_exit = on_exit_cb,
	    .on_closed = on_closed_cb,
	    .arg = r,
	};

	return worker_proc_spawn(&r->p, &cfg);
}

/* Runs the loop until nothing but the watchdog is left; then no handle of
 * the run may remain. */
static void run_loop(struct run *r)
{
	uv_run(&r->loop, UV_RUN_DEFAULT);
	uv_close((uv_handle_t *)&r->watchdog, NULL);
	uv_run(&r->loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&r->loop), 0);
}

/* The whole content of f, NUL-terminated (static buffer). */
static const char *slurp(FILE *f)
{
	static char buf[8192];
	size_t n;

	fflush(f);
	rewind(f);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	return buf;
}

static void run_release(struct run *r)
{
	for (int s = 0; s < 2; s++) {
		fclose(r->console[s]);
		fclose(r->log[s]);
	}
}

/* Under ddp-exec, as the agent runs a worker: stdout lines written in
 * pieces come out whole, prefixed on the console and bare in the log; the
 * worker's own pid arrives on fd 3. */
static void test_lines_under_ddp_exec(void **state)
{
	struct run r;
	char parent[24], line[400], want_log[2048] = "", want_console[2048] = "";
	char *argv[] = {(char *)program("DDP_EXEC"),
			parent,
			(char *)program("LAUNCH_HELPER"),
			"burst",
			"3",
			"300",
			NULL};
	char *env[] = {"RANK=1", NULL};

	snprintf(parent, sizeof(parent), "%d", (int)getpid());
	run_init(&r);
	assert_int_equal(run_spawn(&r, argv[0], argv, env), 0);
	assert_true(worker_proc_busy(&r.p));
	assert_true(r.p.running);
	assert_true(r.p.shim_pid > 0);
	run_loop(&r);

	assert_int_equal(r.nexit, 1);
	assert_int_equal(r.nclosed, 1);
	assert_false(r.busy_at_close);
	assert_false(worker_proc_busy(&r.p));
	assert_false(r.p.running);
	assert_int_equal(r.exit_code, 0);
	assert_int_equal(r.term_signal, 0);
	assert_true(r.p.pid > 0);
	assert_int_not_equal(r.p.pid, r.p.shim_pid);
	for (int l = 0; l < 3; l++) {
		int n = snprintf(line, sizeof(line), "R1:%d:", l);

		memset(line + n, 'b', 300);
		line[n + 300] = '\0';
		strcat(want_log, line);
		strcat(want_log, "\n");
		strcat(want_console, "[w] ");
		strcat(want_console, line);
		strcat(want_console, "\n");
	}
	assert_string_equal(slurp(r.console[0]), want_console);
	assert_string_equal(slurp(r.log[0]), want_log);
	assert_string_equal(slurp(r.console[1]), "");
	assert_string_equal(slurp(r.log[1]), "");
	run_release(&r);
}

/* Run directly: stderr lines go to the console, the log and the tail; the
 * exit code comes through; nothing reported on fd 3. */
static void test_stderr_and_exit_code(void **state)
{
	struct run r;
	char *argv[] = {(char *)program("LAUNCH_HELPER"), "error-file", "boom", "3", NULL};
	char *env[] = {"RANK=0", NULL};
	char tail[WORKER_PROC_TAIL_LINES * WORKER_PROC_TAIL_LEN];

	run_init(&r);
	assert_int_equal(run_spawn(&r, argv[0], argv, env), 0);
	run_loop(&r);

	assert_int_equal(r.nexit, 1);
	assert_int_equal(r.nclosed, 1);
	assert_false(r.busy_at_close);
	assert_int_equal(r.exit_code, 3);
	assert_int_equal(r.term_signal, 0);
	assert_int_equal(r.p.pid, 0);
	assert_string_equal(slurp(r.console[1]),
			    "[w] stderr line one\n[w] stderr line two\n[w] fatal: boom\n");
	assert_string_equal(slurp(r.log[1]), "stderr line one\nstderr line two\nfatal: boom\n");
	assert_string_equal(slurp(r.console[0]), "");
	assert_int_equal(worker_proc_tail(&r.p, tail, sizeof(tail)),
			 strlen("stderr line one\nstderr line two\nfatal: boom"));
	assert_string_equal(tail, "stderr line one\nstderr line two\nfatal: boom");
	run_release(&r);
}

/* The tail keeps the last WORKER_PROC_TAIL_LINES lines, each cut to fit,
 * and worker_proc_tail writes whole lines only. */
static void test_tail_keeps_last_lines(void **state)
{
	struct run r;
	char *argv[] = {"/bin/sh", "-c",
			"i=0; while [ $i -lt 12 ]; do echo line$i >&2; i=$((i+1)); done; "
			"printf '%0300d' 0 >&2",
			NULL};
	char tail[WORKER_PROC_TAIL_LINES * WORKER_PROC_TAIL_LEN], small[15];
	char want[WORKER_PROC_TAIL_LINES * WORKER_PROC_TAIL_LEN] = "";

	run_init(&r);
	assert_int_equal(run_spawn(&r, argv[0], argv, NULL), 0);
	run_loop(&r);

	assert_int_equal(r.exit_code, 0);
	/* line3..line11, then the last (unterminated) line cut to 239 bytes */
	for (int i = 3; i < 12; i++)
		sprintf(want + strlen(want), "line%d\n", i);
	memset(want + strlen(want), '0', WORKER_PROC_TAIL_LEN - 1);
	worker_proc_tail(&r.p, tail, sizeof(tail));
	assert_string_equal(tail, want);
	/* The log got the whole last line, flushed at the end of the stream. */
	assert_int_equal(strlen(slurp(r.log[1])),
			 strlen("line0\n") * 10 + strlen("line10\n") * 2 + 301);
	assert_int_equal(worker_proc_tail(&r.p, small, sizeof(small)), strlen("line3\nline4"));
	assert_string_equal(small, "line3\nline4");
	run_release(&r);
}

/* worker_proc_signal reaches the process group; the exit callback has the
 * signal. */
static void test_signal(void **state)
{
	struct run r;
	/* rank 0 is not the --only rank: it waits for a signal */
	char *argv[] = {
	    (char *)program("LAUNCH_HELPER"), "--only", "1", "--others-wait", "exit", "0", NULL};
	char *env[] = {"RANK=0", NULL};

	run_init(&r);
	assert_int_equal(run_spawn(&r, argv[0], argv, env), 0);
	/* uv_spawn returned after the exec: the default SIGTERM action is in
	 * place, however far the program got. */
	worker_proc_signal(&r.p, SIGTERM);
	run_loop(&r);

	assert_int_equal(r.nexit, 1);
	assert_int_equal(r.nclosed, 1);
	assert_int_equal(r.term_signal, SIGTERM);
	assert_int_equal(r.exit_code, 0);
	run_release(&r);
}

static void kill_group_at_exit(struct run *r)
{
	worker_proc_kill_group(&r->p);
}

/* A grandchild keeps the pipes open after the process exited: on_closed
 * waits for them, and worker_proc_kill_group (after the exit) ends them. */
static void test_grandchild_holds_pipes(void **state)
{
	struct run r;
	char *argv[] = {"/bin/sh", "-c", "/bin/sleep 1000 & echo started; exit 4", NULL};

	run_init(&r);
	r.at_exit = kill_group_at_exit;
	assert_int_equal(run_spawn(&r, argv[0], argv, NULL), 0);
	run_loop(&r);

	assert_int_equal(r.nexit, 1);
	assert_true(r.busy_at_exit);
	assert_int_equal(r.exit_code, 4);
	assert_int_equal(r.nclosed, 1);
	assert_false(r.busy_at_close);
	assert_string_equal(slurp(r.console[0]), "[w] started\n");
	run_release(&r);
}

static void close_pipes_at_exit(struct run *r)
{
	worker_proc_close_pipes(&r->p);
}

static void check_group_alive_at_closed(struct run *r)
{
	/* The grandchild still holds the pipes that were closed on our side. */
	int alive = kill(-r->p.shim_pid, 0);

	worker_proc_kill_group(&r->p);
	assert_int_equal(alive, 0);
}

/* worker_proc_close_pipes ends the run while a grandchild still holds the
 * pipes (the agent's drain timeout). */
static void test_close_pipes(void **state)
{
	struct run r;
	char *argv[] = {"/bin/sh", "-c", "/bin/sleep 1000 & exit 0", NULL};

	run_init(&r);
	r.at_exit = close_pipes_at_exit;
	r.at_closed = check_group_alive_at_closed;
	assert_int_equal(run_spawn(&r, argv[0], argv, NULL), 0);
	run_loop(&r);

	assert_int_equal(r.nexit, 1);
	assert_int_equal(r.nclosed, 1);
	assert_false(r.busy_at_close);
	run_release(&r);
}

/* A program that cannot be started: an error back, no exit callback, and
 * the closed callback still comes from the loop. */
static void test_spawn_failure(void **state)
{
	struct run r;
	char *argv[] = {"/nonexistent/ddp-worker", NULL};

	run_init(&r);
	assert_int_equal(run_spawn(&r, argv[0], argv, NULL), UV_ENOENT);
	assert_false(r.p.running);
	assert_int_equal(r.nclosed, 0);
	worker_proc_signal(&r.p, SIGTERM); /* nothing to signal: no effect */
	run_loop(&r);

	assert_int_equal(r.nexit, 0);
	assert_int_equal(r.nclosed, 1);
	assert_false(r.busy_at_close);
	run_release(&r);
}

static void respawn_at_closed(struct run *r)
{
	char **argv = r->next_argv;

	if (!argv)
		return;
	r->next_argv = NULL;
	/* From inside on_closed, as the agent restarts its group. */
	assert_int_equal(run_spawn(r, argv[0], argv, NULL), 0);
}

/* One struct worker_proc, spawned again once the first run closed. */
static void test_respawn(void **state)
{
	struct run r;
	char *first[] = {(char *)program("LAUNCH_HELPER"), "exit", "5", NULL};
	char *second[] = {"/bin/sh", "-c", "echo again", NULL};

	run_init(&r);
	r.at_closed = respawn_at_closed;
	r.next_argv = second;
	assert_int_equal(run_spawn(&r, first[0], first, NULL), 0);
	run_loop(&r);

	assert_int_equal(r.nexit, 2);
	assert_int_equal(r.nclosed, 2);
	assert_int_equal(r.exit_code, 0); /* the second run's */
	assert_string_equal(slurp(r.log[0]), "again\n");
	run_release(&r);
}

/* Runs the loop until the worker's stdout has shown `mark`: its channel
 * lines, written before it, were read in the same loop iteration at the
 * latest (both fds were readable when the mark was). */
static void run_until_shown(struct run *r, const char *mark)
{
	while (!strstr(slurp(r->console[0]), mark))
		assert_true(uv_run(&r->loop, UV_RUN_ONCE) != 0 ||
			    strstr(slurp(r->console[0]), mark));
}

/* The agent channel: only the round that was sent can be taken. A worker
 * that says "took 2147483647" (a round never sent) and exits is one that
 * took nothing: the agent restarts its group uncharged. */
static void test_chan_took_only_the_round_sent(void **state)
{
	struct run r;
	struct agent_wire_round rd = {.round = 5,
				      .rank = 1,
				      .world_size = 2,
				      .local_rank = 0,
				      .local_world_size = 1,
				      .master_port = 29400,
				      .group_rank = 1,
				      .group_world_size = 2};
	/* Each phase waits for a "go" from the test, so that what the test
	 * checks is what the worker said up to that phase. */
	char *argv[] = {"/bin/sh", "-c",
			"printf 'hello 1 resizable\\ntook 2147483647\\n' >&4; echo said; "
			"read -r kind round rest <&4; echo \"heard $kind $round\"; "
			"printf 'took 2147483647\\ntook 4\\n' >&4; echo bogus; read -r go <&4; "
			"printf 'took %s\\n' \"$round\" >&4; echo took; read -r go <&4; exit 6",
			NULL};

	run_init(&r);
	assert_int_equal(agent_wire_round_set_addr(&rd, "127.0.0.1"), 0);
	assert_int_equal(run_spawn(&r, argv[0], argv, NULL), 0);
	run_until_shown(&r, "said");
	assert_true(r.p.resizable);
	assert_int_equal(r.p.took_round, -1); /* no round was sent yet */
	assert_int_equal(worker_proc_send_round(&r.p, &rd), 0);
	assert_int_equal(r.p.sent_round, 5);
	run_until_shown(&r, "bogus");
	assert_int_equal(r.p.took_round, -1);
	assert_int_equal(worker_proc_send(&r.p, "go\n", 3), 0);
	run_until_shown(&r, "took");
	assert_int_equal(r.p.took_round, 5);
	assert_int_equal(worker_proc_send(&r.p, "go\n", 3), 0);
	run_loop(&r);
	assert_int_equal(r.exit_code, 6);
	assert_non_null(strstr(slurp(r.log[0]), "heard round 5\n"));
	run_release(&r);
}

/* A worker that says "took R" and exits at once (a collective error right
 * after it took the round) took R: its exit is heard with what it said
 * before it. The test lets the worker exit before the loop runs again, so
 * that the exit and the line are ready together. A guard, not a test that
 * failed before: libuv hears the line first here even without the drain at
 * the exit (epoll reports the channel first, as it became readable first),
 * but that is an order of the kernel's, not a contract. */
static void test_chan_took_then_exit(void **state)
{
	struct agent_wire_round rd = {.round = 3,
				      .rank = 0,
				      .world_size = 1,
				      .local_rank = 0,
				      .local_world_size = 1,
				      .master_port = 29400,
				      .group_rank = 0,
				      .group_world_size = 1};
	char *argv[] = {"/bin/sh", "-c",
			"printf 'hello 1 resizable\\n' >&4; echo said; "
			"read -r kind round rest <&4; printf 'took %s\\n' \"$round\" >&4; exit 6",
			NULL};

	assert_int_equal(agent_wire_round_set_addr(&rd, "127.0.0.1"), 0);
	for (int i = 0; i < 5; i++) {
		struct run r;
		siginfo_t si;

		run_init(&r);
		assert_int_equal(run_spawn(&r, argv[0], argv, NULL), 0);
		run_until_shown(&r, "said");
		assert_int_equal(worker_proc_send_round(&r.p, &rd), 0);
		si.si_pid = 0;
		assert_int_equal(waitid(P_PID, (id_t)r.p.shim_pid, &si, WEXITED | WNOWAIT), 0);
		run_loop(&r);
		assert_int_equal(r.exit_code, 6);
		assert_int_equal(r.took_at_exit, 3);
		run_release(&r);
	}
}

/* A worker that speaks another version of the channel, or none (an older
 * libddp's bare "resizable"), is not resizable: restarted with its group. */
static void test_chan_other_version_not_resizable(void **state)
{
	const char *scripts[] = {
	    "printf 'resizable\\n' >&4; echo said; read -r go <&4",
	    "printf 'hello 2 resizable\\nresizable\\n' >&4; echo said; read -r go <&4",
	    "printf 'hello 1 resizable\\n' >&4; echo said; read -r go <&4",
	};

	for (int i = 0; i < 3; i++) {
		struct run r;
		char *argv[] = {"/bin/sh", "-c", (char *)scripts[i], NULL};

		run_init(&r);
		assert_int_equal(run_spawn(&r, argv[0], argv, NULL), 0);
		run_until_shown(&r, "said");
		assert_int_equal(r.p.resizable, i == 2);
		assert_int_equal(r.p.chan_version, i == 0 ? 0 : i == 1 ? 2 : 1);
		assert_int_equal(worker_proc_send(&r.p, "go\n", 3), 0);
		run_loop(&r);
		run_release(&r);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_lines_under_ddp_exec),
	    cmocka_unit_test(test_stderr_and_exit_code),
	    cmocka_unit_test(test_tail_keeps_last_lines),
	    cmocka_unit_test(test_signal),
	    cmocka_unit_test(test_grandchild_holds_pipes),
	    cmocka_unit_test(test_close_pipes),
	    cmocka_unit_test(test_spawn_failure),
	    cmocka_unit_test(test_respawn),
	    cmocka_unit_test(test_chan_took_only_the_round_sent),
	    cmocka_unit_test(test_chan_took_then_exit),
	    cmocka_unit_test(test_chan_other_version_not_resizable),
	};

	/* A console that went away must fail a write, not kill the test. */
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
