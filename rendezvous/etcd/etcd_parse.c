/*
 * etcd_parse.c - the gateway's answers and watch-stream messages, parsed
 * with jansson. Pure: no I/O.
 *
 * The gateway follows the proto3 JSON mapping: 64-bit integers are strings,
 * bytes are base64, and fields at their default value (0, "", false, the
 * first enum value) are left out.
 */
#include "etcd_codec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

static json_t *load(const char *body, size_t len)
{
	json_t *j = json_loadb(body, len, 0, NULL);
	if (j && !json_is_object(j)) {
		json_decref(j);
		return NULL;
	}
	return j;
}

/* An int64 field, given as a string or a number; absent means 0. */
static int get_i64(const json_t *o, const char *name, int64_t *v)
{
	const json_t *f = json_object_get(o, name);
	char *end;
	*v = 0;
	if (!f)
		return 0;
	if (json_is_integer(f)) {
		*v = json_integer_value(f);
		return 0;
	}
	if (!json_is_string(f) || !json_string_length(f))
		return -EPROTO;
	errno = 0;
	*v = strtoll(json_string_value(f), &end, 10);
	return errno || *end ? -EPROTO : 0;
}

/* A bytes field, decoded into a malloc'ed NUL-terminated buffer; absent
 * means empty (an empty buffer all the same, so callers need no NULL case). */
static int get_bytes(const json_t *o, const char *name, void **out, size_t *len)
{
	const json_t *f = json_object_get(o, name);
	const char *s = f ? json_string_value(f) : "";
	size_t n = f ? json_string_length(f) : 0;
	char *buf;
	int rc;
	*out = NULL;
	*len = 0;
	if (!s)
		return -EPROTO;
	buf = malloc(n / 4 * 3 + 1);
	if (!buf)
		return -ENOMEM;
	rc = etcd_b64_decode(s, n, buf, len);
	if (rc < 0) {
		free(buf);
		return -EPROTO;
	}
	buf[*len] = '\0';
	*out = buf;
	return 0;
}

static int header_revision(const json_t *o, int64_t *revision)
{
	const json_t *h = json_object_get(o, "header");
	if (!json_is_object(h))
		return -EPROTO;
	return get_i64(h, "revision", revision);
}

void etcd_kv_release(struct etcd_kv *kv)
{
	if (!kv)
		return;
	free(kv->key);
	free(kv->value);
	memset(kv, 0, sizeof(*kv));
}

void etcd_kvs_free(struct etcd_kv *kvs, size_t n)
{
	for (size_t i = 0; kvs && i < n; i++)
		etcd_kv_release(&kvs[i]);
	free(kvs);
}

static int parse_kv(const json_t *o, struct etcd_kv *kv)
{
	size_t klen;
	int rc = json_is_object(o) ? 0 : -EPROTO;
	memset(kv, 0, sizeof(*kv));
	if (!rc && !json_object_get(o, "key"))
		rc = -EPROTO;
	if (!rc)
		rc = get_bytes(o, "key", (void **)&kv->key, &klen);
	if (!rc)
		rc = get_bytes(o, "value", &kv->value, &kv->value_len);
	if (!rc)
		rc = get_i64(o, "create_revision", &kv->create_revision);
	if (!rc)
		rc = get_i64(o, "mod_revision", &kv->mod_revision);
	if (!rc)
		rc = get_i64(o, "version", &kv->version);
	if (!rc)
		rc = get_i64(o, "lease", &kv->lease);
	if (rc < 0)
		etcd_kv_release(kv);
	return rc;
}

/* The "kvs" array of a range answer (absent: none). */
static int parse_kvs(const json_t *o, struct etcd_kv **kvs, size_t *n)
{
	const json_t *arr = json_object_get(o, "kvs");
	size_t count = arr ? json_array_size(arr) : 0;
	struct etcd_kv *v;
	*kvs = NULL;
	*n = 0;
	if (arr && !json_is_array(arr))
		return -EPROTO;
	if (!count)
		return 0;
	v = calloc(count, sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < count; i++) {
		int rc = parse_kv(json_array_get(arr, i), &v[i]);
		if (rc < 0) {
			etcd_kvs_free(v, i);
			return rc;
		}
	}
	*kvs = v;
	*n = count;
	return 0;
}

static void copy_msg(char *msg, size_t msglen, const char *s)
{
	if (msglen)
		snprintf(msg, msglen, "%s", s ? s : "");
}

bool etcd_parse_error(const char *body, size_t len, int *code, char *msg, size_t msglen)
{
	json_t *o = load(body, len);
	const json_t *e = o ? json_object_get(o, "error") : NULL;
	int64_t c = 0;
	bool is_error = e != NULL;
	if (json_is_object(e)) {
		/* A stream error: {"error": {"grpc_code", "http_code", "message"}}. */
		is_error = get_i64(e, "grpc_code", &c) == 0;
		copy_msg(msg, msglen, json_string_value(json_object_get(e, "message")));
	} else if (e) {
		const char *m = json_string_value(json_object_get(o, "message"));
		is_error = get_i64(o, "code", &c) == 0;
		copy_msg(msg, msglen, m ? m : json_string_value(e));
	}
	*code = (int)c;
	json_decref(o);
	return is_error;
}

int etcd_grpc_errno(int code, const char *msg)
{
	/* An auth-enabled cluster answers a request without a token with
	 * InvalidArgument "user name is empty". */
	if (msg && (strstr(msg, "user name is empty") || strstr(msg, "authentication failed")))
		return -EACCES;
	if (code == 2 && msg && strstr(msg, "deadline exceeded"))
		return -ETIMEDOUT;
	switch (code) {
	case 1:
		return -ECANCELED;
	case 3:
	case 9:
		return -EINVAL;
	case 4:
		return -ETIMEDOUT;
	case 5:
		return -ENOENT;
	case 6:
		return -EEXIST;
	case 7:
	case 16:
		return -EACCES;
	case 8:
		return -EBUSY;
	case 10:
	case 14:
		return -EAGAIN;
	case 11:
		return -ESTALE;
	case 12:
		return -EOPNOTSUPP;
	default:
		return -EIO;
	}
}

bool etcd_grpc_retryable(int code, const char *msg)
{
	/* DeadlineExceeded, ResourceExhausted, Aborted, Unavailable; and the
	 * gateway's own timeout, which comes as Unknown. */
	return code == 4 || code == 8 || code == 10 || code == 14 ||
	       (code == 2 && msg && strstr(msg, "deadline exceeded"));
}

int etcd_parse_revision(const char *body, size_t len, int64_t *revision)
{
	json_t *o = load(body, len);
	int rc = o ? header_revision(o, revision) : -EPROTO;
	json_decref(o);
	return rc;
}

int etcd_parse_range(const char *body, size_t len, struct etcd_kv **kvs, size_t *n,
		     int64_t *revision)
{
	json_t *o = load(body, len);
	int rc = o ? header_revision(o, revision) : -EPROTO;
	*kvs = NULL;
	*n = 0;
	if (!rc)
		rc = parse_kvs(o, kvs, n);
	json_decref(o);
	return rc;
}

int etcd_parse_deleted(const char *body, size_t len, int64_t *deleted)
{
	json_t *o = load(body, len);
	int rc = o ? get_i64(o, "deleted", deleted) : -EPROTO;
	json_decref(o);
	return rc;
}

/* The failure branch's range answer: responses[0].response_range. */
static int cas_current(const json_t *o, struct etcd_kv *cur)
{
	const json_t *r =
	    json_object_get(json_array_get(json_object_get(o, "responses"), 0), "response_range");
	struct etcd_kv *kvs;
	size_t n;
	int rc = json_is_object(r) ? parse_kvs(r, &kvs, &n) : -EPROTO;
	if (rc < 0)
		return rc;
	if (n)
		*cur = kvs[0];
	for (size_t i = 1; i < n; i++)
		etcd_kv_release(&kvs[i]);
	free(kvs);
	return 0;
}

int etcd_parse_cas(const char *body, size_t len, bool *succeeded, int64_t *revision,
		   struct etcd_kv *cur)
{
	json_t *o = load(body, len);
	int rc = o ? header_revision(o, revision) : -EPROTO;
	memset(cur, 0, sizeof(*cur));
	*succeeded = o && json_is_true(json_object_get(o, "succeeded"));
	if (!rc && !*succeeded)
		rc = cas_current(o, cur);
	json_decref(o);
	return rc;
}

int etcd_parse_lease_grant(const char *body, size_t len, int64_t *id, int64_t *ttl)
{
	json_t *o = load(body, len);
	int rc = o ? get_i64(o, "ID", id) : -EPROTO;
	if (!rc)
		rc = get_i64(o, "TTL", ttl);
	if (!rc && *id == 0)
		rc = -EPROTO;
	json_decref(o);
	return rc;
}

int etcd_parse_keepalive(const char *body, size_t len, int64_t *ttl)
{
	json_t *o = load(body, len);
	const json_t *r = o ? json_object_get(o, "result") : NULL;
	int rc = json_is_object(r) ? get_i64(r, "TTL", ttl) : -EPROTO;
	json_decref(o);
	return rc;
}

int etcd_parse_auth(const char *body, size_t len, char **token)
{
	json_t *o = load(body, len);
	const char *t = o ? json_string_value(json_object_get(o, "token")) : NULL;
	int rc = t && *t ? 0 : -EPROTO;
	*token = NULL;
	if (!rc && !(*token = strdup(t)))
		rc = -ENOMEM;
	json_decref(o);
	return rc;
}

/* ---- the watch stream ---- */

void etcd_event_release(struct etcd_event *ev)
{
	if (ev)
		etcd_kv_release(&ev->kv);
}

void etcd_watch_msg_release(struct etcd_watch_msg *m)
{
	for (size_t i = 0; i < m->nevents; i++)
		etcd_event_release(&m->events[i]);
	free(m->events);
	m->events = NULL;
	m->nevents = 0;
}

static int parse_event(const json_t *o, struct etcd_event *ev)
{
	const char *type = json_string_value(json_object_get(o, "type"));
	memset(ev, 0, sizeof(*ev));
	if (!json_is_object(o))
		return -EPROTO;
	if (!type || !strcmp(type, "PUT"))
		ev->type = ETCD_EVENT_PUT;
	else if (!strcmp(type, "DELETE"))
		ev->type = ETCD_EVENT_DELETE;
	else
		return -EPROTO;
	return parse_kv(json_object_get(o, "kv"), &ev->kv);
}

static int parse_events(const json_t *r, struct etcd_watch_msg *m)
{
	const json_t *arr = json_object_get(r, "events");
	size_t count = arr ? json_array_size(arr) : 0;
	if (arr && !json_is_array(arr))
		return -EPROTO;
	if (!count)
		return 0;
	m->events = calloc(count, sizeof(*m->events));
	if (!m->events)
		return -ENOMEM;
	for (size_t i = 0; i < count; i++) {
		int rc = parse_event(json_array_get(arr, i), &m->events[i]);
		if (rc < 0)
			return rc;
		m->nevents = i + 1;
	}
	return 0;
}

static int parse_result(const json_t *r, struct etcd_watch_msg *m)
{
	int rc = json_is_object(r) ? header_revision(r, &m->revision) : -EPROTO;
	if (!rc)
		rc = get_i64(r, "compact_revision", &m->compact_revision);
	if (rc < 0)
		return rc;
	m->created = json_is_true(json_object_get(r, "created"));
	m->canceled = json_is_true(json_object_get(r, "canceled"));
	copy_msg(m->reason, sizeof(m->reason),
		 json_string_value(json_object_get(r, "cancel_reason")));
	return parse_events(r, m);
}

int etcd_parse_watch_msg(const char *line, size_t len, struct etcd_watch_msg *m)
{
	json_t *o = load(line, len);
	int rc = o ? 0 : -EPROTO;
	memset(m, 0, sizeof(*m));
	if (!rc && json_object_get(o, "error")) {
		int code;
		if (!etcd_parse_error(line, len, &code, m->reason, sizeof(m->reason)))
			rc = -EPROTO;
		m->canceled = true;
		m->error_code = code ? code : 2;
	} else if (!rc) {
		rc = parse_result(json_object_get(o, "result"), m);
	}
	if (rc < 0)
		etcd_watch_msg_release(m);
	json_decref(o);
	return rc;
}
