/*
 * store_wait.c - waits on keys: registration, wake-up when the last missing
 * key appears, barriers (a counter key whose waiters wake together),
 * cancellation (cancel-wait, disconnect).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "store_int.h"

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

void store_entry_wake(struct store *s, struct store_entry *e, bool one)
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

int store_check(const struct store *store, const struct byteview *keys, size_t nkeys)
{
	for (size_t i = 0; i < nkeys; i++)
		if (!store_entry_exists(store_table_find(&store->table, keys[i])))
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
		store_entry_gc(s, e);
	}
	s->bytes -= w->bytes;
	free(w);
}

/* Allocates a waiter for up to nlinks keys, accounted against the limit.
 * Returns 0, -ENOSPC or -ENOMEM. */
static int waiter_new(struct store *s, struct store_owner *owner, size_t nlinks,
		      struct store_waiter **out)
{
	size_t size = sizeof(struct store_waiter) + nlinks * sizeof(struct store_link);
	if (size > s->max_bytes - s->bytes)
		return -ENOSPC;
	struct store_waiter *w = calloc(1, size);
	if (!w)
		return -ENOMEM;
	w->owner = owner;
	w->bytes = size;
	s->bytes += size;
	*out = w;
	return 0;
}

/* Links the waiter's next key to entry e. */
static void waiter_link(struct store_waiter *w, struct store_entry *e)
{
	struct store_link *l = &w->links[w->nlinks++];
	l->waiter = w;
	l->entry = e;
	l->prev = NULL;
	l->next = e->waiters;
	if (e->waiters)
		e->waiters->prev = l;
	e->waiters = l;
}

/* The waiter's keys are linked: it now waits, on its owner's list. */
static void waiter_register(struct store *s, struct store_waiter *w)
{
	struct store_owner *owner = w->owner;
	w->missing = w->nlinks;
	w->onext = owner->waiters;
	if (owner->waiters)
		owner->waiters->oprev = w;
	owner->waiters = w;
	s->nwaiters++;
}

int store_wait(struct store *store, struct store_owner *owner, const struct byteview *keys,
	       size_t nkeys)
{
	size_t missing = 0;
	for (size_t i = 0; i < nkeys; i++)
		if (!store_entry_exists(store_table_find(&store->table, keys[i])))
			missing++;
	if (missing == 0)
		return 1;
	struct store_waiter *w;
	int rc = waiter_new(store, owner, missing, &w);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < nkeys; i++) {
		struct store_entry *e = store_table_find(&store->table, keys[i]);
		if (store_entry_exists(e))
			continue;
		rc = store_entry_get(store, keys[i], 0, &e);
		if (rc < 0) {
			waiter_unwind(store, w);
			return rc;
		}
		waiter_link(w, e);
	}
	waiter_register(store, w);
	return 0;
}

int store_barrier(struct store *store, struct store_owner *owner, struct byteview key,
		  int64_t world_size, int64_t *count)
{
	struct byteview cur;
	int64_t n = 0;
	if (store_get(store, key, &cur)) {
		int rc = store_parse_decimal(cur.data, cur.len, &n);
		if (rc < 0)
			return rc;
	}
	n = (int64_t)((uint64_t)n + 1); /* wraps like add */
	bool release = n >= world_size;
	/* The waiter first, so that a refusal leaves the count unchanged. */
	struct store_waiter *w = NULL;
	int rc = release ? 0 : waiter_new(store, owner, 1, &w);
	if (rc < 0)
		return rc;
	char text[24];
	int len = snprintf(text, sizeof(text), "%" PRId64, n);
	rc = store_entry_put(store, key, text, (size_t)len, false);
	if (rc < 0) {
		if (w)
			waiter_unwind(store, w);
		return rc;
	}
	*count = n;
	struct store_entry *e = store_table_find(&store->table, key);
	if (release) {
		store_entry_wake(store, e, false);
		return 1;
	}
	waiter_link(w, e);
	waiter_register(store, w);
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
			store_entry_gc(store, e);
		}
		waiter_free(store, w);
		n++;
	}
	return n;
}

size_t store_waiter_count(const struct store *store)
{
	return store->nwaiters;
}

void store_entry_drop_waits(struct store_entry *e)
{
	/* A waiter's links are all removed before it is freed, so no list
	 * still points at it. */
	while (e->waiters) {
		struct store_waiter *w = e->waiters->waiter;
		for (size_t j = 0; j < w->nlinks; j++)
			if (w->links[j].entry)
				link_remove(&w->links[j]);
		free(w);
	}
	while (e->watches) {
		struct store_watch *w = e->watches;
		e->watches = w->enext;
		free(w);
	}
}
