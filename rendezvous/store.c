/*
 * store.c - TCPStore semantics: values, counters, compare-set, waits and
 * queues over the hash table, with byte accounting.
 */
#include "store.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_table.h"

/* One key a waiter still misses, linked into that key's entry. */
struct store_link {
	struct store_link *prev;
	struct store_link *next;
	struct store_waiter *waiter;
	struct store_entry *entry;
};

struct store_waiter {
	struct store_owner *owner;
	struct store_waiter *oprev; /* owner's list */
	struct store_waiter *onext;
	size_t missing; /* links still in entries */
	size_t nlinks;
	size_t bytes; /* accounted size */
	struct store_link links[];
};

struct store_item {
	struct store_item *next;
	size_t len;
	uint8_t data[];
};

struct store {
	struct store_table table;
	size_t max_bytes;
	size_t bytes;
	int64_t num_keys;
	size_t nwaiters;
	store_wake_fn wake;
	void *ctx;
};

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
	s->ctx = ctx;
	*out = s;
	return 0;
}

static bool entry_exists(const struct store_entry *e)
{
	return e && (e->present || e->qlen > 0);
}

/* Frees the entry once nothing keeps it alive. */
static void entry_gc(struct store *s, struct store_entry *e)
{
	if (e->present || e->qlen > 0 || e->waiters)
		return;
	store_table_remove(&s->table, e);
	s->bytes -= e->key_len;
	free(e->value);
	free(e);
}

/* Finds the key or creates an empty entry for it, if `extra` more bytes (plus
 * the key, when new) fit under the limit. */
static int entry_get(struct store *s, struct byteview key, size_t extra, struct store_entry **out)
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

static void owner_unlink(struct store_waiter *w)
{
	if (w->oprev)
		w->oprev->onext = w->onext;
	else
		w->owner->waiters = w->onext;
	if (w->onext)
		w->onext->oprev = w->oprev;
}

static void link_remove(struct store_link *l)
{
	if (l->prev)
		l->prev->next = l->next;
	else
		l->entry->waiters = l->next;
	if (l->next)
		l->next->prev = l->prev;
	l->entry = NULL;
}

static void waiter_free(struct store *s, struct store_waiter *w)
{
	s->bytes -= w->bytes;
	s->nwaiters--;
	free(w);
}

/* The key of `e` now exists: satisfy its waiters (all, or only until one
 * completes when `one`), running the wake callback for each completed. */
static void entry_wake(struct store *s, struct store_entry *e, bool one)
{
	while (e->waiters) {
		struct store_link *l = e->waiters;
		struct store_waiter *w = l->waiter;
		link_remove(l);
		if (--w->missing > 0)
			continue;
		struct store_owner *owner = w->owner;
		owner_unlink(w);
		waiter_free(s, w);
		if (s->wake)
			s->wake(s->ctx, owner);
		if (one)
			break;
	}
}

/* Replaces the value of an entry that has room accounted by the caller. */
static int entry_assign(struct store *s, struct store_entry *e, const void *data, size_t len)
{
	uint8_t *v = NULL;
	if (len) {
		v = malloc(len);
		if (!v)
			return -ENOMEM;
		memcpy(v, data, len);
	}
	s->bytes = s->bytes - e->value_len + len;
	free(e->value);
	e->value = v;
	e->value_len = len;
	if (!e->present)
		s->num_keys++;
	e->present = true;
	return 0;
}

static int store_put(struct store *s, struct byteview key, const void *data, size_t len)
{
	struct store_entry *e = store_table_find(&s->table, key);
	size_t old = e && e->present ? e->value_len : 0;
	size_t extra = len > old ? len - old : 0;
	int rc = entry_get(s, key, extra, &e);
	if (rc < 0)
		return rc;
	rc = entry_assign(s, e, data, len);
	if (rc < 0) {
		entry_gc(s, e);
		return rc;
	}
	entry_wake(s, e, false);
	return 0;
}

int store_set(struct store *store, struct byteview key, struct byteview value)
{
	return store_put(store, key, value.data, value.len);
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

/* Parses like C++ std::stoll (leading blanks, sign, digits, rest ignored). */
static int parse_decimal(const uint8_t *p, size_t len, int64_t *out)
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
		int rc = parse_decimal(cur.data, cur.len, &v);
		if (rc < 0)
			return rc;
	}
	if (__builtin_add_overflow(v, delta, &v))
		return -ERANGE;
	char text[24];
	int n = snprintf(text, sizeof(text), "%" PRId64, v);
	int rc = store_put(store, key, text, (size_t)n);
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
	int rc = store_put(store, key, desired.data, desired.len);
	if (rc < 0)
		return rc;
	return store_get(store, key, current) ? 0 : -EIO;
}

int store_check(const struct store *store, const struct byteview *keys, size_t nkeys)
{
	for (size_t i = 0; i < nkeys; i++)
		if (!entry_exists(store_table_find(&store->table, keys[i])))
			return 0;
	return 1;
}

/* Undoes a partly registered waiter (allocation failure). */
static void waiter_unwind(struct store *s, struct store_waiter *w)
{
	for (size_t i = 0; i < w->nlinks; i++) {
		struct store_entry *e = w->links[i].entry;
		if (!e)
			continue;
		link_remove(&w->links[i]);
		entry_gc(s, e);
	}
	s->bytes -= w->bytes;
	free(w);
}

int store_wait(struct store *store, struct store_owner *owner, const struct byteview *keys,
	       size_t nkeys)
{
	size_t missing = 0;
	for (size_t i = 0; i < nkeys; i++)
		if (!entry_exists(store_table_find(&store->table, keys[i])))
			missing++;
	if (missing == 0)
		return 1;
	size_t size = sizeof(struct store_waiter) + missing * sizeof(struct store_link);
	if (size > store->max_bytes - store->bytes)
		return -ENOSPC;
	struct store_waiter *w = calloc(1, size);
	if (!w)
		return -ENOMEM;
	w->owner = owner;
	w->bytes = size;
	store->bytes += size;
	for (size_t i = 0; i < nkeys; i++) {
		struct store_entry *e = store_table_find(&store->table, keys[i]);
		if (entry_exists(e))
			continue;
		int rc = entry_get(store, keys[i], 0, &e);
		if (rc < 0) {
			waiter_unwind(store, w);
			return rc;
		}
		struct store_link *l = &w->links[w->nlinks++];
		l->waiter = w;
		l->entry = e;
		l->prev = NULL;
		l->next = e->waiters;
		if (e->waiters)
			e->waiters->prev = l;
		e->waiters = l;
	}
	w->missing = w->nlinks;
	w->onext = owner->waiters;
	if (owner->waiters)
		owner->waiters->oprev = w;
	owner->waiters = w;
	store->nwaiters++;
	return 0;
}

size_t store_owner_cancel(struct store *store, struct store_owner *owner)
{
	size_t n = 0;
	while (owner->waiters) {
		struct store_waiter *w = owner->waiters;
		owner_unlink(w);
		for (size_t i = 0; i < w->nlinks; i++) {
			struct store_entry *e = w->links[i].entry;
			if (!e)
				continue;
			link_remove(&w->links[i]);
			entry_gc(store, e);
		}
		waiter_free(store, w);
		n++;
	}
	return n;
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
	store->bytes -= e->value_len;
	free(e->value);
	e->value = NULL;
	e->value_len = 0;
	e->present = false;
	store->num_keys--;
	entry_gc(store, e);
	return 1;
}

int store_append(struct store *store, struct byteview key, struct byteview value)
{
	struct store_entry *e = store_table_find(&store->table, key);
	if (!e || !e->present)
		return store_put(store, key, value.data, value.len);
	if (value.len > store->max_bytes - store->bytes)
		return -ENOSPC;
	if (value.len) {
		uint8_t *v = realloc(e->value, e->value_len + value.len);
		if (!v)
			return -ENOMEM;
		memcpy(v + e->value_len, value.data, value.len);
		e->value = v;
		e->value_len += value.len;
		store->bytes += value.len;
	}
	entry_wake(store, e, false);
	return 0;
}

int store_queue_push(struct store *store, struct byteview key, struct byteview value)
{
	struct store_entry *e;
	int rc = entry_get(store, key, value.len, &e);
	if (rc < 0)
		return rc;
	struct store_item *it = malloc(sizeof(*it) + value.len);
	if (!it) {
		entry_gc(store, e);
		return -ENOMEM;
	}
	it->next = NULL;
	it->len = value.len;
	if (value.len)
		memcpy(it->data, value.data, value.len);
	if (e->qtail)
		e->qtail->next = it;
	else
		e->qhead = it;
	e->qtail = it;
	e->qlen++;
	store->bytes += value.len;
	entry_wake(store, e, true);
	return 0;
}

int store_queue_pop(struct store *store, struct byteview key, int64_t *len_before, uint8_t **item,
		    size_t *item_len)
{
	struct store_entry *e = store_table_find(&store->table, key);
	*len_before = e ? (int64_t)e->qlen : 0;
	*item = NULL;
	*item_len = 0;
	if (!e || e->qlen == 0)
		return 0;
	struct store_item *it = e->qhead;
	uint8_t *copy = malloc(it->len ? it->len : 1);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, it->data, it->len);
	e->qhead = it->next;
	if (!e->qhead)
		e->qtail = NULL;
	e->qlen--;
	store->bytes -= it->len;
	*item = copy;
	*item_len = it->len;
	free(it);
	entry_gc(store, e);
	return 0;
}

int64_t store_queue_len(const struct store *store, struct byteview key)
{
	const struct store_entry *e = store_table_find(&store->table, key);
	return e ? (int64_t)e->qlen : 0;
}

size_t store_bytes_used(const struct store *store)
{
	return store->bytes;
}

size_t store_waiter_count(const struct store *store)
{
	return store->nwaiters;
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
			/* A waiter's links are all removed before it is freed, so
			 * no list still points at it. */
			while (e->waiters) {
				struct store_waiter *w = e->waiters->waiter;
				for (size_t j = 0; j < w->nlinks; j++)
					if (w->links[j].entry)
						link_remove(&w->links[j]);
				free(w);
			}
			while (e->qhead) {
				struct store_item *it = e->qhead;
				e->qhead = it->next;
				free(it);
			}
			free(e->value);
			free(e);
			e = next;
		}
	}
	store_table_release(t);
	free(store);
}
