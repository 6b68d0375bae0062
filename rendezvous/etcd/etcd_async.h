/*
 * etcd_async.h - the etcd v3 client on a libuv loop: leases, put/get,
 * compare-and-set, delete and watches (etcd_types.h has the words), each
 * answered by a callback from the loop. No thread: every request is a curl
 * easy handle on one multi handle whose sockets and timer the loop drives
 * (etcd_multi_uv.c); a watch is a long-lived streaming request on the same
 * multi handle whose messages are parsed as they arrive.
 *
 * The semantics are etcd_types.h's: the endpoint list and its failover with
 * the per-attempt budget, one deadline per operation, require-leader, the
 * auth token renewed when rejected, the TLS options, the errors as negative
 * errno. Requests made
 * one after the other may run at the same time: a caller that needs its
 * writes applied in order makes the next one from the previous one's
 * callback.
 *
 * Callbacks are never called from inside the call that made the request.
 * While a callback runs with status < 0, etcd_error() gives the message.
 * A callback may make requests, free watches, and close the client.
 */
#ifndef DDP_RENDEZVOUS_ETCD_ASYNC_H
#define DDP_RENDEZVOUS_ETCD_ASYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "etcd_types.h"

struct etcd_async;
struct etcd_awatch;

/* What an operation answered; fields it does not fill are 0 / NULL. */
struct etcd_result {
	int64_t revision;    /* the store revision the answer saw; put and a
				successful compare-and-set: the write's */
	struct etcd_kv *kvs; /* range: the keys, in key order; compare-and-set
				that failed: the key as it is (n 0: absent) */
	size_t n;
	bool succeeded;	 /* compare-and-set */
	int64_t id, ttl; /* lease grant: the lease and its TTL; keep-alive: TTL */
	int64_t deleted; /* delete: how many keys went */
};

/* status >= 0 (r filled) or a negative errno (r zeroed). r is valid during
 * the call; the callback may take r->kvs (then set it NULL and r->n 0). */
typedef void (*etcd_async_cb)(void *arg, int status, struct etcd_result *r);

/* Loads libcurl (etcd_curl.h) and makes the client on loop, copying every
 * string of opt. Nothing is sent yet; the first request connects. -EINVAL
 * for an empty or malformed endpoint list, a cert without a key, or a user
 * without a password; -ENOENT without libcurl; etcd_error() says why. */
int etcd_async_new(uv_loop_t *loop, const struct etcd_options *opt, struct etcd_async **out);

/* Drops every pending request and watch (their callbacks are not called)
 * and frees the client once its handles are closed; then closed(arg) (may
 * be NULL) is called from the loop. NULL is allowed. */
void etcd_async_close(struct etcd_async *c, void (*closed)(void *arg), void *arg);

/* The endpoint that answered last (as given in the options). */
const char *etcd_async_endpoint(const struct etcd_async *c);

/* Each endpoint whose last attempt failed (of any request, even one still
 * retrying), with why: "EP: cause; EP2: cause" into buf (truncated to
 * len). Returns how many; 0 (buf "") when every endpoint tried answered.
 * For the word while etcd does not answer, before a request's deadline. */
size_t etcd_async_failures(const struct etcd_async *c, char *buf, size_t len);

/* The requests return 0 (cb will be called) or a negative errno (-EINVAL,
 * -ENOMEM; cb will not be called, etcd_error() says why). */
/* Grants a lease of ttl_s seconds (>= 1): r->id, and r->ttl the TTL etcd
 * chose (it may raise a very short one). */
int etcd_async_grant(struct etcd_async *c, int64_t ttl_s, etcd_async_cb cb, void *arg);
/* Renews the lease to its full TTL (r->ttl); -ENOENT when the lease has
 * expired or was revoked (its keys are gone). */
int etcd_async_keepalive(struct etcd_async *c, int64_t id, etcd_async_cb cb, void *arg);
/* Revokes the lease; every key attached to it is deleted at once. -ENOENT
 * when it was already gone. */
int etcd_async_revoke(struct etcd_async *c, int64_t id, etcd_async_cb cb, void *arg);
/* Sets key to value (len bytes), attached to `lease` when not 0 (the key is
 * deleted when the lease ends); r->revision is the write's. */
int etcd_async_put(struct etcd_async *c, const char *key, const void *value, size_t len,
		   int64_t lease, etcd_async_cb cb, void *arg);
/* Reads key, or with prefix every key starting with it (r->kvs, in key
 * order); r->revision is the store revision the read saw: watch from
 * revision + 1 to miss no change after it. */
int etcd_async_range(struct etcd_async *c, const char *key, bool prefix, etcd_async_cb cb,
		     void *arg);
/* Deletes key; r->deleted is 1 if it existed, 0 if not. */
int etcd_async_delete(struct etcd_async *c, const char *key, etcd_async_cb cb, void *arg);
/* One transaction: if cmp holds, put value (attached to lease when not 0):
 * r->succeeded, r->revision the write's; otherwise r->kvs (n 1, or 0 when
 * absent) is the key as it is. */
int etcd_async_cas(struct etcd_async *c, const char *key, const struct etcd_cmp *cmp,
		   const void *value, size_t len, int64_t lease, etcd_async_cb cb, void *arg);

/* ---- watches ---- */

/* status 0: *ev is a change (the callback owns it: etcd_event_release());
 * status < 0: the watch has ended, after every event before the end, and
 * nothing follows: -ESTALE when start_revision was compacted away,
 * -ECANCELED when etcd cancelled it, -EACCES, or the connection error of
 * the last endpoint tried (etcd_error() names every endpoint). */
typedef void (*etcd_awatch_cb)(void *arg, int status, struct etcd_event *ev);

/* Watches key (or, with ETCD_WATCH_PREFIX, the prefix) for changes with a
 * revision >= start_revision (0: from when the watch is set up - prefer the
 * revision of a read + 1, so nothing between the read and the watch is
 * missed). The watch is a streaming request on the client's loop, and
 * survives the loss of an endpoint: it resumes on the next one from the
 * revision after the last event delivered, so no event is lost or repeated.
 * If no endpoint takes it back within the client's timeout_ms, the watch
 * ends with that error. A member that freezes or is cut off keeps its
 * connection open: after timeout_ms / 2 without a message the client asks
 * that member for a linearizable count of the key (at most 1 s), and moves
 * on when it fails, so such a member is left within about timeout_ms / 2 +
 * 1 s. A member that loses its leader cancels the watch itself
 * (require-leader). The client must outlive the watch. */
int etcd_async_watch(struct etcd_async *c, const char *key, unsigned flags, int64_t start_revision,
		     etcd_awatch_cb cb, void *arg, struct etcd_awatch **out);

/* Stops the watch at once; its callback is not called again. NULL is
 * allowed. */
void etcd_awatch_free(struct etcd_awatch *w);

#endif
