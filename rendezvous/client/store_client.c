/*
 * store_client.c - blocking TCPStore client speaking the torch 2.x framing.
 */
#include "store_client.h"

#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client_net.h"
#include "store_client_int.h"
#include "timeutil.h"

int client_fail(struct store_client *c, int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
	return rc;
}

/* Why a server closes a connection at query q instead of answering: what
 * it refuses there, and the fix. (torch's protocol has no error reply: a
 * refused query is answered by closing the connection.) */
static const char *closed_reason(const struct client_query *q)
{
	switch (q->op) {
	case PROTO_OP_SET:
	case PROTO_OP_APPEND:
	case PROTO_OP_MULTI_SET:
	case PROTO_OP_QUEUE_PUSH:
	case PROTO_OP_COMPARE_SET:
		return "the store refuses a key or value over its limits (ddp-rdzvd "
		       "--max-key-len, --max-value-len, --max-total-bytes): shorten it or raise "
		       "the limit";
	case PROTO_OP_ADD:
		return "the store refuses to add to a value that is not an integer (set the key "
		       "to a number or delete it first), or a key over its --max-key-len";
	case PROTO_OP_BARRIER:
		return "the store refuses a counter that is not an integer, or a world size over "
		       "its --max-barrier-world";
	case PROTO_OP_LIST_KEYS:
		return "the store refuses to list more keys than its --max-list-keys (raise it, "
		       "or count them with num_keys)";
	case PROTO_OP_CHECK:
	case PROTO_OP_WAIT:
	case PROTO_OP_MULTI_GET:
		return "the store refuses a key over its --max-key-len, or more keys in one query "
		       "than its --max-keys-per-request: shorten the key, send fewer keys or "
		       "raise the limit";
	case PROTO_OP_GET:
	case PROTO_OP_DELETE_KEY:
	case PROTO_OP_QUEUE_POP:
	case PROTO_OP_QUEUE_LEN:
		return "the store refuses a key over its --max-key-len: shorten the key or raise "
		       "the limit";
	default:
		return "the store closes connections it does not serve (ddp-rdzvd --token-file, "
		       "--allow)";
	}
}

/* " of 'key' (a 70000-byte key, a 5-byte value)" for a message. */
static void query_text(const struct client_query *q, char *buf, size_t len)
{
	int n = 0;
	if (q->nkeys == 0 || len == 0) {
		if (len)
			buf[0] = '\0';
		return;
	}
	n = snprintf(buf, len, " of '%s'%s (a %zu-byte key", q->key,
		     q->nkeys > 1 ? " and more" : "", q->key_len);
	if (n >= 0 && (size_t)n < len && q->nkeys > 1)
		n += snprintf(buf + n, len - (size_t)n, ", %zu keys", q->nkeys);
	if (n >= 0 && (size_t)n < len &&
	    (q->op == PROTO_OP_SET || q->op == PROTO_OP_APPEND || q->op == PROTO_OP_QUEUE_PUSH ||
	     q->op == PROTO_OP_COMPARE_SET))
		n += snprintf(buf + n, len - (size_t)n, ", a %zu-byte value", q->value_len);
	if (n >= 0 && (size_t)n < len)
		snprintf(buf + n, len - (size_t)n, ")");
}

/* The server closed the connection. A reply-less write sent before (and
 * never answered) is the likely culprit, so it is named rather than the
 * query that found the connection closed. */
static int client_closed(struct store_client *c, int rc)
{
	const struct client_query *q = c->unconfirmed ? &c->written : &c->cur;
	bool write = c->unconfirmed || q->op == PROTO_OP_SET || q->op == PROTO_OP_APPEND ||
		     q->op == PROTO_OP_MULTI_SET || q->op == PROTO_OP_QUEUE_PUSH;
	char what[160];
	query_text(q, what, sizeof(what));
	return client_fail(c, rc,
			   "store %s closed the connection %s %s%s%s: %s (or it was stopped, "
			   "or reset for a restart)",
			   c->addr, c->unconfirmed ? "instead of confirming" : "at",
			   proto_op_name(q->op), what, write ? ", so the write was not stored" : "",
			   closed_reason(q));
}

static int client_io_error(struct store_client *c, int rc, const char *what)
{
	if (rc == -ECONNRESET || rc == -EPIPE)
		return client_closed(c, rc);
	return client_fail(c, rc, "store %s: %s failed: %s", c->addr, what, strerror(-rc));
}

uint64_t client_op_deadline(uint64_t timeout_ms)
{
	return time_now_ms() + (timeout_ms ? timeout_ms : STORE_CLIENT_DEFAULT_TIMEOUT_MS);
}

void client_req_begin(struct store_client *c, enum proto_op op)
{
	c->tx.len = 0;
	c->err[0] = '\0';
	c->cur = (struct client_query){.op = op};
	/* In 1.13 framing only 1.13's own queries (codes 0-8): its server
	 * drops a connection on anything else. */
	c->bad_op = (c->gen == PROTO_GEN_V1 && proto_op_code(c->gen, op) > 8) ||
		    proto_put_op(&c->tx, c->gen, op) < 0;
}

/* Keeps the first key of a query, printable and shortened, for messages. */
static void query_note_key(struct client_query *q, const char *key, size_t len)
{
	if (q->nkeys++ > 0)
		return;
	q->key_len = len;
	size_t keep = sizeof(q->key) - 1, n = len < keep ? len : keep - 3;
	for (size_t i = 0; i < n; i++)
		q->key[i] = key[i] >= 0x20 && key[i] < 0x7f ? key[i] : '?';
	strcpy(q->key + n, len > n ? "..." : "");
}

int client_req_key(struct store_client *c, const char *key)
{
	if (!key)
		return -EINVAL;
	size_t len = strlen(key);
	query_note_key(&c->cur, key, len);
	return proto_put_bytes(&c->tx, key, len);
}

int client_req_value(struct store_client *c, const void *value, size_t len)
{
	if (!value && len)
		return -EINVAL;
	if (c->cur.nkeys <= 1)
		c->cur.value_len = len;
	return proto_put_bytes(&c->tx, value, len);
}

/* Queries the server answers with nothing. */
static bool op_has_no_reply(enum proto_op op)
{
	return op == PROTO_OP_SET || op == PROTO_OP_APPEND || op == PROTO_OP_MULTI_SET ||
	       op == PROTO_OP_QUEUE_PUSH;
}

int client_req_send(struct store_client *c, int rc)
{
	if (c->bad_op)
		return client_fail(c, -EOPNOTSUPP, "store %s: not available in torch 1.13 framing",
				   c->addr);
	if (c->broken)
		return client_fail(c, -EPIPE,
				   "store %s: the connection is out of step after a timed-out wait "
				   "(torch 1.13 framing); connect again",
				   c->addr);
	if (rc < 0)
		return client_fail(c, rc, "store %s: bad request arguments", c->addr);
	rc = client_net_send(c->fd, c->tx.data, c->tx.len);
	if (rc < 0)
		return client_io_error(c, rc, "send");
	if (op_has_no_reply(c->cur.op)) {
		c->written = c->cur;
		c->unconfirmed++;
	}
	return 0;
}

/* Receives more reply bytes (at least one) before the deadline. */
static int client_rx_more(struct store_client *c, uint64_t deadline)
{
	int rc = client_net_recv(c->fd, &c->rx, deadline, &c->rcvtimeo_ms);
	if (rc < 0)
		return rc == -ETIMEDOUT ? rc : client_io_error(c, rc, "receive");
	return 0;
}

/* A reply field of `size` bytes was read: the server got past every write
 * sent before its query. */
static void client_rx_took(struct store_client *c, size_t size)
{
	bytebuf_consume(&c->rx, size);
	c->unconfirmed = 0;
}

/* The reply fields are parsed by the codec (proto_take_*); this only
 * receives until the field is whole, then consumes it. */
int client_rx_u8(struct store_client *c, uint8_t *v, uint64_t deadline)
{
	size_t size;
	int rc;
	while ((rc = proto_take_u8(c->rx.data, c->rx.len, v, &size)) == 0)
		if ((rc = client_rx_more(c, deadline)) < 0)
			return rc;
	client_rx_took(c, size);
	return 0;
}

int client_rx_u32(struct store_client *c, uint32_t *v, uint64_t deadline)
{
	size_t size;
	int rc;
	while ((rc = proto_take_u32(c->rx.data, c->rx.len, v, &size)) == 0)
		if ((rc = client_rx_more(c, deadline)) < 0)
			return rc;
	client_rx_took(c, size);
	return 0;
}

int client_rx_i64(struct store_client *c, int64_t *v, uint64_t deadline)
{
	size_t size;
	int rc;
	while ((rc = proto_take_i64(c->rx.data, c->rx.len, v, &size)) == 0)
		if ((rc = client_rx_more(c, deadline)) < 0)
			return rc;
	client_rx_took(c, size);
	return 0;
}

/* Reads a byte string into a malloc'ed, NUL-terminated copy. */
int client_rx_bytes(struct store_client *c, void **value, size_t *len, uint64_t deadline)
{
	struct byteview v;
	size_t size;
	int rc;
	while ((rc = proto_take_bytes(c->rx.data, c->rx.len, CLIENT_MAX_VALUE, &v, &size)) == 0)
		if ((rc = client_rx_more(c, deadline)) < 0)
			return rc;
	if (rc == -EMSGSIZE)
		return client_fail(c, -EPROTO, "store %s: reply of %llu bytes is too large",
				   c->addr, (unsigned long long)bytes_load_u64(c->rx.data));
	uint8_t *copy = malloc(v.len + 1);
	if (!copy)
		return -ENOMEM;
	if (v.len)
		memcpy(copy, v.data, v.len);
	copy[v.len] = '\0';
	client_rx_took(c, size);
	*value = copy;
	*len = v.len;
	return 0;
}

static int client_handshake(struct store_client *c, uint64_t deadline)
{
	uint32_t nonce = (uint32_t)getpid() ^ (uint32_t)time_now_ns();
	c->tx.len = 0;
	proto_put_op(&c->tx, PROTO_GEN_V2, PROTO_OP_VALIDATE);
	proto_put_u32(&c->tx, PROTO_VALIDATE_MAGIC);
	proto_put_op(&c->tx, PROTO_GEN_V2, PROTO_OP_PING);
	proto_put_u32(&c->tx, nonce);
	uint32_t echo = 0;
	int rc = client_net_send(c->fd, c->tx.data, c->tx.len);
	if (rc == 0)
		rc = client_rx_u32(c, &echo, deadline);
	if (rc < 0)
		return rc;
	return echo == nonce ? 0 : -EPROTO;
}

int store_client_connect(const char *host, int port, uint64_t timeout_ms, struct store_client **out,
			 char *errbuf, size_t errbuf_len)
{
	return store_client_connect_proto(host, port, timeout_ms, STORE_CLIENT_PROTO_V2, out,
					  errbuf, errbuf_len);
}

int store_client_connect_proto(const char *host, int port, uint64_t timeout_ms,
			       enum store_client_proto proto, struct store_client **out,
			       char *errbuf, size_t errbuf_len)
{
	*out = NULL;
	struct store_client *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	snprintf(c->addr, sizeof(c->addr), "%s:%d", host ? host : "", port);
	c->gen = proto == STORE_CLIENT_PROTO_V1 ? PROTO_GEN_V1 : PROTO_GEN_V2;
	uint64_t deadline = time_now_ms() + timeout_ms;
	uint64_t delay = 10;
	int rc, gai = 0;
	for (;;) {
		rc = c->fd = client_net_connect(host, port, deadline, &gai);
		if (rc >= 0) {
			/* torch 1.13 has no handshake: the first query is the first byte. */
			rc = c->gen == PROTO_GEN_V2 ? client_handshake(c, deadline) : 0;
			if (rc == 0)
				break;
			close(c->fd);
			c->rx.len = 0;
			c->rcvtimeo_ms = 0;
		}
		/* A reset during the handshake (a server over its connection
		 * limit or backlog) is retried like a refused connect. */
		if (!client_net_retryable(rc) || time_left_ms(deadline) == 0)
			break;
		client_net_backoff(&delay, deadline);
	}
	if (rc < 0 && gai != 0 && errbuf && errbuf_len) {
		snprintf(errbuf, errbuf_len,
			 "cannot find the store's host '%s' (%s) after %llu ms: check the host "
			 "name (--addr, MASTER_ADDR)",
			 host ? host : "", gai == EAI_SYSTEM ? strerror(errno) : gai_strerror(gai),
			 (unsigned long long)timeout_ms);
	} else if (rc < 0) {
		if (errbuf && errbuf_len)
			snprintf(errbuf, errbuf_len,
				 "cannot reach the store at %s after %llu ms: %s%s", c->addr,
				 (unsigned long long)timeout_ms, strerror(-rc),
				 rc == -EPROTO ? " (not a TCPStore 2.x-compatible server?)" : "");
	}
	if (rc < 0) {
		c->fd = -1;
		store_client_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

void store_client_free(struct store_client *client)
{
	if (!client)
		return;
	if (client->fd >= 0)
		close(client->fd);
	bytebuf_release(&client->tx);
	bytebuf_release(&client->rx);
	free(client);
}

const char *store_client_error(const struct store_client *client)
{
	return client->err;
}
