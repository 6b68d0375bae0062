/*
 * store.c - TCPStore semantics for values: set, get, add, compare-set,
 * delete, append, with byte accounting (waits: store_wait.c; queues:
 * store_queue.c; watches: store_watch.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

int store_new(size_t max_total_bytes, store_wake_fn wake, void *ctx, struct store **out)
{
	struct store *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	uint64_t seed = (uint64_t)(uintptr_t)s * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)&seed;
	if (store_table_init(&s->table, seed) < 0) {
		free(s);
		return -ENOMEM;
	}
	s->max_bytes = max_total_bytes;
	s->wake = wake;
	s->watch = NULL;
	s->ctx = ctx;
	*out = s;
	return 0;
}

bool store_entry_exists(const struct store_entry *e)
{
	return e && (e->present || e->qlen > 0);
}

void store_entry_gc(struct store *s, struct store_entry *e)
{
	if (e->present || e->qlen > 0 || e->waiters || e->watches)
		return;
	store_table_remove(&s->table, e);
	s->bytes -= e->key_len;
	free(e->value);
	free(e);
}

int store_entry_get(struct store *s, struct byteview key, size_t extra, struct store_entry **out)
{
	struct store_entry *e = store_table_find(&s->table, key);
	size_t need = extra + (e ? 0 : key.len);
	if (need > s->max_bytes - s->bytes)
		return -ENOSPC;
	if (!e) {
		e = store_table_insert(&s->table, key);
		if (!e)
			return -ENOMEM;
		s->bytes += key.len;
	}
	*out = e;
	return 0;
}

/* Gives the entry a copy of data as its value (room accounted by the
 * caller). The old value is handed back through *old (the caller frees it
 * after telling watchers). */
static int entry_assign(struct store *s, struct store_entry *e, const void *data, size_t len,
			struct byteview *old)
{
	uint8_t *v = NULL;
	if (len) {
		v = malloc(len);
		if (!v)
			return -ENOMEM;
		memcpy(v, data, len);
	}
	store_entry_unbind(e);
	s->bytes = s->bytes - e->value_len + len;
	old->data = e->value;
	old->len = e->value_len;
	e->value = v;
	e->value_len = len;
	if (!e->present)
		s->num_keys++;
	e->present = true;
	return 0;
}

int store_entry_put(struct store *s, struct byteview key, const void *data, size_t len, bool wake)
{
	struct store_entry *e = store_table_find(&s->table, key);
	size_t old_len = e && e->present ? e->value_len : 0;
	size_t extra = len > old_len ? len - old_len : 0;
	int rc = store_entry_get(s, key, extra, &e);
	if (rc < 0)
		return rc;
	bool was_present = e->present;
	struct byteview old;
	rc = entry_assign(s, e, data, len, &old);
	if (rc < 0) {
		store_entry_gc(s, e);
		return rc;
	}
	if (wake)
		store_entry_wake(s, e, false);
	store_entry_notify(s, e, was_present ? STORE_KEY_UPDATED : STORE_KEY_CREATED, old,
			   (struct byteview){e->value, e->value_len});
	free((void *)old.data);
	return 0;
}

int store_set(struct store *store, struct byteview key, struct byteview value)
{
	return store_entry_put(store, key, value.data, value.len, true);
}

int store_get(const struct store *store, struct byteview key, struct byteview *value)
{
	const struct store_entry *e = store_table_find(&store->table, key);
	if (!e || !e->present)
		return 0;
	value->data = e->value;
	value->len = e->value_len;
	return 1;
}

int store_parse_decimal(const uint8_t *p, size_t len, int64_t *out)
{
	size_t i = 0;
	while (i < len && (p[i] == ' ' || (p[i] >= '\t' && p[i] <= '\r')))
		i++;
	bool neg = false;
	if (i < len && (p[i] == '+' || p[i] == '-'))
		neg = p[i++] == '-';
	if (i >= len || p[i] < '0' || p[i] > '9')
		return -EINVAL;
	uint64_t v = 0;
	uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
	for (; i < len && p[i] >= '0' && p[i] <= '9'; i++) {
		unsigned d = p[i] - '0';
		if (v > (limit - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	*out = neg ? (int64_t)(0 - v) : (int64_t)v;
	return 0;
}

int store_add(struct store *store, struct byteview key, int64_t delta, int64_t *result)
{
	struct byteview cur;
	int64_t v = 0;
	if (store_get(store, key, &cur)) {
		int rc = store_parse_decimal(cur.data, cur.len, &v);
		if (rc < 0)
			return rc;
	}
	/* Past INT64_MAX the sum wraps around, as in torch's servers (which
	 * keep the connection); only a stored text out of range is an error. */
	v = (int64_t)((uint64_t)v + (uint64_t)delta);
	char text[24];
	int n = snprintf(text, sizeof(text), "%" PRId64, v);
	int rc = store_entry_put(store, key, text, (size_t)n, true);
	if (rc == 0)
		*result = v;
	return rc;
}

static bool bytes_equal(struct byteview a, const uint8_t *b, size_t blen)
{
	return a.len == blen && (blen == 0 || memcmp(a.data, b, blen) == 0);
}

int store_compare_set(struct store *store, struct byteview key, struct byteview expected,
		      struct byteview desired, struct byteview *current)
{
	struct store_entry *e = store_table_find(&store->table, key);
	if (!e || !e->present) {
		if (expected.len > 0) {
			*current = expected;
			return 0;
		}
	} else if (!bytes_equal(expected, e->value, e->value_len)) {
		current->data = e->value;
		current->len = e->value_len;
		return 0;
	}
	int rc = store_entry_put(store, key, desired.data, desired.len, true);
	if (rc < 0)
		return rc;
	return store_get(store, key, current) ? 0 : -EIO;
}

int64_t store_num_keys(const struct store *store)
{
	return store->num_keys;
}

int store_delete(struct store *store, struct byteview key)
{
	struct store_entry *e = store_table_find(&store->table, key);
	if (!e || !e->present)
		return 0;
	store_entry_unbind(e);
	uint8_t *old = e->value;
	size_t old_len = e->value_len;
	store->bytes -= e->value_len;
	e->value = NULL;
	e->value_len = 0;
	e->present = false;
	store->num_keys--;
	store_entry_notify(store, e, STORE_KEY_DELETED, (struct byteview){old, old_len},
			   (struct byteview){NULL, 0});
	free(old);
	store_entry_gc(store, e);
	return 1;
}

int store_append(struct store *store, struct byteview key, struct byteview value)
{
	struct store_entry *e = store_table_find(&store->table, key);
	if (!e || !e->present)
		return store_entry_put(store, key, value.data, value.len, true);
	if (value.len > store->max_bytes - store->bytes)
		return -ENOSPC;
	if (value.len == 0) {
		store_entry_wake(store, e, false);
		return 0;
	}
	/* Watchers are told the old value: keep it apart only for them. */
	uint8_t *keep = NULL;
	if (e->watches && e->value_len) {
		keep = malloc(e->value_len);
		if (!keep)
			return -ENOMEM;
		memcpy(keep, e->value, e->value_len);
	}
	uint8_t *v = realloc(e->value, e->value_len + value.len);
	if (!v) {
		free(keep);
		return -ENOMEM;
	}
	memcpy(v + e->value_len, value.data, value.len);
	store_entry_unbind(e);
	struct byteview old = {keep, e->value_len};
	e->value = v;
	e->value_len += value.len;
	store->bytes += value.len;
	store_entry_wake(store, e, false);
	store_entry_notify(store, e, STORE_KEY_UPDATED, old, (struct byteview){v, e->value_len});
	free(keep);
	return 0;
}

int store_foreach_key(const struct store *store, store_key_fn fn, void *ctx)
{
	const struct store_table *t = &store->table;
	for (size_t i = 0; i <= t->mask; i++) {
		for (const struct store_entry *e = t->buckets[i]; e; e = e->next) {
			if (!e->present)
				continue;
			int rc = fn(ctx, (struct byteview){e->key, e->key_len});
			if (rc < 0)
				return rc;
		}
	}
	return 0;
}

/* Drops the value and queue of one entry (the entry goes too unless waits or
 * watches keep it). Returns 1 when it held either. */
static int entry_clear(struct store *s, struct store_entry *e)
{
	bool had = e->present || e->qlen > 0;
	if (e->present) {
		store_entry_unbind(e);
		uint8_t *old = e->value;
		size_t old_len = e->value_len;
		s->bytes -= e->value_len;
		e->value = NULL;
		e->value_len = 0;
		e->present = false;
		s->num_keys--;
		store_entry_notify(s, e, STORE_KEY_DELETED, (struct byteview){old, old_len},
				   (struct byteview){NULL, 0});
		free(old);
	}
	s->bytes -= store_entry_drop_queue(e);
	store_entry_gc(s, e);
	return had;
}

size_t store_clear(struct store *store, store_keep_fn keep, void *ctx)
{
	struct store_table *t = &store->table;
	size_t n = 0;
	/* The table never shrinks, so removing entries keeps the buckets; only
	 * the chain being walked changes, hence `next` first. */
	for (size_t i = 0; i <= t->mask; i++) {
		struct store_entry *e = t->buckets[i];
		while (e) {
			struct store_entry *next = e->next;
			if (!keep || !keep(ctx, (struct byteview){e->key, e->key_len}))
				n += (size_t)entry_clear(store, e);
			e = next;
		}
	}
	return n;
}

size_t store_bytes_used(const struct store *store)
{
	return store->bytes;
}

void store_free(struct store *store)
{
	if (!store)
		return;
	struct store_table *t = &store->table;
	for (size_t i = 0; i <= t->mask; i++) {
		struct store_entry *e = t->buckets[i];
		while (e) {
			struct store_entry *next = e->next;
			store_entry_drop_waits(e);
			store_entry_drop_queue(e);
			free(e->value);
			free(e);
			e = next;
		}
	}
	store_table_release(t);
	free(store);
}
