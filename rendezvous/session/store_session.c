/*
 * store_session.c - the agent session's requests: options, encoding, the
 * FIFO of requests awaiting replies, and the watches (store_session.h).
 * Replies are parsed in store_session_reply.c, the connection is store_session_conn.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_session_int.h"

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
	if (o->token &&
	    (o->token_len < STORE_SESSION_MIN_TOKEN || o->token_len > STORE_SESSION_MAX_TOKEN))
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

const char *store_session_last_error(const struct store_session *s)
{
	return s->phase != SESS_READY && s->phase != SESS_DEAD && s->last_error[0] ? s->last_error
										   : NULL;
}

bool store_session_peer_silent(const struct store_session *s)
{
	if (s->phase == SESS_HELLO || s->phase == SESS_AUTH)
		return true;
	return s->phase == SESS_CONNECTING && s->silent_peer;
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
bool sess_req_internal(enum proto_op op)
{
	return op == PROTO_OP_S_PING || op == PROTO_OP_S_UNWATCH;
}

struct bytebuf *sess_outbuf(struct store_session *s)
{
	return s->phase == SESS_READY ? &s->out : &s->queued;
}

static bool sess_usable(const struct store_session *s)
{
	return s && s->phase != SESS_DEAD;
}

static bool key_ok(struct byteview k)
{
	return k.len > 0 && k.len <= STORE_SESSION_MAX_KEY && k.data;
}

static bool value_ok(struct byteview v)
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
	s->internal += sess_req_internal(op);
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
	s->internal -= sess_req_internal(r->op);
	free(r);
}

/* Encodes op with fields; rolls the buffer back on failure. */
static int encode(struct store_session *s, enum proto_op op, const struct byteview *f, size_t nf,
		  bool has_int, int64_t integer, bool count)
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
		  const struct byteview *f, size_t nf, bool has_int, int64_t integer, bool count,
		  struct sess_req **out)
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

static int set_common(struct store_session *s, enum proto_op op, struct byteview key,
		      struct byteview value, store_session_done_fn done, void *arg, uint64_t tag)
{
	if (!sess_usable(s))
		return -ENOTCONN;
	if (!done || !key_ok(key) || !value_ok(value))
		return -EINVAL;
	struct byteview f[2] = {key, value};
	return submit(s, op, (void *)done, arg, tag, f, 2, false, 0, false, NULL);
}

int store_session_set(struct store_session *s, struct byteview key, struct byteview value,
		      store_session_done_fn done, void *arg, uint64_t tag)
{
	return set_common(s, PROTO_OP_S_SET, key, value, done, arg, tag);
}

int store_session_set_session(struct store_session *s, struct byteview key, struct byteview value,
			      store_session_done_fn done, void *arg, uint64_t tag)
{
	return set_common(s, PROTO_OP_S_SET_SESSION, key, value, done, arg, tag);
}

int store_session_get(struct store_session *s, const struct byteview *keys, size_t n,
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

int store_session_cas(struct store_session *s, struct byteview key, bool has_expected,
		      struct byteview expected, struct byteview value, store_session_cas_fn done,
		      void *arg, uint64_t tag)
{
	if (!sess_usable(s))
		return -ENOTCONN;
	if (!has_expected)
		expected = (struct byteview){NULL, 0};
	if (!done || !key_ok(key) || !value_ok(expected) || !value_ok(value))
		return -EINVAL;
	struct byteview f[3] = {key, expected, value};
	return submit(s, PROTO_OP_S_CAS, (void *)done, arg, tag, f, 3, true, has_expected ? 1 : 0,
		      false, NULL);
}

int store_session_add(struct store_session *s, struct byteview key, int64_t delta,
		      store_session_add_fn done, void *arg, uint64_t tag)
{
	if (!sess_usable(s))
		return -ENOTCONN;
	if (!done || !key_ok(key))
		return -EINVAL;
	return submit(s, PROTO_OP_S_ADD, (void *)done, arg, tag, &key, 1, true, delta, false, NULL);
}

/* ---- watches ---- */

bool sess_watch_is(const struct sess_watch *w, const uint8_t *key, size_t len)
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
void sess_watch_gc(struct store_session *s)
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

int store_session_watch(struct store_session *s, struct byteview key, store_session_event_fn event,
			void *arg, uint64_t *id)
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
		if (o->live && sess_watch_is(o, w->key, w->key_len))
			others = true;
	/* The store keeps one registration per key: drop it with the last
	 * watch. Failing to say so only costs events that are ignored. */
	if (!others && s->phase != SESS_DEAD) {
		struct byteview k = {w->key, w->key_len};
		submit(s, PROTO_OP_S_UNWATCH, NULL, NULL, 0, &k, 1, false, 0, false, NULL);
	}
	sess_watch_gc(s);
	return 0;
}
