/* The one-node backend of the rendezvous seam (rdzv_one.c) on a real libuv
 * loop, driven as the agent drives it: the workers' store it binds (a taken
 * port moved or, with --strict_port, refused), the rounds it answers, the
 * restart policy's answers to a group's end (the next round after the
 * backoff, or the end with its outcome), a stop signal during the backoff;
 * and rdzv_exit_status, the one place an outcome becomes an exit status. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "exit_status.h"
#include "opts.h"
#include "rdzv.h"

#define WAIT_MS 10000

struct t {
	uv_loop_t loop;
	struct launch_opts o;
	struct rdzv *r;
	int njoined, nended, nshown, nround_over;
	struct rdzv_round round;
	enum rdzv_outcome how;
	uint64_t joined_at;
};

static char *no_env[] = {NULL};

static void on_round_over(void *arg, const char *why)
{
	((struct t *)arg)->nround_over++;
}

static void on_ended(void *arg, enum rdzv_outcome how, const char *msg)
{
	struct t *t = arg;

	t->nended++;
	t->how = how;
	rdzv_shutdown(t->r, 0); /* as the agent does when it finishes */
}

static const struct rdzv_events events = {.round_over = on_round_over, .ended = on_ended};

static void on_joined(void *arg, int status, const struct rdzv_round *r)
{
	struct t *t = arg;

	assert_int_equal(status, 0);
	t->njoined++;
	t->round = *r;
	t->joined_at = uv_now(&t->loop);
}

static void show(void *arg)
{
	((struct t *)arg)->nshown++;
}

/* Options for one node on 127.0.0.1; `port` -1: not given. */
static void t_init(struct t *t, int port, int max_restarts, double backoff)
{
	char err[256];

	memset(t, 0, sizeof(*t));
	assert_int_equal(uv_loop_init(&t->loop), 0);
	assert_int_equal(opts_init(&t->o), 0);
	assert_int_equal(
	    opts_set(&t->o, "master_addr", "127.0.0.1", OPTS_SRC_CLI, err, sizeof(err)), 0);
	t->o.master_port = port;
	t->o.standalone = port < 0;
	t->o.max_restarts = max_restarts;
	t->o.backoff_initial = t->o.backoff_max = backoff;
	assert_int_equal(rdzv_new(&t->o, no_env, 3, &t->r, err, sizeof(err)), 0);
}

static void t_release(struct t *t)
{
	if (!t->nended)
		rdzv_shutdown(t->r, 0);
	assert_int_equal(uv_run(&t->loop, UV_RUN_DEFAULT), 0);
	assert_int_equal(uv_loop_close(&t->loop), 0);
	rdzv_free(t->r);
	opts_release(&t->o);
}

/* Runs the loop until `n` joins were answered (or WAIT_MS). */
static void run_until_joined(struct t *t, int n)
{
	uint64_t until = uv_now(&t->loop) + WAIT_MS;

	while (t->njoined < n && uv_now(&t->loop) < until)
		uv_run(&t->loop, UV_RUN_ONCE);
	assert_int_equal(t->njoined, n);
}

static bool group_ended(struct t *t, bool failed, bool permanent, int stop_signal)
{
	struct rdzv_group_end g = {
	    .attempt = t->njoined - 1,
	    .failed = failed,
	    .permanent = permanent,
	    .stop_signal = stop_signal,
	    .show_summary = show,
	    .arg = t,
	};

	return rdzv_group_ended(t->r, &g);
}

static bool port_accepts(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	bool ok;

	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

/* A listening socket on 127.0.0.1 that the test holds; its port. */
static int hold_port(int *fd)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t len = sizeof(a);

	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	*fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(*fd >= 0);
	assert_int_equal(bind(*fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(*fd, 1), 0);
	assert_int_equal(getsockname(*fd, (struct sockaddr *)&a, &len), 0);
	return ntohs(a.sin_port);
}

/* Restarts while they remain, each after the backoff, then the end. */
static void test_restarts_then_failed(void **state)
{
	struct t t;
	uint64_t ended_at;

	t_init(&t, -1, 2, 0.05);
	assert_int_equal(rdzv_attach(t.r, &t.loop, &events, &t), 0);
	assert_int_equal(rdzv_join(t.r, on_joined, &t), 0);
	assert_int_equal(t.njoined, 1); /* the first round is answered at once */
	assert_int_equal(t.round.round, 0);
	assert_int_equal(t.round.restart_count, 0);
	assert_int_equal(t.round.group_world_size, 1);
	assert_int_equal(t.round.world_size, 3);
	assert_string_equal(t.round.master_addr, "127.0.0.1");
	assert_true(t.round.master_port > 0);
	assert_true(port_accepts(t.round.master_port));
	for (int restart = 1; restart <= 2; restart++) {
		assert_true(group_ended(&t, true, false, 0));
		assert_int_equal(t.nshown, restart);
		ended_at = uv_now(&t.loop);
		assert_int_equal(rdzv_join(t.r, on_joined, &t), 0);
		assert_int_equal(t.njoined, restart); /* not before the backoff */
		run_until_joined(&t, restart + 1);
		assert_true(t.joined_at - ended_at >= 40);
		assert_int_equal(t.round.round, restart);
		assert_int_equal(t.round.restart_count, restart);
		assert_true(port_accepts(t.round.master_port)); /* the same store */
	}
	assert_false(group_ended(&t, true, false, 0));
	assert_int_equal(t.nended, 1);
	assert_int_equal(t.how, RDZV_OUT_FAILED);
	assert_int_equal(t.nshown, 3);
	assert_int_equal(rdzv_join(t.r, on_joined, &t), -ECANCELED);
	assert_int_equal(t.nround_over, 0);
	t_release(&t);
}

/* A renewal (a worker replaced alone): round_over from the loop, then the
 * next round at once, with the same store, and no restart counted; the
 * restart policy is unchanged after it. */
static void test_renew_is_free(void **state)
{
	struct t t;

	t_init(&t, -1, 1, 0.05);
	assert_int_equal(rdzv_attach(t.r, &t.loop, &events, &t), 0);
	assert_int_equal(rdzv_join(t.r, on_joined, &t), 0);
	int port = t.round.master_port;
	assert_int_equal(rdzv_renew(t.r), 0);
	assert_int_equal(t.nround_over, 0); /* from the loop, not during the call */
	uv_run(&t.loop, UV_RUN_NOWAIT);
	assert_int_equal(t.nround_over, 1);
	assert_int_equal(rdzv_join(t.r, on_joined, &t), 0);
	assert_int_equal(t.njoined, 2); /* at once: no backoff */
	assert_int_equal(t.round.round, 1);
	assert_int_equal(t.round.restart_count, 0);
	assert_int_equal(t.round.master_port, port);
	/* the one restart allowed is still there */
	assert_true(group_ended(&t, true, false, 0));
	assert_int_equal(rdzv_join(t.r, on_joined, &t), 0);
	run_until_joined(&t, 3);
	assert_int_equal(t.round.round, 2);
	assert_int_equal(t.round.restart_count, 1);
	assert_false(group_ended(&t, true, false, 0));
	assert_int_equal(t.how, RDZV_OUT_FAILED);
	t_release(&t);
}

static void test_success_permanent_stopped(void **state)
{
	struct t t;

	t_init(&t, -1, 3, 0);
	assert_int_equal(rdzv_attach(t.r, &t.loop, &events, &t), 0);
	assert_int_equal(rdzv_join(t.r, on_joined, &t), 0);
	assert_false(group_ended(&t, false, false, 0));
	assert_int_equal(t.how, RDZV_OUT_FINISHED);
	assert_int_equal(t.nshown, 0);
	t_release(&t);

	t_init(&t, -1, 3, 0);
	assert_int_equal(rdzv_attach(t.r, &t.loop, &events, &t), 0);
	assert_int_equal(rdzv_join(t.r, on_joined, &t), 0);
	assert_false(group_ended(&t, true, true, 0)); /* restarts remain: not used */
	assert_int_equal(t.how, RDZV_OUT_PERMANENT);
	assert_int_equal(t.nshown, 1);
	t_release(&t);

	t_init(&t, -1, 3, 0);
	assert_int_equal(rdzv_attach(t.r, &t.loop, &events, &t), 0);
	assert_int_equal(rdzv_join(t.r, on_joined, &t), 0);
	rdzv_signal(t.r, SIGTERM); /* a round runs: its group's end says it */
	assert_int_equal(t.nended, 0);
	assert_false(group_ended(&t, true, false, SIGTERM));
	assert_int_equal(t.how, RDZV_OUT_STOPPED);
	t_release(&t);
}

/* A stop signal during the backoff ends at once; the round never comes. */
static void test_signal_in_backoff(void **state)
{
	struct t t;

	t_init(&t, -1, 1, 5.0);
	assert_int_equal(rdzv_attach(t.r, &t.loop, &events, &t), 0);
	assert_int_equal(rdzv_join(t.r, on_joined, &t), 0);
	assert_true(group_ended(&t, true, false, 0));
	assert_int_equal(rdzv_join(t.r, on_joined, &t), 0);
	rdzv_signal(t.r, SIGINT);
	assert_int_equal(t.nended, 1);
	assert_int_equal(t.how, RDZV_OUT_STOPPED);
	t_release(&t); /* returns at once: the backoff timer is closed */
	assert_int_equal(t.njoined, 1);
}

/* A taken --master_port: another port, or with --strict_port -EADDRINUSE. */
static void test_taken_port(void **state)
{
	struct t t;
	int fd, port = hold_port(&fd);

	t_init(&t, port, 0, 0);
	assert_int_equal(rdzv_attach(t.r, &t.loop, &events, &t), 0);
	assert_int_equal(rdzv_join(t.r, on_joined, &t), 0);
	assert_true(t.round.master_port > 0);
	assert_int_not_equal(t.round.master_port, port);
	t_release(&t);

	t_init(&t, port, 0, 0);
	t.o.strict_port = true;
	assert_int_equal(rdzv_attach(t.r, &t.loop, &events, &t), -EADDRINUSE);
	t_release(&t);
	close(fd);
}

static void test_exit_status(void **state)
{
	assert_int_equal(rdzv_exit_status(RDZV_OUT_FINISHED, 0, false, 3), 0);
	assert_int_equal(rdzv_exit_status(RDZV_OUT_REFUSED, SIGTERM, false, 0), 2);
	assert_int_equal(rdzv_exit_status(RDZV_OUT_PERMANENT, 0, true, 0), DDP_EXIT_PERMANENT);
	assert_int_equal(rdzv_exit_status(RDZV_OUT_STOPPED, SIGINT, false, 0), 128 + SIGINT);
	assert_int_equal(rdzv_exit_status(RDZV_OUT_LEFT, 0, false, 3), 0);
	assert_int_equal(rdzv_exit_status(RDZV_OUT_LEFT, 0, true, 3), DDP_EXIT_PERMANENT);
	assert_int_equal(rdzv_exit_status(RDZV_OUT_LEFT, SIGTERM, true, 3), 128 + SIGTERM);
	assert_int_equal(rdzv_exit_status(RDZV_OUT_FAILED, 0, false, 3), 3);
	assert_int_equal(rdzv_exit_status(RDZV_OUT_FAILED, 0, false, 0), 1);
	assert_int_equal(rdzv_exit_status(RDZV_OUT_FAILED, SIGTERM, false, 3), 128 + SIGTERM);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_restarts_then_failed),
	    cmocka_unit_test(test_renew_is_free),
	    cmocka_unit_test(test_success_permanent_stopped),
	    cmocka_unit_test(test_signal_in_backoff),
	    cmocka_unit_test(test_taken_port),
	    cmocka_unit_test(test_exit_status),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
