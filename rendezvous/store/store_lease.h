/*
 * store_lease.h - what agent sessions need of the store beyond torch's
 * semantics (pure, no I/O): keys bound to a session (deleted when it ends,
 * like a key under an etcd lease), an exact compare-and-set, and per-key
 * watch management.
 *
 * A key is bound to the owner of its last store_set_bound(); any other
 * write (set, add, a compare-and-set that stores, append of bytes, queue
 * operations excepted) or its deletion unbinds it first, as a put without a
 * lease does in etcd. store_owner_expire() deletes the owner's bound keys,
 * telling their watchers (a deletion completes no wait: waits are for keys
 * to exist).
 */
#ifndef DDP_RENDEZVOUS_STORE_LEASE_H
#define DDP_RENDEZVOUS_STORE_LEASE_H

#include <stdbool.h>
#include <stddef.h>

#include "store.h"

/* Sets key to value (as store_set: waiters wake, watchers are told) and
 * binds it to `owner`. Returns 0, -ENOSPC or -ENOMEM (nothing changed). */
int store_set_bound(struct store *store, struct store_owner *owner, struct byteview key,
		    struct byteview value);

/* Deletes every key bound to `owner` (its session ended), telling their
 * watchers. Returns how many. Call before the owner's memory is reused. */
size_t store_owner_expire(struct store *store, struct store_owner *owner);

/* Whether `key` is bound to `owner` now (for tests). */
bool store_key_bound(const struct store *store, struct byteview key,
		     const struct store_owner *owner);

/* Exact compare-and-set: stores `desired` iff the key holds `expected`
 * (has_expected) or has no value (!has_expected). *swapped says whether it
 * stored; *present and *current give the value after (views valid until
 * the next change of the store). Returns 0, -ENOSPC or -ENOMEM. */
int store_cas(struct store *store, struct byteview key, bool has_expected, struct byteview expected,
	      struct byteview desired, bool *swapped, bool *present, struct byteview *current);

/* Whether `owner` watches `key`. */
bool store_watching(const struct store *store, const struct store_owner *owner,
		    struct byteview key);

/* Drops `owner`'s watches of `key`. Returns how many. */
size_t store_unwatch(struct store *store, struct store_owner *owner, struct byteview key);

#endif
