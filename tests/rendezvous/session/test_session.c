/*
 * test_session.c - the agent session client (rendezvous/session) against
 * the store server in the same libuv loop, on loopback, port 0: every
 * primitive, watches, session keys deleted when their session ends, the
 * token handshake both ways (the client proves first: a stranger's hello
 * gets nothing that depends on the token), the agents' keys written only by
 * sessions that proved it, tokens under 16 bytes refused, strangers'
 * addresses refused (127.0.0.2 and up
 * are other "nodes"; only 127.0.0.1 is loopback to the store), connect
 * retries, and a real ddp-rdzvd (DDP_RDZVD) frozen or killed: on_close
 * within 2 s.
 */
#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sodium.h>
#include <uv.h>

#include <cmocka.h>

#include "proto.h"
#include "store_access.h"
#include "store_server.h"
#include "store_session.h"

#define TOKEN "job-token-0123456789"

static struct byteview B(const char *s) {
	return (struct byteview){(const uint8_t *)s, strlen(s)};
}

static uint64_t
now_ms(void)
{
	return uv_hrtime() / 1000000;
}

/* ---- the loop ---- */

struct waiter {
	bool expired;
};

static void on_expire(uv_timer_t *t)
{
	((struct waiter *)t->data)->expired = true;
}

/* Runs the loop until *flag >= want; fails the test after timeout_ms. */
static void run_until(uv_loop_t *loop, const int *flag, int want, uint64_t timeout_ms)
{
	struct waiter w = {false};
	uv_timer_t t;
	uv_timer_init(loop, &t);
	t.data = &w;
	uv_timer_start(&t, on_expire, timeout_ms, 0);
	while (*flag < want && !w.expired)
		uv_run(loop, UV_RUN_ONCE);
	uv_close((uv_handle_t *)&t, NULL);
	uv_run(loop, UV_RUN_NOWAIT);
	assert_false(w.expired);
}

/* ---- server and sessions ---- */

struct fx {
	uv_loop_t loop;
	struct store_server *server;
	int port;
};

static void fx_init(struct fx *f, const char *token, bool restrict_)
{
	assert_int_equal(uv_loop_init(&f->loop), 0);
	assert_int_equal(store_server_new(&f->loop, NULL, &f->server), 0);
	if (token)
		assert_int_equal(store_server_set_token(f->server, token, strlen(token)), 0);
	if (restrict_)
		store_server_restrict(f->server);
	/* 0.0.0.0: reachable on every 127.x address, like a node's interface. */
	assert_int_equal(store_server_listen(f->server, "0.0.0.0", 0), 0);
	f->port = store_server_port(f->server);
}

static void count_done(void *arg)
{
	(*(int *)arg)++;
}

static void fx_release(struct fx *f)
{
	int done = 0;
	store_server_close(f->server, count_done, &done);
	run_until(&f->loop, &done, 1, 5000);
	uv_run(&f->loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&f->loop), 0);
}

struct sess {
	struct store_session *s;
	int connected; /* callbacks seen */
	int status;
	char msg[STORE_SESSION_MSG_MAX];
	int closed;
	int close_status;
	char close_msg[STORE_SESSION_MSG_MAX];
	uint64_t closed_at;
};

static void on_connect(struct store_session *s, void *arg, int status, const char *msg)
{
	struct sess *x = arg;
	x->connected++;
	x->status = status;
	snprintf(x->msg, sizeof(x->msg), "%s", msg);
	if (status < 0)
		x->s = NULL; /* freed after this callback */
}

static void on_close(struct store_session *s, void *arg, int status, const char *msg)
{
	struct sess *x = arg;
	x->closed++;
	x->close_status = status;
	x->closed_at = now_ms();
	snprintf(x->close_msg, sizeof(x->close_msg), "%s", msg);
	x->s = NULL;
}

static void sess_open(uv_loop_t *loop, struct sess *x, int port, const char *token,
		      const char *bind, int64_t timeout_ms)
{
	memset(x, 0, sizeof(*x));
	struct store_session_opts o;
	store_session_opts_default(&o);
	o.host = "127.0.0.1";
	o.port = (uint16_t)port;
	o.token = token;
	o.token_len = token ? strlen(token) : 0;
	o.bind_addr = bind;
	o.connect_timeout_ms = timeout_ms;
	assert_int_equal(store_session_connect(loop, &o, on_connect, on_close, x, &x->s), 0);
	assert_int_equal(x->connected, 0); /* never from inside the call */
	run_until(loop, &x->connected, 1, 10000);
}

/* ---- request results ---- */

struct res {
	int n; /* callbacks */
	int seq;
	int status;
	bool swapped;
	int64_t num;
	size_t nvals;
	bool present[4];
	char val[4][64];
};

static int seq_counter;

static void copy_val(struct res *r, size_t i, const struct store_session_value *v)
{
	r->present[i] = v->present;
	snprintf(r->val[i], sizeof(r->val[i]), "%.*s", (int)v->bytes.len,
		 (const char *)v->bytes.data);
}

static void done_cb(void *arg, uint64_t tag, int status)
{
	struct res *r = arg;
	r->n++;
	r->seq = ++seq_counter;
	r->status = status;
}

static void get_cb(void *arg, uint64_t tag, int status, const struct store_session_value *vals,
		   size_t n)
{
	struct res *r = arg;
	r->n++;
	r->seq = ++seq_counter;
	r->status = status;
	r->nvals = n;
	for (size_t i = 0; i < n && i < 4; i++)
		copy_val(r, i, &vals[i]);
}

static void cas_cb(void *arg, uint64_t tag, int status, bool swapped,
		   struct store_session_value cur)
{
	struct res *r = arg;
	r->n++;
	r->seq = ++seq_counter;
	r->status = status;
	r->swapped = swapped;
	copy_val(r, 0, &cur);
}

static void add_cb(void *arg, uint64_t tag, int status, int64_t value)
{
	struct res *r = arg;
	r->n++;
	r->seq = ++seq_counter;
	r->status = status;
	r->num = value;
}

/* Watch events: the last few values seen. */
struct events {
	int n;
	int status;
	bool present;
	char val[64];
};

static void event_cb(void *arg, uint64_t id, int status, struct store_session_value v)
{
	struct events *e = arg;
	e->n++;
	e->status = status;
	e->present = v.present;
	snprintf(e->val, sizeof(e->val), "%.*s", (int)v.bytes.len, (const char *)v.bytes.data);
}

/* ---- tests ---- */

static void test_primitives(void **state)
{
	struct fx f;
	struct sess a;
	fx_init(&f, NULL, false);
	sess_open(&f.loop, &a, f.port, NULL, NULL, 5000);
	assert_int_equal(a.status, 0);
	char local[64];
	assert_int_equal(store_session_local_addr(a.s, local, sizeof(local)), 0);
	assert_string_equal(local, "127.0.0.1");

	struct res r[12];
	memset(r, 0, sizeof(r));
	struct store_session *s = a.s;
	assert_int_equal(store_session_set(s, B("a"), B("1"), done_cb, &r[0], 1), 0);
	struct byteview keys[2] = {B("a"), B("missing")};
	assert_int_equal(store_session_get(s, keys, 2, get_cb, &r[1], 2), 0);
	assert_int_equal(store_session_cas(s, B("c"), false, B(""), B("x"), cas_cb, &r[2], 3), 0);
	assert_int_equal(store_session_cas(s, B("c"), false, B(""), B("z"), cas_cb, &r[3], 4), 0);
	assert_int_equal(store_session_cas(s, B("c"), true, B("x"), B("y"), cas_cb, &r[4], 5), 0);
	assert_int_equal(store_session_cas(s, B("c"), true, B("zz"), B("y"), cas_cb, &r[5], 6), 0);
	assert_int_equal(store_session_set(s, B("e"), B(""), done_cb, &r[6], 7), 0);
	assert_int_equal(store_session_cas(s, B("e"), false, B(""), B("q"), cas_cb, &r[7], 8), 0);
	assert_int_equal(store_session_add(s, B("n"), 5, add_cb, &r[8], 9), 0);
	assert_int_equal(store_session_add(s, B("n"), -2, add_cb, &r[9], 10), 0);
	assert_int_equal(store_session_set(s, B("t"), B("abc"), done_cb, &r[10], 11), 0);
	assert_int_equal(store_session_add(s, B("t"), 1, add_cb, &r[11], 12), 0);
	assert_int_equal(store_session_pending(s), 12);
	run_until(&f.loop, &r[11].n, 1, 5000);
	for (int i = 0; i < 12; i++) {
		assert_int_equal(r[i].n, 1);
		assert_int_equal(r[i].seq, r[0].seq + i); /* in order */
	}
	assert_int_equal(r[0].status, 0);
	assert_int_equal(r[1].nvals, 2);
	assert_true(r[1].present[0]);
	assert_string_equal(r[1].val[0], "1");
	assert_false(r[1].present[1]);
	assert_true(r[2].swapped && r[2].present[0]);
	assert_string_equal(r[2].val[0], "x");
	assert_false(r[3].swapped); /* not absent any more */
	assert_string_equal(r[3].val[0], "x");
	assert_true(r[4].swapped);
	assert_string_equal(r[4].val[0], "y");
	assert_false(r[5].swapped);
	assert_string_equal(r[5].val[0], "y");
	/* An empty value is present: "absent" does not match it. */
	assert_false(r[7].swapped);
	assert_true(r[7].present[0]);
	assert_string_equal(r[7].val[0], "");
	assert_int_equal(r[8].num, 5);
	assert_int_equal(r[9].num, 3);
	assert_int_equal(r[11].status, -EINVAL); /* the session goes on */
	struct res after = {0};
	assert_int_equal(store_session_get(s, keys, 1, get_cb, &after, 13), 0);
	run_until(&f.loop, &after.n, 1, 5000);
	assert_string_equal(after.val[0], "1");
	assert_int_equal(store_session_pending(s), 0);

	/* Bad arguments: no callback ever. */
	assert_int_equal(store_session_set(s, B(""), B("v"), done_cb, &r[0], 0), -EINVAL);
	assert_int_equal(store_session_get(s, keys, 0, get_cb, &r[0], 0), -EINVAL);
	assert_int_equal(store_session_add(s, B("k"), 1, NULL, NULL, 0), -EINVAL);
	assert_int_equal(store_session_unwatch(s, 12345), -ENOENT);

	store_session_close(a.s);
	store_session_close(NULL);
	fx_release(&f);
}

static void test_watch(void **state)
{
	struct fx f;
	struct sess a, b;
	fx_init(&f, NULL, false);
	sess_open(&f.loop, &a, f.port, NULL, NULL, 5000);
	sess_open(&f.loop, &b, f.port, NULL, NULL, 5000);
	struct events e1 = {0}, e2 = {0};
	uint64_t id1, id2;
	assert_int_equal(store_session_watch(a.s, B("w"), event_cb, &e1, &id1), 0);
	run_until(&f.loop, &e1.n, 1, 5000);
	assert_false(e1.present); /* the current value first: missing */
	struct res r = {0};
	assert_int_equal(store_session_set(b.s, B("w"), B("1"), done_cb, &r, 0), 0);
	run_until(&f.loop, &e1.n, 2, 5000);
	assert_true(e1.present);
	assert_string_equal(e1.val, "1");
	/* A second watch of the key: its own first value, then both hear. */
	assert_int_equal(store_session_watch(a.s, B("w"), event_cb, &e2, &id2), 0);
	run_until(&f.loop, &e2.n, 1, 5000);
	assert_string_equal(e2.val, "1");
	assert_int_not_equal(id1, id2);
	struct res c = {0};
	assert_int_equal(store_session_cas(b.s, B("w"), true, B("1"), B("2"), cas_cb, &c, 0), 0);
	run_until(&f.loop, &e2.n, 2, 5000);
	run_until(&f.loop, &e1.n, 3, 5000);
	assert_string_equal(e1.val, "2");
	assert_string_equal(e2.val, "2");
	/* After unwatch: never called again; the other watch still is. */
	assert_int_equal(store_session_unwatch(a.s, id1), 0);
	assert_int_equal(store_session_unwatch(a.s, id1), -ENOENT);
	int n1 = e1.n;
	struct res add = {0};
	assert_int_equal(store_session_add(b.s, B("w"), 5, add_cb, &add, 0), 0);
	run_until(&f.loop, &e2.n, 3, 5000);
	assert_string_equal(e2.val, "7");
	assert_int_equal(e1.n, n1);
	/* Unwatching the last: no more events, the session still works. */
	assert_int_equal(store_session_unwatch(a.s, id2), 0);
	int n2 = e2.n;
	struct res s2 = {0}, g = {0};
	assert_int_equal(store_session_set(b.s, B("w"), B("x"), done_cb, &s2, 0), 0);
	run_until(&f.loop, &s2.n, 1, 5000);
	struct byteview k = B("w");
	assert_int_equal(store_session_get(a.s, &k, 1, get_cb, &g, 0), 0);
	run_until(&f.loop, &g.n, 1, 5000);
	assert_string_equal(g.val[0], "x");
	assert_int_equal(e2.n, n2);
	assert_int_equal(e1.n, n1);
	store_session_close(a.s);
	store_session_close(b.s);
	fx_release(&f);
}

static void test_session_keys(void **state)
{
	struct fx f;
	struct sess a, b;
	fx_init(&f, NULL, false);
	sess_open(&f.loop, &a, f.port, NULL, NULL, 5000);
	sess_open(&f.loop, &b, f.port, NULL, NULL, 5000);
	struct res r1 = {0}, r2 = {0}, r3 = {0};
	assert_int_equal(store_session_set_session(a.s, B("m/a"), B("alive"), done_cb, &r1, 0), 0);
	assert_int_equal(store_session_set_session(a.s, B("m/x"), B("mine"), done_cb, &r2, 0), 0);
	run_until(&f.loop, &r2.n, 1, 5000);
	assert_int_equal(r1.status, 0);
	/* A plain write by another session unbinds the key: it stays. */
	assert_int_equal(store_session_set(b.s, B("m/x"), B("yours"), done_cb, &r3, 0), 0);
	run_until(&f.loop, &r3.n, 1, 5000);
	struct events ea = {0}, ex = {0};
	uint64_t ida, idx;
	assert_int_equal(store_session_watch(b.s, B("m/a"), event_cb, &ea, &ida), 0);
	assert_int_equal(store_session_watch(b.s, B("m/x"), event_cb, &ex, &idx), 0);
	run_until(&f.loop, &ex.n, 1, 5000);
	assert_true(ea.present);
	assert_string_equal(ea.val, "alive");
	/* A closes: its key is deleted and the watcher told. */
	store_session_close(a.s);
	run_until(&f.loop, &ea.n, 2, 5000);
	assert_false(ea.present);
	struct byteview keys[2] = {B("m/a"), B("m/x")};
	struct res g = {0};
	assert_int_equal(store_session_get(b.s, keys, 2, get_cb, &g, 0), 0);
	run_until(&f.loop, &g.n, 1, 5000);
	assert_false(g.present[0]);
	assert_true(g.present[1]);
	assert_string_equal(g.val[1], "yours");
	assert_int_equal(ex.n, 1);
	store_session_close(b.s);
	fx_release(&f);
}

static void test_close_fails_pending(void **state)
{
	struct fx f;
	struct sess a;
	fx_init(&f, NULL, false);
	/* Requests issued before the session is ready are kept and sent. */
	memset(&a, 0, sizeof(a));
	struct store_session_opts o;
	store_session_opts_default(&o);
	o.host = "127.0.0.1";
	o.port = (uint16_t)f.port;
	assert_int_equal(store_session_connect(&f.loop, &o, on_connect, on_close, &a, &a.s), 0);
	struct res early = {0};
	assert_int_equal(store_session_add(a.s, B("early"), 2, add_cb, &early, 0), 0);
	run_until(&f.loop, &early.n, 1, 5000);
	assert_int_equal(a.connected, 1);
	assert_int_equal(early.status, 0);
	assert_int_equal(early.num, 2);
	struct res r1 = {0}, r2 = {0};
	struct events e = {0};
	uint64_t id;
	assert_int_equal(store_session_watch(a.s, B("k"), event_cb, &e, &id), 0);
	assert_int_equal(store_session_set(a.s, B("k"), B("v"), done_cb, &r1, 0), 0);
	assert_int_equal(store_session_add(a.s, B("n"), 1, add_cb, &r2, 0), 0);
	store_session_close(a.s);
	assert_int_equal(r1.n, 1);
	assert_int_equal(r1.status, -ECANCELED);
	assert_int_equal(r2.status, -ECANCELED);
	assert_int_equal(e.n, 1);
	assert_int_equal(e.status, -ECANCELED);
	assert_int_equal(a.closed, 0);
	fx_release(&f);
}

/* Closing from inside a callback, with more replies in the same read. */
struct closer {
	struct store_session *s;
	int n;
	int status[4];
};

static void close_in_cb(void *arg, uint64_t tag, int status)
{
	struct closer *c = arg;
	c->n++;
	c->status[tag] = status;
	if (tag == 0)
		store_session_close(c->s);
}

static void test_close_from_callback(void **state)
{
	struct fx f;
	struct sess a;
	fx_init(&f, NULL, false);
	sess_open(&f.loop, &a, f.port, NULL, NULL, 5000);
	struct closer c = {a.s, 0, {1, 1, 1, 1}};
	for (uint64_t i = 0; i < 4; i++)
		assert_int_equal(store_session_set(a.s, B("k"), B("v"), close_in_cb, &c, i), 0);
	run_until(&f.loop, &c.n, 4, 5000);
	assert_int_equal(c.status[0], 0);
	for (int i = 1; i < 4; i++)
		assert_int_equal(c.status[i], -ECANCELED);
	assert_int_equal(a.closed, 0);
	fx_release(&f);
}

static void test_auth(void **state)
{
	struct fx f;
	struct sess a;
	fx_init(&f, TOKEN, false);
	sess_open(&f.loop, &a, f.port, TOKEN, NULL, 5000);
	assert_int_equal(a.status, 0);
	struct res r = {0};
	assert_int_equal(store_session_set(a.s, B("k"), B("v"), done_cb, &r, 0), 0);
	run_until(&f.loop, &r.n, 1, 5000);
	assert_int_equal(r.status, 0);
	store_session_close(a.s);

	/* A wrong token: the client proves first, and the store refuses it. */
	sess_open(&f.loop, &a, f.port, "another-jobs-token", NULL, 5000);
	assert_int_equal(a.status, -EACCES);
	assert_non_null(strstr(a.msg, "refused this node's proof of the token"));
	assert_non_null(strstr(a.msg, "127.0.0.1:"));
	/* No token at a store that has one. */
	sess_open(&f.loop, &a, f.port, NULL, NULL, 5000);
	assert_int_equal(a.status, -EACCES);
	assert_non_null(strstr(a.msg, "requires the job's token"));
	fx_release(&f);

	/* A token at a store without one: not this job's store. */
	fx_init(&f, NULL, false);
	sess_open(&f.loop, &a, f.port, TOKEN, NULL, 5000);
	assert_int_equal(a.status, -EACCES);
	assert_non_null(strstr(a.msg, "has no token"));
	fx_release(&f);
}

/* A client that cannot authenticate (like a torch worker): connects from
 * `bind`, sends its bytes, and reads until `want` bytes came or the end of
 * the connection. */
struct raw {
	uv_tcp_t tcp;
	uv_connect_t creq;
	uv_write_t wreq;
	uint8_t req[256];
	size_t reqlen;
	uint8_t buf[256];
	size_t got;
	size_t want;
	int finished;
	bool eof;
};

static void raw_alloc(uv_handle_t *h, size_t s, uv_buf_t *buf)
{
	struct raw *r = h->data;
	*buf = uv_buf_init((char *)r->buf + r->got, (unsigned)(sizeof(r->buf) - r->got));
}

static void raw_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
	struct raw *r = st->data;
	if (n < 0) {
		r->eof = true;
		r->finished = 1;
		uv_read_stop(st);
		return;
	}
	r->got += (size_t)n;
	if (r->got >= r->want || r->got == sizeof(r->buf)) {
		r->finished = 1;
		uv_read_stop(st);
	}
}

static void raw_written(uv_write_t *w, int status)
{
}

static void raw_connected(uv_connect_t *c, int status)
{
	struct raw *r = c->data;
	if (status < 0) {
		r->eof = true;
		r->finished = 1;
		return;
	}
	uv_buf_t b = uv_buf_init((char *)r->req, (unsigned)r->reqlen);
	if (r->reqlen)
		uv_write(&r->wreq, (uv_stream_t *)&r->tcp, &b, 1, raw_written);
	uv_read_start((uv_stream_t *)&r->tcp, raw_alloc, raw_read);
}

/* Runs one raw client to its end; *r holds what it got. */
static void raw_run(uv_loop_t *loop, int port, const char *bind, struct raw *r)
{
	uv_tcp_init(loop, &r->tcp);
	r->tcp.data = r;
	r->creq.data = r;
	struct sockaddr_in b, to;
	uv_ip4_addr(bind, 0, &b);
	uv_ip4_addr("127.0.0.1", port, &to);
	assert_int_equal(uv_tcp_bind(&r->tcp, (struct sockaddr *)&b, 0), 0);
	assert_int_equal(uv_tcp_connect(&r->creq, &r->tcp, (struct sockaddr *)&to, raw_connected),
			 0);
	run_until(loop, &r->finished, 1, 5000);
	uv_close((uv_handle_t *)&r->tcp, NULL);
	uv_run(loop, UV_RUN_NOWAIT);
}

/* Appends a 2.x byte string (u64 length, bytes) to r's request. */
static void raw_bytes(struct raw *r, const void *p, size_t n)
{
	uint64_t len = n;
	assert_true(r->reqlen + 8 + n <= sizeof(r->req));
	memcpy(r->req + r->reqlen, &len, 8);
	memcpy(r->req + r->reqlen + 8, p, n);
	r->reqlen += 8 + n;
}

static void raw_op(struct raw *r, uint8_t code)
{
	static const uint8_t validate[] = {0x00, 0xCE, 0xF7, 0x85, 0x3C};
	if (r->reqlen == 0) {
		memcpy(r->req, validate, sizeof(validate));
		r->reqlen = sizeof(validate);
	}
	r->req[r->reqlen++] = code;
}

/* Returns true when the client was served (a GET reply came); a silent
 * client sends nothing and waits for the end of the connection. */
static bool raw_client(uv_loop_t *loop, int port, const char *bind, bool silent)
{
	struct raw r;
	memset(&r, 0, sizeof(r));
	r.want = 8;
	if (!silent) {
		raw_op(&r, 0x03); /* GET */
		raw_bytes(&r, "k", 1);
	}
	raw_run(loop, port, bind, &r);
	return !r.eof && r.got >= 8;
}

static bool raw_served(uv_loop_t *loop, int port, const char *bind)
{
	return raw_client(loop, port, bind, false);
}

/* A torch 2.x client from `bind`: SET key "forged", then GET key. Returns
 * true when it was served (the GET answered "forged"), false when the store
 * closed the connection. */
static bool raw_set(uv_loop_t *loop, int port, const char *bind, const char *key)
{
	struct raw r;
	memset(&r, 0, sizeof(r));
	r.want = 8 + 6;
	raw_op(&r, 0x01); /* SET */
	raw_bytes(&r, key, strlen(key));
	raw_bytes(&r, "forged", 6);
	raw_op(&r, 0x03); /* GET */
	raw_bytes(&r, key, strlen(key));
	raw_run(loop, port, bind, &r);
	if (r.eof && r.got == 0)
		return false;
	assert_int_equal(r.got, 8 + 6);
	assert_memory_equal(r.buf + 8, "forged", 6);
	return true;
}

static void test_strangers(void **state)
{
	struct fx f;
	struct sess a;
	fx_init(&f, TOKEN, false);
	/* Loopback (127.0.0.1) is served as today; 127.0.0.2 is another node. */
	assert_true(raw_served(&f.loop, f.port, "127.0.0.1"));
	assert_int_equal(store_server_refused_count(f.server), 0);
	assert_false(raw_served(&f.loop, f.port, "127.0.0.2"));
	assert_int_equal(store_server_refused_count(f.server), 1);
	/* A session from there without the token is refused too. */
	sess_open(&f.loop, &a, f.port, NULL, "127.0.0.2", 5000);
	assert_int_equal(a.status, -EACCES);
	/* With the token it joins, and its address is then allowed. */
	sess_open(&f.loop, &a, f.port, TOKEN, "127.0.0.2", 5000);
	assert_int_equal(a.status, 0);
	char local[64];
	assert_int_equal(store_session_local_addr(a.s, local, sizeof(local)), 0);
	assert_string_equal(local, "127.0.0.2");
	assert_true(raw_served(&f.loop, f.port, "127.0.0.2"));
	/* An address allowed by the API. */
	assert_false(raw_served(&f.loop, f.port, "127.0.0.3"));
	assert_int_equal(store_server_allow(f.server, "127.0.0.3"), 0);
	assert_true(raw_served(&f.loop, f.port, "127.0.0.3"));
	assert_int_equal(store_server_allow(f.server, "not-an-address"), -EINVAL);
	/* A stranger that never starts the handshake is closed after the
	 * handshake timeout, so strangers cannot hold connections. */
	store_server_set_handshake_timeout(f.server, 200);
	size_t refused = store_server_refused_count(f.server);
	uint64_t t1 = now_ms();
	assert_false(raw_client(&f.loop, f.port, "127.0.0.5", true));
	assert_true(now_ms() - t1 >= 150 && now_ms() - t1 < 2000);
	assert_int_equal(store_server_refused_count(f.server), refused + 1);
	store_session_close(a.s);
	fx_release(&f);

	/* Restricted without a token: strangers are closed at once; the
	 * session client retries until its deadline and says what happened. */
	fx_init(&f, NULL, true);
	assert_true(raw_served(&f.loop, f.port, "127.0.0.1"));
	assert_false(raw_served(&f.loop, f.port, "127.0.0.4"));
	uint64_t t0 = now_ms();
	sess_open(&f.loop, &a, f.port, NULL, "127.0.0.4", 300);
	assert_int_equal(a.status, -ETIMEDOUT);
	assert_true(now_ms() - t0 < 2000);
	assert_non_null(strstr(a.msg, "within 0.3 s"));
	assert_non_null(strstr(a.msg, "closed the connection during the handshake"));
	fx_release(&f);
}

/* ---- strangers cannot starve the host ---- */

/* Silent clients from one address, counted as they connect and end. */
struct flood {
	uv_tcp_t tcp;
	uv_connect_t creq;
	int *connected;
	int *ended;
	char buf[64];
};

static void flood_alloc(uv_handle_t *h, size_t s, uv_buf_t *buf)
{
	struct flood *c = h->data;
	*buf = uv_buf_init(c->buf, sizeof(c->buf));
}

static void flood_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
	struct flood *c = st->data;
	if (n < 0) {
		(*c->ended)++;
		uv_read_stop(st);
	}
}

static void flood_connected(uv_connect_t *r, int status)
{
	struct flood *c = r->data;
	(*c->connected)++;
	if (status < 0)
		(*c->ended)++;
	else
		uv_read_start((uv_stream_t *)&c->tcp, flood_alloc, flood_read);
}

static void flood_start(uv_loop_t *loop, struct flood *c, size_t n, int port, const char *bind,
			int *connected, int *ended)
{
	struct sockaddr_in b, to;
	uv_ip4_addr(bind, 0, &b);
	uv_ip4_addr("127.0.0.1", port, &to);
	for (size_t i = 0; i < n; i++) {
		c[i].connected = connected;
		c[i].ended = ended;
		uv_tcp_init(loop, &c[i].tcp);
		c[i].tcp.data = &c[i];
		c[i].creq.data = &c[i];
		assert_int_equal(uv_tcp_bind(&c[i].tcp, (struct sockaddr *)&b, 0), 0);
		assert_int_equal(
		    uv_tcp_connect(&c[i].creq, &c[i].tcp, (struct sockaddr *)&to, flood_connected),
		    0);
	}
}

static void flood_stop(uv_loop_t *loop, struct flood *c, size_t n)
{
	for (size_t i = 0; i < n; i++)
		uv_close((uv_handle_t *)&c[i].tcp, NULL);
	uv_run(loop, UV_RUN_NOWAIT);
}

/* Runs the loop until the server's connections settle at `want` (the close
 * callbacks of those it refused run a turn after the clients hear it). */
static void conns_settle(struct fx *f, size_t want)
{
	for (int i = 0; i < 1000 && store_server_connection_count(f->server) != want; i++)
		uv_run(&f->loop, UV_RUN_NOWAIT);
	assert_int_equal(store_server_connection_count(f->server), want);
}

/* Connections that have not passed the handshake are bounded: 16 from one
 * address (more are closed at once), 128 in all (the oldest is closed), and
 * an agent with the token still joins during the flood. */
static void test_stranger_flood(void **state)
{
	enum { PER = STORE_STRANGERS_PER_ADDR, ADDRS = STORE_STRANGERS_MAX / PER };
	static struct flood one[PER + 8], many[ADDRS][PER];
	struct fx f;
	struct sess a;
	int connected = 0, ended = 0;
	fx_init(&f, TOKEN, false);
	flood_start(&f.loop, one, PER + 8, f.port, "127.0.0.6", &connected, &ended);
	run_until(&f.loop, &connected, PER + 8, 5000);
	run_until(&f.loop, &ended, 8, 5000);
	conns_settle(&f, PER);
	assert_int_equal(store_server_refused_count(f.server), 8);
	assert_int_equal(store_server_member_count(f.server), 0);
	/* From many addresses: the total stays bounded, the oldest go. */
	connected = 0;
	for (int i = 0; i < ADDRS; i++) {
		char addr[32];
		snprintf(addr, sizeof(addr), "127.0.0.%d", 10 + i);
		flood_start(&f.loop, many[i], PER, f.port, addr, &connected, &ended);
	}
	run_until(&f.loop, &connected, ADDRS * PER, 5000);
	run_until(&f.loop, &ended, 8 + PER, 5000);
	conns_settle(&f, STORE_STRANGERS_MAX);
	/* An agent with the token joins at once. */
	sess_open(&f.loop, &a, f.port, TOKEN, "127.0.0.7", 5000);
	assert_int_equal(a.status, 0);
	assert_int_equal(store_server_member_count(f.server), 1);
	conns_settle(&f, STORE_STRANGERS_MAX);
	store_session_close(a.s);
	flood_stop(&f.loop, one, PER + 8);
	for (int i = 0; i < ADDRS; i++)
		flood_stop(&f.loop, many[i], PER);
	fx_release(&f);
}

/* A stranger's frame that announces more than what the handshake needs
 * (60 MiB here) closes it at once, before anything of it is buffered. */
static void test_stranger_big_frame(void **state)
{
	struct fx f;
	struct raw r;
	fx_init(&f, TOKEN, false);
	memset(&r, 0, sizeof(r));
	r.want = 8;
	raw_op(&r, 0x01); /* SET "k", then a value of 60 MiB announced */
	raw_bytes(&r, "k", 1);
	uint64_t len = (uint64_t)60 << 20;
	memcpy(r.req + r.reqlen, &len, 8);
	r.reqlen += 8;
	memset(r.req + r.reqlen, 'x', 64);
	r.reqlen += 64;
	uint64_t t0 = now_ms();
	raw_run(&f.loop, f.port, "127.0.0.8", &r);
	assert_true(r.eof);
	assert_int_equal(r.got, 0);
	assert_true(now_ms() - t0 < 2000); /* not the 10 s handshake timeout */
	assert_int_equal(store_server_refused_count(f.server), 1);
	/* A hello is within the limit: a session with the token joins. */
	struct sess a;
	sess_open(&f.loop, &a, f.port, TOKEN, "127.0.0.8", 5000);
	assert_int_equal(a.status, 0);
	store_session_close(a.s);
	fx_release(&f);
}

#define STATE_KEY "ddprdzv/job/state"

/* With a token, the agents' keys (ddprdzv/...) are written only by agent
 * sessions that proved it: a torch client from loopback, or from the
 * address of a node that joined, cannot forge the rendezvous state (it is
 * closed); it keeps every other key. Without a token nothing is protected
 * (anyone who may connect may open a session). */
static void test_agent_keys(void **state)
{
	struct fx f;
	struct sess a;
	struct res r = {0};
	fx_init(&f, TOKEN, false);
	sess_open(&f.loop, &a, f.port, TOKEN, "127.0.0.2", 5000);
	assert_int_equal(a.status, 0);
	assert_int_equal(store_session_set(a.s, B(STATE_KEY), B("agents"), done_cb, &r, 0), 0);
	run_until(&f.loop, &r.n, 1, 5000);
	assert_int_equal(r.status, 0);
	size_t refused = store_server_refused_count(f.server);
	assert_false(raw_set(&f.loop, f.port, "127.0.0.1", STATE_KEY));
	assert_false(raw_set(&f.loop, f.port, "127.0.0.2", STATE_KEY)); /* a member's address */
	assert_false(raw_set(&f.loop, f.port, "127.0.0.1", "ddprdzv/owner"));
	assert_int_equal(store_server_refused_count(f.server), refused + 3);
	struct byteview key = B(STATE_KEY);
	memset(&r, 0, sizeof(r));
	assert_int_equal(store_session_get(a.s, &key, 1, get_cb, &r, 0), 0);
	run_until(&f.loop, &r.n, 1, 5000);
	assert_int_equal(r.status, 0);
	assert_string_equal(r.val[0], "agents");
	/* Torch clients keep the rest of the key space, and read the agents'. */
	assert_true(raw_set(&f.loop, f.port, "127.0.0.1", "/default_pg/0//cpu//0/1"));
	assert_true(raw_set(&f.loop, f.port, "127.0.0.2", "ddprdzv"));
	assert_true(raw_served(&f.loop, f.port, "127.0.0.2"));
	store_session_close(a.s);
	fx_release(&f);

	fx_init(&f, NULL, false);
	assert_true(raw_set(&f.loop, f.port, "127.0.0.1", STATE_KEY));
	fx_release(&f);
}

/* Deterministic "random" bytes, so that two handshakes can be compared. */
static uint8_t fixed_next;

static const char *fixed_name(void)
{
	return "fixed";
}

static uint32_t fixed_random(void)
{
	return fixed_next++;
}

static void fixed_stir(void)
{
}

static void fixed_buf(void *const buf, const size_t size)
{
	for (size_t i = 0; i < size; i++)
		((uint8_t *)buf)[i] = fixed_next++;
}

static int fixed_close(void)
{
	return 0;
}

static randombytes_implementation fixed_rng = {fixed_name, fixed_random, fixed_stir,
					       NULL,	   fixed_buf,	 fixed_close};

/* Everything a store with `token` sends a client that opens a session
 * without proving anything (until it ends the connection, 0.3 s later). */
static size_t hello_transcript(const char *token, uint8_t *out, size_t cap)
{
	struct fx f;
	struct raw r;
	uint8_t nonce[PROTO_SESSION_NONCE_LEN];
	int64_t idle = 0;
	fx_init(&f, token, false);
	store_server_set_handshake_timeout(f.server, 300);
	memset(&r, 0, sizeof(r));
	memset(nonce, 0x5a, sizeof(nonce));
	r.want = SIZE_MAX;
	raw_op(&r, 0xA0); /* SESSION_HELLO */
	memcpy(r.req + r.reqlen, &idle, 8);
	r.reqlen += 8;
	raw_bytes(&r, nonce, sizeof(nonce));
	fixed_next = 0;
	raw_run(&f.loop, f.port, "127.0.0.2", &r);
	assert_true(r.eof);
	fx_release(&f);
	assert_true(r.got <= cap);
	memcpy(out, r.buf, r.got);
	return r.got;
}

/* No offline guessing: what a store sends before the client proved the
 * token (its challenge) is the same whatever the token, so it holds
 * nothing to test a guess against. The store's proof comes only after the
 * client's (test_auth: the handshake still works both ways). */
static void test_hello_reveals_nothing(void **state)
{
	uint8_t a[256], b[256];
	randombytes_set_implementation(&fixed_rng);
	size_t na = hello_transcript(TOKEN, a, sizeof(a));
	size_t nb = hello_transcript("another-jobs-token-0123456789", b, sizeof(b));
	randombytes_set_implementation(&randombytes_sysrandom_implementation);
	assert_int_equal(na, nb);
	assert_memory_equal(a, b, na);
	/* tag, status 0, auth 1, the nonce (32 bytes), an empty proof */
	assert_int_equal(na, 1 + 8 + 1 + 8 + PROTO_SESSION_NONCE_LEN + 8);
}

/* A fake store that takes any proof: it answers HELLO with a challenge
 * (with a proof of `hello_proof` bytes, as version 1 did when 32), and AUTH
 * with status 0 and a proof it cannot have made. */
struct fake {
	uv_tcp_t listener, conn;
	uv_write_t w;
	uint8_t in[256], out[128];
	size_t got, outlen;
	size_t hello_proof;
	int stage;
};

static void fake_alloc(uv_handle_t *h, size_t n, uv_buf_t *buf)
{
	struct fake *f = h->data;
	*buf = uv_buf_init((char *)f->in + f->got, (unsigned)(sizeof(f->in) - f->got));
}

static void fake_put(struct fake *f, const void *p, size_t n)
{
	memcpy(f->out + f->outlen, p, n);
	f->outlen += n;
}

static void fake_bytes(struct fake *f, uint8_t fill, size_t n)
{
	uint64_t len = n;
	uint8_t b[32];
	memset(b, fill, sizeof(b));
	fake_put(f, &len, 8);
	fake_put(f, b, n);
}

static void fake_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
	static const size_t hello = 5 + 1 + 8 + 8 + 32, auth = 1 + 8 + 32;
	struct fake *f = st->data;
	int64_t status = 0;
	if (n < 0) {
		uv_read_stop(st);
		return;
	}
	f->got += (size_t)n;
	f->outlen = 0;
	if (f->stage == 0 && f->got >= hello) {
		fake_put(f, "\0", 1);
		fake_put(f, &status, 8);
		fake_put(f, "\1", 1);
		fake_bytes(f, 0x11, 32);
		fake_bytes(f, 0x22, f->hello_proof);
		f->stage = 1;
	} else if (f->stage == 1 && f->got >= hello + auth) {
		fake_put(f, "\0", 1);
		fake_put(f, &status, 8);
		fake_bytes(f, 0x33, 32);
		f->stage = 2;
	}
	uv_buf_t b = uv_buf_init((char *)f->out, (unsigned)f->outlen);
	if (f->outlen)
		assert_int_equal(uv_try_write(st, &b, 1), (int)f->outlen);
}

static void fake_accept(uv_stream_t *l, int status)
{
	struct fake *f = l->data;
	uv_tcp_init(l->loop, &f->conn);
	f->conn.data = f;
	assert_int_equal(uv_accept(l, (uv_stream_t *)&f->conn), 0);
	uv_read_start((uv_stream_t *)&f->conn, fake_alloc, fake_read);
}

static void fake_session(size_t hello_proof, struct sess *a)
{
	uv_loop_t loop;
	struct fake f;
	struct sockaddr_in sa;
	int len = sizeof(sa);
	memset(&f, 0, sizeof(f));
	f.hello_proof = hello_proof;
	assert_int_equal(uv_loop_init(&loop), 0);
	uv_tcp_init(&loop, &f.listener);
	f.listener.data = &f;
	uv_ip4_addr("127.0.0.1", 0, &sa);
	assert_int_equal(uv_tcp_bind(&f.listener, (struct sockaddr *)&sa, 0), 0);
	assert_int_equal(uv_listen((uv_stream_t *)&f.listener, 4, fake_accept), 0);
	uv_tcp_getsockname(&f.listener, (struct sockaddr *)&sa, &len);
	sess_open(&loop, a, ntohs(sa.sin_port), TOKEN, NULL, 5000);
	assert_int_equal(f.stage, hello_proof ? 1 : 2);
	uv_close((uv_handle_t *)&f.listener, NULL);
	if (uv_is_active((uv_handle_t *)&f.conn) || f.conn.loop)
		uv_close((uv_handle_t *)&f.conn, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&loop), 0);
}

/* The store proves the token too: one that accepts any proof but cannot
 * make its own is left; a version-1 store (its proof in the HELLO reply)
 * is told apart and refused without the client's proof. */
static void test_fake_store(void **state)
{
	struct sess a;
	fake_session(0, &a);
	assert_int_equal(a.status, -EACCES);
	assert_non_null(strstr(a.msg, "does not know this job's token"));
	fake_session(PROTO_SESSION_PROOF_LEN, &a);
	assert_int_equal(a.status, -EACCES);
	assert_non_null(strstr(a.msg, "speaks an older handshake"));
}

/* Tokens shorter than 16 bytes are refused on both sides (proto_auth.h). */
static void test_short_token(void **state)
{
	uv_loop_t loop;
	struct store_server *server;
	struct store_session *s;
	struct store_session_opts o;
	assert_int_equal(uv_loop_init(&loop), 0);
	assert_int_equal(store_server_new(&loop, NULL, &server), 0);
	assert_int_equal(store_server_set_token(server, "0123456789abcde", 15), -EINVAL);
	assert_int_equal(store_server_set_token(server, "0123456789abcdef", 16), 0);
	store_server_close(server, NULL, NULL);
	store_session_opts_default(&o);
	o.host = "127.0.0.1";
	o.port = 1;
	o.token = "0123456789abcde";
	o.token_len = 15;
	assert_int_equal(store_session_connect(&loop, &o, on_connect, on_close, NULL, &s), -EINVAL);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&loop), 0);
}

/* A session that asked for an idle timeout is ended by the store when it
 * goes silent (its keys go with it); pings keep it alive. */
static void test_idle_timeout(void **state)
{
	struct fx f;
	struct sess quiet, pinging, watcher;
	fx_init(&f, NULL, false);
	struct store_session_opts o;
	store_session_opts_default(&o);
	o.host = "127.0.0.1";
	o.port = (uint16_t)f.port;
	o.server_idle_timeout_ms = 300;
	o.ping_interval_ms = 0;
	memset(&quiet, 0, sizeof(quiet));
	assert_int_equal(store_session_connect(&f.loop, &o, on_connect, on_close, &quiet, &quiet.s),
			 0);
	o.ping_interval_ms = 100;
	o.ping_timeout_ms = 1000;
	memset(&pinging, 0, sizeof(pinging));
	assert_int_equal(
	    store_session_connect(&f.loop, &o, on_connect, on_close, &pinging, &pinging.s), 0);
	run_until(&f.loop, &quiet.connected, 1, 5000);
	run_until(&f.loop, &pinging.connected, 1, 5000);
	struct res r1 = {0}, r2 = {0};
	assert_int_equal(store_session_set_session(quiet.s, B("q"), B("1"), done_cb, &r1, 0), 0);
	assert_int_equal(store_session_set_session(pinging.s, B("p"), B("1"), done_cb, &r2, 0), 0);
	run_until(&f.loop, &r2.n, 1, 5000);
	run_until(&f.loop, &r1.n, 1, 5000);
	sess_open(&f.loop, &watcher, f.port, NULL, NULL, 5000);
	struct events eq = {0};
	uint64_t id;
	assert_int_equal(store_session_watch(watcher.s, B("q"), event_cb, &eq, &id), 0);
	uint64_t t0 = now_ms();
	run_until(&f.loop, &quiet.closed, 1, 5000);
	assert_int_equal(quiet.close_status, -ECONNRESET);
	assert_true(quiet.closed_at - t0 < 1500);
	run_until(&f.loop, &eq.n, 2, 5000);
	assert_false(eq.present);
	/* Meanwhile the pinging session lives on, its key with it. */
	assert_int_equal(pinging.closed, 0);
	struct byteview k = B("p");
	struct res g = {0};
	assert_int_equal(store_session_get(watcher.s, &k, 1, get_cb, &g, 0), 0);
	run_until(&f.loop, &g.n, 1, 5000);
	assert_true(g.present[0]);
	store_session_close(pinging.s);
	store_session_close(watcher.s);
	fx_release(&f);
}

/* The process stops (SIGSTOP, a VM migration) with the store in it, as the
 * agent that hosts the store: its loop does not run for 2.5 s, over twice
 * the ping timeout and the store's idle timeout. On thaw libuv runs both
 * expired timers before it reads a byte: neither side may conclude from
 * the pause alone. The session lives on, its key with it. */
static void test_loop_paused(void **state)
{
	struct fx f;
	struct sess a;
	fx_init(&f, NULL, false);
	struct store_session_opts o;
	store_session_opts_default(&o);
	o.host = "127.0.0.1";
	o.port = (uint16_t)f.port;
	o.server_idle_timeout_ms = 1000;
	o.ping_interval_ms = 100;
	o.ping_timeout_ms = 1000;
	memset(&a, 0, sizeof(a));
	assert_int_equal(store_session_connect(&f.loop, &o, on_connect, on_close, &a, &a.s), 0);
	run_until(&f.loop, &a.connected, 1, 5000);
	struct res r = {0};
	assert_int_equal(store_session_set_session(a.s, B("p"), B("1"), done_cb, &r, 0), 0);
	run_until(&f.loop, &r.n, 1, 5000);
	struct waiter w = {false};
	uv_timer_t t;
	uv_timer_init(&f.loop, &t);
	t.data = &w;
	uv_timer_start(&t, on_expire, 300, 0);
	while (!w.expired)
		uv_run(&f.loop, UV_RUN_ONCE);
	usleep(2500 * 1000); /* the pause under test: the loop does not run */
	w.expired = false;
	uv_timer_start(&t, on_expire, 1500, 0);
	while (!w.expired && !a.closed)
		uv_run(&f.loop, UV_RUN_ONCE);
	uv_close((uv_handle_t *)&t, NULL);
	if (a.closed)
		fail_msg("the session ended after the pause: %s", a.close_msg);
	struct byteview k = B("p");
	struct res g = {0};
	assert_int_equal(store_session_get(a.s, &k, 1, get_cb, &g, 0), 0);
	run_until(&f.loop, &g.n, 1, 5000);
	assert_true(g.present[0]);
	store_session_close(a.s);
	fx_release(&f);
}

static void start_later(uv_timer_t *t)
{
	struct fx *f = t->data;
	assert_int_equal(store_server_listen(f->server, "127.0.0.1", f->port), 0);
}

static void test_connect_retries(void **state)
{
	struct fx f;
	struct sess a;
	/* A port with nothing behind it: refused until the deadline. */
	fx_init(&f, NULL, false);
	int port = f.port;
	fx_release(&f);
	uv_loop_t loop;
	uv_loop_init(&loop);
	uint64_t t0 = now_ms();
	sess_open(&loop, &a, port, NULL, NULL, 400);
	uint64_t took = now_ms() - t0;
	assert_int_equal(a.status, -ETIMEDOUT);
	assert_true(took >= 300 && took < 2000);
	char want[96];
	snprintf(want, sizeof(want), "cannot reach the store at 127.0.0.1:%d within 0.4 s: ", port);
	assert_non_null(strstr(a.msg, want));
	assert_non_null(strstr(a.msg, "refused"));
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&loop), 0);

	/* The store comes up while the client retries. */
	assert_int_equal(uv_loop_init(&f.loop), 0);
	assert_int_equal(store_server_new(&f.loop, NULL, &f.server), 0);
	f.port = port;
	uv_timer_t t;
	uv_timer_init(&f.loop, &t);
	t.data = &f;
	uv_timer_start(&t, start_later, 200, 0);
	sess_open(&f.loop, &a, port, NULL, NULL, 5000);
	assert_int_equal(a.status, 0);
	uv_close((uv_handle_t *)&t, NULL);
	store_session_close(a.s);
	fx_release(&f);
}

/* ---- a real ddp-rdzvd, frozen and killed ---- */

static pid_t spawn_rdzvd(int *port)
{
	const char *bin = getenv("DDP_RDZVD");
	int fds[2];
	assert_int_equal(pipe(fds), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(fds[1], 1);
		close(fds[0]);
		close(fds[1]);
		execl(bin, bin, "--port", "0", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	char line[32] = {0};
	size_t n = 0;
	while (n < sizeof(line) - 1) {
		ssize_t k = read(fds[0], line + n, 1);
		if (k <= 0 || line[n] == '\n')
			break;
		n++;
	}
	close(fds[0]);
	*port = atoi(line);
	assert_true(*port > 0);
	return pid;
}

static void test_host_lost(void **state)
{
	if (!getenv("DDP_RDZVD")) {
		fprintf(stderr, "# DDP_RDZVD not set; skipping the daemon part\n");
		return;
	}
	uv_loop_t loop;
	struct sess a;
	int port;
	assert_int_equal(uv_loop_init(&loop), 0);

	/* Frozen (SIGSTOP): its kernel still acknowledges, nothing answers;
	 * the pings (every 500 ms, lost when one waits 1.5 s) notice it 1.5 to
	 * 2 s after its last answer. */
	pid_t pid = spawn_rdzvd(&port);
	sess_open(&loop, &a, port, NULL, NULL, 5000);
	assert_int_equal(a.status, 0);
	struct res r = {0};
	assert_int_equal(store_session_set_session(a.s, B("hb"), B("1"), done_cb, &r, 0), 0);
	run_until(&loop, &r.n, 1, 5000);
	struct events e = {0};
	uint64_t id;
	assert_int_equal(store_session_watch(a.s, B("state"), event_cb, &e, &id), 0);
	run_until(&loop, &e.n, 1, 5000);
	uint64_t t0 = now_ms();
	kill(pid, SIGSTOP);
	run_until(&loop, &a.closed, 1, 5000);
	uint64_t took = a.closed_at - t0;
	fprintf(stderr, "# frozen store noticed after %llu ms: %s\n", (unsigned long long)took,
		a.close_msg);
	assert_int_equal(a.close_status, -ETIMEDOUT);
	/* 1.5 s after the next ping (scheduling slack on a loaded machine) */
	assert_true(took >= 1500 && took <= 2000 + 300);
	assert_int_equal(e.n, 2);
	assert_int_equal(e.status, -ECONNRESET);
	char want[64];
	snprintf(want, sizeof(want), "lost the store at 127.0.0.1:%d: ", port);
	assert_non_null(strstr(a.close_msg, want));
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);

	/* Killed: the kernel closes its sockets, noticed at once. */
	pid = spawn_rdzvd(&port);
	sess_open(&loop, &a, port, NULL, NULL, 5000);
	assert_int_equal(a.status, 0);
	struct res pend = {0};
	t0 = now_ms();
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	run_until(&loop, &a.closed, 1, 5000);
	took = a.closed_at - t0;
	fprintf(stderr, "# killed store noticed after %llu ms: %s\n", (unsigned long long)took,
		a.close_msg);
	assert_int_equal(a.close_status, -ECONNRESET);
	assert_true(took < 1000);
	assert_int_equal(store_session_add(a.s, B("x"), 1, add_cb, &pend, 0), -ENOTCONN);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_primitives),
	    cmocka_unit_test(test_watch),
	    cmocka_unit_test(test_session_keys),
	    cmocka_unit_test(test_close_fails_pending),
	    cmocka_unit_test(test_close_from_callback),
	    cmocka_unit_test(test_auth),
	    cmocka_unit_test(test_strangers),
	    cmocka_unit_test(test_stranger_flood),
	    cmocka_unit_test(test_stranger_big_frame),
	    cmocka_unit_test(test_connect_retries),
	    cmocka_unit_test(test_idle_timeout),
	    cmocka_unit_test(test_loop_paused),
	    cmocka_unit_test(test_host_lost),
	    cmocka_unit_test(test_agent_keys),
	    cmocka_unit_test(test_hello_reveals_nothing),
	    cmocka_unit_test(test_short_token),
	    cmocka_unit_test(test_fake_store),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
