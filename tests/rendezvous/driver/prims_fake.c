/*
 * prims_fake.c - the in-memory store behind the primitives (prims_fake.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prims_fake.h"

struct fentry {
	char *key;
	uint8_t *val;
	size_t len;
	struct fbe *owner; /* session-bound to this backend, or NULL */
	struct fentry *next;
};

struct fwatch {
	struct fbe *be;
	uint64_t id;
	char *key;
	struct fwatch *next;
};

enum fkind { F_CONNECTED, F_GOT, F_CASED, F_ADDED, F_DONE, F_EVENT };

/* One answer or event on its way to a sink. */
struct fmsg {
	struct fbe *be;
	enum fkind kind;
	uint64_t tag;
	bool swapped;
	int64_t added;
	struct rdzv_value *vals;
	size_t nvals;
	struct fmsg *next;
};

struct fbe {
	const struct rdzv_prims_sink *sink;
	void *drv;
	char addr[64];
	struct fbe *next;
};

static struct {
	uv_idle_t pump;
	struct fentry *entries;
	struct fwatch *watches;
	struct fbe *bes;
	struct fmsg *head, *tail;
	uint64_t requests;
} st;

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);

	if (!p)
		abort();
	return p;
}

static struct byteview copy_bytes(const void *p, size_t n)
{
	uint8_t *c = xcalloc(n + 1, 1);

	memcpy(c, p, n);
	return (struct byteview){c, n};
}

static char *key_of(struct byteview k)
{
	return (char *)copy_bytes(k.data, k.len).data;
}

static struct fentry *lookup(const char *key)
{
	for (struct fentry *e = st.entries; e; e = e->next)
		if (!strcmp(e->key, key))
			return e;
	return NULL;
}

static struct rdzv_value value_of(const struct fentry *e)
{
	if (!e)
		return (struct rdzv_value){false, {NULL, 0}};
	return (struct rdzv_value){true, copy_bytes(e->val, e->len)};
}

static void pump_cb(uv_idle_t *h);

static struct fmsg *push(struct fbe *be, enum fkind kind, uint64_t tag, size_t nvals)
{
	struct fmsg *m = xcalloc(1, sizeof(*m));

	m->be = be;
	m->kind = kind;
	m->tag = tag;
	m->nvals = nvals;
	m->vals = xcalloc(nvals, sizeof(*m->vals));
	if (st.tail)
		st.tail->next = m;
	else
		st.head = m;
	st.tail = m;
	uv_idle_start(&st.pump, pump_cb);
	return m;
}

static void msg_free(struct fmsg *m)
{
	for (size_t i = 0; i < m->nvals; i++)
		free((void *)m->vals[i].bytes.data);
	free(m->vals);
	free(m);
}

static void notify(const char *key, const struct fentry *e)
{
	for (struct fwatch *w = st.watches; w; w = w->next)
		if (!strcmp(w->key, key))
			push(w->be, F_EVENT, w->id, 1)->vals[0] = value_of(e);
}

static void put(const char *key, const void *v, size_t len, struct fbe *owner)
{
	struct fentry *e = lookup(key);

	if (!e) {
		e = xcalloc(1, sizeof(*e));
		e->key = strdup(key);
		e->next = st.entries;
		st.entries = e;
	}
	free(e->val);
	e->val = (uint8_t *)copy_bytes(v, len).data;
	e->len = len;
	e->owner = owner;
	notify(key, e);
}

static void del(struct fentry **at)
{
	struct fentry *e = *at;

	*at = e->next;
	notify(e->key, NULL);
	free(e->key);
	free(e->val);
	free(e);
}

/* Delivers what is queued now; what the sinks queue meanwhile waits for
 * the next turn of the loop. */
static void pump_cb(uv_idle_t *h)
{
	struct fmsg *last = st.tail, *m;
	bool more = true;

	while (more && (m = st.head)) {
		more = m != last;
		st.head = m->next;
		if (!st.head)
			st.tail = NULL;
		const struct rdzv_prims_sink *s = m->be->sink;
		void *drv = m->be->drv;

		switch (m->kind) {
		case F_CONNECTED:
			s->connected(drv, 0, NULL);
			break;
		case F_GOT:
			s->got(drv, m->tag, 0, m->vals, m->nvals);
			break;
		case F_CASED:
			s->cased(drv, m->tag, 0, m->swapped, m->vals[0]);
			break;
		case F_ADDED:
			s->added(drv, m->tag, 0, m->added);
			break;
		case F_DONE:
			s->done(drv, m->tag, 0);
			break;
		case F_EVENT:
			s->event(drv, m->tag, 0, m->vals[0]);
			break;
		}
		msg_free(m);
	}
	if (!st.head)
		uv_idle_stop(h);
}

static int f_open(const struct rdzv_prims_config *cfg, const struct rdzv_prims_sink *sink,
		  void *drv, void **out)
{
	struct fbe *be = xcalloc(1, sizeof(*be));

	be->sink = sink;
	be->drv = drv;
	snprintf(be->addr, sizeof(be->addr), "%s", cfg->bind_addr ? cfg->bind_addr : "127.0.0.1");
	be->next = st.bes;
	st.bes = be;
	push(be, F_CONNECTED, 0, 0);
	*out = be;
	return 0;
}

static int f_local_addr(void *p, char *buf, size_t len)
{
	struct fbe *be = p;

	snprintf(buf, len, "%s", be->addr);
	return 0;
}

static const char *f_peer(void *p)
{
	return "fake:1";
}

static int64_t f_death_delay_ms(void *p)
{
	return PRIMS_FAKE_DEATH_DELAY_MS;
}

static int f_get(void *p, uint64_t tag, const struct byteview *keys, size_t n)
{
	struct fmsg *m = push(p, F_GOT, tag, n);

	st.requests++;
	for (size_t i = 0; i < n; i++) {
		char *k = key_of(keys[i]);

		m->vals[i] = value_of(lookup(k));
		free(k);
	}
	return 0;
}

/* TCPStore's compare_set: a missing key is created only when `expected` is
 * empty, and otherwise answered with `expected` itself. */
static int f_cas(void *p, uint64_t tag, struct byteview key, bool has_expected,
		 struct byteview expected, struct byteview value)
{
	char *k = key_of(key);
	struct fentry *e = lookup(k);
	struct byteview exp = has_expected ? expected : (struct byteview){(const uint8_t *)"", 0};
	struct fmsg *m = push(p, F_CASED, tag, 1);
	struct byteview after;

	st.requests++;
	if (!e && exp.len == 0)
		put(k, value.data, value.len, NULL);
	else if (e && e->len == exp.len && !memcmp(e->val, exp.data, exp.len))
		put(k, value.data, value.len, NULL);
	e = lookup(k);
	after = e ? (struct byteview){e->val, e->len} : exp;
	m->swapped = after.len == value.len && !memcmp(after.data, value.data, value.len);
	m->vals[0] = (struct rdzv_value){true, copy_bytes(after.data, after.len)};
	free(k);
	return 0;
}

static int f_add(void *p, uint64_t tag, struct byteview key, int64_t delta)
{
	char *k = key_of(key), buf[32];
	struct fentry *e = lookup(k);
	int64_t v = (e ? strtoll((const char *)e->val, NULL, 10) : 0) + delta;
	int n = snprintf(buf, sizeof(buf), "%" PRId64, v);

	st.requests++;
	put(k, buf, (size_t)n, NULL);
	push(p, F_ADDED, tag, 0)->added = v;
	free(k);
	return 0;
}

static int f_set(void *p, uint64_t tag, struct byteview key, struct byteview value, bool session)
{
	char *k = key_of(key);

	st.requests++;
	put(k, value.data, value.len, session ? p : NULL);
	push(p, F_DONE, tag, 0);
	free(k);
	return 0;
}

static int f_watch(void *p, uint64_t id, struct byteview key)
{
	struct fwatch *w = xcalloc(1, sizeof(*w));

	st.requests++;
	w->be = p;
	w->id = id;
	w->key = key_of(key);
	w->next = st.watches;
	st.watches = w;
	push(p, F_EVENT, id, 1)->vals[0] = value_of(lookup(w->key));
	return 0;
}

static void unwatch_where(struct fbe *be, bool all, uint64_t id)
{
	for (struct fwatch **at = &st.watches; *at;) {
		struct fwatch *w = *at;

		if (w->be != be || (!all && w->id != id)) {
			at = &w->next;
			continue;
		}
		*at = w->next;
		free(w->key);
		free(w);
	}
}

static void f_unwatch(void *p, uint64_t id)
{
	unwatch_where(p, false, id);
}

/* The session ends: its keys go (the others' watches hear it), and nothing
 * more reaches its sink. */
static void f_close(void *p)
{
	struct fbe *be = p;

	if (!be)
		return;
	unwatch_where(be, true, 0);
	for (struct fmsg **at = &st.head, *prev = NULL; *at;) {
		struct fmsg *m = *at;

		if (m->be != be) {
			prev = m;
			at = &m->next;
			continue;
		}
		*at = m->next;
		if (st.tail == m)
			st.tail = prev;
		msg_free(m);
	}
	for (struct fentry **at = &st.entries; *at;)
		if ((*at)->owner == be)
			del(at);
		else
			at = &(*at)->next;
	for (struct fbe **at = &st.bes; *at; at = &(*at)->next)
		if (*at == be) {
			*at = be->next;
			break;
		}
	free(be);
}

const struct rdzv_prims_ops prims_fake = {
    .name = "fake",
    .open = f_open,
    .local_addr = f_local_addr,
    .peer = f_peer,
    .death_delay_ms = f_death_delay_ms,
    .get = f_get,
    .cas = f_cas,
    .add = f_add,
    .set = f_set,
    .watch = f_watch,
    .unwatch = f_unwatch,
    .close = f_close,
};

void prims_fake_init(uv_loop_t *loop)
{
	memset(&st, 0, sizeof(st));
	uv_idle_init(loop, &st.pump);
}

void prims_fake_release(void)
{
	while (st.entries)
		del(&st.entries);
	while (st.head) {
		struct fmsg *m = st.head;

		st.head = m->next;
		msg_free(m);
	}
	st.tail = NULL;
	uv_close((uv_handle_t *)&st.pump, NULL);
}

size_t prims_fake_sessions(void)
{
	size_t n = 0;

	for (struct fbe *be = st.bes; be; be = be->next)
		n++;
	return n;
}

size_t prims_fake_keys(void)
{
	size_t n = 0;

	for (struct fentry *e = st.entries; e; e = e->next)
		n++;
	return n;
}

uint64_t prims_fake_requests(void)
{
	return st.requests;
}
