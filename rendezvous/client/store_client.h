/*
 * store_client.h - blocking client of a TCPStore-compatible server
 * (ddp-rdzvd, ddplaunch's store, or torch's own 2.x TCPStore server).
 *
 * It speaks the torch 2.x framing (validate handshake, one connection, ping,
 * cancel-wait). Keys are sent exactly as given: no "/" is added (torch's
 * Python client prefixes "/"; add it yourself to share keys with torch).
 *
 * Errors: every fallible call returns >= 0 on success or a negative errno:
 *   -ETIMEDOUT     a deadline passed (store_client_error() names the key(s)
 *                  still missing, or the operation)
 *   -ECONNREFUSED  nobody listens at the address (the message names it)
 *   -ECONNRESET / -EPIPE  the server closed the connection: it does so at a
 *                  query it refuses (over a limit, an add to a non-number;
 *                  torch's protocol has no error reply), so the message
 *                  names that query and what the server refuses there
 *   -EPROTO        the server sent something that is not a valid reply
 *   -EINVAL        bad arguments (e.g. a key or value over the wire limits)
 *   -ENOMEM
 * After any error other than -ETIMEDOUT from store_client_wait() or
 * store_client_barrier(), the connection is unusable: free the client and
 * connect again.
 * A client is used by one thread at a time.
 */
#ifndef DDP_RENDEZVOUS_STORE_CLIENT_H
#define DDP_RENDEZVOUS_STORE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

struct store_client;

/* Connects to host:port, retrying refused/unreachable connects with
 * exponential backoff and jitter until `timeout_ms` has passed, then does the
 * validate + ping handshake. On failure *out is NULL and, if `errbuf` is not
 * NULL, a message naming the address is written there. */
int store_client_connect(const char *host, int port, uint64_t timeout_ms, struct store_client **out,
			 char *errbuf, size_t errbuf_len);

/* The framing a client speaks. */
enum store_client_proto {
	STORE_CLIENT_PROTO_V2 = 0, /* torch 2.x: validate handshake, ping, cancel-wait */
	/* torch 1.13 (for talking to torch 1.13's own server, e.g. in benchmarks):
	 * no handshake; ping is a num_keys round trip; multi_get/multi_set are
	 * sent as single gets/sets; append fails with -EOPNOTSUPP; a timed-out
	 * wait cannot be cancelled, so the connection is unusable after it
	 * (-EPIPE from then on: free the client and connect again). */
	STORE_CLIENT_PROTO_V1 = 1,
};

/* store_client_connect() with a choice of framing. */
int store_client_connect_proto(const char *host, int port, uint64_t timeout_ms,
			       enum store_client_proto proto, struct store_client **out,
			       char *errbuf, size_t errbuf_len);

/* Closes the connection and frees the client. NULL is allowed. */
void store_client_free(struct store_client *client);

/* The message describing the last error on this client ("" if none). Valid
 * until the next call on the client. */
const char *store_client_error(const struct store_client *client);

/* Default deadline for operations that wait (get, wait, multi_get) when
 * called with timeout_ms == 0: 300 s. */
#define STORE_CLIENT_DEFAULT_TIMEOUT_MS 300000u

/* Sends a SET. The protocol has no reply to it (nor to append, multi_set),
 * so 0 means sent, not stored: a server that refuses the write (a key or
 * value over its limits) closes the connection, and the next call that reads
 * a reply fails with -ECONNRESET naming this write. To know at once, follow
 * with store_client_confirm(). */
int store_client_set(struct store_client *client, const char *key, const void *value, size_t len);

/* One round trip (ping; num_keys in torch 1.13 framing) that returns 0 only
 * once the server has run every query sent before it, so the writes before
 * it were stored. -ECONNRESET / -EPIPE when the server closed the connection
 * instead (store_client_error() names the last write and what the server
 * refuses). */
int store_client_confirm(struct store_client *client);

/* Waits until `key` exists (up to timeout_ms; 0 = default), then returns a
 * malloc'ed copy of its value in *value (NUL-terminated for convenience;
 * *len excludes the NUL). The caller frees *value.
 * With 2.x framing it first asks with a plain GET (one round trip when the
 * key is there) and only waits when the answer is empty; this relies on the
 * server answering a GET of a missing key with empty bytes, as ddp-rdzvd and
 * torch's libuv server (the default since 2.4) do. */
int store_client_get(struct store_client *client, const char *key, uint64_t timeout_ms,
		     void **value, size_t *len);

/* Atomically adds `delta` to the decimal integer stored at `key` (a missing
 * key counts as 0) and returns the new value in *result. */
int store_client_add(struct store_client *client, const char *key, int64_t delta, int64_t *result);

/* torch's compare_set: if the key is missing and `expected` is empty, stores
 * `desired`; if missing and `expected` is not empty, stores nothing; if
 * present, replaces it with `desired` iff it equals `expected`. *current
 * (malloc'ed, caller frees) receives the value after the operation (for a
 * missing key with non-empty expected: `expected`). */
int store_client_compare_set(struct store_client *client, const char *key, const void *expected,
			     size_t expected_len, const void *desired, size_t desired_len,
			     void **current, size_t *current_len);

/* Returns 1 if every key exists, 0 if not. */
int store_client_check(struct store_client *client, const char *const *keys, size_t nkeys);

/* Waits until every key exists; -ETIMEDOUT after timeout_ms (0 = default),
 * with store_client_error() naming the keys still missing. The wait is
 * cancelled on the server, so the connection stays usable after a timeout. */
int store_client_wait(struct store_client *client, const char *const *keys, size_t nkeys,
		      uint64_t timeout_ms);

int store_client_num_keys(struct store_client *client, int64_t *count);

/* Returns 1 if the key existed and was deleted, 0 if it did not exist. */
int store_client_delete(struct store_client *client, const char *key);

/* Appends bytes to the key's value (creating it). */
int store_client_append(struct store_client *client, const char *key, const void *value,
			size_t len);

/* Waits for all keys, then fetches them in one round trip. values[i] and
 * lens[i] are filled as store_client_get() does; on error none are left
 * allocated. */
int store_client_multi_get(struct store_client *client, const char *const *keys, size_t nkeys,
			   uint64_t timeout_ms, void **values, size_t *lens);

int store_client_multi_set(struct store_client *client, const char *const *keys,
			   const void *const *values, const size_t *lens, size_t nkeys);

/* torch 2.x's list_keys: every key that holds a value, in no particular
 * order. *keys receives a malloc'ed array of *nkeys malloc'ed,
 * NUL-terminated keys (free it with store_client_free_keys()). -EOPNOTSUPP
 * in torch 1.13 framing, which has no such query. */
int store_client_list_keys(struct store_client *client, char ***keys, size_t *nkeys);

/* Frees what store_client_list_keys() returned. NULL is allowed. */
void store_client_free_keys(char **keys, size_t nkeys);

/* torch 2.x's barrier: counts this caller at `key` (a decimal counter key,
 * as in torch) and waits until `world_size` callers have arrived, up to
 * timeout_ms (0 = default). On -ETIMEDOUT the wait is cancelled on the
 * server and the connection stays usable; the arrival still counts, as in
 * torch. A key that has reached its world size releases every later
 * arrival at once: use a new key per round. -EOPNOTSUPP in 1.13 framing. */
int store_client_barrier(struct store_client *client, const char *key, int64_t world_size,
			 uint64_t timeout_ms);

/* Round trip with a nonce; returns 0 when the server echoed it. */
int store_client_ping(struct store_client *client);

#endif
