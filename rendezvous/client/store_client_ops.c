/*
 * store_client_ops.c - the operations of the blocking store client.
 * Split from store_client.c, which holds the connection and reply reading.
 */
#include "store_client_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "timeutil.h"

int store_client_set(struct store_client *c, const char *key, const void *value, size_t len)
{
	client_req_begin(c, PROTO_OP_SET);
	int rc = client_req_key(c, key);
	if (rc == 0)
		rc = client_req_value(c, value, len);
	return client_req_send(c, rc);
}

int store_client_confirm(struct store_client *c)
{
	/* Any answer will do: the server runs queries in order, so it has run
	 * every earlier one by the time it answers this. */
	if (c->gen == PROTO_GEN_V1) {
		int64_t n;
		return store_client_num_keys(c, &n);
	}
	return store_client_ping(c);
}

/* Sends a query naming nkeys keys after a u64 count. */
static int client_req_keys(struct store_client *c, enum proto_op op, const char *const *keys,
			   size_t n)
{
	client_req_begin(c, op);
	int rc = (keys || n == 0) ? proto_put_u64(&c->tx, n) : -EINVAL;
	for (size_t i = 0; i < n && rc == 0; i++)
		rc = client_req_key(c, keys[i]);
	return client_req_send(c, rc);
}

/* CHECKs sent before their answers are read, at most: their answers (a
 * byte each) always fit in the socket buffers, so neither side blocks. */
#define CLIENT_CHECK_BATCH 4096

/* One round trip of single-key CHECKs for keys[0..n): bit i of ready[] set
 * when keys[i] exists. 0 or -errno. */
static int check_batch(struct store_client *c, const char *const *keys, size_t n, uint8_t *ready)
{
	struct bytebuf all = {0};
	int rc = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		client_req_begin(c, PROTO_OP_CHECK);
		rc = proto_put_u64(&c->tx, 1);
		if (rc == 0)
			rc = client_req_key(c, keys[i]);
		if (rc == 0)
			rc = bytebuf_append(&all, c->tx.data, c->tx.len);
	}
	struct bytebuf one = c->tx;
	c->tx = all;
	rc = client_req_send(c, rc);
	c->tx = one;
	bytebuf_release(&all);
	uint64_t deadline = client_op_deadline(0);
	for (size_t i = 0; i < n && rc == 0; i++) {
		uint8_t r = 0;
		rc = client_rx_u8(c, &r, deadline);
		if (rc == 0 && r > PROTO_CHECK_NOT_READY)
			rc = client_fail(c, -EPROTO, "store %s: unexpected check reply %u", c->addr,
					 r);
		if (rc == 0 && r == PROTO_CHECK_READY)
			ready[i / 8] |= (uint8_t)(1u << (i % 8));
	}
	return rc;
}

/* After a timed-out wait: names the keys still missing in c->err. The
 * checks go out in batches (a round trip per key made 20,000 keys take
 * seconds). */
static int wait_report(struct store_client *c, const char *const *keys, size_t n,
		       uint64_t timeout_ms)
{
	char list[400] = "";
	size_t used = 0, missing = 0;
	uint8_t ready[CLIENT_CHECK_BATCH / 8];
	for (size_t at = 0; at < n; at += CLIENT_CHECK_BATCH) {
		size_t k = n - at < CLIENT_CHECK_BATCH ? n - at : CLIENT_CHECK_BATCH;
		memset(ready, 0, sizeof(ready));
		int rc = check_batch(c, keys + at, k, ready);
		if (rc < 0)
			return rc;
		for (size_t i = 0; i < k; i++) {
			if (ready[i / 8] & (1u << (i % 8)))
				continue;
			if (missing++ < 8 && used < sizeof(list))
				used += (size_t)snprintf(list + used, sizeof(list) - used, "%s'%s'",
							 used ? ", " : "", keys[at + i]);
		}
	}
	return client_fail(
	    c, -ETIMEDOUT, "store %s: timed out after %llu ms waiting for %zu of %zu key(s): %s%s",
	    c->addr, (unsigned long long)timeout_ms, missing, n, list, missing > 8 ? ", ..." : "");
}

/* The wait timed out: cancel it on the server so the stream stays in step
 * (a STOP_WAITING may race the cancel and arrive first). */
static int wait_cancel(struct store_client *c)
{
	client_req_begin(c, PROTO_OP_CANCEL_WAIT);
	int rc = client_req_send(c, 0);
	uint64_t deadline = time_now_ms() + CLIENT_CANCEL_GRACE_MS;
	uint8_t r = 0;
	if (rc == 0)
		rc = client_rx_u8(c, &r, deadline);
	if (rc == 0 && r == PROTO_WAIT_STOP_WAITING)
		rc = client_rx_u8(c, &r, deadline);
	if (rc == 0 && r != PROTO_WAIT_CANCELED)
		rc = -EPROTO;
	return rc;
}

int store_client_wait(struct store_client *c, const char *const *keys, size_t nkeys,
		      uint64_t timeout_ms)
{
	uint64_t t = timeout_ms ? timeout_ms : STORE_CLIENT_DEFAULT_TIMEOUT_MS;
	uint64_t deadline = client_op_deadline(t); /* sending many keys counts too */
	int rc = client_req_keys(c, PROTO_OP_WAIT, keys, nkeys);
	uint8_t r = 0;
	if (rc == 0)
		rc = client_rx_u8(c, &r, deadline);
	if (rc == -ETIMEDOUT && c->gen == PROTO_GEN_V1) {
		/* torch 1.13 cannot cancel: its late STOP_WAITING would be read as
		 * the reply to a later query. */
		c->broken = true;
		return client_fail(c, -ETIMEDOUT,
				   "store %s: timed out after %llu ms waiting for %zu key(s) "
				   "(first '%s'); torch 1.13 framing cannot cancel a wait, so "
				   "connect again",
				   c->addr, (unsigned long long)t, nkeys, nkeys ? keys[0] : "");
	}
	if (rc == -ETIMEDOUT) {
		rc = wait_cancel(c);
		if (rc < 0)
			return client_fail(c, rc, "store %s: cancelling a timed-out wait failed",
					   c->addr);
		return wait_report(c, keys, nkeys, t);
	}
	if (rc == 0 && r != PROTO_WAIT_STOP_WAITING)
		return client_fail(c, -EPROTO, "store %s: unexpected wait reply %u", c->addr, r);
	return rc;
}

static int get_now(struct store_client *c, const char *key, void **value, size_t *len)
{
	client_req_begin(c, PROTO_OP_GET);
	int rc = client_req_send(c, client_req_key(c, key));
	if (rc == 0)
		rc = client_rx_bytes(c, value, len, client_op_deadline(0));
	return rc;
}

/* 2.x servers answer a GET of a missing key with empty bytes, so a non-empty
 * answer to an optimistic GET is the value: one round trip instead of
 * WAIT + GET when the key is already there, as it usually is. An empty answer
 * is ambiguous (missing, or an empty value) and falls back to WAIT + GET.
 * torch 1.13 drops the connection on a missing GET, so it always waits first. */
int store_client_get(struct store_client *c, const char *key, uint64_t timeout_ms, void **value,
		     size_t *len)
{
	int rc;
	if (c->gen != PROTO_GEN_V1) {
		rc = get_now(c, key, value, len);
		if (rc < 0 || *len > 0)
			return rc;
		free(*value);
		*value = NULL;
	}
	rc = store_client_wait(c, &key, 1, timeout_ms);
	if (rc < 0)
		return rc;
	return get_now(c, key, value, len);
}

int store_client_add(struct store_client *c, const char *key, int64_t delta, int64_t *result)
{
	client_req_begin(c, PROTO_OP_ADD);
	int rc = client_req_key(c, key);
	if (rc == 0)
		rc = proto_put_i64(&c->tx, delta);
	rc = client_req_send(c, rc);
	if (rc == 0)
		rc = client_rx_i64(c, result, client_op_deadline(0));
	return rc;
}

int store_client_compare_set(struct store_client *c, const char *key, const void *expected,
			     size_t expected_len, const void *desired, size_t desired_len,
			     void **current, size_t *current_len)
{
	client_req_begin(c, PROTO_OP_COMPARE_SET);
	int rc = client_req_key(c, key);
	if (rc == 0 && (!expected && expected_len))
		rc = -EINVAL;
	if (rc == 0)
		rc = proto_put_bytes(&c->tx, expected, expected_len);
	if (rc == 0)
		rc = client_req_value(c, desired, desired_len);
	rc = client_req_send(c, rc);
	if (rc == 0)
		rc = client_rx_bytes(c, current, current_len, client_op_deadline(0));
	return rc;
}

int store_client_check(struct store_client *c, const char *const *keys, size_t nkeys)
{
	int rc = client_req_keys(c, PROTO_OP_CHECK, keys, nkeys);
	uint8_t r = 0;
	if (rc == 0)
		rc = client_rx_u8(c, &r, client_op_deadline(0));
	if (rc < 0)
		return rc;
	if (r > PROTO_CHECK_NOT_READY)
		return client_fail(c, -EPROTO, "store %s: unexpected check reply %u", c->addr, r);
	return r == PROTO_CHECK_READY;
}

int store_client_num_keys(struct store_client *c, int64_t *count)
{
	client_req_begin(c, PROTO_OP_NUM_KEYS);
	int rc = client_req_send(c, 0);
	if (rc == 0)
		rc = client_rx_i64(c, count, client_op_deadline(0));
	return rc;
}

int store_client_delete(struct store_client *c, const char *key)
{
	client_req_begin(c, PROTO_OP_DELETE_KEY);
	int rc = client_req_send(c, client_req_key(c, key));
	int64_t n = 0;
	if (rc == 0)
		rc = client_rx_i64(c, &n, client_op_deadline(0));
	if (rc < 0)
		return rc;
	return n > 0 ? 1 : 0;
}

int store_client_append(struct store_client *c, const char *key, const void *value, size_t len)
{
	client_req_begin(c, PROTO_OP_APPEND);
	int rc = client_req_key(c, key);
	if (rc == 0)
		rc = client_req_value(c, value, len);
	return client_req_send(c, rc);
}

/* torch 1.13 has no MULTI_GET: the gets go out in one send instead. */
static int multi_get_v1(struct store_client *c, const char *const *keys, size_t nkeys)
{
	struct bytebuf all = {0};
	int rc = 0;
	for (size_t i = 0; i < nkeys && rc == 0; i++) {
		client_req_begin(c, PROTO_OP_GET);
		rc = client_req_key(c, keys[i]);
		if (rc == 0)
			rc = bytebuf_append(&all, c->tx.data, c->tx.len);
	}
	struct bytebuf tmp = c->tx;
	c->tx = all;
	rc = client_req_send(c, rc);
	c->tx = tmp;
	bytebuf_release(&all);
	return rc;
}

int store_client_multi_get(struct store_client *c, const char *const *keys, size_t nkeys,
			   uint64_t timeout_ms, void **values, size_t *lens)
{
	int rc = store_client_wait(c, keys, nkeys, timeout_ms);
	if (rc == 0 && c->gen == PROTO_GEN_V1)
		rc = multi_get_v1(c, keys, nkeys);
	else if (rc == 0)
		rc = client_req_keys(c, PROTO_OP_MULTI_GET, keys, nkeys);
	size_t got = 0;
	for (; rc == 0 && got < nkeys; got++)
		rc = client_rx_bytes(c, &values[got], &lens[got], client_op_deadline(0));
	if (rc < 0) {
		/* got counts the value that failed too: it was never set. */
		for (size_t i = 0; i + 1 < got; i++) {
			free(values[i]);
			values[i] = NULL;
		}
	}
	return rc;
}

int store_client_multi_set(struct store_client *c, const char *const *keys,
			   const void *const *values, const size_t *lens, size_t nkeys)
{
	if (c->gen == PROTO_GEN_V1) {
		/* torch 1.13 has no MULTI_SET; sets have no reply, so this is
		 * just as pipelined. */
		int rc = 0;
		for (size_t i = 0; i < nkeys && rc == 0; i++)
			rc = store_client_set(c, keys[i], values[i], lens[i]);
		return rc;
	}
	client_req_begin(c, PROTO_OP_MULTI_SET);
	int rc = (nkeys == 0 || (keys && values && lens)) ? proto_put_u64(&c->tx, nkeys) : -EINVAL;
	for (size_t i = 0; i < nkeys && rc == 0; i++) {
		rc = client_req_key(c, keys[i]);
		if (rc == 0)
			rc = client_req_value(c, values[i], lens[i]);
	}
	return client_req_send(c, rc);
}

/* A reply's key count beyond this is taken for garbage. */
#define CLIENT_MAX_LIST ((int64_t)1 << 27)

void store_client_free_keys(char **keys, size_t nkeys)
{
	if (!keys)
		return;
	for (size_t i = 0; i < nkeys; i++)
		free(keys[i]);
	free(keys);
}

int store_client_list_keys(struct store_client *c, char ***keys, size_t *nkeys)
{
	*keys = NULL;
	*nkeys = 0;
	client_req_begin(c, PROTO_OP_LIST_KEYS);
	int rc = client_req_send(c, 0);
	int64_t n = 0;
	uint64_t deadline = client_op_deadline(0);
	if (rc == 0)
		rc = client_rx_i64(c, &n, deadline);
	if (rc < 0)
		return rc;
	if (n < 0 || n > CLIENT_MAX_LIST)
		return client_fail(c, -EPROTO, "store %s: list_keys announced %lld keys", c->addr,
				   (long long)n);
	char **list = calloc((size_t)n ? (size_t)n : 1, sizeof(*list));
	if (!list)
		return -ENOMEM;
	size_t got = 0, len;
	for (; got < (size_t)n && rc == 0; got++)
		rc = client_rx_bytes(c, (void **)&list[got], &len, deadline);
	if (rc < 0) {
		store_client_free_keys(list, got);
		return rc;
	}
	*keys = list;
	*nkeys = got;
	return 0;
}

int store_client_barrier(struct store_client *c, const char *key, int64_t world_size,
			 uint64_t timeout_ms)
{
	uint64_t t = timeout_ms ? timeout_ms : STORE_CLIENT_DEFAULT_TIMEOUT_MS;
	client_req_begin(c, PROTO_OP_BARRIER);
	int rc = client_req_key(c, key);
	if (rc == 0)
		rc = proto_put_i64(&c->tx, world_size);
	rc = client_req_send(c, rc);
	uint8_t r = 0;
	if (rc == 0)
		rc = client_rx_u8(c, &r, client_op_deadline(t));
	if (rc == -ETIMEDOUT) {
		rc = wait_cancel(c);
		if (rc < 0)
			return client_fail(c, rc, "store %s: cancelling a timed-out barrier failed",
					   c->addr);
		return client_fail(
		    c, -ETIMEDOUT,
		    "store %s: barrier '%s' timed out after %llu ms waiting for %lld "
		    "caller(s)",
		    c->addr, key, (unsigned long long)t, (long long)world_size);
	}
	if (rc == 0 && r != PROTO_WAIT_STOP_WAITING)
		return client_fail(c, -EPROTO, "store %s: unexpected barrier reply %u", c->addr, r);
	return rc;
}

int store_client_ping(struct store_client *c)
{
	if (c->gen == PROTO_GEN_V1) {
		int64_t n;
		return store_client_num_keys(c, &n); /* 1.13 has no PING */
	}
	uint32_t nonce = (uint32_t)time_now_ns();
	client_req_begin(c, PROTO_OP_PING);
	int rc = client_req_send(c, proto_put_u32(&c->tx, nonce));
	uint32_t echo = 0;
	if (rc == 0)
		rc = client_rx_u32(c, &echo, client_op_deadline(0));
	if (rc < 0)
		return rc;
	if (echo != nonce)
		return client_fail(c, -EPROTO, "store %s: ping answered with a wrong nonce",
				   c->addr);
	return 0;
}
