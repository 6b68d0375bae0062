/*
 * etcd_client.h - the narrow etcd v3 client the rendezvous runs over: leases
 * (liveness), put/get, compare-and-set as a transaction, delete, and watches
 * (wait for a change without polling).
 *
 * It speaks etcd's documented JSON gateway (/v3/kv/..., /v3/lease/...,
 * /v3/watch, /v3/auth/authenticate; etcd 3.4 and later) over libcurl; keys
 * and values travel base64-encoded, 64-bit numbers as JSON strings.
 *
 * Endpoints: "host1:2379,host2:2379,host3:2379" (an entry may carry its own
 * "http://" or "https://"). Each operation has one deadline (timeout_ms) over
 * all endpoints: it starts on the endpoint that last answered, moves on to the
 * next one on a connection failure or an "unavailable" answer (no leader, a
 * leader change, too many requests), and goes round the list again with a
 * short backoff until the deadline. Every request asks for etcd's
 * require-leader, so a member cut off from its leader says so at once. An
 * attempt on one endpoint gets at most what is left divided by the endpoints
 * not yet tried in this round, and in the first round at most 1 s (doubling
 * each round): a follower that has not yet noticed its leader died holds a
 * write until etcd's own 7 s timeout, while the election is over in one or
 * two. When it gives up, etcd_error() names every endpoint tried and the last
 * error of each. An answer that is an error of the request itself (bad
 * argument, permission, lease not found) is returned at once. An http_proxy
 * in the environment is not used.
 *
 * A request whose connection broke after it was sent may have been applied:
 * it is retried on the next endpoint all the same. put, delete, keep-alive and
 * revoke are idempotent; a compare-and-set retried that way may report a
 * conflict whose current value is the one this call wrote (compare it), and a
 * lease grant may leave an unused lease behind (it expires after its TTL).
 *
 * Authentication: with a user and password the client gets a token from
 * /v3/auth/authenticate and sends it in the Authorization header; an expired
 * token, or one another member does not know (etcd's "simple" tokens are per
 * member), is renewed once per attempt.
 * TLS: with ca_file (or an https:// entry) every endpoint is spoken to over
 * HTTPS and verified against ca_file (the system store without it);
 * cert_file/key_file give a client certificate.
 *
 * Errors: fallible calls return >= 0 on success or a negative errno:
 *   -ETIMEDOUT / -ECONNREFUSED / -ECONNRESET / -EHOSTUNREACH / -EAGAIN
 *                 no endpoint answered in time (the last endpoint's error)
 *   -EACCES       authentication needed or refused, permission denied
 *   -ENOENT       lease not found (expired or revoked)
 *   -EPROTO       an answer that is not the gateway's JSON, or TLS failed
 *   -EINVAL       bad arguments, or etcd refused the request as invalid
 *   -ENOMEM
 * etcd_error() gives the message.
 *
 * Threads: none. This client is the async one (etcd_async.h) run on a
 * private libuv loop: each call runs that loop until its answer is in, and
 * the client's watches progress while it runs (in a call, or in
 * etcd_watch_next()). A client and its watches are used by one thread.
 */
#ifndef DDP_RENDEZVOUS_ETCD_CLIENT_H
#define DDP_RENDEZVOUS_ETCD_CLIENT_H

#include <stddef.h>
#include <stdint.h>

struct etcd_client;
struct etcd_watch;

/* Default per-operation deadline over all endpoints. */
#define ETCD_DEFAULT_TIMEOUT_MS 5000

struct etcd_options {
	const char *endpoints; /* required, see above */
	int timeout_ms;	       /* per operation, all endpoints together; 0 = default */
	const char *ca_file;   /* TLS: CA bundle to verify the members against */
	const char *cert_file; /* TLS: client certificate (PEM) */
	const char *key_file;  /* TLS: its key (PEM) */
	const char *user;      /* etcd authentication; with password */
	const char *password;
};

/* One key as read. Fields a call does not fill are 0 / NULL. */
struct etcd_kv {
	char *key; /* NUL-terminated */
	void *value;
	size_t value_len; /* value is NUL-terminated too (not counted) */
	int64_t create_revision;
	int64_t mod_revision;
	int64_t version;
	int64_t lease;
};

/* Frees what an etcd_kv holds and zeroes it. NULL is allowed. */
void etcd_kv_release(struct etcd_kv *kv);

/* The message of the calling thread's last failed etcd_* call ("" if none).
 * Valid until that thread's next etcd_* call (and, with etcd_async.h,
 * during a callback that has status < 0). */
const char *etcd_error(void);

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
void etcd_kvs_free(struct etcd_kv *kvs, size_t n);

/* Deletes key. Returns 1 if it existed, 0 if not. */
int etcd_delete(struct etcd_client *c, const char *key);

/* The condition of a compare-and-set. */
enum etcd_cmp_kind {
	ETCD_CMP_ABSENT = 0,	   /* the key does not exist */
	ETCD_CMP_MOD_REVISION = 1, /* its mod_revision equals mod_revision */
	ETCD_CMP_VALUE = 2,	   /* its value equals value/value_len */
};

struct etcd_cmp {
	enum etcd_cmp_kind kind;
	int64_t mod_revision;
	const void *value;
	size_t value_len;
};

/* One transaction: if cmp holds, put value (attached to lease when not 0)
 * and return 1, with cur->mod_revision set to the write's revision and the
 * other fields of *cur zeroed; otherwise return 0 with *cur the key as it is
 * (cur->key NULL and everything 0 when absent). Release *cur either way.
 * cur may be NULL. */
int etcd_cas(struct etcd_client *c, const char *key, const struct etcd_cmp *cmp, const void *value,
	     size_t len, int64_t lease, struct etcd_kv *cur);

/* ---- watches ---- */

enum etcd_event_type {
	ETCD_EVENT_PUT = 0,
	ETCD_EVENT_DELETE = 1,
};

struct etcd_event {
	enum etcd_event_type type;
	struct etcd_kv kv; /* a DELETE has key and mod_revision only */
};

#define ETCD_WATCH_PREFIX 1u /* watch every key starting with key */

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
void etcd_event_release(struct etcd_event *ev);

/* Stops the watch (at once, even mid-reconnect), and frees it and its
 * pending events. NULL is allowed. */
void etcd_watch_free(struct etcd_watch *w);

#endif
