/*
 * store_session.h - an agent's session with the rendezvous store: an
 * asynchronous client on a libuv loop, speaking the "agent session"
 * extension of the TCPStore protocol (docs/protocol.md, "Agent sessions").
 *
 * It gives the primitives the rendezvous state machine runs over
 * (rdzv_machine.h): get of several keys (present or missing), compare-and-set
 * (the expected value may be "absent"), add, set, set_session (a key the
 * store deletes when this session's connection closes), watch (the key's
 * current value, then every change, deletions included) and unwatch.
 *
 * Life cycle:
 *   store_session_connect() -> on_connect(0) -> requests ... ->
 *   store_session_close() (or on_close when the connection is lost)
 * The session object is allocated by store_session_connect() and freed by
 * the library after store_session_close() (once libuv has closed its
 * handles: keep the loop running) or after on_connect reported a failure /
 * on_close ran (the callback is its last use: calling store_session_close()
 * from inside it is allowed and does nothing more; after it returns the
 * pointer is invalid).
 *
 * Connecting: the host is resolved (a name or an IPv4/IPv6 literal) and
 * connected to, retried with backoff (50 ms doubling to 1 s) until
 * connect_timeout_ms have passed since the call; then the handshake runs:
 * the client proves it knows the token by an HMAC-SHA-256 (libsodium) over
 * both nonces, first (a stranger who connects to the store gets nothing
 * to test guesses of the token against), then checks the store's proof,
 * so an agent never joins a store that does not know the job's token. The
 * token itself never crosses the network. Without a token the session is only
 * possible with a store that has none (and accepts this node's address).
 * A refused handshake (wrong token, a token missing on either side) is not
 * retried: it fails at once with -EACCES.
 *
 * Requests: each takes a completion callback, its `arg` and a `tag` (any
 * value the caller wants back, e.g. the machine's request id). They may be
 * issued as soon as store_session_connect() returned (before on_connect:
 * they are sent once the session is authenticated) and pipelined without
 * limit; the callbacks run in the order the requests were issued, from the
 * loop (never from inside the call that issued them). Writes reach the store
 * in the order issued. Byte views passed in are copied before the call
 * returns; views passed to callbacks are valid during the callback only.
 * Callbacks may issue requests, unwatch and close the session.
 *
 * A request call returns 0 (the callback will run exactly once), or, with
 * no callback ever: -EINVAL (a NULL callback, a key of 0 bytes or over
 * STORE_SESSION_MAX_KEY, a value over STORE_SESSION_MAX_VALUE, more than
 * STORE_SESSION_MAX_KEYS keys), -ENOTCONN (the session is closed, or its
 * connect failed, or on_close ran), -ENOMEM.
 * Statuses given to callbacks: 0; -ECONNRESET (the connection closed or was
 * declared lost before the answer: every pending request fails so, then
 * on_close runs); -ECANCELED (store_session_close() was called); -ENOSPC
 * (the store is full); -EINVAL (add: the stored value is not a decimal
 * integer), -ERANGE (add: out of int64); -ENOMEM (the store ran out of
 * memory); any other negative errno the store answered.
 *
 * Liveness: TCP keep-alive is on, a ping goes out every ping_interval_ms
 * (one at a time), and when nothing at all has come from the store for
 * ping_timeout_ms since the waiting ping went out, the connection is
 * declared lost (on_close with -ETIMEDOUT): a dead or frozen store host, or
 * a partition, is noticed even when the session is otherwise silent, and a
 * store that answers each ping within ping_timeout_ms (a store host paused
 * for less than that) never is. A pause of this process (SIGSTOP, a VM
 * migration, a swapped-out host: a ping tick that runs 0.5 s or more late)
 * is not the store's silence: it is counted from the thaw, so what the
 * store sent meanwhile is read before anything is concluded. Agents set
 * the two from --rdzv_conf's keep_alive_interval and its window
 * (keep_alive_interval x keep_alive_max_attempt). A closed connection (the
 * store process died, or the store closed it) is noticed at once
 * (-ECONNRESET).
 *
 * Not thread-safe: one session belongs to one loop and is used from that
 * loop's thread only.
 */
#ifndef DDP_RENDEZVOUS_STORE_SESSION_H
#define DDP_RENDEZVOUS_STORE_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "byteview.h"

/* Argument limits (the server's defaults are larger). */
#define STORE_SESSION_MAX_KEY	(64 * 1024)
#define STORE_SESSION_MAX_VALUE (16 * 1024 * 1024)
#define STORE_SESSION_MAX_KEYS	(64 * 1024)
#define STORE_SESSION_MIN_TOKEN 16 /* why: proto_auth.h */
#define STORE_SESSION_MAX_TOKEN 4096
#define STORE_SESSION_MSG_MAX	768 /* room for any message given to a callback */

/* A value read: present or missing (an empty value is present, len 0). */
struct store_session_value {
	bool present;
	struct byteview bytes;
};

struct store_session_opts {
	const char *host; /* the store's host: a name or an IPv4/IPv6 literal */
	uint16_t port;
	const void *token;		 /* the job's token, or NULL (token_len 0) for none */
	size_t token_len;		 /* STORE_SESSION_MIN_TOKEN..MAX_TOKEN when set */
	const char *bind_addr;		 /* local address to connect from (a literal),
					    or NULL for the kernel's choice: simulated
					    nodes on one host use 127.0.0.2, ... */
	int64_t connect_timeout_ms;	 /* retry until this long after the call (the
					    join deadline); 0 means one attempt */
	uint32_t ping_interval_ms;	 /* 0: no pings (TCP keep-alive only) */
	uint32_t ping_timeout_ms;	 /* nothing heard this long since the
					    waiting ping went out: lost (must
					    exceed the interval) */
	uint32_t server_idle_timeout_ms; /* asks the store to end this session
					    when it hears nothing from it this
					    long (its session keys go with it;
					    the pings keep it alive); 0: never */
};

/* Fills *opts: no token, no bind address, connect timeout 60 s, ping every
 * 500 ms with a 1500 ms deadline, server idle timeout 0 (host and port
 * unset). */
void store_session_opts_default(struct store_session_opts *opts);

struct store_session;

/* status 0: the session is authenticated and ready. Otherwise the connect
 * failed (after the retries, or at once for -EACCES / -EINVAL) and `msg`
 * names host:port and the last error, in a user-facing sentence such as
 * "cannot reach the store at node0:29400 within 60 s: connection refused"
 * or "the store at node0:29400 does not know this job's token (check
 * --rdzv_token or DDP_RDZV_TOKEN)"; the session is then finished (requests
 * issued before have failed with the same status first) and freed after
 * this callback returns. Status values: -ETIMEDOUT (the deadline passed;
 * msg gives the last error), -EACCES (the handshake was refused either way,
 * or a token is missing on one side), -EPROTO (the peer does not speak the
 * agent-session protocol), -ENOMEM. */
typedef void (*store_session_connect_fn)(struct store_session *s, void *arg, int status,
					 const char *msg);

/* The established session ended without store_session_close(): status is
 * -ECONNRESET (the store closed the connection, or its process died),
 * -ETIMEDOUT (pings unanswered: host dead, frozen or cut off) or -EPROTO
 * (the store sent bytes this client cannot parse); msg names host:port,
 * e.g. "lost the store at node0:29400: no answer for 15 s". Runs once,
 * after every pending request and watch has been failed with -ECONNRESET;
 * the session is freed after it returns. */
typedef void (*store_session_close_fn)(struct store_session *s, void *arg, int status,
				       const char *msg);

/* Starts connecting (asynchronously; nothing is sent before this returns).
 * opts and the strings in it are copied. on_close may be NULL. Returns 0
 * with *out set (on_connect will run exactly once), or -EINVAL (no host,
 * port 0, a token under STORE_SESSION_MIN_TOKEN or over STORE_SESSION_MAX_TOKEN bytes, a bind
 * address that is not a literal, a ping timeout not over the interval) or
 * -ENOMEM, with no callback ever. */
int store_session_connect(uv_loop_t *loop, const struct store_session_opts *opts,
			  store_session_connect_fn on_connect, store_session_close_fn on_close,
			  void *arg, struct store_session **out);

/* Ends the session: the connection closes (the store deletes this session's
 * keys), every pending request and watch fails with -ECANCELED (from inside
 * this call), neither on_connect nor on_close runs afterwards, and the
 * memory is freed once libuv has closed the handles. NULL, and a second
 * call, are allowed. */
void store_session_close(struct store_session *s);

/* Where the session connects from, as a literal (e.g. "10.0.0.5" or
 * "127.0.0.2"): the address of this node's interface that reaches the
 * store, for other nodes to reach it. Valid after on_connect(0). Returns 0,
 * -ENOTCONN before, -ENOSPC when buf is too small (46 bytes always do). */
int store_session_local_addr(const struct store_session *s, char *buf, size_t len);

/* The peer as "host:port", as given to store_session_connect() (for
 * messages). Valid until the session is freed. */
const char *store_session_peer(const struct store_session *s);

/* While connecting (before on_connect), why the last attempt failed, e.g.
 * "connection refused"; NULL before the first failure and once the session
 * is ready. Valid until the next turn of the loop. */
const char *store_session_last_error(const struct store_session *s);

/* While connecting (before on_connect): whether a peer accepted the
 * connection but did not answer the session handshake, in the current
 * attempt (its answer is still due) or in the last one (it gets 5 s): not a
 * ddp-rdzvd or ddplaunch store, or a frozen one. False once ready. */
bool store_session_peer_silent(const struct store_session *s);

/* ---- requests ---- */

/* Plain write (set) and session write (set_session: the key is deleted by
 * the store when this session's connection closes, watchers seeing the
 * deletion; a later write to the key by any other request, or a deletion,
 * unbinds it, as a put without lease does in etcd; another set_session binds
 * it to that session). */
typedef void (*store_session_done_fn)(void *arg, uint64_t tag, int status);
int store_session_set(struct store_session *s, struct byteview key, struct byteview value,
		      store_session_done_fn done, void *arg, uint64_t tag);
int store_session_set_session(struct store_session *s, struct byteview key, struct byteview value,
			      store_session_done_fn done, void *arg, uint64_t tag);

/* Reads n keys (1..STORE_SESSION_MAX_KEYS) at one point of the store's
 * history; vals has n entries in the order of keys (NULL when status < 0). */
typedef void (*store_session_get_fn)(void *arg, uint64_t tag, int status,
				     const struct store_session_value *vals, size_t n);
int store_session_get(struct store_session *s, const struct byteview *keys, size_t n,
		      store_session_get_fn done, void *arg, uint64_t tag);

/* Compare-and-set: stores `value` iff the key holds `expected` (has_expected)
 * or is absent (!has_expected; `expected` is ignored). swapped says whether
 * it stored; `current` is the key's value after the operation (the one that
 * stopped it when !swapped; absent: present false). Exact: unlike
 * TCPStore's compare_set, absent and empty are told apart, and swapped is
 * false when the key already held `value` but not `expected`. */
typedef void (*store_session_cas_fn)(void *arg, uint64_t tag, int status, bool swapped,
				     struct store_session_value current);
int store_session_cas(struct store_session *s, struct byteview key, bool has_expected,
		      struct byteview expected, struct byteview value, store_session_cas_fn done,
		      void *arg, uint64_t tag);

/* Atomic add to a decimal counter (missing counts as 0; stored as decimal
 * text, as TCPStore's add); value is the sum. */
typedef void (*store_session_add_fn)(void *arg, uint64_t tag, int status, int64_t value);
int store_session_add(struct store_session *s, struct byteview key, int64_t delta,
		      store_session_add_fn done, void *arg, uint64_t tag);

/* Watches a key: `event` runs first with the key's value at the time the
 * store registered the watch, then after every change (set, add, CAS that
 * stored, append, deletion, a session key deleted because its session
 * ended), with the value after it (deleted: present false). Level-
 * triggered: duplicates may come (e.g. when the key is watched twice), but
 * the last event delivered is always the key's latest value. On failure
 * `event` runs once with status < 0 (then never again): -ECONNRESET,
 * -ECANCELED, -ENOSPC, ... After store_session_unwatch(id) it never runs
 * again. *id (never 0) names the watch. Returns as the other requests. */
typedef void (*store_session_event_fn)(void *arg, uint64_t id, int status,
				       struct store_session_value value);
int store_session_watch(struct store_session *s, struct byteview key, store_session_event_fn event,
			void *arg, uint64_t *id);

/* Stops a watch: its callback never runs again, even for events already
 * received. Returns 0, or -ENOENT for an unknown or finished id. (The store
 * stops sending the key's changes once no watch of this session is left on
 * it.) */
int store_session_unwatch(struct store_session *s, uint64_t id);

/* Requests issued and not yet answered (for tests and back-pressure). */
size_t store_session_pending(const struct store_session *s);

#endif
