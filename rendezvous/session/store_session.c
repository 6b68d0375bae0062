/*
 * store_session.c - the agent session's requests: encoding, the FIFO of
 * requests awaiting replies, parsing the store's framed replies and watch
 * events, and the watches (store_session.h). The connection itself is in
 * session_conn.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "session_int.h"

/* The largest byte string accepted from the store (its own limit on one
 * value is 64 MiB by default). */
#define SESS_MAX_READ ((size_t)256 * 1024 * 1024)

void store_session_opts_default(struct store_session_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->connect_timeout_ms = 60 * 1000;
	opts->ping_interval_ms = 500;
	opts->ping_timeout_ms = 1500;
}

static bool opts_ok(const struct store_session_opts *o)
{
	struct sockaddr_storage ss;
	if (!o->host || !o->host[0] || strlen(o->host) >= 256 || o->port == 0)
		return false;
	if (o->token && (o->token_len == 0 || o->token_len > STORE_SESSION_MAX_TOKEN))
		return false;
	if (!o->token && o->token_len)
		return false;
	if (o->bind_addr && (strlen(o->bind_addr) >= 64 ||
			     (uv_ip4_addr(o->bind_addr, 0, (struct sockaddr_in *)&ss) != 0 &&
			      uv_ip6_addr(o->bind_addr, 0, (struct sockaddr_in6 *)&ss) != 0)))
		return false;
	if (o->connect_timeout_ms < 0)
		return false;
	return o->ping_interval_ms == 0 || o->ping_timeout_ms > o->ping_interval_ms;
}

int store_session_connect(uv_loop_t *loop, const struct store_session_opts *opts,
			  store_session_connect_fn on_connect, store_session_close_fn on_close,
			  void *arg, struct store_session **out)
{
	if (!loop || !opts || !on_connect || !out || !opts_ok(opts))
		return -EINVAL;
	struct store_session *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->loop = loop;
	s->opts = *opts;
	snprintf(s->host, sizeof(s->host), "%s", opts->host);
	s->opts.host = s->host;
	if (opts->bind_addr) {
		snprintf(s->bind, sizeof(s->bind), "%s", opts->bind_addr);
		s->opts.bind_addr = s->bind;
	}
	if (opts->token) {
		s->token = malloc(opts->token_len);
		if (!s->token) {
			free(s);
			return -ENOMEM;
		}
		memcpy(s->token, opts->token, opts->token_len);
		s->opts.token = s->token;
	}
	snprintf(s->peer, sizeof(s->peer), strchr(s->host, ':') ? "[%s]:%u" : "%s:%u", s->host,
		 (unsigned)opts->port);
	s->on_connect = on_connect;
	s->on_close = on_close;
	s->arg = arg;
	s->next_watch_id = 1;
	s->phase = SESS_CONNECTING;
	sess_conn_start(s);
	*out = s;
	return 0;
}

const char *store_session_peer(const struct store_session *s)
{
	return s->peer;
}

int store_session_local_addr(const struct store_session *s, char *buf, size_t len)
{
	if (s->phase != SESS_READY || !s->local[0])
		return -ENOTCONN;
	if (strlen(s->local) >= len)
		return -ENOSPC;
	memcpy(buf, s->local, strlen(s->local) + 1);
	return 0;
}

size_t store_session_pending(const struct store_session *s)
{
	return s->pending - s->internal;
}

/* Pings and unwatches: the session's own, not counted for the caller. */
static bool req_internal(enum proto_op op)
{
	return op == PROTO_OP_S_PING || op == PROTO_OP_S_UNWATCH;
}

/* Unlinks the oldest request. */
static void pop_head(struct store_session *s, struct sess_req *r)
{
	s->head = r->next;
	if (!s->head)
		s->tail = NULL;
	s->pending--;
	s->internal -= req_internal(r->op);
}

struct bytebuf *sess_outbuf(struct store_session *s)
{
	return s->phase == SESS_READY ? &s->out : &s->queued;
}

static bool sess_usable(const struct store_session *s)
{
	return s && s->phase != SESS_DEAD;
}

static bool key_ok(struct store_session_bytes k)
{
	return k.len > 0 && k.len <= STORE_SESSION_MAX_KEY && k.data;
}

static bool value_ok(struct store_session_bytes v)
{
	return v.len <= STORE_SESSION_MAX_VALUE && (v.data || v.len == 0);
}

static int push_req(struct store_session *s, enum proto_op op, void *fn, void *arg, uint64_t tag,
		    struct sess_req **out)
{
	struct sess_req *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->op = op;
	r->fn = fn;
	r->arg = arg;
	r->tag = tag;
	if (s->tail)
		s->tail->next = r;
	else
		s->head = r;
	s->tail = r;
	s->pending++;
	s->internal += req_internal(op);
	if (out)
		*out = r;
	return 0;
}

/* Removes the newest request again (its frame could not be encoded). */
static void pop_tail(struct store_session *s, struct sess_req *r)
{
	struct sess_req **pp = &s->head;
	struct sess_req *prev = NULL;
	while (*pp != r) {
		prev = *pp;
		pp = &(*pp)->next;
	}
	*pp = NULL;
	s->tail = prev;
	s->pending--;
	s->internal -= req_internal(r->op);
	free(r);
}

/* Encodes op with fields; rolls the buffer back on failure. */
static int encode(struct store_session *s, enum proto_op op, const struct store_session_bytes *f,
		  size_t nf, bool has_int, int64_t integer, bool count)
{
	struct bytebuf *b = sess_outbuf(s);
	size_t mark = b->len;
	int rc = proto_put_op(b, PROTO_GEN_V2, op);
	if (rc == 0 && count)
		rc = proto_put_u64(b, nf);
	for (size_t i = 0; i < nf && rc == 0; i++) {
		rc = proto_put_bytes(b, f[i].data, f[i].len);
		if (rc == 0 && i == 0 && has_int)
			rc = proto_put_i64(b, integer);
	}
	if (rc == 0 && nf == 0 && has_int)
		rc = proto_put_i64(b, integer);
	if (rc < 0)
		b->len = mark;
	return rc;
}

static int submit(struct store_session *s, enum proto_op op, void *fn, void *arg, uint64_t tag,
		  const struct store_session_bytes *f, size_t nf, bool has_int, int64_t integer,
		  bool count, struct sess_req **out)
{
	struct sess_req *r;
	int rc = push_req(s, op, fn, arg, tag, &r);
	if (rc < 0)
		return rc;
	rc = encode(s, op, f, nf, has_int, integer, count);
	if (rc < 0) {
		pop_tail(s, r);
		return rc;
	}
	if (out)
		*out = r;
	if (s->phase == SESS_READY)
		sess_flush(s);
	return 0;
}

int sess_push_ping(struct store_session *s)
{
	struct sess_req *r;
	int rc = push_req(s, PROTO_OP_S_PING, NULL, NULL, 0, &r);
	if (rc < 0)
		return rc;
	struct bytebuf *b = sess_outbuf(s);
	size_t mark = b->len;
	rc = proto_put_op(b, PROTO_GEN_V2, PROTO_OP_S_PING);
	if (rc == 0)
		rc = proto_put_u32(b, s->ping_nonce);
	if (rc < 0) {
		b->len = mark;
		pop_tail(s, r);
		return rc;
	}
	sess_flush(s);
	return 0;
}

static int set_common(struct store_session *s, enum proto_op op, struct store_session_bytes key,
		      struct store_session_bytes value, store_session_done_fn done, void *arg,
		      uint64_t tag)
{
	if (!sess_usable(s))
		return -ENOTCONN;
	if (!done || !key_ok(key) || !value_ok(value))
		return -EINVAL;
	struct store_session_bytes f[2] = {key, value};
	return submit(s, op, (void *)done, arg, tag, f, 2, false, 0, false, NULL);
}

int store_session_set(struct store_session *s, struct store_session_bytes key,
		      struct store_session_bytes value, store_session_done_fn done, void *arg,
		      uint64_t tag)
{
	return set_common(s, PROTO_OP_S_SET, key, value, done, arg, tag);
}

int store_session_set_session(struct store_session *s, struct store_session_bytes key,
			      struct store_session_bytes value, store_session_done_fn done,
			      void *arg, uint64_t tag)
{
	return set_common(s, PROTO_OP_S_SET_SESSION, key, value, done, arg, tag);
}

int store_session_get(struct store_session *s, const struct store_session_bytes *keys, size_t n,
		      store_session_get_fn done, void *arg, uint64_t tag)
{
	if (!sess_usable(s))
		return -ENOTCONN;
	if (!done || !keys || n == 0 || n > STORE_SESSION_MAX_KEYS)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (!key_ok(keys[i]))
			return -EINVAL;
	struct sess_req *r;
	int rc = submit(s, PROTO_OP_S_GET, (void *)done, arg, tag, keys, n, false, 0, true, &r);
	if (rc == 0)
		r->nkeys = n;
	return rc;
}

int store_session_cas(struct store_session *s, struct store_session_bytes key, bool has_expected,
		      struct store_session_bytes expected, struct store_session_bytes value,
		      store_session_cas_fn done, void *arg, uint64_t tag)
{
	if (!sess_usable(s))
		return -ENOTCONN;
	if (!has_expected)
		expected = (struct store_session_bytes){NULL, 0};
	if (!done || !key_ok(key) || !value_ok(expected) || !value_ok(value))
		return -EINVAL;
	struct store_session_bytes f[3] = {key, expected, value};
	return submit(s, PROTO_OP_S_CAS, (void *)done, arg, tag, f, 3, true, has_expected ? 1 : 0,
		      false, NULL);
}

int store_session_add(struct store_session *s, struct store_session_bytes key, int64_t delta,
		      store_session_add_fn done, void *arg, uint64_t tag)
{
	if (!sess_usable(s))
		return -ENOTCONN;
	if (!done || !key_ok(key))
		return -EINVAL;
	return submit(s, PROTO_OP_S_ADD, (void *)done, arg, tag, &key, 1, true, delta, false, NULL);
}

/* ---- watches ---- */

static bool watch_is(const struct sess_watch *w, const uint8_t *key, size_t len)
{
	return w->key_len == len && memcmp(w->key, key, len) == 0;
}

static void watch_free(struct store_session *s, struct sess_watch *w)
{
	if (w->prev)
		w->prev->next = w->next;
	else
		s->watches = w->next;
	if (w->next)
		w->next->prev = w->prev;
	free(w);
}

/* Frees watches that can no longer be told anything (not while callbacks
 * run: a callback's caller may be walking the list). */
static void watch_gc(struct store_session *s)
{
	if (s->dispatching)
		return;
	struct sess_watch *w = s->watches;
	while (w) {
		struct sess_watch *next = w->next;
		if (!w->live && !w->waiting)
			watch_free(s, w);
		w = next;
	}
}

int store_session_watch(struct store_session *s, struct store_session_bytes key,
			store_session_event_fn event, void *arg, uint64_t *id)
{
	if (!sess_usable(s))
		return -ENOTCONN;
	if (!event || !id || !key_ok(key))
		return -EINVAL;
	struct sess_watch *w = calloc(1, sizeof(*w) + key.len);
	if (!w)
		return -ENOMEM;
	struct sess_req *r;
	int rc = submit(s, PROTO_OP_S_WATCH, NULL, arg, 0, &key, 1, false, 0, false, &r);
	if (rc < 0) {
		free(w);
		return rc;
	}
	w->id = s->next_watch_id++;
	w->fn = event;
	w->arg = arg;
	w->live = true;
	w->waiting = true;
	w->key_len = key.len;
	memcpy(w->key, key.data, key.len);
	w->next = s->watches;
	if (s->watches)
		s->watches->prev = w;
	s->watches = w;
	r->watch = w;
	*id = w->id;
	return 0;
}

int store_session_unwatch(struct store_session *s, uint64_t id)
{
	if (!s)
		return -ENOENT;
	struct sess_watch *w = s->watches;
	while (w && !(w->id == id && w->live))
		w = w->next;
	if (!w)
		return -ENOENT;
	w->live = false;
	bool others = false;
	for (struct sess_watch *o = s->watches; o; o = o->next)
		if (o->live && watch_is(o, w->key, w->key_len))
			others = true;
	/* The store keeps one registration per key: drop it with the last
	 * watch. Failing to say so only costs events that are ignored. */
	if (!others && s->phase != SESS_DEAD) {
		struct store_session_bytes k = {w->key, w->key_len};
		submit(s, PROTO_OP_S_UNWATCH, NULL, NULL, 0, &k, 1, false, 0, false, NULL);
	}
	watch_gc(s);
	return 0;
}

static void deliver_event(struct store_session *s, const uint8_t *key, size_t len,
			  struct store_session_value v)
{
	for (struct sess_watch *w = s->watches; w && s->phase != SESS_DEAD; w = w->next)
		if (w->live && w->started && watch_is(w, key, len))
			w->fn(w->arg, w->id, 0, v);
}

/* ---- completing requests ---- */

static void fail_req(struct sess_req *r, int status)
{
	static const struct store_session_value none = {false, {NULL, 0}};
	switch (r->op) {
	case PROTO_OP_S_SET:
	case PROTO_OP_S_SET_SESSION:
		((store_session_done_fn)r->fn)(r->arg, r->tag, status);
		break;
	case PROTO_OP_S_GET:
		((store_session_get_fn)r->fn)(r->arg, r->tag, status, NULL, 0);
		break;
	case PROTO_OP_S_CAS:
		((store_session_cas_fn)r->fn)(r->arg, r->tag, status, false, none);
		break;
	case PROTO_OP_S_ADD:
		((store_session_add_fn)r->fn)(r->arg, r->tag, status, 0);
		break;
	default:
		break;
	}
}

static void watch_fail(struct sess_watch *w, int status)
{
	static const struct store_session_value none = {false, {NULL, 0}};
	if (!w->live)
		return;
	w->live = false;
	w->fn(w->arg, w->id, status, none);
}

void sess_fail_all(struct store_session *s, int status)
{
	s->dispatching++;
	while (s->head) {
		struct sess_req *r = s->head;
		pop_head(s, r);
		if (r->watch) {
			r->watch->waiting = false;
			watch_fail(r->watch, status);
		} else if (r->fn) {
			fail_req(r, status);
		}
		free(r);
	}
	for (struct sess_watch *w = s->watches; w; w = w->next)
		watch_fail(w, status);
	s->dispatching--;
	watch_gc(s);
}

/* ---- parsing ---- */

struct cur {
	const uint8_t *p;
	size_t len;
	size_t off;
};

static int take_u8(struct cur *c, uint8_t *v)
{
	size_t n;
	int rc = proto_take_u8(c->p + c->off, c->len - c->off, v, &n);
	c->off += rc == 1 ? n : 0;
	return rc;
}

static int take_i64(struct cur *c, int64_t *v)
{
	size_t n;
	int rc = proto_take_i64(c->p + c->off, c->len - c->off, v, &n);
	c->off += rc == 1 ? n : 0;
	return rc;
}

static int take_u32(struct cur *c, uint32_t *v)
{
	size_t n;
	int rc = proto_take_u32(c->p + c->off, c->len - c->off, v, &n);
	c->off += rc == 1 ? n : 0;
	return rc;
}

static int take_value(struct cur *c, struct store_session_value *v)
{
	uint8_t present;
	size_t n;
	struct byteview b;
	int rc = take_u8(c, &present);
	if (rc != 1)
		return rc;
	if (present > 1)
		return -EPROTO;
	rc = proto_take_bytes(c->p + c->off, c->len - c->off, SESS_MAX_READ, &b, &n);
	if (rc != 1)
		return rc < 0 ? -EPROTO : rc;
	c->off += n;
	v->present = present == 1;
	v->bytes.data = b.data;
	v->bytes.len = b.len;
	return 1;
}

static int scratch_reserve(struct store_session *s, size_t n)
{
	if (n <= s->scratch_cap)
		return 0;
	struct store_session_value *v = realloc(s->scratch, n * sizeof(*v));
	if (!v)
		return -ENOMEM;
	s->scratch = v;
	s->scratch_cap = n;
	return 0;
}

/* Parses the body of a successful reply to r; 1 whole, 0 more needed. On
 * 1 the results are in the out-parameters (views into s->in). */
static int parse_body(struct store_session *s, struct cur *c, const struct sess_req *r,
		      uint8_t *flag, int64_t *num, struct store_session_value *val)
{
	int rc = 1;
	uint32_t nonce;
	switch (r->op) {
	case PROTO_OP_S_GET:
		if (scratch_reserve(s, r->nkeys) < 0)
			return -ENOMEM;
		for (size_t i = 0; i < r->nkeys && rc == 1; i++)
			rc = take_value(c, &s->scratch[i]);
		return rc;
	case PROTO_OP_S_CAS:
		rc = take_u8(c, flag);
		return rc == 1 ? take_value(c, val) : rc;
	case PROTO_OP_S_ADD:
		return take_i64(c, num);
	case PROTO_OP_S_WATCH:
		return take_value(c, val);
	case PROTO_OP_S_PING:
		rc = take_u32(c, &nonce);
		if (rc == 1 && nonce != s->ping_nonce)
			return -EPROTO;
		return rc;
	default:
		return 1;
	}
}

static void complete(struct store_session *s, struct sess_req *r, int status, uint8_t flag,
		     int64_t num, struct store_session_value val)
{
	if (r->watch) {
		struct sess_watch *w = r->watch;
		w->waiting = false;
		if (status < 0) {
			watch_fail(w, status);
		} else if (w->live) {
			w->started = true;
			w->fn(w->arg, w->id, 0, val);
		}
		return;
	}
	if (r->op == PROTO_OP_S_PING) {
		sess_ping_answered(s);
		return;
	}
	if (!r->fn)
		return;
	if (status < 0) {
		fail_req(r, status);
		return;
	}
	switch (r->op) {
	case PROTO_OP_S_SET:
	case PROTO_OP_S_SET_SESSION:
		((store_session_done_fn)r->fn)(r->arg, r->tag, 0);
		break;
	case PROTO_OP_S_GET:
		((store_session_get_fn)r->fn)(r->arg, r->tag, 0, s->scratch, r->nkeys);
		break;
	case PROTO_OP_S_CAS:
		((store_session_cas_fn)r->fn)(r->arg, r->tag, 0, flag == 1, val);
		break;
	case PROTO_OP_S_ADD:
		((store_session_add_fn)r->fn)(r->arg, r->tag, 0, num);
		break;
	default:
		break;
	}
}

/* One message from p[0..len): 1 parsed and dispatched (*used bytes), 0
 * incomplete, < 0 malformed. */
static int parse_one(struct store_session *s, const uint8_t *p, size_t len, size_t *used)
{
	struct cur c = {p, len, 0};
	uint8_t tag, flag = 0;
	int64_t status = 0, num = 0;
	struct store_session_value val = {false, {NULL, 0}};
	int rc = take_u8(&c, &tag);
	if (rc == 1 && tag == PROTO_SESSION_EVENT) {
		/* An event: the key, then its value after the change. */
		size_t n;
		struct byteview k;
		rc = proto_take_bytes(c.p + c.off, c.len - c.off, SESS_MAX_READ, &k, &n);
		if (rc != 1)
			return rc < 0 ? -EPROTO : rc;
		c.off += n;
		rc = take_value(&c, &val);
		if (rc != 1)
			return rc;
		*used = c.off;
		deliver_event(s, k.data, k.len, val);
		return 1;
	}
	if (rc != 1)
		return rc;
	struct sess_req *r = s->head;
	if (tag != PROTO_SESSION_REPLY || !r)
		return -EPROTO;
	rc = take_i64(&c, &status);
	if (rc != 1)
		return rc;
	if (status > 0 || status < -4095)
		return -EPROTO;
	if (status == 0) {
		rc = parse_body(s, &c, r, &flag, &num, &val);
		if (rc != 1)
			return rc;
	}
	*used = c.off;
	pop_head(s, r);
	complete(s, r, (int)status, flag, num, val);
	free(r);
	return 1;
}

int sess_parse(struct store_session *s)
{
	int rc = 0;
	size_t done = 0;
	s->dispatching++;
	/* Callbacks cannot touch s->in (only reads append to it), so the
	 * messages are parsed in place and consumed in one move. */
	while (s->phase == SESS_READY && done < s->in.len) {
		size_t used = 0;
		rc = parse_one(s, s->in.data + done, s->in.len - done, &used);
		if (rc != 1)
			break;
		done += used;
	}
	s->dispatching--;
	/* A callback that closed the session emptied s->in already. */
	if (done && s->phase != SESS_DEAD)
		bytebuf_consume(&s->in, done);
	watch_gc(s);
	return rc < 0 ? rc : 0;
}
