/*
 * store_session_reply.c - the agent session's side of the store's messages:
 * parsing framed replies and watch events, completing requests in order,
 * fanning events out to the watches of a key, failing everything when the
 * session ends.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store_session_int.h"

/* The largest byte string accepted from the store (its own limit on one
 * value is 64 MiB by default). */
#define SESS_MAX_READ ((size_t)256 * 1024 * 1024)

/* Unlinks the oldest request. */
static void pop_head(struct store_session *s, struct sess_req *r)
{
	s->head = r->next;
	if (!s->head)
		s->tail = NULL;
	s->pending--;
	s->internal -= sess_req_internal(r->op);
}

static void deliver_event(struct store_session *s, const uint8_t *key, size_t len,
			  struct store_session_value v)
{
	for (struct sess_watch *w = s->watches; w && s->phase != SESS_DEAD; w = w->next)
		if (w->live && w->started && sess_watch_is(w, key, len))
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
	sess_watch_gc(s);
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
	sess_watch_gc(s);
	return rc < 0 ? rc : 0;
}
