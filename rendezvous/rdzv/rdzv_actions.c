/*
 * rdzv_actions.c - the machine's queue of actions: each owns copies of its
 * keys and values, valid until the next entry point frees the ones handed
 * out (rdzv_acts_gc).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_machine_int.h"

static void act_free(struct rdzv_act *a)
{
	free(a->keys);
	free(a->buf);
}

void rdzv_acts_gc(struct rdzv_machine *m)
{
	if (!m->acts_head)
		return;
	for (size_t i = 0; i < m->acts_head; i++)
		act_free(&m->acts[i]);
	memmove(m->acts, m->acts + m->acts_head, (m->acts_len - m->acts_head) * sizeof(*m->acts));
	m->acts_len -= m->acts_head;
	m->acts_head = 0;
}

static struct rdzv_act *act_push(struct rdzv_machine *m, enum rdzv_action_kind kind)
{
	if (m->acts_len == m->acts_cap) {
		size_t cap = m->acts_cap ? 2 * m->acts_cap : 16;
		struct rdzv_act *v = realloc(m->acts, cap * sizeof(*v));
		if (!v)
			return NULL;
		m->acts = v;
		m->acts_cap = cap;
	}
	struct rdzv_act *a = &m->acts[m->acts_len++];
	memset(a, 0, sizeof(*a));
	a->a.kind = kind;
	a->a.at_ms = -1;
	return a;
}

bool rdzv_next_action(struct rdzv_machine *m, struct rdzv_action *out)
{
	if (m->acts_head == m->acts_len)
		return false;
	*out = m->acts[m->acts_head++].a;
	return true;
}

/* Copies key, expected and value into one buffer owned by the action. */
static int act_fill(struct rdzv_act *a, const char *key, const void *e, size_t elen, const void *v,
		    size_t vlen)
{
	size_t klen = key ? strlen(key) : 0;
	a->buf = malloc(klen + elen + vlen + 1);
	if (!a->buf)
		return -ENOMEM;
	memcpy(a->buf, key, klen);
	if (elen)
		memcpy(a->buf + klen, e, elen);
	if (vlen)
		memcpy(a->buf + klen + elen, v, vlen);
	a->buf[klen + elen + vlen] = '\0';
	a->a.key = (struct byteview){a->buf, klen};
	a->a.expected = (struct byteview){a->buf + klen, elen};
	a->a.value = (struct byteview){a->buf + klen + elen, vlen};
	return 0;
}

static int push_req(struct rdzv_machine *m, enum rdzv_action_kind kind, const char *key,
		    const void *e, size_t elen, bool has_e, const void *v, size_t vlen,
		    int64_t delta, uint64_t *id)
{
	struct rdzv_act *a = act_push(m, kind);
	if (!a)
		return -ENOMEM;
	if (act_fill(a, key, e, elen, v, vlen) < 0) {
		m->acts_len--;
		return -ENOMEM;
	}
	a->a.id = m->next_id++;
	a->a.has_expected = has_e;
	a->a.delta = delta;
	if (id)
		*id = a->a.id;
	return 0;
}

int rdzv_push_kv(struct rdzv_machine *m, enum rdzv_action_kind kind, const char *key,
		 const void *value, size_t vlen, uint64_t *id)
{
	return push_req(m, kind, key, NULL, 0, false, value, vlen, 0, id);
}

int rdzv_push_cas(struct rdzv_machine *m, const char *key, const void *expected, size_t elen,
		  bool has_expected, const void *value, size_t vlen, uint64_t *id)
{
	return push_req(m, RDZV_ACT_CAS, key, expected, has_expected ? elen : 0, has_expected,
			value, vlen, 0, id);
}

int rdzv_push_add(struct rdzv_machine *m, const char *key, int64_t delta, uint64_t *id)
{
	return push_req(m, RDZV_ACT_ADD, key, NULL, 0, false, NULL, 0, delta, id);
}

int rdzv_push_simple(struct rdzv_machine *m, enum rdzv_action_kind kind, int64_t at_ms,
		     uint64_t watch, const char *text)
{
	struct rdzv_act *a = act_push(m, kind);
	if (!a)
		return -ENOMEM;
	a->a.at_ms = at_ms;
	a->a.watch = watch;
	if (text) {
		if (!(a->buf = (uint8_t *)strdup(text))) {
			m->acts_len--;
			return -ENOMEM;
		}
		a->a.text = (const char *)a->buf;
	}
	return 0;
}

/* Appends one key to a GET's buffer; offsets stand in for pointers until
 * the buffer stops moving. */
static int get_append(struct rdzv_act *a, size_t *cap, size_t i, const char *key)
{
	size_t kl = strlen(key);
	if (a->buf_len + kl > *cap) {
		size_t ncap = 2 * (a->buf_len + kl);
		uint8_t *b = realloc(a->buf, ncap);
		if (!b)
			return -ENOMEM;
		a->buf = b;
		*cap = ncap;
	}
	memcpy(a->buf + a->buf_len, key, kl);
	a->keys[i] = (struct byteview){(const uint8_t *)(uintptr_t)a->buf_len, kl};
	a->buf_len += kl;
	return 0;
}

int rdzv_push_get(struct rdzv_machine *m, size_t n,
		  void (*fill)(const struct rdzv_machine *, void *, size_t, char *), void *ctx,
		  uint64_t *id)
{
	struct rdzv_act *a = act_push(m, RDZV_ACT_GET);
	char key[RDZV_KEY_MAX];
	size_t cap = n * 48 + 64;
	int rc = 0;
	if (!a)
		return -ENOMEM;
	a->keys = calloc(n ? n : 1, sizeof(*a->keys));
	a->buf = malloc(cap);
	if (!a->keys || !a->buf)
		rc = -ENOMEM;
	for (size_t i = 0; i < n && rc == 0; i++) {
		fill(m, ctx, i, key);
		rc = get_append(a, &cap, i, key);
	}
	if (rc < 0) {
		act_free(a);
		m->acts_len--;
		return rc;
	}
	for (size_t i = 0; i < n; i++)
		a->keys[i].data = a->buf + (uintptr_t)a->keys[i].data;
	a->a.keys = a->keys;
	a->a.nkeys = n;
	a->a.id = m->next_id++;
	*id = a->a.id;
	return 0;
}

static void copy_key(const struct rdzv_machine *m, void *ctx, size_t i, char *key)
{
	snprintf(key, RDZV_KEY_MAX, "%s", (const char *)ctx);
}

int rdzv_push_get1(struct rdzv_machine *m, const char *key, uint64_t *id)
{
	return rdzv_push_get(m, 1, copy_key, (void *)key, id);
}

void rdzv_key(const struct rdzv_machine *m, char *buf, const char *fmt, ...)
{
	va_list ap;
	size_t n = strlen(m->prefix);
	memcpy(buf, m->prefix, n);
	va_start(ap, fmt);
	vsnprintf(buf + n, RDZV_KEY_MAX - n, fmt, ap);
	va_end(ap);
}

void rdzv_unwatch(struct rdzv_machine *m, uint64_t *watch)
{
	if (*watch && rdzv_push_simple(m, RDZV_ACT_UNWATCH, -1, *watch, NULL) == 0)
		*watch = 0;
}

void rdzv_acts_release(struct rdzv_machine *m)
{
	for (size_t i = 0; i < m->acts_len; i++)
		act_free(&m->acts[i]);
	free(m->acts);
	m->acts = NULL;
	m->acts_len = m->acts_head = m->acts_cap = 0;
}
