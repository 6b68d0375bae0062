/*
 * test_etcd_async.c - the async etcd client (etcd_async.h) on a libuv loop
 * against a real etcd, started by test_etcd.py, which runs this program once
 * per scenario:
 *
 *   async       one member: requests answered from the loop (never inside
 *               the call), a watch that sees every change in order, a
 *               deadline against a member that accepts and never answers
 *   async-kill  three members: the client's member (a follower) is killed;
 *               a request fails over to the next, the watch resumes there
 *
 * Environment: ETCD_ENDPOINTS, ETCD_PIDS (member PIDs in endpoint order),
 * ETCD_LEADER (index of the leader).
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "etcd_cluster_env.h"
#include "etcd_async.h"
#include "timeutil.h"

static char *member_ep[3];
static pid_t member_pid[3];
static int leader_index = -1;
static const char *endpoints;

/* What a request answered, and whether its callback came inside the call. */
struct answer {
	bool done, in_call;
	int status;
	int64_t revision;
	char err[512];
};

static bool calling; /* set around each request call */

static void on_answer(void *arg, int status, struct etcd_result *r)
{
	struct answer *a = arg;
	a->done = true;
	a->in_call = calling;
	a->status = status;
	a->revision = r->revision;
	snprintf(a->err, sizeof(a->err), "%s", status < 0 ? etcd_error() : "");
}

/* Runs the loop until a is answered, at most ms. */
static void run_until(uv_loop_t *loop, struct answer *a, uint64_t ms)
{
	uint64_t deadline = time_now_ms() + ms;
	while (!a->done && time_left_ms(deadline))
		uv_run(loop, UV_RUN_ONCE);
	if (!a->done)
		fail_msg("no answer within %llu ms", (unsigned long long)ms);
}

static struct etcd_async *client(uv_loop_t *loop, const char *eps, int timeout_ms)
{
	struct etcd_options o = {.endpoints = eps, .timeout_ms = timeout_ms};
	struct etcd_async *c;
	int rc = etcd_async_new(loop, &o, &c);
	if (rc < 0)
		fail_msg("etcd_async_new: %d %s", rc, etcd_error());
	return c;
}

static void put(struct etcd_async *c, uv_loop_t *loop, const char *k, const char *v,
		struct answer *a)
{
	memset(a, 0, sizeof(*a));
	calling = true;
	assert_int_equal(etcd_async_put(c, k, v, strlen(v), 0, on_answer, a), 0);
	calling = false;
	assert_false(a->done);
	run_until(loop, a, 10000);
	assert_false(a->in_call);
}

/* The events a watch delivered, as "value" strings. */
struct seen {
	int n, status;
	char values[64][16];
	int64_t revs[64];
};

static void on_event(void *arg, int status, struct etcd_event *ev)
{
	struct seen *s = arg;
	if (status < 0) {
		s->status = status;
		return;
	}
	if (s->n < 64) {
		snprintf(s->values[s->n], sizeof(s->values[s->n]), "%s",
			 ev->type == ETCD_EVENT_PUT ? (char *)ev->kv.value : "<deleted>");
		s->revs[s->n++] = ev->kv.mod_revision;
	}
	etcd_event_release(ev);
}

static void wait_events(uv_loop_t *loop, struct seen *s, int n, uint64_t ms)
{
	uint64_t deadline = time_now_ms() + ms;
	while (s->n < n && !s->status && time_left_ms(deadline))
		uv_run(loop, UV_RUN_ONCE);
	if (s->n < n)
		fail_msg("%d of %d events within %llu ms (status %d)", s->n, n,
			 (unsigned long long)ms, s->status);
}

static void close_client(uv_loop_t *loop, struct etcd_async *c)
{
	etcd_async_close(c, NULL, NULL);
	uv_run(loop, UV_RUN_DEFAULT); /* returns once every handle is closed */
	assert_int_equal(uv_loop_close(loop), 0);
}

/* ---- one member ---- */

/* Twenty writes made one after the other, each from the previous answer
 * (as the rendezvous does), then a delete: the watch sees all, in order. */
static void test_watch_sees_changes(void **state)
{
	uv_loop_t loop;
	struct etcd_async *c;
	struct etcd_awatch *w;
	struct seen *s = calloc(1, sizeof(*s));
	struct answer a;
	char k[64], v[16];
	(void)state;
	snprintf(k, sizeof(k), "async/%d/watch", (int)getpid());
	uv_loop_init(&loop);
	c = client(&loop, endpoints, 5000);
	put(c, &loop, k, "start", &a);
	assert_int_equal(etcd_async_watch(c, k, 0, a.revision + 1, on_event, s, &w), 0);
	for (int i = 0; i < 20; i++) {
		snprintf(v, sizeof(v), "v%d", i);
		put(c, &loop, k, v, &a);
	}
	memset(&a, 0, sizeof(a));
	assert_int_equal(etcd_async_delete(c, k, on_answer, &a), 0);
	run_until(&loop, &a, 5000);
	wait_events(&loop, s, 21, 5000);
	for (int i = 0; i < 20; i++) {
		snprintf(v, sizeof(v), "v%d", i);
		assert_string_equal(s->values[i], v);
		if (i)
			assert_true(s->revs[i] > s->revs[i - 1]);
	}
	assert_string_equal(s->values[20], "<deleted>");
	etcd_awatch_free(w);
	close_client(&loop, c);
	free(s);
}

/* A member that accepts connections and never answers (a listening socket
 * nobody reads): the request ends with -ETIMEDOUT at its deadline, and
 * the loop stayed free meanwhile (a timer fired during the wait). */
static void on_beat(uv_timer_t *t)
{
	++*(int *)t->data;
}

static void test_deadline(void **state)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), beats = 0;
	char eps[64];
	uv_loop_t loop;
	uv_timer_t beat;
	struct etcd_async *c;
	struct answer a = {0};
	uint64_t t0;
	(void)state;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fd, 16), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	snprintf(eps, sizeof(eps), "127.0.0.1:%d", ntohs(sa.sin_port));
	uv_loop_init(&loop);
	uv_timer_init(&loop, &beat);
	beat.data = &beats;
	uv_timer_start(&beat, on_beat, 100, 100);
	c = client(&loop, eps, 1500);
	t0 = time_now_ms();
	assert_int_equal(etcd_async_put(c, "async/deadline", "x", 1, 0, on_answer, &a), 0);
	run_until(&loop, &a, 5000);
	printf("silent member: %d after %llu ms: %s\n", a.status,
	       (unsigned long long)(time_now_ms() - t0), a.err);
	assert_int_equal(a.status, -ETIMEDOUT);
	assert_true(time_now_ms() - t0 >= 1400 && time_now_ms() - t0 < 3000);
	assert_non_null(strstr(a.err, eps));
	assert_true(beats >= 10);
	uv_close((uv_handle_t *)&beat, NULL);
	close_client(&loop, c);
	close(fd);
}

/* ---- three members ---- */

static void kill_member(int i)
{
	int fd = pidfd_open(member_pid[i], 0);
	struct pollfd p = {.fd = fd, .events = POLLIN};
	assert_true(fd >= 0);
	assert_int_equal(pidfd_send_signal(fd, SIGKILL, NULL, 0), 0);
	assert_int_equal(poll(&p, 1, 10000), 1);
	close(fd);
}

static void test_failover(void **state)
{
	int f1 = leader_index == 0 ? 1 : 0, f2 = 3 - leader_index - f1, l = leader_index;
	char eps[1024], k[64];
	uv_loop_t loop;
	struct etcd_async *c;
	struct etcd_awatch *w;
	struct seen *s = calloc(1, sizeof(*s));
	struct answer a;
	uint64_t t0;
	(void)state;
	snprintf(eps, sizeof(eps), "%s,%s,%s", member_ep[f1], member_ep[f2], member_ep[l]);
	snprintf(k, sizeof(k), "async/%d/failover", (int)getpid());
	uv_loop_init(&loop);
	c = client(&loop, eps, 5000);
	put(c, &loop, k, "before", &a);
	assert_string_equal(etcd_async_endpoint(c), member_ep[f1]);
	assert_int_equal(etcd_async_watch(c, k, 0, a.revision + 1, on_event, s, &w), 0);
	put(c, &loop, k, "warm", &a);
	wait_events(&loop, s, 1, 5000);
	kill_member(f1);
	t0 = time_now_ms();
	put(c, &loop, k, "after", &a);
	assert_int_equal(a.status, 0);
	wait_events(&loop, s, 2, 6000);
	printf("async failover: put and its event %llu ms after the member was killed\n",
	       (unsigned long long)(time_now_ms() - t0));
	assert_string_equal(etcd_async_endpoint(c), member_ep[f2]);
	assert_string_equal(s->values[1], "after");
	etcd_awatch_free(w);
	close_client(&loop, c);
	free(s);
}

static void read_env(void)
{
	struct etcd_cluster_env env;

	etcd_cluster_env_read(&env, "test_etcd_async");
	endpoints = env.endpoints;
	memcpy(member_ep, env.member_ep, sizeof(member_ep));
	memcpy(member_pid, env.member_pid, sizeof(member_pid));
	leader_index = env.leader_index;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest one[] = {
	    cmocka_unit_test(test_watch_sees_changes),
	    cmocka_unit_test(test_deadline),
	};
	const struct CMUnitTest three[] = {cmocka_unit_test(test_failover)};
	const char *what = argc > 1 ? argv[1] : "";
	read_env();
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(what, "async"))
		return cmocka_run_group_tests_name("async", one, NULL, NULL);
	if (!strcmp(what, "async-kill") && leader_index >= 0)
		return cmocka_run_group_tests_name("async-kill", three, NULL, NULL);
	fprintf(stderr, "usage: test_etcd_async async|async-kill (async-kill needs ETCD_PIDS "
			"and ETCD_LEADER)\n");
	return 2;
}
