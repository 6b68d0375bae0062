/*
 * store_watch.c - watches on keys (torch 1.13's WATCH_KEY): each change of a
 * watched key is reported to its watchers until they unwatch.
 */
#include <errno.h>
#include <stdlib.h>

#include "store_int.h"

void store_set_watch_callback(struct store *store, store_watch_fn watch)
{
	store->watch = watch;
}

int store_watch(struct store *store, struct store_owner *owner, struct byteview key)
{
	struct store_entry *e;
	int rc = store_entry_get(store, key, sizeof(struct store_watch), &e);
	if (rc < 0)
		return rc;
	struct store_watch *w = calloc(1, sizeof(*w));
	if (!w) {
		store_entry_gc(store, e);
		return -ENOMEM;
	}
	store->bytes += sizeof(*w);
	w->owner = owner;
	w->entry = e;
	w->enext = e->watches;
	if (e->watches)
		e->watches->eprev = w;
	e->watches = w;
	w->onext = owner->watches;
	if (owner->watches)
		owner->watches->oprev = w;
	owner->watches = w;
	return 0;
}

size_t store_owner_unwatch(struct store *store, struct store_owner *owner)
{
	size_t n = 0;
	while (owner->watches) {
		struct store_watch *w = owner->watches;
		owner->watches = w->onext;
		struct store_entry *e = w->entry;
		if (w->eprev)
			w->eprev->enext = w->enext;
		else
			e->watches = w->enext;
		if (w->enext)
			w->enext->eprev = w->eprev;
		free(w);
		store->bytes -= sizeof(*w);
		store_entry_gc(store, e);
		n++;
	}
	if (n)
		owner->watches = NULL;
	return n;
}

void store_entry_notify(struct store *s, struct store_entry *e, enum store_change change,
			struct byteview old_value, struct byteview new_value)
{
	if (!s->watch)
		return;
	struct byteview key = {e->key, e->key_len};
	for (struct store_watch *w = e->watches; w; w = w->enext)
		s->watch(s->ctx, w->owner, change, key, old_value, new_value);
}
