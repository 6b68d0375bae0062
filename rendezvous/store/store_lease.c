/*
 * store_lease.c - session-bound keys, exact compare-and-set and per-key
 * unwatch for agent sessions (store_lease.h).
 */
#include "store_lease.h"

#include <stdlib.h>
#include <string.h>

#include "store_int.h"

void store_entry_unbind(struct store_entry *e)
{
	struct store_owner *owner = e->bound;
	if (!owner)
		return;
	if (e->bprev)
		e->bprev->bnext = e->bnext;
	else
		owner->bound = e->bnext;
	if (e->bnext)
		e->bnext->bprev = e->bprev;
	e->bound = NULL;
	e->bprev = e->bnext = NULL;
}

int store_set_bound(struct store *store, struct store_owner *owner, struct byteview key,
		    struct byteview value)
{
	int rc = store_entry_put(store, key, value.data, value.len, true);
	if (rc < 0)
		return rc;
	/* A watcher told of the write cannot have changed the store (the
	 * callbacks must not), so the entry is still there with its value. */
	struct store_entry *e = store_table_find(&store->table, key);
	e->bound = owner;
	e->bprev = NULL;
	e->bnext = owner->bound;
	if (owner->bound)
		owner->bound->bprev = e;
	owner->bound = e;
	return 0;
}

size_t store_owner_expire(struct store *store, struct store_owner *owner)
{
	size_t n = 0;
	while (owner->bound) {
		struct store_entry *e = owner->bound;
		/* store_delete unbinds it (and may free it); a bound key always
		 * has a value, but never loop on one that has not. */
		if (store_delete(store, (struct byteview){e->key, e->key_len}) == 1)
			n++;
		else
			store_entry_unbind(e);
	}
	return n;
}

bool store_key_bound(const struct store *store, struct byteview key,
		     const struct store_owner *owner)
{
	const struct store_entry *e = store_table_find(&store->table, key);
	return e && e->present && e->bound == owner;
}

int store_cas(struct store *store, struct byteview key, bool has_expected, struct byteview expected,
	      struct byteview desired, bool *swapped, bool *present, struct byteview *current)
{
	struct byteview cur = {NULL, 0};
	bool has = store_get(store, key, &cur) == 1;
	bool match = has_expected
			 ? has && cur.len == expected.len &&
			       (cur.len == 0 || memcmp(cur.data, expected.data, cur.len) == 0)
			 : !has;
	*swapped = false;
	if (match) {
		int rc = store_entry_put(store, key, desired.data, desired.len, true);
		if (rc < 0)
			return rc;
		*swapped = true;
		has = store_get(store, key, &cur) == 1;
	}
	*present = has;
	*current = has ? cur : (struct byteview){NULL, 0};
	return 0;
}

bool store_watching(const struct store *store, const struct store_owner *owner, struct byteview key)
{
	for (const struct store_watch *w = owner->watches; w; w = w->onext) {
		const struct store_entry *e = w->entry;
		if (e->key_len == key.len &&
		    (key.len == 0 || memcmp(e->key, key.data, key.len) == 0))
			return true;
	}
	return false;
}

size_t store_unwatch(struct store *store, struct store_owner *owner, struct byteview key)
{
	struct store_entry *e = store_table_find(&store->table, key);
	if (!e)
		return 0;
	size_t n = 0;
	struct store_watch *w = e->watches;
	while (w) {
		struct store_watch *next = w->enext;
		if (w->owner == owner) {
			if (w->eprev)
				w->eprev->enext = w->enext;
			else
				e->watches = w->enext;
			if (w->enext)
				w->enext->eprev = w->eprev;
			if (w->oprev)
				w->oprev->onext = w->onext;
			else
				owner->watches = w->onext;
			if (w->onext)
				w->onext->oprev = w->oprev;
			store->bytes -= sizeof(*w);
			free(w);
			n++;
		}
		w = next;
	}
	store_entry_gc(store, e);
	return n;
}
