/*
 * etcd_types.h - the words of the narrow etcd v3 client the rendezvous runs
 * over (etcd_async.h: leases for liveness, put/get, compare-and-set as a
 * transaction, delete, and watches that wait for a change without polling):
 * its options, keys, conditions, events and errors, and the semantics every
 * operation keeps.
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
 * Threads: none. The client runs on the caller's libuv loop (etcd_async.h;
 * the tests' blocking form, tests/rendezvous/etcd/etcd_client.h, runs it on
 * a private one).
 */
#ifndef DDP_RENDEZVOUS_ETCD_TYPES_H
#define DDP_RENDEZVOUS_ETCD_TYPES_H

#include <stddef.h>
#include <stdint.h>

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

/* Frees an array of n keys (a prefix read's). NULL is allowed. */
void etcd_kvs_free(struct etcd_kv *kvs, size_t n);

/* The message of the calling thread's last failed etcd_* call ("" if none).
 * Valid until that thread's next etcd_* call (and, with etcd_async.h,
 * during a callback that has status < 0). */
const char *etcd_error(void);

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

/* Frees what an event holds and zeroes it. NULL is allowed. */
void etcd_event_release(struct etcd_event *ev);

#endif
