/*
 * etcd_request.c - one request of the async client (etcd_async.h) to
 * etcd's JSON gateway, and its failover: an attempt on one endpoint
 * (authenticating there first when the client has a user and no token yet,
 * and once more when the token is rejected), within a slice of what is left
 * of its deadline; on a connection failure or an "unavailable" answer the
 * next endpoint; after a whole round, a short backoff on the client's timer
 * and another round with twice the cap per attempt.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_async.h"
#include "etcd_codec.h"
#include "etcd_curl.h"
#include "etcd_int.h"
#include "timeutil.h"

enum op_kind { OP_GRANT, OP_KEEPALIVE, OP_REVOKE, OP_PUT, OP_RANGE, OP_DELETE, OP_CAS };

struct etcd_op {
	struct etcd_op *prev, *next;
	struct etcd_async *c;
	enum op_kind kind;
	const char *path;
	char *body, *url;
	etcd_async_cb cb;
	void *arg;
	struct etcd_xfer x;
	struct etcd_wake wake; /* the backoff */
	struct curl_slist *hdrs;
	struct etcd_rxbuf rx;
	char curl_err[CURL_ERROR_SIZE];
	char (*ep_err)[160];
	uint64_t deadline, attempt_end, attempt_ms, cap, delay;
	size_t start, k, ep; /* the round's first endpoint, the attempt's index
				in it, its endpoint */
	int last_rc;
	int token_tries;
	bool authing;
	int64_t lease; /* keep-alive: for the message */
};

static void op_free(struct etcd_op *op)
{
	if (op->x.easy)
		etcd_curl.easy_cleanup(op->x.easy);
	etcd_curl.slist_free_all(op->hdrs);
	free(op->url);
	if (op->body)
		explicit_bzero(op->body, strlen(op->body));
	free(op->body);
	free(op->rx.data);
	free(op->ep_err);
	free(op);
}

static void op_unlink(struct etcd_op *op)
{
	struct etcd_async *c = op->c;

	if (op->prev)
		op->prev->next = op->next;
	else
		c->ops = op->next;
	if (op->next)
		op->next->prev = op->prev;
	etcd_async_unwake(c, &op->wake);
	etcd_multi_stop(&c->m, &op->x);
}

void etcd_request_drop_all(struct etcd_async *c)
{
	while (c->ops) {
		struct etcd_op *op = c->ops;

		op_unlink(op);
		op_free(op);
	}
}

/* ---- one request ---- */

static void attempt_next(struct etcd_op *op, int rc, bool retry);
static void attempt_start(struct etcd_op *op);

/* Parses the answer into r as the kind of request wants it. */
static int op_parse(struct etcd_op *op, struct etcd_result *r)
{
	const char *b = op->rx.data ? op->rx.data : "";
	size_t len = op->rx.len;
	int rc = -EINVAL;

	switch (op->kind) {
	case OP_GRANT:
		return etcd_parse_lease_grant(b, len, &r->id, &r->ttl);
	case OP_KEEPALIVE:
		rc = etcd_parse_keepalive(b, len, &r->ttl);
		if (rc == 0 && r->ttl <= 0)
			return etcd_fail(-ENOENT, "etcd: lease %llx has expired",
					 (unsigned long long)op->lease);
		return rc;
	case OP_REVOKE:
	case OP_PUT:
		return etcd_parse_revision(b, len, &r->revision);
	case OP_RANGE:
		return etcd_parse_range(b, len, &r->kvs, &r->n, &r->revision);
	case OP_DELETE:
		return etcd_parse_deleted(b, len, &r->deleted);
	case OP_CAS:
		r->kvs = calloc(1, sizeof(*r->kvs));
		if (!r->kvs)
			return -ENOMEM;
		rc = etcd_parse_cas(b, len, &r->succeeded, &r->revision, r->kvs);
		r->n = rc == 0 && r->kvs->key ? 1 : 0;
		return rc;
	}
	return rc;
}

/* The end of a request: its callback, then it goes. */
static void op_finish(struct etcd_op *op, int rc)
{
	struct etcd_result r;

	memset(&r, 0, sizeof(r));
	op_unlink(op);
	if (rc >= 0) {
		rc = op_parse(op, &r);
		if (rc < 0 && !(op->kind == OP_KEEPALIVE && rc == -ENOENT))
			etcd_fail(rc, "etcd %s: unexpected answer to %s: %.200s",
				  op->c->cfg.names[op->ep], op->path,
				  op->rx.data ? op->rx.data : "");
	}
	if (rc < 0) {
		etcd_kvs_free(r.kvs, r.n ? r.n : (r.kvs ? 1 : 0));
		memset(&r, 0, sizeof(r));
	}
	op->cb(op->arg, rc, &r);
	etcd_kvs_free(r.kvs, r.n ? r.n : (r.kvs ? 1 : 0));
	op_free(op);
}

/* Starts the transfer of the current step: the authentication, or the
 * request with the token. */
static int op_post(struct etcd_op *op)
{
	struct etcd_async *c = op->c;
	const char *path = op->authing ? "/v3/auth/authenticate" : op->path;
	char *body = op->authing ? etcd_req_auth(c->cfg.user, c->cfg.password) : NULL;
	int rc = -ENOMEM;

	etcd_curl.slist_free_all(op->hdrs);
	free(op->url);
	op->hdrs = etcd_headers(op->authing ? NULL : c->token);
	op->url = etcd_url(c->cfg.urls[op->ep], path);
	if (op->hdrs && op->url && (body || !op->authing)) {
		etcd_easy_post(op->x.easy, &c->cfg, op->curl_err, op->url, op->hdrs,
			       body ? body : op->body, &op->rx, time_left_ms(op->attempt_end));
		/* curl copies a body set with COPYPOSTFIELDS; the password must
		 * not outlive the call here. */
		if (body)
			etcd_curl.easy_setopt(op->x.easy, CURLOPT_COPYPOSTFIELDS, body);
		rc = etcd_multi_start(&c->m, &op->x);
	}
	if (body)
		explicit_bzero(body, strlen(body));
	free(body);
	if (rc < 0)
		snprintf(op->ep_err[op->ep], sizeof(op->ep_err[op->ep]), "out of memory");
	return rc;
}

/* The authentication's answer: the token, then the request. */
static void auth_done(struct etcd_op *op, int rc, bool retry)
{
	struct etcd_async *c = op->c;
	char *token;

	op->authing = false;
	rc = etcd_auth_result(rc, &op->rx, c->cfg.user, op->ep_err[op->ep],
			      sizeof(op->ep_err[op->ep]), &token);
	if (rc >= 0) {
		etcd_async_set_token(c, token);
		if ((rc = op_post(op)) >= 0)
			return;
		retry = false;
	}
	attempt_next(op, rc, retry);
}

static void on_op_done(struct etcd_xfer *x, CURLcode code)
{
	struct etcd_op *op = (struct etcd_op *)((char *)x - offsetof(struct etcd_op, x));
	struct etcd_async *c = op->c;
	int grpc = 0, rc;
	bool retry;

	rc = etcd_post_result(x->easy, code, op->curl_err, &op->rx,
			      op->authing ? "/v3/auth/authenticate" : op->path, op->attempt_ms,
			      op->ep_err[op->ep], sizeof(op->ep_err[op->ep]), &retry, &grpc);
	if (op->authing) {
		auth_done(op, rc, retry);
		return;
	}
	if (rc >= 0) {
		c->cur = op->ep;
		c->ep_fail[op->ep][0] = '\0';
		op_finish(op, 0);
		return;
	}
	if (c->cfg.user && etcd_token_rejected(op->ep_err[op->ep], grpc)) {
		/* An expired token, or one this member does not know: renew it
		 * here, once per attempt; then another member may do better. */
		etcd_async_set_token(c, NULL);
		op->authing = op->token_tries++ < 1 && time_left_ms(op->attempt_end);
		if (op->authing && op_post(op) >= 0)
			return;
		op->authing = false;
		retry = true;
	}
	attempt_next(op, rc, retry);
}

/* One attempt on the next endpoint of the round, within its share of what
 * is left: no one endpoint that hangs can take it all. */
static void attempt_start(struct etcd_op *op)
{
	struct etcd_async *c = op->c;
	size_t n = c->cfg.n;
	uint64_t left = time_left_ms(op->deadline);
	uint64_t slice = left / (n - op->k), floor = left < 50 ? left : 50;
	int rc;

	if (!left) {
		char what[96];
		snprintf(what, sizeof(what), "no endpoint answered %s", op->path);
		op_finish(op, etcd_fail_all(op->last_rc, &c->cfg, op->ep_err, what));
		return;
	}
	if (slice > op->cap)
		slice = op->cap;
	op->ep = (op->start + op->k) % n;
	op->attempt_ms = slice > floor ? slice : floor;
	op->attempt_end = time_now_ms() + op->attempt_ms;
	op->token_tries = 0;
	op->authing = c->cfg.user && !c->token;
	if ((rc = op_post(op)) < 0)
		attempt_next(op, rc, false);
}

static void on_backoff(struct etcd_wake *wk)
{
	attempt_start((struct etcd_op *)((char *)wk - offsetof(struct etcd_op, wake)));
}

/* After a failed attempt: the next endpoint, or after a round a short
 * backoff and the next round, each attempt's cap doubled (the first
 * round's is ETCD_FIRST_ATTEMPT_MS: a follower that has not yet noticed its
 * leader died holds a write until etcd's own 7 s, while an election is over
 * in one or two). */
static void attempt_next(struct etcd_op *op, int rc, bool retry)
{
	struct etcd_async *c = op->c;
	uint64_t left = time_left_ms(op->deadline);

	op->last_rc = rc;
	memcpy(c->ep_fail[op->ep], op->ep_err[op->ep], sizeof(c->ep_fail[op->ep]));
	if (!retry) {
		op_finish(op, etcd_fail(rc, "etcd %s: %s: %s", c->cfg.names[op->ep], op->path,
					op->ep_err[op->ep]));
		return;
	}
	if (++op->k < c->cfg.n || !left) {
		attempt_start(op);
		return;
	}
	op->k = 0;
	op->cap *= 2;
	op->wake.fn = on_backoff;
	etcd_async_wake(c, &op->wake, time_now_ms() + (op->delay < left ? op->delay : left));
	op->delay = op->delay * 2 > 250 ? 250 : op->delay * 2;
}

/* A request: body (owned; freed with it) to path. It starts from the loop,
 * so that its callback never runs inside the caller's call. */
static int op_submit(struct etcd_async *c, enum op_kind kind, const char *path, char *body,
		     etcd_async_cb cb, void *arg, struct etcd_op **out)
{
	struct etcd_op *op = body && !c->closing ? calloc(1, sizeof(*op)) : NULL;

	etcd_error_clear();
	if (op) {
		op->ep_err = calloc(c->cfg.n, sizeof(*op->ep_err));
		op->x.easy = etcd_curl.easy_init();
	}
	if (!op || !op->ep_err || !op->x.easy) {
		if (op)
			op_free(op);
		else
			free(body);
		return etcd_fail(c->closing ? -EINVAL : -ENOMEM, c->closing
								     ? "etcd: the client is closing"
								     : "etcd: out of memory");
	}
	op->c = c;
	op->kind = kind;
	op->path = path;
	op->body = body;
	op->cb = cb;
	op->arg = arg;
	op->x.done = on_op_done;
	op->deadline = time_now_ms() + c->cfg.timeout_ms;
	op->cap = ETCD_FIRST_ATTEMPT_MS;
	op->delay = 10;
	op->start = c->cur;
	op->last_rc = -ETIMEDOUT;
	op->next = c->ops;
	if (op->next)
		op->next->prev = op;
	c->ops = op;
	op->wake.fn = on_backoff;
	etcd_async_wake(c, &op->wake, time_now_ms());
	if (out)
		*out = op;
	return 0;
}

/* ---- the operations ---- */

static int key_ok(const char *key)
{
	return key && *key ? 0 : etcd_fail(-EINVAL, "etcd: empty key");
}

int etcd_async_grant(struct etcd_async *c, int64_t ttl_s, etcd_async_cb cb, void *arg)
{
	if (ttl_s < 1)
		return etcd_fail(-EINVAL, "etcd: a lease needs a TTL of at least 1 s");
	return op_submit(c, OP_GRANT, "/v3/lease/grant", etcd_req_lease_grant(ttl_s), cb, arg,
			 NULL);
}

int etcd_async_keepalive(struct etcd_async *c, int64_t id, etcd_async_cb cb, void *arg)
{
	struct etcd_op *op;
	int rc =
	    op_submit(c, OP_KEEPALIVE, "/v3/lease/keepalive", etcd_req_lease_id(id), cb, arg, &op);
	if (rc == 0)
		op->lease = id;
	return rc;
}

int etcd_async_revoke(struct etcd_async *c, int64_t id, etcd_async_cb cb, void *arg)
{
	return op_submit(c, OP_REVOKE, "/v3/lease/revoke", etcd_req_lease_id(id), cb, arg, NULL);
}

int etcd_async_put(struct etcd_async *c, const char *key, const void *value, size_t len,
		   int64_t lease, etcd_async_cb cb, void *arg)
{
	return key_ok(key)
		   ?: op_submit(c, OP_PUT, "/v3/kv/put", etcd_req_put(key, value, len, lease), cb,
				arg, NULL);
}

int etcd_async_range(struct etcd_async *c, const char *key, bool prefix, etcd_async_cb cb,
		     void *arg)
{
	return key_ok(key)
		   ?: op_submit(c, OP_RANGE, "/v3/kv/range", etcd_req_range(key, prefix), cb, arg,
				NULL);
}

int etcd_async_delete(struct etcd_async *c, const char *key, etcd_async_cb cb, void *arg)
{
	return key_ok(key)
		   ?: op_submit(c, OP_DELETE, "/v3/kv/deleterange", etcd_req_delete(key), cb, arg,
				NULL);
}

int etcd_async_cas(struct etcd_async *c, const char *key, const struct etcd_cmp *cmp,
		   const void *value, size_t len, int64_t lease, etcd_async_cb cb, void *arg)
{
	int rc = key_ok(key);

	if (!rc && (!cmp || cmp->kind > ETCD_CMP_VALUE))
		rc = etcd_fail(-EINVAL, "etcd: bad compare-and-set condition");
	return rc
		   ?: op_submit(c, OP_CAS, "/v3/kv/txn", etcd_req_cas(key, cmp, value, len, lease),
				cb, arg, NULL);
}
