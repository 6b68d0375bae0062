/*
 * store.h - the key-value semantics of the TCPStore (pure, no I/O).
 *
 * Keys and values are bytes. Semantics follow torch's servers:
 *  - set replaces; add parses the stored value as a decimal integer (a
 *    missing key counts as 0) and stores the sum as decimal text (wrapping
 *    around past INT64_MAX, as torch's servers do);
 *  - compare_set: missing key + empty expected stores desired; missing key +
 *    non-empty expected stores nothing and answers `expected`; present key is
 *    replaced iff its value equals expected; the answer is the value after;
 *  - wait on several keys completes when every key exists (a key also counts
 *    as existing while a queue of that name is not empty); the waiter's owner
 *    is told through the wake callback;
 *  - barriers (torch 2.x): the key is a counter; each arrival adds one and
 *    waits until the count reaches the world size, then all waiters of the
 *    key wake (a key past its world size releases every later arrival at
 *    once, as in torch);
 *  - queues (torch 2.x): push wakes at most one waiter of that name, pop
 *    takes the oldest item;
 *  - watches (torch 1.13): every change of a watched key is reported.
 * Every byte stored (keys, values, queue items) is counted against
 * max_total_bytes; an operation that would pass it fails with -ENOSPC and
 * changes nothing.
 */
#ifndef DDP_RENDEZVOUS_STORE_H
#define DDP_RENDEZVOUS_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bytes.h"

struct store;
struct store_waiter;

struct store_watch;
struct store_entry;

/* The pending waits and the watches of one client (embed one per
 * connection). Initialise with STORE_OWNER_INIT or zeroes; cancel and unwatch
 * before freeing it. */
struct store_owner {
	struct store_waiter *waiters;
	struct store_watch *watches;
	struct store_entry *bound; /* keys bound to this session (store_lease.h) */
};

#define STORE_OWNER_INIT                                                                           \
	{                                                                                          \
		NULL, NULL, NULL                                                                   \
	}

/* What happened to a watched key (the values are torch 1.13's
 * WatchResponseType). */
enum store_change {
	STORE_KEY_UPDATED = 0,
	STORE_KEY_CREATED = 1,
	STORE_KEY_DELETED = 2,
};

/* Called for each watch of a key that changed: its value went from
 * old_value to new_value (empty when created / deleted). The views are valid
 * during the call only. It must not call into the store. */
typedef void (*store_watch_fn)(void *ctx, struct store_owner *owner, enum store_change change,
			       struct byteview key, struct byteview old_value,
			       struct byteview new_value);

/* Called when a wait of `owner` completes (the waiter is already removed
 * and freed). It must not free the store, and must not cancel or register
 * waits of other owners; it may cancel `owner`'s remaining waits. */
typedef void (*store_wake_fn)(void *ctx, struct store_owner *owner);

/* Creates an empty store. Returns 0 or -ENOMEM. */
int store_new(size_t max_total_bytes, store_wake_fn wake, void *ctx, struct store **out);

/* Frees every key, queue and waiter (no callbacks run; owners with pending
 * waits are left pointing at freed waiters: cancel them first or discard
 * them). NULL is allowed. */
void store_free(struct store *store);

/* Returns 0, -ENOSPC (over the byte limit) or -ENOMEM. */
int store_set(struct store *store, struct byteview key, struct byteview value);

/* Returns 1 and views the value (valid until the next change of the store),
 * or 0 when the key is missing. */
int store_get(const struct store *store, struct byteview key, struct byteview *value);

/* Returns 0 with the new value in *result (the sum wraps around past
 * INT64_MAX / INT64_MIN); -EINVAL if the stored value is not a decimal
 * integer; -ERANGE if it is one out of the int64 range; -ENOSPC; -ENOMEM. */
int store_add(struct store *store, struct byteview key, int64_t delta, int64_t *result);

/* torch's compare_set (see above). *current views the value after the
 * operation (valid until the next change; for a missing key with non-empty
 * expected it is `expected` itself). Returns 0, -ENOSPC or -ENOMEM. */
int store_compare_set(struct store *store, struct byteview key, struct byteview expected,
		      struct byteview desired, struct byteview *current);

/* Returns 1 when every key exists, else 0. */
int store_check(const struct store *store, const struct byteview *keys, size_t nkeys);

/* Returns 1 when every key exists already (nothing registered), 0 when a
 * wait was registered for `owner` (the wake callback runs when the last
 * missing key appears), or -ENOMEM. */
int store_wait(struct store *store, struct store_owner *owner, const struct byteview *keys,
	       size_t nkeys);

/* torch 2.x's BARRIER: adds one to the decimal counter at `key` (a missing
 * key counts as 0; *count gets the new value). When the count has reached
 * world_size, every waiter of the key wakes and this returns 1 (the caller
 * is released too); otherwise a wait of `owner` on the key is registered and
 * this returns 0 (it wakes when a later arrival completes the barrier, or
 * when the key is set, added to or appended to, as in torch; cancel it like
 * any wait). Errors as store_add(); on an error nothing changed. */
int store_barrier(struct store *store, struct store_owner *owner, struct byteview key,
		  int64_t world_size, int64_t *count);

/* Drops every pending wait of `owner` (disconnect, cancel-wait). Returns how
 * many were dropped. */
size_t store_owner_cancel(struct store *store, struct store_owner *owner);

/* Sets the callback for watches (it gets the ctx given to store_new). */
void store_set_watch_callback(struct store *store, store_watch_fn watch);

/* torch 1.13's WATCH_KEY: from now on `owner` is told about every set, add,
 * compare-set that stores, append and delete of `key` (until it unwatches).
 * Returns 0, -ENOSPC (watches are accounted) or -ENOMEM. */
int store_watch(struct store *store, struct store_owner *owner, struct byteview key);

/* Drops every watch of `owner`. Returns how many. */
size_t store_owner_unwatch(struct store *store, struct store_owner *owner);

/* Number of keys with a value (queues are not counted, as in torch). */
int64_t store_num_keys(const struct store *store);

/* Called for each key by store_foreach_key(); the view is valid during the
 * call only, which must not change the store. A negative return stops the
 * walk and is passed on. */
typedef int (*store_key_fn)(void *ctx, struct byteview key);

/* Calls fn for every key with a value (the keys store_num_keys() counts), in
 * no particular order. Returns 0 or fn's negative return. */
int store_foreach_key(const struct store *store, store_key_fn fn, void *ctx);

/* Whether store_clear() keeps `key`. */
typedef bool (*store_keep_fn)(void *ctx, struct byteview key);

/* Drops the value and the queue of every key that `keep` (NULL: none)
 * does not keep; watchers are told of each deleted value. Pending waits and
 * watches stay registered (cancel their owners first to drop them too).
 * Returns how many keys held a value or queue and were cleared. */
size_t store_clear(struct store *store, store_keep_fn keep, void *ctx);

/* Returns 1 if the key existed and was deleted, else 0. Waiters are kept. */
int store_delete(struct store *store, struct byteview key);

/* Appends to the value, creating the key. Returns 0, -ENOSPC or -ENOMEM. */
int store_append(struct store *store, struct byteview key, struct byteview value);

/* Queues (torch 2.x). push: 0, -ENOSPC or -ENOMEM. */
int store_queue_push(struct store *store, struct byteview key, struct byteview value);

/* Sets *len_before to the queue's length; if it was > 0, removes the oldest
 * item and gives it in *item (malloc'ed, the caller frees; *item_len its
 * size). Returns 0 or -ENOMEM. */
int store_queue_pop(struct store *store, struct byteview key, int64_t *len_before, uint8_t **item,
		    size_t *item_len);

int64_t store_queue_len(const struct store *store, struct byteview key);

/* Bytes counted against the limit now. */
size_t store_bytes_used(const struct store *store);

/* Number of pending waits, all owners together (for tests). */
size_t store_waiter_count(const struct store *store);

#endif
