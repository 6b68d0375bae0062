/*
 * etcd_async.h - the etcd v3 client on a libuv loop: the operations of
 * etcd_client.h (leases, put/get, compare-and-set, delete, watches), each
 * answered by a callback from the loop. No thread: every request is a curl
 * easy handle on one multi handle whose sockets and timer the loop drives
 * (etcd_multi_uv.c); a watch is a long-lived streaming request on the same
 * multi handle whose messages are parsed as they arrive.
 *
 * The semantics are etcd_client.h's (which is this client run on a private
 * loop): the endpoint list and its failover with the per-attempt budget, one
 * deadline per operation, require-leader, the auth token renewed when
 * rejected, the TLS options, the errors as negative errno. Requests made
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

#include "etcd_client.h"

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

/* Loads libcurl (etcd_curl.h) and makes the client on loop. Nothing is sent
 * yet. -EINVAL as etcd_client_new(), -ENOENT without libcurl; etcd_error()
 * says why. */
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
int etcd_async_grant(struct etcd_async *c, int64_t ttl_s, etcd_async_cb cb, void *arg);
/* -ENOENT when the lease has expired or was revoked. */
int etcd_async_keepalive(struct etcd_async *c, int64_t id, etcd_async_cb cb, void *arg);
int etcd_async_revoke(struct etcd_async *c, int64_t id, etcd_async_cb cb, void *arg);
int etcd_async_put(struct etcd_async *c, const char *key, const void *value, size_t len,
		   int64_t lease, etcd_async_cb cb, void *arg);
/* Reads key, or with prefix every key starting with it. */
int etcd_async_range(struct etcd_async *c, const char *key, bool prefix, etcd_async_cb cb,
		     void *arg);
int etcd_async_delete(struct etcd_async *c, const char *key, etcd_async_cb cb, void *arg);
/* As etcd_cas(): status 0, r->succeeded and, when it did not, r->kvs. */
int etcd_async_cas(struct etcd_async *c, const char *key, const struct etcd_cmp *cmp,
		   const void *value, size_t len, int64_t lease, etcd_async_cb cb, void *arg);

/* ---- watches ---- */

/* status 0: *ev is a change (the callback owns it: etcd_event_release());
 * status < 0: the watch has ended (as etcd_watch_next() describes), after
 * every event before the end; nothing follows. */
typedef void (*etcd_awatch_cb)(void *arg, int status, struct etcd_event *ev);

/* Watches key (or the prefix) from start_revision, as etcd_watch_new()
 * describes: it resumes on the next endpoint after a loss, probes a quiet
 * stream's member, ends with an error when no endpoint takes it back within
 * the client's timeout_ms. */
int etcd_async_watch(struct etcd_async *c, const char *key, unsigned flags, int64_t start_revision,
		     etcd_awatch_cb cb, void *arg, struct etcd_awatch **out);

/* Stops the watch at once; its callback is not called again. NULL is
 * allowed. */
void etcd_awatch_free(struct etcd_awatch *w);

#endif
