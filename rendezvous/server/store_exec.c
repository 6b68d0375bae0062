/*
 * store_exec.c - runs decoded requests against the store and encodes the
 * replies, as torch's servers answer them.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "log.h"
#include "store_access.h"
#include "store_agent.h"
#include "store_conn.h"

/* One query may ask for a reply far larger than what it sent (the same
 * large key many times): its size is checked against the connection's
 * limit before it is built. */
static int exec_multi_get(struct store_conn *conn, const struct proto_request *req)
{
	size_t bytes = 0;
	for (size_t i = 0; i < req->nfields; i++) {
		struct byteview v = {NULL, 0};
		store_get(conn->server->store, req->fields[i], &v);
		bytes += 8 + (v.len < SIZE_MAX / 2 ? v.len : SIZE_MAX / 2);
		if (bytes > SIZE_MAX / 2)
			bytes = SIZE_MAX / 2;
	}
	if (store_budget_reserve(conn, bytes) < 0)
		return -ENOBUFS;
	for (size_t i = 0; i < req->nfields; i++) {
		struct byteview v = {NULL, 0};
		store_get(conn->server->store, req->fields[i], &v);
		int rc = proto_put_bytes(&conn->out, v.data, v.len);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int exec_multi_set(struct store_conn *conn, const struct proto_request *req)
{
	for (size_t i = 0; i + 1 < req->nfields; i += 2) {
		int rc = store_set(conn->server->store, req->fields[i], req->fields[i + 1]);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int exec_queue_pop(struct store_conn *conn, const struct proto_request *req)
{
	int64_t before = 0;
	uint8_t *item = NULL;
	size_t len = 0;
	int rc = store_queue_pop(conn->server->store, req->fields[0], &before, &item, &len);
	if (rc < 0)
		return rc;
	rc = proto_put_i64(&conn->out, before);
	if (rc == 0 && before > 0)
		rc = proto_put_bytes(&conn->out, item, len);
	free(item);
	return rc;
}

static int put_key(void *ctx, struct byteview key)
{
	return proto_put_bytes(ctx, key.data, key.len);
}

static int add_key_size(void *ctx, struct byteview key)
{
	*(size_t *)ctx += 8 + key.len;
	return 0;
}

/* torch 2.x's LIST_KEYS: every key with a value, as a count and the keys
 * (the client strips its "/" and filters its PrefixStore prefix itself). */
static int exec_list_keys(struct store_conn *conn)
{
	int64_t n = store_num_keys(conn->server->store);
	if ((uint64_t)n > conn->server->limits.max_list_keys) {
		log_debug("store: list_keys of %lld keys is over the limit (%zu)", (long long)n,
			  conn->server->limits.max_list_keys);
		return -EMSGSIZE;
	}
	size_t bytes = 8;
	store_foreach_key(conn->server->store, add_key_size, &bytes);
	if (store_budget_reserve(conn, bytes) < 0)
		return -ENOBUFS;
	int rc = proto_put_i64(&conn->out, n);
	if (rc == 0)
		rc = store_foreach_key(conn->server->store, put_key, &conn->out);
	return rc;
}

static int exec_barrier(struct store_conn *conn, const struct proto_request *req)
{
	if (req->integer > 0 && (uint64_t)req->integer > conn->server->limits.max_barrier_world) {
		log_debug("store: barrier world size %lld is over the limit (%zu)",
			  (long long)req->integer, conn->server->limits.max_barrier_world);
		return -EMSGSIZE;
	}
	int64_t count;
	int rc =
	    store_barrier(conn->server->store, &conn->owner, req->fields[0], req->integer, &count);
	if (rc == 1)
		return proto_put_u8(&conn->out, PROTO_WAIT_STOP_WAITING);
	return rc;
}

static int exec_wait(struct store_conn *conn, const struct proto_request *req)
{
	int rc = store_wait(conn->server->store, &conn->owner, req->fields, req->nfields);
	if (rc == 1)
		return proto_put_u8(&conn->out, PROTO_WAIT_STOP_WAITING);
	return rc;
}

static int exec_compare_set(struct store_conn *conn, const struct proto_request *req)
{
	struct byteview cur;
	int rc = store_compare_set(conn->server->store, req->fields[0], req->fields[1],
				   req->fields[2], &cur);
	if (rc < 0)
		return rc;
	return proto_put_bytes(&conn->out, cur.data, cur.len);
}

static int exec_add(struct store_conn *conn, const struct proto_request *req)
{
	int64_t v = 0;
	int rc = store_add(conn->server->store, req->fields[0], req->integer, &v);
	if (rc < 0)
		return rc;
	return proto_put_i64(&conn->out, v);
}

static int exec_get(struct store_conn *conn, const struct proto_request *req)
{
	/* A missing key reads as empty bytes (torch 2.x); torch 1.13's server
	 * dropped the connection instead, but its clients always wait first. */
	struct byteview v = {NULL, 0};
	store_get(conn->server->store, req->fields[0], &v);
	return proto_put_bytes(&conn->out, v.data, v.len);
}

int store_conn_execute(struct store_conn *conn, const struct proto_request *req)
{
	struct store *store = conn->server->store;
	struct bytebuf *out = &conn->out;
	int rc;

	if ((size_t)req->op < PROTO_OP_COUNT)
		conn->server->requests[req->op]++;
	if (conn->agent || conn->access != CONN_ACCESS_OPEN || req->op >= PROTO_OP_S_HELLO)
		return store_agent_execute(conn, req);
	if (store_access_agent_write(conn->server, req)) {
		store_access_refused(conn, "it tried to write the agents' keys (" STORE_AGENT_KEYS
					   "...) without an agent session that proved the token");
		return -EACCES;
	}
	switch (req->op) {
	case PROTO_OP_VALIDATE:
		return 0;
	case PROTO_OP_SET:
		return store_set(store, req->fields[0], req->fields[1]);
	case PROTO_OP_COMPARE_SET:
		return exec_compare_set(conn, req);
	case PROTO_OP_GET:
		return exec_get(conn, req);
	case PROTO_OP_ADD:
		return exec_add(conn, req);
	case PROTO_OP_CHECK:
		return proto_put_u8(out, store_check(store, req->fields, req->nfields)
					     ? PROTO_CHECK_READY
					     : PROTO_CHECK_NOT_READY);
	case PROTO_OP_WAIT:
		return exec_wait(conn, req);
	case PROTO_OP_NUM_KEYS:
		return proto_put_i64(out, store_num_keys(store));
	case PROTO_OP_DELETE_KEY:
		return proto_put_i64(out, store_delete(store, req->fields[0]));
	case PROTO_OP_APPEND:
		return store_append(store, req->fields[0], req->fields[1]);
	case PROTO_OP_MULTI_GET:
		return exec_multi_get(conn, req);
	case PROTO_OP_MULTI_SET:
		return exec_multi_set(conn, req);
	case PROTO_OP_CANCEL_WAIT:
		store_owner_cancel(store, &conn->owner);
		return proto_put_u8(out, PROTO_WAIT_CANCELED);
	case PROTO_OP_PING:
		return proto_put_u32(out, req->u32);
	case PROTO_OP_QUEUE_PUSH:
		return store_queue_push(store, req->fields[0], req->fields[1]);
	case PROTO_OP_QUEUE_POP:
		return exec_queue_pop(conn, req);
	case PROTO_OP_QUEUE_LEN:
		return proto_put_i64(out, store_queue_len(store, req->fields[0]));
	case PROTO_OP_LIST_KEYS:
		return exec_list_keys(conn);
	case PROTO_OP_BARRIER:
		return exec_barrier(conn, req);
	case PROTO_OP_WATCH_KEY:
		/* torch 1.13's watchKey, on its second connection. */
		rc = store_watch(store, &conn->owner, req->fields[0]);
		return rc < 0 ? rc : proto_put_u8(out, PROTO_WATCH_CALLBACK_REGISTERED);
	default:
		log_debug("store: unsupported query %s", proto_op_name(req->op));
		return -EPROTO;
	}
}
