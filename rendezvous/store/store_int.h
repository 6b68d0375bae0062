/*
 * store_int.h - the store's internal structures, shared by store.c (values),
 * store_wait.c (waits), store_queue.c (queues) and store_watch.c (watches).
 */
#ifndef DDP_RENDEZVOUS_STORE_INT_H
#define DDP_RENDEZVOUS_STORE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"
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

/* One owner watching one key (torch 1.13's WATCH_KEY). */
struct store_watch {
	struct store_watch *eprev; /* entry's list */
	struct store_watch *enext;
	struct store_watch *oprev; /* owner's list */
	struct store_watch *onext;
	struct store_owner *owner;
	struct store_entry *entry;
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
	store_watch_fn watch;
	void *ctx;
};

/* True when the key has a value or a non-empty queue. */
bool store_entry_exists(const struct store_entry *e);

/* Frees the entry once nothing keeps it alive (no value, queue, waiter or
 * watch). */
void store_entry_gc(struct store *s, struct store_entry *e);

/* Finds the key or creates an empty entry for it, if `extra` more bytes (plus
 * the key, when new) fit under the limit. 0, -ENOSPC or -ENOMEM. */
int store_entry_get(struct store *s, struct byteview key, size_t extra, struct store_entry **out);

/* The key of `e` now exists: satisfy its waiters (all, or only until one
 * completes when `one`), running the wake callback for each completed. */
void store_entry_wake(struct store *s, struct store_entry *e, bool one);

/* Tells the entry's watchers about a change (no-op without watchers). */
void store_entry_notify(struct store *s, struct store_entry *e, enum store_change change,
			struct byteview old_value, struct byteview new_value);

/* Unbinds the entry from its session, if bound (every write or deletion
 * does this first; store_lease.c). */
void store_entry_unbind(struct store_entry *e);

/* Frees every waiter and watch of the entry without callbacks (store_free). */
void store_entry_drop_waits(struct store_entry *e);

/* Frees the entry's queue items; returns their bytes (the caller accounts
 * for them). */
size_t store_entry_drop_queue(struct store_entry *e);

/* Gives `key` a copy of data as its value, telling watchers; wakes the key's
 * waiters only when `wake` (a barrier counts without waking). Returns 0,
 * -ENOSPC or -ENOMEM. */
int store_entry_put(struct store *s, struct byteview key, const void *data, size_t len, bool wake);

/* Parses like C++ std::stoll (leading blanks, sign, digits, the rest
 * ignored). Returns 0, -EINVAL (no number) or -ERANGE (out of int64). */
int store_parse_decimal(const uint8_t *p, size_t len, int64_t *out);

#endif
