/*
 * store_client.c - blocking TCPStore client speaking the torch 2.x framing.
 */
#include "store_client.h"

#include <errno.h>
#include <stdarg.h>
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

static int client_io_error(struct store_client *c, int rc, const char *what)
{
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
	/* In 1.13 framing only 1.13's own queries (codes 0-8): its server
	 * drops a connection on anything else. */
	c->bad_op = (c->gen == PROTO_GEN_V1 && proto_op_code(c->gen, op) > 8) ||
		    proto_put_op(&c->tx, c->gen, op) < 0;
}

int client_req_key(struct store_client *c, const char *key)
{
	if (!key)
		return -EINVAL;
	return proto_put_bytes(&c->tx, key, strlen(key));
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
	return rc < 0 ? client_io_error(c, rc, "send") : 0;
}

/* Receives more reply bytes (at least one) before the deadline. */
static int client_rx_more(struct store_client *c, uint64_t deadline)
{
	int rc = client_net_recv(c->fd, &c->rx, deadline, &c->rcvtimeo_ms);
	if (rc < 0)
		return rc == -ETIMEDOUT ? rc : client_io_error(c, rc, "receive");
	return 0;
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
	bytebuf_consume(&c->rx, size);
	return 0;
}

int client_rx_u32(struct store_client *c, uint32_t *v, uint64_t deadline)
{
	size_t size;
	int rc;
	while ((rc = proto_take_u32(c->rx.data, c->rx.len, v, &size)) == 0)
		if ((rc = client_rx_more(c, deadline)) < 0)
			return rc;
	bytebuf_consume(&c->rx, size);
	return 0;
}

int client_rx_i64(struct store_client *c, int64_t *v, uint64_t deadline)
{
	size_t size;
	int rc;
	while ((rc = proto_take_i64(c->rx.data, c->rx.len, v, &size)) == 0)
		if ((rc = client_rx_more(c, deadline)) < 0)
			return rc;
	bytebuf_consume(&c->rx, size);
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
	bytebuf_consume(&c->rx, size);
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
	int rc;
	for (;;) {
		rc = c->fd = client_net_connect(host, port, deadline);
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
	if (rc < 0) {
		if (errbuf && errbuf_len)
			snprintf(errbuf, errbuf_len,
				 "cannot reach the store at %s after %llu ms: %s%s", c->addr,
				 (unsigned long long)timeout_ms, strerror(-rc),
				 rc == -EPROTO ? " (not a TCPStore 2.x-compatible server?)" : "");
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
