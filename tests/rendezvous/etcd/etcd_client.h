/*
 * etcd_client.h - the etcd client's blocking form, for the tests that drive
 * real etcd call by call (test_etcd_live.c): the async client
 * (rendezvous/etcd/etcd_async.h) on a private libuv loop, each call running
 * that loop until its answer is in; the client's watches progress while it
 * runs (in a call, or in etcd_watch_next()). The semantics (endpoints,
 * failover, deadlines, errors, auth, TLS) are etcd_types.h's. A client and
 * its watches are used by one thread. The product uses the async client
 * alone (the rendezvous driver, rendezvous/driver/rdzv_etcd.c).
 */
#ifndef DDP_TESTS_ETCD_CLIENT_H
#define DDP_TESTS_ETCD_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "etcd_types.h"

struct etcd_client;
struct etcd_watch;

/* Parses the options (copying every string) and makes the client. Nothing is
 * sent yet; the first operation connects. -EINVAL (with etcd_error()) for an
 * empty or malformed endpoint list, a cert without a key, or a user without
 * a password. */
int etcd_client_new(const struct etcd_options *opt, struct etcd_client **out);

/* Frees the client. Every watch made from it must be freed first. NULL is
 * allowed. */
void etcd_client_free(struct etcd_client *c);

/* The endpoint that answered last (as given in the options). */
const char *etcd_client_endpoint(const struct etcd_client *c);

/* ---- leases ---- */

/* Grants a lease of ttl_s seconds (>= 1). *id receives its id, *granted_ttl
 * (may be NULL) the TTL etcd chose (it may raise a very short one). */
int etcd_lease_grant(struct etcd_client *c, int64_t ttl_s, int64_t *id, int64_t *granted_ttl);

/* Renews the lease to its full TTL; *ttl (may be NULL) receives it.
 * -ENOENT when the lease has expired or was revoked (its keys are gone). */
int etcd_lease_keepalive(struct etcd_client *c, int64_t id, int64_t *ttl);

/* Revokes the lease; every key attached to it is deleted at once.
 * -ENOENT when it was already gone. */
int etcd_lease_revoke(struct etcd_client *c, int64_t id);

/* ---- keys ---- */

/* Sets key to value (len bytes), attached to `lease` when not 0 (the key is
 * deleted when the lease ends). *revision (may be NULL) receives the store
 * revision of the write (the key's new mod_revision). */
int etcd_put(struct etcd_client *c, const char *key, const void *value, size_t len, int64_t lease,
	     int64_t *revision);

/* Reads key. Returns 1 and fills *kv (release it) when present, 0 and zeroes
 * *kv when absent. *revision (may be NULL) receives the store revision the
 * read saw: watch from revision + 1 to miss no change after it. */
int etcd_get(struct etcd_client *c, const char *key, struct etcd_kv *kv, int64_t *revision);

/* Reads every key starting with prefix, in key order. *kvs is a malloc'ed
 * array of *n entries (free with etcd_kvs_free()); *revision as etcd_get(). */
int etcd_get_prefix(struct etcd_client *c, const char *prefix, struct etcd_kv **kvs, size_t *n,
		    int64_t *revision);

/* Deletes key. Returns 1 if it existed, 0 if not. */
int etcd_delete(struct etcd_client *c, const char *key);

/* One transaction: if cmp holds, put value (attached to lease when not 0)
 * and return 1, with cur->mod_revision set to the write's revision and the
 * other fields of *cur zeroed; otherwise return 0 with *cur the key as it is
 * (cur->key NULL and everything 0 when absent). Release *cur either way.
 * cur may be NULL. */
int etcd_cas(struct etcd_client *c, const char *key, const struct etcd_cmp *cmp, const void *value,
	     size_t len, int64_t lease, struct etcd_kv *cur);

/* ---- watches ---- */

/* Watches key (or, with ETCD_WATCH_PREFIX, the prefix) for changes with a
 * revision >= start_revision (0: from when the watch is set up - prefer the
 * revision of a read + 1, so nothing between the read and the watch is
 * missed). The watch is a streaming request on the client's loop, and
 * survives the loss of an endpoint: it resumes on the next one from the
 * revision after the last event delivered, so no event is lost or repeated.
 * If no endpoint takes it back within the client's timeout_ms, the watch
 * ends with that error (etcd_watch_next() returns it, naming every endpoint).
 * A member that freezes or is cut off keeps its connection open: after
 * timeout_ms / 2 without a message the client asks that member for a
 * linearizable count of the key (at most 1 s), and moves on when it fails,
 * so such a member is left within about timeout_ms / 2 + 1 s. A member that
 * loses its leader cancels the watch itself (require-leader).
 * The client must outlive the watch. */
int etcd_watch_new(struct etcd_client *c, const char *key, unsigned flags, int64_t start_revision,
		   struct etcd_watch **out);

/* etcd_watch_next(): 1 and *ev filled (release it with etcd_event_release());
 * 0 when timeout_ms passed with nothing (timeout_ms < 0: wait forever; 0:
 * what has arrived, without waiting); a negative errno once the watch has
 * ended, after the events before the end were delivered: -ESTALE when
 * start_revision was compacted away, -ECANCELED when etcd cancelled it,
 * -EACCES, or the connection error of the last endpoint tried. */
int etcd_watch_next(struct etcd_watch *w, int timeout_ms, struct etcd_event *ev);

/* Stops the watch (at once, even mid-reconnect), and frees it and its
 * pending events. NULL is allowed. */
void etcd_watch_free(struct etcd_watch *w);

#endif
