/*
 * test_driver.c - the rendezvous driver (rendezvous/driver/driver.h) on a
 * real libuv loop over an in-memory store (prims_fake.h): several nodes in
 * one process, each a driver as the agent runs it, joining again after
 * every round_over as the agent does. Rounds form, a node's death (its
 * session keys vanish) and a join re-form them, a group failure spends the
 * restart budget and then fails the job, a node leaves, another job's node
 * is refused. Every wait is bounded by a deadline on the loop.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "driver.h"
#include "prims_fake.h"

#define NODES_MAX 8
#define WAIT_MS	  20000 /* any one wait; the rounds take milliseconds */
#define NPROC	  2

struct node {
	struct rdzv_driver *d;
	int idx;
	int rounds, round_overs;
	bool in_round, ended;
	struct rdzv_driver_round r; /* the last round (its scalars) */
	enum rdzv_driver_outcome how;
	char msg[1024];
	int notices; /* heard on the job's notice board */
	char notice[RDZV_NOTICE_MAX + 1];
	char heard[8192]; /* every line heard, each ended by '\n' */
};

static uv_loop_t loop;
static uv_timer_t guard;
static bool timed_out;
static struct node nodes[NODES_MAX];

static void on_joined(void *arg, int status, const struct rdzv_driver_round *r)
{
	struct node *n = arg;

	assert_int_equal(status, 0);
	n->r = *r;
	n->r.master_addr = n->r.local_addr = NULL;
	n->r.members = NULL;
	n->rounds++;
	n->in_round = true;
}

/* As the agent does: stop the workers (none here), then join again. */
static void on_round_over(void *arg, const char *why)
{
	struct node *n = arg;

	assert_non_null(why);
	n->round_overs++;
	n->in_round = false;
	assert_int_equal(rdzv_driver_join(n->d, on_joined, n), 0);
}

static void on_ended(void *arg, enum rdzv_driver_outcome how, const char *msg)
{
	struct node *n = arg;

	assert_false(n->ended);
	n->ended = true;
	n->in_round = false;
	n->how = how;
	snprintf(n->msg, sizeof(n->msg), "%s", msg ? msg : "");
}

static void on_notice(void *arg, const char *text)
{
	struct node *n = arg;

	size_t len = strlen(n->heard);

	n->notices++;
	snprintf(n->notice, sizeof(n->notice), "%s", text);
	snprintf(n->heard + len, sizeof(n->heard) - len, "%s\n", text);
}

static const struct rdzv_driver_events events = {on_round_over, on_ended, on_notice, NULL};

static void guard_cb(uv_timer_t *t)
{
	timed_out = true;
	uv_stop(&loop);
}

/* Runs the loop until pred() holds; fails the test at the deadline. */
static void run_until(bool (*pred)(void *), void *ctx)
{
	timed_out = false;
	uv_timer_start(&guard, guard_cb, WAIT_MS, 0);
	while (!pred(ctx) && !timed_out)
		uv_run(&loop, UV_RUN_ONCE);
	uv_timer_stop(&guard);
	assert_false(timed_out);
}

static void node_config(struct rdzv_driver_config *c, int idx, int min, int max)
{
	static char addr[NODES_MAX][32];

	snprintf(addr[idx], sizeof(addr[idx]), "127.0.0.%d", idx + 2);
	rdzv_driver_config_defaults(c);
	c->mode = RDZV_DRIVER_C10D;
	c->host = "127.0.0.1";
	c->port = 1; /* the fake's: never connected to */
	c->is_host = 0;
	c->run_id = "drvtest";
	c->job = "jobA";
	c->job_text = "the test's job A";
	c->min_nodes = min;
	c->max_nodes = max;
	c->nproc = NPROC;
	c->local_addr = addr[idx];
	c->join_timeout = 15;
	c->last_call_timeout = 0.2;
	c->close_timeout = 2;
	c->keep_alive_interval = 0.5;
	c->keep_alive_max_attempt = 3;
	c->fail_slack_ms = 100;
	c->prims = &prims_fake;
}

static struct node *node_start(const struct rdzv_driver_config *c, int idx)
{
	struct node *n = &nodes[idx];
	char err[512] = "";

	memset(n, 0, sizeof(*n));
	n->idx = idx;
	assert_int_equal(rdzv_driver_new(c, &n->d, err, sizeof(err)), 0);
	assert_int_equal(rdzv_driver_attach(n->d, &loop, &events, n), 0);
	assert_int_equal(rdzv_driver_join(n->d, on_joined, n), 0);
	return n;
}

static void start_nodes(int count, int min, int max, int max_restarts)
{
	struct rdzv_driver_config c;

	for (int i = 0; i < count; i++) {
		node_config(&c, i, min, max);
		c.max_restarts = max_restarts;
		node_start(&c, i);
	}
}

/* "a-b": nodes a..b; every one in round `want` (its size too). */
struct want {
	int first, last;
	uint32_t round, size;
};

static bool all_in(void *p)
{
	const struct want *w = p;

	for (int i = w->first; i <= w->last; i++)
		if (!nodes[i].in_round || nodes[i].r.round != w->round)
			return false;
	return true;
}

static void check_round(int first, int last, uint32_t round, uint32_t size)
{
	struct want w = {first, last, round, size};
	bool seen[NODES_MAX] = {false};

	run_until(all_in, &w);
	for (int i = first; i <= last; i++) {
		const struct rdzv_driver_round *r = &nodes[i].r;

		assert_int_equal(r->size, size);
		assert_true(r->rank < size);
		assert_false(seen[r->rank]);
		seen[r->rank] = true;
		assert_int_equal(r->first_proc, (uint64_t)r->rank * NPROC);
		assert_int_equal(r->world_procs, (uint64_t)size * NPROC);
		assert_int_not_equal(r->master_port, 0);
		assert_int_equal(r->master_port, nodes[first].r.master_port);
		assert_int_equal(r->restarts, nodes[first].r.restarts);
	}
}

struct ends {
	int first, last;
};

static bool all_ended(void *p)
{
	const struct ends *e = p;

	for (int i = e->first; i <= e->last; i++)
		if (!nodes[i].ended)
			return false;
	return true;
}

static void wait_ended(int first, int last)
{
	struct ends e = {first, last};

	run_until(all_ended, &e);
}

static bool loop_idle(void *p)
{
	return !uv_loop_alive(&loop);
}

static int setup(void **state)
{
	assert_int_equal(uv_loop_init(&loop), 0);
	uv_timer_init(&loop, &guard);
	uv_unref((uv_handle_t *)&guard); /* it never keeps the loop alive */
	prims_fake_init(&loop);
	memset(nodes, 0, sizeof(nodes));
	return 0;
}

/* Every driver shuts down (a member leaves first); every handle closes,
 * every session is gone, and the loop closes clean. */
static int teardown(void **state)
{
	for (int i = 0; i < NODES_MAX; i++)
		if (nodes[i].d)
			rdzv_driver_shutdown(nodes[i].d, 0);
	run_until(loop_idle, NULL);
	assert_int_equal(prims_fake_sessions(), 0);
	for (int i = 0; i < NODES_MAX; i++)
		rdzv_driver_free(nodes[i].d);
	prims_fake_release();
	uv_close((uv_handle_t *)&guard, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&loop), 0);
	return 0;
}

/* Three nodes form a round of three: distinct ranks, the workers' ranks
 * laid out by node, one master; every node's workers succeed: FINISHED. */
static void test_form_and_finish(void **state)
{
	start_nodes(3, 2, 3, 0);
	check_round(0, 2, 1, 3);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(nodes[i].r.restarts, 0);
		assert_int_equal(nodes[i].round_overs, 0);
		rdzv_driver_group_exited(nodes[i].d, true);
	}
	wait_ended(0, 2);
	for (int i = 0; i < 3; i++)
		assert_int_equal(nodes[i].how, RDZV_DRIVER_FINISHED);
}

/* A node dies (its session closes, its keys vanish): the survivors' round
 * is over and they form the next without it, no restart charged; a new
 * node joins: the round is over again, and the next has three. */
static void test_death_then_join(void **state)
{
	struct rdzv_driver_config c;

	start_nodes(3, 2, 3, 0);
	check_round(0, 2, 1, 3);
	rdzv_driver_kill(nodes[2].d);
	check_round(0, 1, 2, 2);
	assert_int_equal(nodes[0].round_overs, 1);
	assert_int_equal(nodes[1].round_overs, 1);
	assert_int_equal(nodes[0].r.restarts, 0);
	assert_false(nodes[2].ended); /* a killed node hears nothing */

	node_config(&c, 3, 2, 3);
	node_start(&c, 3);
	check_round(0, 1, 3, 3);
	check_round(3, 3, 3, 3);
	assert_int_equal(nodes[0].round_overs, 2);
	assert_int_equal(nodes[3].round_overs, 0);
	assert_int_equal(nodes[3].rounds, 1);
}

/* A group failure spends the job's restart budget: every node's round is
 * over and the next counts one restart; the next failure, with none left,
 * fails the job on every node. */
static void test_restarts_then_failed(void **state)
{
	start_nodes(2, 2, 2, 1);
	check_round(0, 1, 1, 2);
	rdzv_driver_group_exited(nodes[0].d, false);
	check_round(0, 1, 2, 2);
	assert_int_equal(nodes[0].r.restarts, 1);
	assert_int_equal(nodes[1].r.restarts, 1);
	assert_int_equal(nodes[1].round_overs, 1);

	rdzv_driver_group_exited(nodes[1].d, false);
	wait_ended(0, 1);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(nodes[i].how, RDZV_DRIVER_FAILED);
		assert_true(nodes[i].msg[0] != '\0');
	}
	assert_int_equal(rdzv_driver_join(nodes[0].d, on_joined, &nodes[0]), -ECANCELED);
}

/* A node leaves: it ends LEFT, the others form the next round without it
 * at once (no restart charged). */
static void test_leave(void **state)
{
	start_nodes(3, 2, 3, 0);
	check_round(0, 2, 1, 3);
	rdzv_driver_leave(nodes[1].d);
	wait_ended(1, 1);
	assert_int_equal(nodes[1].how, RDZV_DRIVER_LEFT);
	nodes[1].in_round = false;
	check_round(0, 0, 2, 2);
	check_round(2, 2, 2, 2);
	assert_int_equal(nodes[0].r.restarts, 0);
}

/* A node of another job (another fingerprint) under the same run id is
 * REFUSED, naming both jobs; the running job does not notice. */
static void test_refused(void **state)
{
	struct rdzv_driver_config c;

	start_nodes(2, 2, 3, 0);
	check_round(0, 1, 1, 2);
	node_config(&c, 2, 2, 3);
	c.job = "jobB";
	c.job_text = "the test's job B";
	node_start(&c, 2);
	wait_ended(2, 2);
	assert_int_equal(nodes[2].how, RDZV_DRIVER_REFUSED);
	assert_non_null(strstr(nodes[2].msg, "job B"));
	assert_non_null(strstr(nodes[2].msg, "job A"));
	assert_int_equal(nodes[2].rounds, 0);
	assert_int_equal(nodes[0].round_overs, 0);
	assert_int_equal(nodes[1].round_overs, 0);
	assert_true(nodes[0].in_round && nodes[1].in_round);
}

static bool all_heard(void *p)
{
	const int *want = p;

	for (int i = 0; i < 3; i++)
		if (nodes[i].notices < *want)
			return false;
	return true;
}

/* A line posted by one node is heard once by every node, the poster
 * included; a later one replaces it; a node that comes afterwards is not
 * told what was posted before it watched; a line too long is refused. */
static void test_notice_board(void **state)
{
	struct rdzv_driver_config c;
	char big[RDZV_NOTICE_MAX + 2];
	int want = 1;

	start_nodes(3, 3, 4, 0);
	check_round(0, 2, 1, 3);
	assert_int_equal(rdzv_driver_post(nodes[1].d, "hang1 1 1 3 42 7 100 500\thang: rank 3"), 0);
	run_until(all_heard, &want);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(nodes[i].notices, 1);
		assert_string_equal(nodes[i].notice, "hang1 1 1 3 42 7 100 500\thang: rank 3");
	}
	assert_int_equal(rdzv_driver_post(nodes[2].d, "second"), 0);
	want = 2;
	run_until(all_heard, &want);
	for (int i = 0; i < 3; i++)
		assert_string_equal(nodes[i].notice, "second");
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(rdzv_driver_post(nodes[0].d, big), -EINVAL);
	node_config(&c, 3, 3, 4);
	node_start(&c, 3);
	check_round(0, 3, 2, 4);
	assert_int_equal(nodes[3].notices, 0);
}

/* Lines posted at once (two nodes in one turn of the loop, then five from
 * one: within a store round trip) are each heard by every node, once; none
 * is lost to a later one. */
static void test_notice_board_at_once(void **state)
{
	static const char *const lines[] = {"hang1 1 1 2 40 7 10 500\tfirst",
					    "hang1 1 2 4 41 7 20 500\tsecond",
					    "third",
					    "fourth",
					    "fifth",
					    "sixth",
					    "seventh"};
	int want = 7;

	(void)state;
	start_nodes(3, 3, 4, 0);
	check_round(0, 2, 1, 3);
	assert_int_equal(rdzv_driver_post(nodes[1].d, lines[0]), 0);
	assert_int_equal(rdzv_driver_post(nodes[2].d, lines[1]), 0);
	for (int k = 2; k < 7; k++)
		assert_int_equal(rdzv_driver_post(nodes[0].d, lines[k]), 0);
	run_until(all_heard, &want);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(nodes[i].notices, 7);
		for (int k = 0; k < 7; k++) {
			char line[64];

			snprintf(line, sizeof(line), "%s\n", lines[k]);
			assert_non_null(strstr(nodes[i].heard, line));
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_form_and_finish, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_death_then_join, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_restarts_then_failed, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_leave, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_refused, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_notice_board, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_notice_board_at_once, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
