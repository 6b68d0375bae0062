/*
 * store_agent.c - agent sessions on the server: the token handshake, the
 * session queries (framed replies: a tag byte, an i64 status, the body),
 * watch events, and the deletion of a session's keys when it ends.
 * docs/protocol.md, "Agent sessions", gives every frame.
 */
#include "store_agent.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "proto_auth.h"
#include "store_lease.h"

#define AGENT_IDLE_MIN_MS 100
#define AGENT_IDLE_MAX_MS (3600 * 1000)

/* Starts a reply: tag and status. */
static int reply_head(struct store_conn *conn, int status)
{
	int rc = proto_put_u8(&conn->out, PROTO_SESSION_REPLY);
	return rc == 0 ? proto_put_i64(&conn->out, status) : rc;
}

static int put_value(struct bytebuf *out, bool present, struct byteview v)
{
	int rc = proto_put_u8(out, present ? 1 : 0);
	return rc == 0 ? proto_put_bytes(out, v.data, v.len) : rc;
}

/* A store error the session is told about; anything else ends it. */
static bool status_inband(int rc)
{
	return rc == -ENOSPC || rc == -ENOMEM || rc == -EINVAL || rc == -ERANGE;
}

/* Hands what is queued to the kernel now: used before closing after a
 * refusal, so the client reads why instead of a bare reset. */
static void flush_now(struct store_conn *conn)
{
	if (conn->out.len == 0)
		return;
	uv_buf_t b = uv_buf_init((char *)conn->out.data, (unsigned)conn->out.len);
	int n = uv_try_write((uv_stream_t *)&conn->tcp, &b, 1);
	if (n > 0)
		bytebuf_consume(&conn->out, (size_t)n);
}

static int agent_hello(struct store_conn *conn, const struct proto_request *req)
{
	struct byteview nonce = req->fields[0];
	if (nonce.len != PROTO_SESSION_NONCE_LEN) {
		log_debug("store: session hello with a nonce of %zu bytes", nonce.len);
		return -EPROTO;
	}
	struct store_agent *ag = conn->agent ? conn->agent : calloc(1, sizeof(*ag));
	if (!ag)
		return -ENOMEM;
	conn->agent = ag;
	int64_t idle = req->integer;
	ag->idle_ms = idle <= 0			 ? 0
		      : idle < AGENT_IDLE_MIN_MS ? AGENT_IDLE_MIN_MS
		      : idle > AGENT_IDLE_MAX_MS ? AGENT_IDLE_MAX_MS
						 : (uint64_t)idle;
	ag->last_ms = uv_now(conn->server->loop);
	if (ag->idle_ms)
		store_access_watch_idle(conn->server);
	memcpy(ag->client_nonce, nonce.data, PROTO_SESSION_NONCE_LEN);
	size_t tlen;
	const uint8_t *token = store_access_token(conn->server, &tlen);
	int rc = reply_head(conn, 0);
	if (rc < 0)
		return rc;
	if (!token) {
		ag->phase = AGENT_READY;
		rc = proto_put_u8(&conn->out, PROTO_SESSION_AUTH_NONE);
		if (rc == 0)
			rc = proto_put_bytes(&conn->out, NULL, 0);
		return rc == 0 ? proto_put_bytes(&conn->out, NULL, 0) : rc;
	}
	/* A challenge that owes nothing to the token: the client proves
	 * first, so a stranger gets nothing to test guesses against. */
	proto_auth_nonce(ag->server_nonce);
	ag->phase = AGENT_CHALLENGED;
	if (!ag->handshake_until)
		ag->handshake_until = store_access_handshake_deadline(conn->server);
	rc = proto_put_u8(&conn->out, PROTO_SESSION_AUTH_TOKEN);
	if (rc == 0)
		rc = proto_put_bytes(&conn->out, ag->server_nonce, sizeof(ag->server_nonce));
	return rc == 0 ? proto_put_bytes(&conn->out, NULL, 0) : rc;
}

static int agent_auth(struct store_conn *conn, const struct proto_request *req)
{
	struct store_agent *ag = conn->agent;
	size_t tlen;
	const uint8_t *token = store_access_token(conn->server, &tlen);
	struct byteview got = req->fields[0];
	uint8_t want[PROTO_SESSION_PROOF_LEN];
	bool ok = false;
	if (token && ag->phase == AGENT_CHALLENGED && got.len == PROTO_SESSION_PROOF_LEN) {
		proto_auth_proof(token, tlen, false, ag->client_nonce, ag->server_nonce, want);
		ok = proto_auth_equal(want, got.data);
	}
	if (!ok) {
		store_access_refused(conn, "its session did not prove the job's token");
		if (reply_head(conn, -EACCES) == 0)
			flush_now(conn);
		return -EACCES;
	}
	/* Only now the store's own proof: to a client that proved the token. */
	proto_auth_proof(token, tlen, true, ag->client_nonce, ag->server_nonce, want);
	ag->phase = AGENT_READY;
	ag->handshake_until = 0;
	store_access_unlist(conn);
	conn->access = CONN_ACCESS_OPEN;
	conn->dec.limits = &conn->server->plimits; /* between frames: the next is read so */
	store_access_joined(conn);
	int rc = reply_head(conn, 0);
	return rc == 0 ? proto_put_bytes(&conn->out, want, sizeof(want)) : rc;
}

static int agent_get(struct store_conn *conn, const struct proto_request *req)
{
	int rc = reply_head(conn, 0);
	for (size_t i = 0; i < req->nfields && rc == 0; i++) {
		struct byteview v = {NULL, 0};
		bool present = store_get(conn->server->store, req->fields[i], &v) == 1;
		rc = put_value(&conn->out, present, v);
	}
	return rc;
}

static int agent_cas(struct store_conn *conn, const struct proto_request *req)
{
	bool swapped, present;
	struct byteview cur;
	int rc = store_cas(conn->server->store, req->fields[0], req->integer != 0, req->fields[1],
			   req->fields[2], &swapped, &present, &cur);
	if (rc < 0)
		return status_inband(rc) ? reply_head(conn, rc) : rc;
	rc = reply_head(conn, 0);
	if (rc == 0)
		rc = proto_put_u8(&conn->out, swapped ? 1 : 0);
	return rc == 0 ? put_value(&conn->out, present, cur) : rc;
}

static int agent_add(struct store_conn *conn, const struct proto_request *req)
{
	int64_t v = 0;
	int rc = store_add(conn->server->store, req->fields[0], req->integer, &v);
	if (rc < 0)
		return status_inband(rc) ? reply_head(conn, rc) : rc;
	rc = reply_head(conn, 0);
	return rc == 0 ? proto_put_i64(&conn->out, v) : rc;
}

static int agent_set(struct store_conn *conn, const struct proto_request *req, bool bound)
{
	struct store *store = conn->server->store;
	int rc = bound ? store_set_bound(store, &conn->owner, req->fields[0], req->fields[1])
		       : store_set(store, req->fields[0], req->fields[1]);
	if (rc < 0 && !status_inband(rc))
		return rc;
	return reply_head(conn, rc);
}

static int agent_watch(struct store_conn *conn, const struct proto_request *req)
{
	struct store *store = conn->server->store;
	int rc = 0;
	/* One registration per key and session: the client fans events out
	 * to its watches of the key. */
	if (!store_watching(store, &conn->owner, req->fields[0]))
		rc = store_watch(store, &conn->owner, req->fields[0]);
	if (rc < 0)
		return status_inband(rc) ? reply_head(conn, rc) : rc;
	struct byteview v = {NULL, 0};
	bool present = store_get(store, req->fields[0], &v) == 1;
	rc = reply_head(conn, 0);
	return rc == 0 ? put_value(&conn->out, present, v) : rc;
}

static int agent_query(struct store_conn *conn, const struct proto_request *req)
{
	switch (req->op) {
	case PROTO_OP_S_GET:
		return agent_get(conn, req);
	case PROTO_OP_S_CAS:
		return agent_cas(conn, req);
	case PROTO_OP_S_ADD:
		return agent_add(conn, req);
	case PROTO_OP_S_SET:
		return agent_set(conn, req, false);
	case PROTO_OP_S_SET_SESSION:
		return agent_set(conn, req, true);
	case PROTO_OP_S_WATCH:
		return agent_watch(conn, req);
	case PROTO_OP_S_UNWATCH:
		store_unwatch(conn->server->store, &conn->owner, req->fields[0]);
		return reply_head(conn, 0);
	case PROTO_OP_S_PING: {
		int rc = reply_head(conn, 0);
		return rc == 0 ? proto_put_u32(&conn->out, req->u32) : rc;
	}
	default:
		log_debug("store: %s is not a session query", proto_op_name(req->op));
		return -EPROTO;
	}
}

/* Before HELLO: only VALIDATE and HELLO are accepted; a connection that
 * must prove the token and sends anything else is refused. */
static int agent_first(struct store_conn *conn, const struct proto_request *req)
{
	if (req->op == PROTO_OP_VALIDATE)
		return 0;
	if (req->op == PROTO_OP_S_HELLO)
		return agent_hello(conn, req);
	if (conn->access == CONN_ACCESS_PROOF) {
		store_access_refused(conn, "its address is not allowed and it did not open an "
					   "agent session with the job's token");
		return -EACCES;
	}
	log_debug("store: %s before a session hello", proto_op_name(req->op));
	return -EPROTO;
}

int store_agent_execute(struct store_conn *conn, const struct proto_request *req)
{
	struct store_agent *ag = conn->agent;
	if (!ag || ag->phase == AGENT_NEW)
		return agent_first(conn, req);
	ag->last_ms = uv_now(conn->server->loop);
	if (req->op == PROTO_OP_S_AUTH)
		return agent_auth(conn, req);
	if (ag->phase != AGENT_READY) {
		store_access_refused(conn, "its session sent a query before proving the token");
		return -EACCES;
	}
	return agent_query(conn, req);
}

int store_agent_event(struct store_conn *conn, enum store_change change, struct byteview key,
		      struct byteview value)
{
	int rc = proto_put_u8(&conn->out, PROTO_SESSION_EVENT);
	if (rc == 0)
		rc = proto_put_bytes(&conn->out, key.data, key.len);
	return rc == 0 ? put_value(&conn->out, change != STORE_KEY_DELETED, value) : rc;
}

void store_agent_forget(struct store_conn *conn)
{
	size_t n = store_owner_expire(conn->server->store, &conn->owner);
	if (n)
		log_debug("store: session ended; deleted its %zu key(s)", n);
	store_access_unlist(conn);
	free(conn->agent);
	conn->agent = NULL;
}
