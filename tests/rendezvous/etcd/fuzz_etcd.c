/*
 * fuzz_etcd.c - libFuzzer target over what etcd's JSON gateway answers
 * (rendezvous/etcd/etcd_codec.h): the parsers of unary answers (range,
 * compare-and-set, delete, lease grant and keep-alive, authenticate, the
 * header revision, errors and their errno), the watch stream (bytes in
 * chunks through the line buffer, each line a watch message) and base64.
 *
 * The input's first byte picks the parser; the rest is the body as received
 * (not NUL-terminated: ASan sees any read past it). For the watch stream the
 * chunk sizes come from the first byte too. Invariants: no crash, leak or
 * undefined behaviour; what is parsed is well formed (NUL-terminated keys
 * and values of the length given, no events without an array, a message
 * within its buffer); base64 decodes within its bound and what it decoded
 * encodes and decodes back to the same bytes.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_codec.h"

#define FUZZ_LINE_MAX 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_kv(const struct etcd_kv *kv)
{
	if (!kv->key || (kv->value_len && !kv->value) ||
	    (kv->value && ((const char *)kv->value)[kv->value_len] != '\0'))
		abort();
	(void)strlen(kv->key);
}

static void fuzz_range(const char *body, size_t len)
{
	struct etcd_kv *kvs = NULL;
	size_t n = 0;
	int64_t rev;
	if (etcd_parse_range(body, len, &kvs, &n, &rev) < 0)
		return;
	if ((n == 0) != (kvs == NULL))
		abort();
	for (size_t i = 0; i < n; i++)
		check_kv(&kvs[i]);
	etcd_kvs_free(kvs, n);
}

static void fuzz_cas(const char *body, size_t len)
{
	struct etcd_kv cur;
	bool succeeded;
	int64_t rev;
	if (etcd_parse_cas(body, len, &succeeded, &rev, &cur) < 0)
		return;
	if (cur.key)
		check_kv(&cur);
	etcd_kv_release(&cur);
}

static void fuzz_unary(uint8_t mode, const char *body, size_t len)
{
	int64_t a, b;
	char *token = NULL, msg[128];
	int code = 0;
	switch (mode) {
	case 2:
		etcd_parse_deleted(body, len, &a);
		break;
	case 3:
		etcd_parse_lease_grant(body, len, &a, &b);
		break;
	case 4:
		etcd_parse_keepalive(body, len, &a);
		break;
	case 5:
		if (etcd_parse_auth(body, len, &token) == 0 && (!token || !strlen(token)))
			abort();
		free(token);
		break;
	case 6:
		etcd_parse_revision(body, len, &a);
		break;
	default:
		if (etcd_parse_error(body, len, &code, msg, sizeof(msg))) {
			if (strnlen(msg, sizeof(msg)) == sizeof(msg))
				abort();
			if (etcd_grpc_errno(code, msg) >= 0)
				abort();
			etcd_grpc_retryable(code, msg);
		}
		break;
	}
}

static void fuzz_watch_line(const char *line, size_t len)
{
	struct etcd_watch_msg m;
	if (etcd_parse_watch_msg(line, len, &m) < 0)
		return;
	if ((m.nevents == 0) != (m.events == NULL) ||
	    strnlen(m.reason, sizeof(m.reason)) == sizeof(m.reason))
		abort();
	for (size_t i = 0; i < m.nevents; i++)
		check_kv(&m.events[i].kv);
	etcd_watch_msg_release(&m);
}

/* The stream in chunks of 1 to 16 bytes (from `seed`), lines parsed as they
 * complete, as the watch thread does. */
static void fuzz_stream(uint8_t seed, const char *p, size_t len)
{
	struct etcd_linebuf b;
	memset(&b, 0, sizeof(b));
	b.max = FUZZ_LINE_MAX;
	for (size_t off = 0, k = 0; off < len; k++) {
		size_t chunk = 1 + ((seed + k * 7) % 16);
		if (chunk > len - off)
			chunk = len - off;
		if (etcd_linebuf_add(&b, p + off, chunk) < 0)
			break;
		off += chunk;
		const char *line;
		size_t n;
		while ((n = etcd_linebuf_peek(&b, &line)) > 0) {
			if (n > FUZZ_LINE_MAX || memchr(line, '\n', n))
				abort();
			fuzz_watch_line(line, n);
			etcd_linebuf_pop(&b);
		}
	}
	etcd_linebuf_release(&b);
}

static void fuzz_b64(const char *src, size_t n)
{
	uint8_t *dst = malloc(n / 4 * 3 + 1), *back = NULL;
	char *enc = NULL;
	size_t len = 0, len2 = 0;
	if (!dst)
		abort();
	if (etcd_b64_decode(src, n, dst, &len) == 0) {
		if (len > n / 4 * 3)
			abort();
		enc = malloc(etcd_b64_len(len) + 1);
		back = malloc(len + 1);
		if (!enc || !back)
			abort();
		etcd_b64_encode(dst, len, enc);
		if (etcd_b64_decode(enc, strlen(enc), back, &len2) < 0 || len2 != len ||
		    memcmp(back, dst, len) != 0)
			abort();
	}
	free(enc);
	free(back);
	free(dst);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	/* A copy of exactly the body's size, so a read past it is caught. */
	size_t len = size - 1;
	char *body = malloc(len ? len : 1);
	if (!body)
		return 0;
	memcpy(body, data + 1, len);
	uint8_t mode = data[0] % 10;
	if (mode == 0)
		fuzz_range(body, len);
	else if (mode == 1)
		fuzz_cas(body, len);
	else if (mode == 8)
		fuzz_stream(data[0], body, len);
	else if (mode == 9)
		fuzz_b64(body, len);
	else
		fuzz_unary(mode, body, len);
	free(body);
	return 0;
}
