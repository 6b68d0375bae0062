/*
 * test_daemon.c - integration tests of the real ddp-rdzvd: every operation
 * through the C client, raw torch 1.13 and 2.x frames, waits, limits,
 * faults, memory and shutdown. Every daemon listens on 127.0.0.1, port 0.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon_util.h"
#include "store_client.h"

#define L8(n) (n), 0, 0, 0, 0, 0, 0, 0

#define RSS_MEANINGFUL DAEMON_RSS_MEANINGFUL

static long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

struct fx {
	struct daemon d;
	struct store_client *c;
};

static int start_with(void **state, const char *const *args)
{
	struct fx *f = calloc(1, sizeof(*f));
	assert_int_equal(daemon_start(&f->d, args), 0);
	char err[256];
	assert_int_equal(
	    store_client_connect("127.0.0.1", f->d.port, 10000, &f->c, err, sizeof(err)), 0);
	*state = f;
	return 0;
}

static int setup(void **state)
{
	const char *args[] = {"-v", NULL};
	return start_with(state, args);
}

static int setup_limits(void **state)
{
	const char *args[] = {"-v", "--max-key-len",	      "16", "--max-value-len",
			      "64", "--max-keys-per-request", "4",  "--max-total-bytes",
			      "4K", "--max-connections",      "16", NULL};
	return start_with(state, args);
}

static int teardown(void **state)
{
	struct fx *f = *state;
	store_client_free(f->c);
	assert_int_equal(daemon_stop(&f->d), 0);
	free(f);
	return 0;
}

static void test_every_op(void **state)
{
	struct store_client *c = ((struct fx *)*state)->c;
	void *v = NULL;
	size_t len = 0;
	int64_t n = 0;
	assert_int_equal(store_client_ping(c), 0);
	assert_int_equal(store_client_set(c, "a", "hello", 5), 0);
	assert_int_equal(store_client_get(c, "a", 1000, &v, &len), 0);
	assert_int_equal(len, 5);
	assert_string_equal(v, "hello");
	free(v);
	assert_int_equal(store_client_add(c, "n", 5, &n), 0);
	assert_int_equal(n, 5);
	assert_int_equal(store_client_add(c, "n", -8, &n), 0);
	assert_int_equal(n, -3);
	assert_int_equal(store_client_compare_set(c, "cs", "", 0, "x", 1, &v, &len), 0);
	assert_string_equal(v, "x");
	free(v);
	assert_int_equal(store_client_compare_set(c, "cs", "y", 1, "z", 1, &v, &len), 0);
	assert_string_equal(v, "x");
	free(v);
	assert_int_equal(store_client_compare_set(c, "cs", "x", 1, "w", 1, &v, &len), 0);
	assert_string_equal(v, "w");
	free(v);
	assert_int_equal(store_client_compare_set(c, "none", "e", 1, "d", 1, &v, &len), 0);
	assert_string_equal(v, "e");
	free(v);
	const char *both[] = {"a", "n"}, *one_missing[] = {"a", "zz"};
	assert_int_equal(store_client_check(c, both, 2), 1);
	assert_int_equal(store_client_check(c, one_missing, 2), 0);
	assert_int_equal(store_client_wait(c, both, 2, 1000), 0);
	assert_int_equal(store_client_num_keys(c, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(store_client_delete(c, "a"), 1);
	assert_int_equal(store_client_delete(c, "a"), 0);
	assert_int_equal(store_client_append(c, "ap", "ab", 2), 0);
	assert_int_equal(store_client_append(c, "ap", "cd", 2), 0);
	const char *keys[] = {"k1", "k2", "k3"};
	const void *vals[] = {"one", "", "three"};
	size_t lens[] = {3, 0, 5};
	assert_int_equal(store_client_multi_set(c, keys, vals, lens, 3), 0);
	const char *mkeys[] = {"k3", "ap", "k2", "k1"};
	void *got[4];
	size_t glen[4];
	assert_int_equal(store_client_multi_get(c, mkeys, 4, 1000, got, glen), 0);
	assert_string_equal(got[0], "three");
	assert_string_equal(got[1], "abcd");
	assert_int_equal(glen[2], 0);
	assert_string_equal(got[3], "one");
	for (int i = 0; i < 4; i++)
		free(got[i]);
	assert_int_equal(store_client_num_keys(c, &n), 0);
	assert_int_equal(n, 6);
}

static void test_wait_timeout(void **state)
{
	struct store_client *c = ((struct fx *)*state)->c;
	const char *keys[] = {"present", "missing/one", "missing/two"};
	assert_int_equal(store_client_set(c, "present", "1", 1), 0);
	long t0 = now_ms();
	assert_int_equal(store_client_wait(c, keys, 3, 300), -ETIMEDOUT);
	long took = now_ms() - t0;
	assert_true(took >= 300 && took < 5000);
	const char *msg = store_client_error(c);
	assert_non_null(strstr(msg, "missing/one"));
	assert_non_null(strstr(msg, "missing/two"));
	assert_null(strstr(msg, "'present'"));
	/* The wait was cancelled: the connection is still in step. */
	assert_int_equal(store_client_ping(c), 0);
	assert_int_equal(store_client_set(c, "missing/one", "1", 1), 0);
	assert_int_equal(store_client_set(c, "missing/two", "1", 1), 0);
	assert_int_equal(store_client_wait(c, keys, 3, 1000), 0);
	void *v;
	size_t len;
	assert_int_equal(store_client_get(c, "never", 200, &v, &len), -ETIMEDOUT);
	assert_int_equal(store_client_ping(c), 0);
}

static void test_waiter_wakeup(void **state)
{
	struct fx *f = *state;
	int fd = raw_connect(f->d.port);
	assert_true(fd >= 0);
	assert_int_equal(raw_handshake_v2(fd), 0);
	/* WAIT for "w1" and "w2" (2.x numbering: 6). */
	const uint8_t wait[] = {0x06, L8(2), L8(2), 'w', '1', L8(2), 'w', '2'};
	assert_int_equal(raw_send(fd, wait, sizeof(wait)), 0);
	assert_true(raw_silent(fd, 100));
	assert_int_equal(store_client_set(f->c, "w1", "x", 1), 0);
	assert_true(raw_silent(fd, 100)); /* one key is still missing */
	int64_t n;
	assert_int_equal(store_client_add(f->c, "w2", 1, &n), 0);
	uint8_t r = 0xFF;
	assert_int_equal(raw_recv(fd, &r, 1, 5000), 0);
	assert_int_equal(r, 0); /* STOP_WAITING */
	close(fd);
}

static void test_disconnect_while_waiting(void **state)
{
	struct fx *f = *state;
	int fd = raw_connect(f->d.port);
	assert_int_equal(raw_handshake_v2(fd), 0);
	const uint8_t wait[] = {0x06, L8(1), L8(2), 'd', 'w'};
	assert_int_equal(raw_send(fd, wait, sizeof(wait)), 0);
	assert_true(raw_silent(fd, 50));
	close(fd);
	assert_true(daemon_log_contains(&f->d, "dropped 1 pending wait", 5000));
	/* A later waiter on the same key is served; the gone one is not touched. */
	fd = raw_connect(f->d.port);
	assert_int_equal(raw_handshake_v2(fd), 0);
	assert_int_equal(raw_send(fd, wait, sizeof(wait)), 0);
	assert_true(raw_silent(fd, 50));
	assert_int_equal(store_client_set(f->c, "dw", "1", 1), 0);
	uint8_t r = 0xFF;
	assert_int_equal(raw_recv(fd, &r, 1, 5000), 0);
	assert_int_equal(r, 0);
	close(fd);
	assert_int_equal(store_client_ping(f->c), 0);
}

/* The exact bytes torch 1.13's client sends, and the replies it expects. */
static void test_torch113_frames(void **state)
{
	struct fx *f = *state;
	const uint8_t q[] = {
	    0x00, L8(2), '/',	'k', L8(1), 'v',		 /* set */
	    0x05, L8(1), L8(2), '/', 'k',			 /* wait */
	    0x02, L8(2), '/',	'k',				 /* get */
	    0x03, L8(2), '/',	'c', L8(5),			 /* add */
	    0x01, L8(3), '/',	'c', 's',   L8(0), L8(1), 'x',	 /* compare_set */
	    0x06,						 /* num_keys */
	    0x08, L8(2), '/',	'k',				 /* delete */
	    0x03, L8(5), 'i',	'n', 'i',   't',   '/',	  L8(1), /* ctor join */
	    0x04, L8(1), L8(2), '/', 'c',			 /* check */
	};
	const uint8_t want[] = {
	    0x00, L8(1), 'v', L8(5), L8(1), 'x', L8(3), L8(1), L8(1), 0x00, /* check READY */
	};
	int fd = raw_connect(f->d.port);
	/* A second, idle connection, as 1.13's callback connection. */
	int idle = raw_connect(f->d.port);
	assert_true(fd >= 0 && idle >= 0);
	/* Each query in two sends, as the 1.13 client does. */
	assert_int_equal(raw_send(fd, q, 1), 0);
	assert_int_equal(raw_send(fd, q + 1, sizeof(q) - 1), 0);
	uint8_t got[sizeof(want)];
	assert_int_equal(raw_recv(fd, got, sizeof(got), 5000), 0);
	assert_memory_equal(got, want, sizeof(want));
	assert_true(raw_silent(fd, 50));
	/* Both generations at once: a 2.x client sees what 1.13 stored. */
	void *v;
	size_t len;
	assert_int_equal(store_client_get(f->c, "/cs", 1000, &v, &len), 0);
	assert_string_equal(v, "x");
	free(v);
	close(fd);
	close(idle);
}

/* torch 1.13's watchKey: WATCH_KEY on the second connection, then a push
 * (type, key, old value, new value) for every change of the key. */
static void test_torch113_watch_key(void **state)
{
	struct fx *f = *state;
	int q = raw_connect(f->d.port);
	int cb = raw_connect(f->d.port);
	const uint8_t watch[] = {0x07, L8(2), '/', 'w'};
	assert_int_equal(raw_send(cb, watch, sizeof(watch)), 0);
	uint8_t r[64];
	assert_int_equal(raw_recv(cb, r, 1, 5000), 0);
	assert_int_equal(r[0], 3); /* KEY_CALLBACK_REGISTERED */
	const uint8_t set1[] = {0x00, L8(2), '/', 'w', L8(1), 'a'};
	const uint8_t set2[] = {0x00, L8(2), '/', 'w', L8(2), 'b', 'c'};
	const uint8_t del[] = {0x08, L8(2), '/', 'w'};
	assert_int_equal(raw_send(q, set1, sizeof(set1)), 0);
	const uint8_t created[] = {1, L8(2), '/', 'w', L8(0), L8(1), 'a'};
	assert_int_equal(raw_recv(cb, r, sizeof(created), 5000), 0);
	assert_memory_equal(r, created, sizeof(created));
	assert_int_equal(raw_send(q, set2, sizeof(set2)), 0);
	const uint8_t updated[] = {0, L8(2), '/', 'w', L8(1), 'a', L8(2), 'b', 'c'};
	assert_int_equal(raw_recv(cb, r, sizeof(updated), 5000), 0);
	assert_memory_equal(r, updated, sizeof(updated));
	assert_int_equal(raw_send(q, del, sizeof(del)), 0);
	assert_int_equal(raw_recv(q, r, 8, 5000), 0);
	assert_int_equal(r[0], 1);
	const uint8_t deleted[] = {2, L8(2), '/', 'w', L8(2), 'b', 'c', L8(0)};
	assert_int_equal(raw_recv(cb, r, sizeof(deleted), 5000), 0);
	assert_memory_equal(r, deleted, sizeof(deleted));
	/* The watcher goes away; changes after that harm nobody. */
	close(cb);
	assert_int_equal(raw_send(q, set1, sizeof(set1)), 0);
	assert_int_equal(store_client_ping(f->c), 0);
	close(q);
}

static void expect_closed_after(struct fx *f, const uint8_t *bytes, size_t len, bool v2)
{
	int fd = raw_connect(f->d.port);
	assert_true(fd >= 0);
	if (v2)
		assert_int_equal(raw_handshake_v2(fd), 0);
	assert_int_equal(raw_send(fd, bytes, len), 0);
	assert_true(raw_closed(fd, 5000));
	close(fd);
	assert_int_equal(store_client_ping(f->c), 0); /* others are served */
}

static void test_limits_close_connection(void **state)
{
	struct fx *f = *state;
	const uint8_t key_over[] = {0x03, L8(17)};
	expect_closed_after(f, key_over, sizeof(key_over), true);
	const uint8_t value_over[] = {0x01, L8(1), 'k', L8(65)};
	expect_closed_after(f, value_over, sizeof(value_over), true);
	const uint8_t count_over[] = {0x06, L8(5)};
	expect_closed_after(f, count_over, sizeof(count_over), true);
	const uint8_t huge[] = {0x03, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F};
	expect_closed_after(f, huge, sizeof(huge), true);
	const uint8_t unknown_v2[] = {0x20};
	expect_closed_after(f, unknown_v2, 1, true);
	const uint8_t unknown_v1[] = {0x0D, 1, 2, 3, 4};
	expect_closed_after(f, unknown_v1, sizeof(unknown_v1), false);
	const uint8_t bad_magic[] = {0x00, 0xCE, 0xF7, 0x85, 0x3D};
	expect_closed_after(f, bad_magic, sizeof(bad_magic), true);
	const uint8_t add_text[] = {0x04, L8(1), 't', L8(1)};
	assert_int_equal(store_client_set(f->c, "t", "text", 4), 0);
	expect_closed_after(f, add_text, sizeof(add_text), true);

	/* A truncated frame: half a SET, then the client closes its side. */
	int fd = raw_connect(f->d.port);
	assert_int_equal(raw_handshake_v2(fd), 0);
	const uint8_t half[] = {0x01, L8(4), 'a', 'b'};
	assert_int_equal(raw_send(fd, half, sizeof(half)), 0);
	shutdown(fd, SHUT_WR);
	assert_true(raw_closed(fd, 5000));
	close(fd);
	assert_true(daemon_log_contains(&f->d, "in the middle of a frame", 5000));

	/* Total bytes: fill the store until the daemon refuses. */
	char key[16], val[64];
	memset(val, 'v', sizeof(val));
	struct store_client *filler;
	char err[256];
	assert_int_equal(
	    store_client_connect("127.0.0.1", f->d.port, 5000, &filler, err, sizeof(err)), 0);
	int rc = 0, i;
	for (i = 0; i < 200 && rc == 0; i++) {
		snprintf(key, sizeof(key), "fill%d", i);
		rc = store_client_set(filler, key, val, sizeof(val));
		if (rc == 0)
			rc = store_client_ping(filler); /* sets have no reply */
	}
	assert_true(rc < 0);
	assert_true(i > 30 && i < 70); /* 4 KiB / ~70 bytes each */
	store_client_free(filler);
	assert_int_equal(store_client_ping(f->c), 0);
}

/* A set has no reply: store_client_confirm() tells whether it was stored,
 * and a refused write is named by whatever call finds the connection
 * closed. */
static void test_refused_write_confirmed(void **state)
{
	struct fx *f = *state;
	char err[256], val[65];
	memset(val, 'v', sizeof(val));
	struct store_client *c;
	assert_int_equal(store_client_connect("127.0.0.1", f->d.port, 5000, &c, err, sizeof(err)),
			 0);
	assert_int_equal(store_client_set(c, "ok", "v", 1), 0);
	assert_int_equal(store_client_confirm(c), 0);
	assert_int_equal(store_client_set(c, "k", val, sizeof(val)), 0); /* sent, not stored */
	int rc = store_client_confirm(c);
	assert_true(rc == -ECONNRESET || rc == -EPIPE);
	print_message("%s\n", store_client_error(c));
	assert_non_null(strstr(store_client_error(c), "instead of confirming set of 'k' (a 1-byte "
						      "key, a 65-byte value)"));
	assert_non_null(strstr(store_client_error(c), "--max-value-len"));
	store_client_free(c);

	/* A get pipelined behind a refused set names the set. */
	assert_int_equal(store_client_connect("127.0.0.1", f->d.port, 5000, &c, err, sizeof(err)),
			 0);
	assert_int_equal(store_client_set(c, "0123456789abcdefX", "v", 1), 0);
	void *v = NULL;
	size_t len = 0;
	rc = store_client_get(c, "ok", 1000, &v, &len);
	assert_true(rc == -ECONNRESET || rc == -EPIPE);
	assert_non_null(strstr(store_client_error(c), "set of '0123456789abcdefX' (a 17-byte key"));
	store_client_free(c);

	/* A query refused itself is named as such. */
	assert_int_equal(store_client_connect("127.0.0.1", f->d.port, 5000, &c, err, sizeof(err)),
			 0);
	const char *keys[] = {"a", "b", "c", "d", "e"};
	rc = store_client_check(c, keys, 5);
	assert_true(rc == -ECONNRESET || rc == -EPIPE);
	assert_non_null(strstr(store_client_error(c), "at check of 'a' and more (a 1-byte key, 5 "
						      "keys)"));
	assert_non_null(strstr(store_client_error(c), "--max-keys-per-request"));
	store_client_free(c);
	v = NULL;
	assert_int_equal(store_client_get(f->c, "ok", 1000, &v, &len), 0);
	free(v);
	assert_int_equal(store_client_check(f->c, (const char *[]){"k"}, 1), 0);
}

static void test_connection_limit(void **state)
{
	struct fx *f = *state;
	int fds[15];
	for (int i = 0; i < 15; i++) { /* 15 + the fixture's client = 16 */
		fds[i] = raw_connect(f->d.port);
		assert_int_equal(raw_handshake_v2(fds[i]), 0);
	}
	int extra = raw_connect(f->d.port);
	assert_true(extra >= 0);
	assert_true(raw_closed(extra, 5000));
	close(extra);
	close(fds[0]);
	/* Room again once the server has seen the close. */
	struct store_client *c = NULL;
	char err[256];
	assert_int_equal(store_client_connect("127.0.0.1", f->d.port, 10000, &c, err, sizeof(err)),
			 0);
	assert_int_equal(store_client_ping(c), 0);
	store_client_free(c);
	for (int i = 1; i < 15; i++)
		close(fds[i]);
}

/* torch 1.13's server freezes for everyone when one client sends a query
 * type and half a length; ours serves the others. */
static void test_half_frame_does_not_stall(void **state)
{
	struct fx *f = *state;
	int stuck = raw_connect(f->d.port);
	const uint8_t half[] = {0x03, 0x02, 0x00, 0x00, 0x00};
	assert_int_equal(raw_send(stuck, half, sizeof(half)), 0);
	long t0 = now_ms();
	for (int i = 0; i < 2000; i++) {
		char key[32];
		snprintf(key, sizeof(key), "hf%d", i % 50);
		assert_int_equal(store_client_set(f->c, key, "v", 1), 0);
		void *v;
		size_t len;
		assert_int_equal(store_client_get(f->c, key, 1000, &v, &len), 0);
		free(v);
	}
	assert_true(now_ms() - t0 < 20000);
	/* The stalled client finishes its ADD and gets its answer. */
	const uint8_t rest[] = {0, 0, 0, 0, '/', 'c', L8(3)};
	assert_int_equal(raw_send(stuck, rest, sizeof(rest)), 0);
	uint8_t r[8];
	assert_int_equal(raw_recv(stuck, r, 8, 5000), 0);
	assert_int_equal(r[0], 3);
	close(stuck);
}

/* A client that pipelines many large GETs and does not read: the daemon stops
 * reading from it instead of buffering every reply, and serves it all once
 * it reads. */
static void test_slow_reader_is_paced(void **state)
{
	struct fx *f = *state;
	enum { VALUE = 64 * 1024, GETS = 2000 };
	char *big = malloc(VALUE);
	memset(big, 'b', VALUE);
	assert_int_equal(store_client_set(f->c, "big", big, VALUE), 0);
	assert_int_equal(store_client_ping(f->c), 0);
	long before = daemon_rss_kib(&f->d);
	int fd = raw_connect(f->d.port);
	assert_int_equal(raw_handshake_v2(fd), 0);
	const uint8_t get[] = {0x03, L8(3), 'b', 'i', 'g'};
	static uint8_t gets[GETS * sizeof(get)];
	for (int i = 0; i < GETS; i++)
		memcpy(gets + i * sizeof(get), get, sizeof(get));
	assert_int_equal(raw_send(fd, gets, sizeof(gets)), 0);
	/* Others are served meanwhile; the replies (128 MiB) are not all held. */
	for (int i = 0; i < 20; i++)
		assert_int_equal(store_client_ping(f->c), 0);
	long during = daemon_rss_kib(&f->d);
	print_message("daemon VmRSS %ld KiB before, %ld KiB with %d MiB of replies unread\n",
		      before, during, GETS * (VALUE / 1024) / 1024);
	if (RSS_MEANINGFUL)
		assert_true(during - before < 48 * 1024);
	uint8_t hdr[8];
	for (int i = 0; i < GETS; i++) {
		assert_int_equal(raw_recv(fd, hdr, 8, 10000), 0);
		assert_int_equal(hdr[0] | hdr[1] << 8 | hdr[2] << 16, VALUE);
		assert_int_equal(raw_recv(fd, big, VALUE, 10000), 0);
		assert_int_equal(big[0], 'b');
		assert_int_equal(big[VALUE - 1], 'b');
	}
	const uint8_t ping[] = {0x0D, 1, 2, 3, 4};
	assert_int_equal(raw_send(fd, ping, sizeof(ping)), 0);
	assert_int_equal(raw_recv(fd, hdr, 4, 5000), 0);
	assert_memory_equal(hdr, ping + 1, 4);
	close(fd);
	free(big);
}

/* A barrier as launchers and workers build it: N clients ADD a counter and
 * WAIT for a release key; every count 1..N is handed out once and every
 * client is released when the key is set. */
static void test_barrier(void **state)
{
	struct fx *f = *state;
	enum { N = 1000 };
	static int fds[N];
	static bool seen[N + 1];
	memset(seen, 0, sizeof(seen));
	const uint8_t msg[] = {0x00, 0xCE,  0xF7, 0x85,	 0x3C,	0x04, L8(1),
			       'b',  L8(1), 0x06, L8(1), L8(1), 'r'};
	long t0 = now_ms();
	for (int i = 0; i < N; i++) {
		fds[i] = raw_connect(f->d.port);
		assert_true(fds[i] >= 0);
		assert_int_equal(raw_send(fds[i], msg, sizeof(msg)), 0);
	}
	for (int i = 0; i < N; i++) {
		uint8_t r[8];
		assert_int_equal(raw_recv(fds[i], r, 8, 10000), 0);
		long v = r[0] | r[1] << 8;
		assert_true(v >= 1 && v <= N && !seen[v]);
		seen[v] = true;
	}
	assert_int_equal(store_client_set(f->c, "r", "go", 2), 0);
	for (int i = 0; i < N; i++) {
		uint8_t r = 0xFF;
		assert_int_equal(raw_recv(fds[i], &r, 1, 10000), 0);
		assert_int_equal(r, 0);
		close(fds[i]);
	}
	print_message("%d-client barrier connected and released in %ld ms\n", N, now_ms() - t0);
	assert_true(now_ms() - t0 < 20000);
}

static int cycle(int port)
{
	int fd = raw_connect(port);
	if (fd < 0)
		return -1;
	int rc = raw_handshake_v2(fd);
	close(fd);
	return rc;
}

static void test_connect_cycles_memory(void **state)
{
	struct fx *f = *state;
	for (int i = 0; i < 1000; i++)
		assert_int_equal(cycle(f->d.port), 0);
	long before = daemon_rss_kib(&f->d);
	for (int i = 0; i < 10000; i++)
		assert_int_equal(cycle(f->d.port), 0);
	assert_int_equal(store_client_ping(f->c), 0);
	long after = daemon_rss_kib(&f->d);
	print_message("daemon VmRSS %ld KiB before, %ld KiB after 10000 cycles\n", before, after);
	assert_true(before > 0 && after > 0);
	if (RSS_MEANINGFUL)
		assert_true(after <= before + 256);
}

static void test_idle_connection_memory(void **state)
{
	struct fx *f = *state;
	enum { MAX_N = 4000 };
	static int fds[MAX_N];
	/* As many as this process may open (main() raised the limit). */
	struct rlimit rl;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	int N = rl.rlim_cur > MAX_N + 100 ? MAX_N : (int)rl.rlim_cur - 100;
	assert_true(N >= 500);
	long before = daemon_rss_kib(&f->d);
	for (int i = 0; i < N; i++) {
		fds[i] = raw_connect(f->d.port);
		assert_true(fds[i] >= 0);
		assert_int_equal(raw_handshake_v2(fds[i]), 0);
	}
	long after = daemon_rss_kib(&f->d);
	long per = (after - before) * 1024 / N;
	print_message("daemon VmRSS %ld -> %ld KiB with %d idle connections: %ld bytes each\n",
		      before, after, N, per);
	if (RSS_MEANINGFUL)
		assert_true(per <= 2048);
	for (int i = 0; i < N; i++)
		close(fds[i]);
	assert_int_equal(store_client_ping(f->c), 0);
}

static void test_sigterm_with_clients(void **state)
{
	struct daemon d;
	const char *args[] = {"-v", NULL};
	assert_int_equal(daemon_start(&d, args), 0);
	int fd = raw_connect(d.port);
	assert_int_equal(raw_handshake_v2(fd), 0);
	const uint8_t wait[] = {0x06, L8(1), L8(1), 'z'};
	assert_int_equal(raw_send(fd, wait, sizeof(wait)), 0);
	int idle = raw_connect(d.port);
	const uint8_t half[] = {0x01, 0x05};
	assert_int_equal(raw_send(idle, half, sizeof(half)), 0);
	assert_true(raw_silent(fd, 50));
	char port_file[sizeof(d.port_file)];
	strcpy(port_file, d.port_file);
	kill(d.pid, SIGTERM);
	assert_true(raw_closed(fd, 5000));
	assert_true(raw_closed(idle, 5000));
	assert_int_equal(daemon_wait(&d, 10000), 0);
	assert_true(daemon_log_contains(&d, "stopped", 0));
	assert_int_equal(access(port_file, F_OK), -1); /* removed on a clean exit */
	daemon_stop(&d);
	close(fd);
	close(idle);
}

static void test_refused_names_address(void **state)
{
	struct daemon d;
	const char *args[] = {NULL};
	assert_int_equal(daemon_start(&d, args), 0);
	int port = d.port;
	assert_int_equal(daemon_stop(&d), 0);
	struct store_client *c = NULL;
	char err[256] = "";
	long t0 = now_ms();
	int rc = store_client_connect("127.0.0.1", port, 300, &c, err, sizeof(err));
	assert_int_equal(rc, -ECONNREFUSED);
	assert_null(c);
	assert_true(now_ms() - t0 >= 250); /* it retried until the deadline */
	char addr[64];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	assert_non_null(strstr(err, addr));
}

/* The torch 1.13 framing of our client, served by the same daemon. */
static void test_client_v1_framing(void **state)
{
	struct fx *f = *state;
	struct store_client *c = NULL;
	char err[256];
	assert_int_equal(store_client_connect_proto("127.0.0.1", f->d.port, 5000,
						    STORE_CLIENT_PROTO_V1, &c, err, sizeof(err)),
			 0);
	assert_int_equal(store_client_ping(c), 0);
	assert_int_equal(store_client_set(c, "v1", "one", 3), 0);
	int64_t n;
	assert_int_equal(store_client_add(c, "v1n", 4, &n), 0);
	assert_int_equal(n, 4);
	const char *keys[] = {"m1", "m2"};
	const void *vals[] = {"a", "bb"};
	size_t lens[] = {1, 2};
	assert_int_equal(store_client_multi_set(c, keys, vals, lens, 2), 0);
	void *got[2];
	size_t glen[2];
	assert_int_equal(store_client_multi_get(c, keys, 2, 1000, got, glen), 0);
	assert_string_equal(got[0], "a");
	assert_string_equal(got[1], "bb");
	free(got[0]);
	free(got[1]);
	assert_int_equal(store_client_append(c, "v1", "x", 1), -EOPNOTSUPP);
	assert_int_equal(store_client_delete(c, "v1n"), 1);
	/* A 2.x client sees what the 1.13-framed one stored. */
	void *v;
	size_t len;
	assert_int_equal(store_client_get(f->c, "v1", 1000, &v, &len), 0);
	assert_string_equal(v, "one");
	free(v);
	/* No cancel in 1.13: after a timeout the connection is given up. */
	const char *missing[] = {"nope"};
	assert_int_equal(store_client_wait(c, missing, 1, 200), -ETIMEDOUT);
	assert_non_null(strstr(store_client_error(c), "nope"));
	assert_int_equal(store_client_ping(c), -EPIPE);
	store_client_free(c);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_every_op, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_wait_timeout, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_waiter_wakeup, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_disconnect_while_waiting, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_torch113_frames, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_torch113_watch_key, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_limits_close_connection, setup_limits, teardown),
	    cmocka_unit_test_setup_teardown(test_refused_write_confirmed, setup_limits, teardown),
	    cmocka_unit_test_setup_teardown(test_connection_limit, setup_limits, teardown),
	    cmocka_unit_test_setup_teardown(test_half_frame_does_not_stall, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_slow_reader_is_paced, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_barrier, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_connect_cycles_memory, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_idle_connection_memory, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_client_v1_framing, setup, teardown),
	    cmocka_unit_test(test_sigterm_with_clients),
	    cmocka_unit_test(test_refused_names_address),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
