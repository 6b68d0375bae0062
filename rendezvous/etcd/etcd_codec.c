/*
 * etcd_codec.c - base64, the gateway's request bodies, and the line framing
 * of its streams. Pure: no I/O.
 */
#include "etcd_codec.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* ---- base64 (RFC 4648 section 4, padded) ---- */

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t etcd_b64_len(size_t n)
{
	return (n + 2) / 3 * 4;
}

void etcd_b64_encode(const void *src, size_t n, char *dst)
{
	const unsigned char *s = src;
	size_t i = 0;
	for (; i + 3 <= n; i += 3) {
		uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
		*dst++ = b64_alphabet[v >> 18];
		*dst++ = b64_alphabet[(v >> 12) & 63];
		*dst++ = b64_alphabet[(v >> 6) & 63];
		*dst++ = b64_alphabet[v & 63];
	}
	if (n - i == 1) {
		uint32_t v = (uint32_t)s[i] << 16;
		*dst++ = b64_alphabet[v >> 18];
		*dst++ = b64_alphabet[(v >> 12) & 63];
		*dst++ = '=';
		*dst++ = '=';
	} else if (n - i == 2) {
		uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8;
		*dst++ = b64_alphabet[v >> 18];
		*dst++ = b64_alphabet[(v >> 12) & 63];
		*dst++ = b64_alphabet[(v >> 6) & 63];
		*dst++ = '=';
	}
	*dst = '\0';
}

/* The 6-bit value of c, or -1. */
static int b64_value(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

/* Decodes one 4-character group; pad is the number of '=' it may end with
 * (only the last group may have any). Returns the bytes written or -EINVAL. */
static int b64_group(const char *g, unsigned char *out, int last)
{
	int pad = (g[3] == '=') + (g[3] == '=' && g[2] == '=');
	uint32_t v = 0;
	if (pad && !last)
		return -EINVAL;
	for (int k = 0; k < 4 - pad; k++) {
		int d = b64_value((unsigned char)g[k]);
		if (d < 0)
			return -EINVAL;
		v = v << 6 | (uint32_t)d;
	}
	v <<= 6 * pad;
	/* The bits the padding drops must be zero (canonical encoding). */
	if ((pad == 1 && (v & 0xff)) || (pad == 2 && (v & 0xffff)))
		return -EINVAL;
	out[0] = (unsigned char)(v >> 16);
	if (pad < 2)
		out[1] = (unsigned char)(v >> 8);
	if (pad < 1)
		out[2] = (unsigned char)v;
	return 3 - pad;
}

int etcd_b64_decode(const char *src, size_t n, void *dst, size_t *out_len)
{
	unsigned char *d = dst;
	size_t o = 0;
	if (n % 4)
		return -EINVAL;
	for (size_t i = 0; i < n; i += 4) {
		int w = b64_group(src + i, d + o, i + 4 == n);
		if (w < 0)
			return w;
		o += (size_t)w;
	}
	*out_len = o;
	return 0;
}

/* ---- JSON helpers ---- */

/* A JSON string holding the base64 of p[0..n). */
static json_t *json_b64(const void *p, size_t n)
{
	char *s = malloc(etcd_b64_len(n) + 1);
	json_t *j;
	if (!s)
		return NULL;
	etcd_b64_encode(p, n, s);
	j = json_string(s);
	free(s);
	return j;
}

/* int64 fields go as strings (proto3 JSON mapping). */
static json_t *json_i64(int64_t v)
{
	char s[24];
	snprintf(s, sizeof(s), "%" PRId64, v);
	return json_string(s);
}

/* Takes ownership of o; NULL when o is NULL or dumping fails. */
static char *dump_free(json_t *o)
{
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	return s;
}

/* Sets obj[name] = v (stealing v); a NULL v marks obj as failed by
 * returning -1, so one check at the end covers every field. */
static int set_new(json_t *obj, const char *name, json_t *v)
{
	return obj && v ? json_object_set_new(obj, name, v) : (json_decref(v), -1);
}

static json_t *obj_key(const char *key)
{
	json_t *o = json_object();
	if (set_new(o, "key", json_b64(key, strlen(key))) < 0) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* {"key", "value", "lease"} of a put, alone or inside a transaction. */
static json_t *put_obj(const char *key, const void *value, size_t len, int64_t lease)
{
	json_t *o = obj_key(key);
	int rc = set_new(o, "value", json_b64(value, len));
	if (lease)
		rc |= set_new(o, "lease", json_i64(lease));
	if (rc < 0) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* Adds range_end for a prefix of key. */
static int set_prefix_end(json_t *o, const char *key)
{
	size_t n = strlen(key);
	char *end = malloc(n + 1);
	int rc;
	if (!end)
		return -1;
	n = etcd_prefix_end(key, n, end);
	rc = set_new(o, "range_end", json_b64(end, n));
	free(end);
	return rc;
}

size_t etcd_prefix_end(const char *prefix, size_t plen, char *end)
{
	for (size_t i = plen; i-- > 0;) {
		if ((unsigned char)prefix[i] != 0xff) {
			memcpy(end, prefix, i);
			end[i] = (char)((unsigned char)prefix[i] + 1);
			return i + 1;
		}
	}
	end[0] = '\0';
	return 1;
}

/* ---- requests ---- */

char *etcd_req_put(const char *key, const void *value, size_t len, int64_t lease)
{
	return dump_free(put_obj(key, value, len, lease));
}

char *etcd_req_range(const char *key, bool prefix)
{
	json_t *o = obj_key(key);
	if (o && prefix && set_prefix_end(o, key) < 0) {
		json_decref(o);
		return NULL;
	}
	return dump_free(o);
}

char *etcd_req_delete(const char *key)
{
	return dump_free(obj_key(key));
}

char *etcd_req_count(const char *key)
{
	json_t *o = obj_key(key);
	if (set_new(o, "count_only", json_true()) < 0) {
		json_decref(o);
		return NULL;
	}
	return dump_free(o);
}

/* The compare clause of a compare-and-set. */
static json_t *cmp_obj(const char *key, const struct etcd_cmp *cmp)
{
	json_t *o = obj_key(key);
	int rc = set_new(o, "result", json_string("EQUAL"));
	switch (cmp->kind) {
	case ETCD_CMP_ABSENT:
		rc |= set_new(o, "target", json_string("CREATE"));
		rc |= set_new(o, "create_revision", json_i64(0));
		break;
	case ETCD_CMP_MOD_REVISION:
		rc |= set_new(o, "target", json_string("MOD"));
		rc |= set_new(o, "mod_revision", json_i64(cmp->mod_revision));
		break;
	case ETCD_CMP_VALUE:
		rc |= set_new(o, "target", json_string("VALUE"));
		rc |= set_new(o, "value", json_b64(cmp->value, cmp->value_len));
		break;
	default:
		rc = -1;
	}
	if (rc < 0) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* [{name: inner}], stealing inner. */
static json_t *one_op(const char *name, json_t *inner)
{
	json_t *op = json_object();
	json_t *arr = json_array();
	if (set_new(op, name, inner) < 0 || !arr || json_array_append_new(arr, op) < 0) {
		json_decref(op);
		json_decref(arr);
		return NULL;
	}
	return arr;
}

char *etcd_req_cas(const char *key, const struct etcd_cmp *cmp, const void *value, size_t len,
		   int64_t lease)
{
	json_t *o = json_object();
	json_t *compare = json_array();
	int rc = compare ? json_array_append_new(compare, cmp_obj(key, cmp)) : -1;
	rc |= set_new(o, "compare", compare);
	rc |= set_new(o, "success", one_op("request_put", put_obj(key, value, len, lease)));
	rc |= set_new(o, "failure", one_op("request_range", obj_key(key)));
	if (rc < 0) {
		json_decref(o);
		return NULL;
	}
	return dump_free(o);
}

char *etcd_req_lease_grant(int64_t ttl_s)
{
	json_t *o = json_object();
	if (set_new(o, "TTL", json_i64(ttl_s)) < 0) {
		json_decref(o);
		return NULL;
	}
	return dump_free(o);
}

char *etcd_req_lease_id(int64_t id)
{
	json_t *o = json_object();
	if (set_new(o, "ID", json_i64(id)) < 0) {
		json_decref(o);
		return NULL;
	}
	return dump_free(o);
}

char *etcd_req_auth(const char *user, const char *password)
{
	json_t *o = json_object();
	int rc = set_new(o, "name", json_string(user));
	rc |= set_new(o, "password", json_string(password));
	if (rc < 0) {
		json_decref(o);
		return NULL;
	}
	return dump_free(o);
}

char *etcd_req_watch(const char *key, bool prefix, int64_t start_revision)
{
	json_t *cr = obj_key(key);
	json_t *o = json_object();
	int rc = cr ? 0 : -1;
	if (!rc && prefix)
		rc = set_prefix_end(cr, key);
	if (!rc && start_revision > 0)
		rc = set_new(cr, "start_revision", json_i64(start_revision));
	/* Progress notifications (where the server sends them) move the resume
	 * revision forward on a quiet key. */
	rc |= set_new(cr, "progress_notify", json_true());
	rc |= set_new(o, "create_request", cr);
	if (rc < 0) {
		json_decref(o);
		return NULL;
	}
	return dump_free(o);
}

/* ---- line framing ---- */

int etcd_linebuf_add(struct etcd_linebuf *b, const void *p, size_t n)
{
	if (!n)
		return 0;
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		char *d;
		while (cap < b->len + n)
			cap *= 2;
		d = realloc(b->data, cap);
		if (!d)
			return -ENOMEM;
		b->data = d;
		b->cap = cap;
	}
	memcpy(b->data + b->len, p, n);
	b->len += n;
	/* A line still without its end, longer than allowed. */
	if (!memchr(b->data + b->scan, '\n', b->len - b->scan) && b->len > b->max)
		return -EMSGSIZE;
	return 0;
}

static void linebuf_drop(struct etcd_linebuf *b, size_t n)
{
	memmove(b->data, b->data + n, b->len - n);
	b->len -= n;
	b->scan = b->scan > n ? b->scan - n : 0;
}

size_t etcd_linebuf_peek(struct etcd_linebuf *b, const char **line)
{
	*line = NULL;
	if (b->taken)
		etcd_linebuf_pop(b);
	for (;;) {
		char *nl =
		    b->len > b->scan ? memchr(b->data + b->scan, '\n', b->len - b->scan) : NULL;
		size_t n;
		if (!nl) {
			b->scan = b->len;
			return 0;
		}
		n = (size_t)(nl - b->data);
		b->taken = n + 1;
		if (n && b->data[n - 1] == '\r')
			n--;
		if (n) {
			*line = b->data;
			return n;
		}
		etcd_linebuf_pop(b);
	}
}

void etcd_linebuf_pop(struct etcd_linebuf *b)
{
	linebuf_drop(b, b->taken);
	b->taken = 0;
	b->scan = 0;
}

void etcd_linebuf_release(struct etcd_linebuf *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}
