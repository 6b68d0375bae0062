/*
 * test_server_embed.c - the store server embedded in a caller's libuv loop
 * (as ddplaunch hosts it): listen errors and retry, clients served from
 * another thread, close with clients still connected and waiting, the reset
 * between worker groups, the list_keys and barrier limits, the bounds on
 * every client (silent ones, per address, the descriptor reserve), and no
 * handle or byte left behind (run under ASan in CI). Loopback, port 0.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include <cmocka.h>

#include "store_access.h"
#include "store_client.h"
#include "store_server.h"

static void count_done(void *arg)
{
	(*(int *)arg)++;
}

static void test_listen_errors_and_retry(void **state)
{
	uv_loop_t loop;
	assert_int_equal(uv_loop_init(&loop), 0);
	struct store_server *a, *b;
	assert_int_equal(store_server_new(&loop, NULL, &a), 0);
	assert_int_equal(store_server_new(&loop, NULL, &b), 0);
	assert_int_equal(store_server_port(a), 0);
	assert_int_equal(store_server_listen(a, "127.0.0.1", 0), 0);
	int port = store_server_port(a);
	assert_true(port > 0);
	assert_int_equal(store_server_listen(b, "127.0.0.1", port), UV_EADDRINUSE);
	assert_true(store_server_listen(b, "no-such-host.invalid", 0) < 0);
	assert_int_equal(store_server_listen(b, "127.0.0.1", 70000), UV_EINVAL);
	/* Nothing stayed open: the same server may listen again. */
	assert_int_equal(store_server_listen(b, "127.0.0.1", 0), 0);
	assert_true(store_server_port(b) > 0 && store_server_port(b) != port);
	assert_int_equal(store_server_listen(b, "127.0.0.1", 0), UV_EINVAL); /* only once */
	assert_int_equal(store_server_connection_count(a), 0);
	int done = 0;
	store_server_close(a, count_done, &done);
	store_server_close(b, count_done, &done);
	assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
	assert_int_equal(done, 2);
	assert_int_equal(uv_loop_close(&loop), 0);
}

/* A client thread; the loop thread runs the server until it is told. */
struct scenario {
	uv_loop_t loop;
	uv_async_t finished;
	uv_async_t reset; /* the thread asks the loop for store_server_reset() */
	const struct store_limits *limits;
	size_t dropped; /* what the reset returned */
	struct store_server *server;
	int port;
	int result; /* 0 when every check in the thread passed, else its line */
	void (*body)(struct scenario *sc);
	void (*prepare)(struct store_server *server); /* before listening, or NULL */
	int done;
	int told; /* the body already sent `finished` itself */
};

#define SC_CHECK(sc, cond)                                                                         \
	do {                                                                                       \
		if (!(cond) && (sc)->result == 0)                                                  \
			(sc)->result = __LINE__;                                                   \
	} while (0)

static void *scenario_thread(void *arg)
{
	struct scenario *sc = arg;
	sc->body(sc);
	/* `finished` is closed once it fired: send it at most once. */
	if (!sc->told)
		uv_async_send(&sc->finished);
	return NULL;
}

static void scenario_reset(uv_async_t *async)
{
	static const char *const keep[] = {"agent/", "launcher/"};
	struct scenario *sc = async->data;
	sc->dropped = store_server_reset(sc->server, keep, 2);
}

static void scenario_finished(uv_async_t *async)
{
	struct scenario *sc = async->data;
	uv_close((uv_handle_t *)&sc->finished, NULL);
	uv_close((uv_handle_t *)&sc->reset, NULL);
	if (sc->server)
		store_server_close(sc->server, count_done, &sc->done);
}

static void scenario_run(struct scenario *sc)
{
	assert_int_equal(uv_loop_init(&sc->loop), 0);
	assert_int_equal(uv_async_init(&sc->loop, &sc->finished, scenario_finished), 0);
	sc->finished.data = sc;
	assert_int_equal(uv_async_init(&sc->loop, &sc->reset, scenario_reset), 0);
	sc->reset.data = sc;
	assert_int_equal(store_server_new(&sc->loop, sc->limits, &sc->server), 0);
	if (sc->prepare)
		sc->prepare(sc->server);
	assert_int_equal(store_server_listen(sc->server, "127.0.0.1", 0), 0);
	sc->port = store_server_port(sc->server);
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, scenario_thread, sc), 0);
	assert_int_equal(uv_run(&sc->loop, UV_RUN_DEFAULT), 0);
	pthread_join(t, NULL);
	assert_int_equal(sc->done, 1);
	assert_int_equal(uv_loop_close(&sc->loop), 0);
	assert_int_equal(sc->result, 0);
}

static void body_ops(struct scenario *sc)
{
	struct store_client *c = NULL, *d = NULL;
	char err[256];
	SC_CHECK(sc, store_client_connect("127.0.0.1", sc->port, 5000, &c, err, sizeof(err)) == 0);
	SC_CHECK(sc, store_client_connect("127.0.0.1", sc->port, 5000, &d, err, sizeof(err)) == 0);
	if (!c || !d)
		goto out;
	void *v = NULL;
	size_t len = 0;
	int64_t n = 0;
	SC_CHECK(sc, store_client_set(c, "k", "v", 1) == 0);
	SC_CHECK(sc, store_client_get(d, "k", 1000, &v, &len) == 0 && len == 1);
	free(v);
	SC_CHECK(sc, store_client_add(d, "n", 2, &n) == 0 && n == 2);
	const char *keys[] = {"absent"};
	SC_CHECK(sc, store_client_wait(c, keys, 1, 100) == -ETIMEDOUT);
	SC_CHECK(sc, store_client_ping(c) == 0);
	SC_CHECK(sc, store_client_num_keys(c, &n) == 0 && n == 2);
out:
	store_client_free(c);
	store_client_free(d);
}

static void test_clients_served(void **state)
{
	struct scenario sc = {.body = body_ops};
	scenario_run(&sc);
}

/* The server closes while a client is connected and waiting. */
static void body_close_while_waiting(struct scenario *sc)
{
	struct store_client *c = NULL, *idle = NULL;
	char err[256];
	SC_CHECK(sc, store_client_connect("127.0.0.1", sc->port, 5000, &c, err, sizeof(err)) == 0);
	SC_CHECK(sc,
		 store_client_connect("127.0.0.1", sc->port, 5000, &idle, err, sizeof(err)) == 0);
	if (!c)
		goto out;
	/* Tell the loop to close the server, then block in a wait it ends. */
	sc->told = 1;
	uv_async_send(&sc->finished);
	const char *keys[] = {"never"};
	int rc = store_client_wait(c, keys, 1, 20000);
	SC_CHECK(sc, rc == -ECONNRESET || rc == -EPIPE);
out:
	store_client_free(c);
	store_client_free(idle);
}

static void test_close_with_clients(void **state)
{
	struct scenario sc = {.body = body_close_while_waiting};
	scenario_run(&sc);
}

/* A restarted worker group: the old group's keys and connections go, the
 * kept prefixes stay, new clients find a clean store. */
static void body_reset(struct scenario *sc)
{
	struct store_client *c = NULL, *fresh = NULL;
	char err[256];
	SC_CHECK(sc, store_client_connect("127.0.0.1", sc->port, 5000, &c, err, sizeof(err)) == 0);
	if (!c)
		return;
	SC_CHECK(sc, store_client_set(c, "/default_pg/0//cpu//0/1", "old address", 11) == 0);
	SC_CHECK(sc, store_client_set(c, "agent/role", "kept", 4) == 0);
	SC_CHECK(sc, store_client_set(c, "launcher/x", "kept too", 8) == 0);
	int64_t n = 0;
	SC_CHECK(sc, store_client_add(c, "/default_pg/store_based_barrier_key:1", 2, &n) == 0);
	SC_CHECK(sc, store_client_ping(c) == 0); /* everything above has been run */
	uv_async_send(&sc->reset);
	/* The reset closes this connection, which ends the wait. */
	const char *keys[] = {"never"};
	int rc = store_client_wait(c, keys, 1, 20000);
	SC_CHECK(sc, rc == -ECONNRESET || rc == -EPIPE);
	SC_CHECK(sc,
		 store_client_connect("127.0.0.1", sc->port, 5000, &fresh, err, sizeof(err)) == 0);
	if (!fresh)
		goto out;
	const char *old[] = {"/default_pg/0//cpu//0/1"};
	SC_CHECK(sc, store_client_check(fresh, old, 1) == 0);
	SC_CHECK(sc, store_client_num_keys(fresh, &n) == 0 && n == 2);
	void *v = NULL;
	size_t len = 0;
	SC_CHECK(sc, store_client_get(fresh, "agent/role", 1000, &v, &len) == 0 && len == 4);
	free(v);
	SC_CHECK(sc, store_client_add(fresh, "/default_pg/store_based_barrier_key:1", 1, &n) == 0);
	SC_CHECK(sc, n == 1); /* counting starts again */
	SC_CHECK(sc, sc->dropped == 2);
out:
	store_client_free(c);
	store_client_free(fresh);
}

static void test_reset_between_groups(void **state)
{
	struct scenario sc = {.body = body_reset};
	scenario_run(&sc);
}

/* A barrier over its world-size limit and a listing over its key limit
 * close that client only. */
static void body_limits(struct scenario *sc)
{
	struct store_client *c = NULL;
	char err[256];
	char **keys = NULL;
	size_t n = 0;
	SC_CHECK(sc, store_client_connect("127.0.0.1", sc->port, 5000, &c, err, sizeof(err)) == 0);
	if (!c)
		return;
	SC_CHECK(sc, store_client_barrier(c, "b", 1, 1000) == 0);
	int rc = store_client_barrier(c, "b5", 5, 1000);
	SC_CHECK(sc, rc == -ECONNRESET || rc == -EPIPE);
	store_client_free(c);
	SC_CHECK(sc, store_client_connect("127.0.0.1", sc->port, 5000, &c, err, sizeof(err)) == 0);
	if (!c)
		return;
	SC_CHECK(sc, store_client_set(c, "k1", "1", 1) == 0);
	SC_CHECK(sc, store_client_list_keys(c, &keys, &n) == 0 && n == 2); /* b, k1 */
	store_client_free_keys(keys, n);
	SC_CHECK(sc, store_client_set(c, "k2", "2", 1) == 0);
	rc = store_client_list_keys(c, &keys, &n);
	SC_CHECK(sc, (rc == -ECONNRESET || rc == -EPIPE) && keys == NULL && n == 0);
	store_client_free(c);
}

static void test_barrier_and_list_limits(void **state)
{
	struct store_limits limits;
	store_limits_default(&limits);
	limits.max_barrier_world = 4;
	limits.max_list_keys = 2;
	struct scenario sc = {.body = body_limits, .limits = &limits};
	scenario_run(&sc);
}

/* A raw client of 127.0.0.1:port from `from` (another loopback address,
 * so that the per-address bounds can be told apart), or -1. */
static int raw_from(const char *from, int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET}, b = {.sin_family = AF_INET};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	inet_pton(AF_INET, from, &b.sin_addr);
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	a.sin_port = htons((uint16_t)port);
	if (fd < 0 || bind(fd, (struct sockaddr *)&b, sizeof(b)) < 0 ||
	    connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* torch 2.x's first query (VALIDATE, no reply): the client has spoken. */
static bool raw_validate(int fd)
{
	static const uint8_t v[] = {0x00, 0xCE, 0xF7, 0x85, 0x3C};
	return send(fd, v, sizeof(v), MSG_NOSIGNAL) == (ssize_t)sizeof(v);
}

/* Whether the server closes fd within timeout_ms (it sends nothing to it). */
static bool raw_closed(int fd, int timeout_ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	char c;
	if (poll(&p, 1, timeout_ms) != 1)
		return false;
	return recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

#define SILENT_MS 300 /* the handshake timeout these scenarios set */

static void prepare_silent(struct store_server *server)
{
	store_server_set_handshake_timeout(server, SILENT_MS);
}

/* Silent clients past max_silent_per_addr (1 here) are closed at their
 * deadline; a client that spoke is not, waiting on a key or idle; a torch
 * 1.13 pair (one speaks, its callback connection stays silent) keeps its
 * silent one; one address holds at most max_conns_per_addr (4 here).
 * (Issue 28: without a token nothing bounded them.) */
static void body_bounds(struct scenario *sc)
{
	struct store_client *c = NULL;
	char err[256];
	int a, b, k, x, kept, lone, e[5], f;
	SC_CHECK(sc, store_client_connect("127.0.0.1", sc->port, 5000, &c, err, sizeof(err)) == 0);
	a = raw_from("127.0.0.5", sc->port); /* a 1.13 store: queries ... */
	SC_CHECK(sc, a >= 0 && raw_validate(a));
	b = raw_from("127.0.0.5", sc->port); /* ... and its silent callback */
	k = raw_from("127.0.0.5", sc->port); /* kept: max_silent_per_addr is 1 */
	x = raw_from("127.0.0.5", sc->port); /* one more: closed */
	kept = raw_from("127.0.0.6", sc->port);
	lone = raw_from("127.0.0.6", sc->port);
	for (int i = 0; i < 5; i++) {
		e[i] = raw_from("127.0.0.7", sc->port);
		if (i < 4)
			SC_CHECK(sc, e[i] >= 0 && raw_validate(e[i]));
	}
	SC_CHECK(sc, raw_closed(e[4], 2000)); /* the 5th of one address, at once */
	f = raw_from("127.0.0.8", sc->port);
	SC_CHECK(sc, f >= 0 && raw_validate(f));
	if (c) { /* waits past the deadline: never cut */
		const char *keys[] = {"late"};
		SC_CHECK(sc, store_client_wait(c, keys, 1, 3 * SILENT_MS) == -ETIMEDOUT);
		SC_CHECK(sc, store_client_ping(c) == 0);
	}
	SC_CHECK(sc, raw_closed(lone, 3 * SILENT_MS));
	SC_CHECK(sc, raw_closed(x, 3 * SILENT_MS));
	SC_CHECK(sc, !raw_closed(b, 2 * SILENT_MS)); /* vouched for by a */
	SC_CHECK(sc, !raw_closed(k, 0));
	SC_CHECK(sc, !raw_closed(kept, 0));
	SC_CHECK(sc, !raw_closed(a, 0));
	SC_CHECK(sc, !raw_closed(f, 0));
	for (int i = 0; i < 4; i++)
		SC_CHECK(sc, !raw_closed(e[i], 0));
	if (c)
		SC_CHECK(sc, store_client_ping(c) == 0);
	int fds[] = {a, b, k, x, kept, lone, e[0], e[1], e[2], e[3], e[4], f};
	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	store_client_free(c);
}

static void test_bounds_on_every_client(void **state)
{
	struct store_limits limits;
	store_limits_default(&limits);
	limits.max_conns_per_addr = 4;
	limits.max_silent_per_addr = 1;
	struct scenario sc = {.body = body_bounds, .limits = &limits, .prepare = prepare_silent};
	scenario_run(&sc);
}

/* A silent connection kept within max_silent_per_addr (1 here) gives its
 * place back once it speaks: a torch 1.13 store made without a world size
 * is silent on both connections until it is used, and its pair held two
 * places for life (so past 32 such clients behind one address, the next
 * were cut at the deadline). Here `first` is kept silent, then speaks and
 * vouches for one of two new silent connections; the other takes the
 * place `first` gave back. */
static void body_kept_gives_back(struct scenario *sc)
{
	int first, v, w;
	first = raw_from("127.0.0.9", sc->port);
	SC_CHECK(sc, first >= 0);
	SC_CHECK(sc, !raw_closed(first, 3 * SILENT_MS)); /* kept past its deadline */
	SC_CHECK(sc, raw_validate(first));		 /* now it speaks */
	v = raw_from("127.0.0.9", sc->port);
	w = raw_from("127.0.0.9", sc->port);
	SC_CHECK(sc, v >= 0 && w >= 0);
	SC_CHECK(sc, !raw_closed(v, 3 * SILENT_MS));
	SC_CHECK(sc, !raw_closed(w, 0));
	SC_CHECK(sc, !raw_closed(first, 0));
	int fds[] = {first, v, w};
	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

static void test_kept_silent_gives_back_when_it_speaks(void **state)
{
	struct store_limits limits;
	store_limits_default(&limits);
	limits.max_conns_per_addr = 4;
	limits.max_silent_per_addr = 1;
	struct scenario sc = {
	    .body = body_kept_gives_back, .limits = &limits, .prepare = prepare_silent};
	scenario_run(&sc);
}

/* A connection that would take one of the descriptors kept in reserve is
 * closed at once (here the reserve is the whole limit). */
static void prepare_reserve_all(struct store_server *server)
{
	store_server_set_fd_reserve(server, 1u << 30);
}

static void body_reserve(struct scenario *sc)
{
	int fd = raw_from("127.0.0.9", sc->port);
	SC_CHECK(sc, fd >= 0 && raw_validate(fd));
	SC_CHECK(sc, raw_closed(fd, 2000));
	if (fd >= 0)
		close(fd);
}

static void test_descriptor_reserve(void **state)
{
	struct scenario sc = {.body = body_reserve, .prepare = prepare_reserve_all};
	scenario_run(&sc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_listen_errors_and_retry),
	    cmocka_unit_test(test_clients_served),
	    cmocka_unit_test(test_close_with_clients),
	    cmocka_unit_test(test_reset_between_groups),
	    cmocka_unit_test(test_barrier_and_list_limits),
	    cmocka_unit_test(test_bounds_on_every_client),
	    cmocka_unit_test(test_kept_silent_gives_back_when_it_speaks),
	    cmocka_unit_test(test_descriptor_reserve),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
