/*
 * store_server.h - the TCPStore-compatible key-value server, embeddable in any
 * libuv loop. ddp-rdzvd runs one on its own loop; ddplaunch hosts one on the
 * loop that also supervises its workers.
 *
 * One server serves torch 1.13 clients and torch 2.x clients at the same
 * time (each connection's generation is told from its first bytes) and our
 * own C client (store_client.h). All memory a server owns is freed when
 * store_server_close()'s callback runs.
 */
#ifndef DDP_RENDEZVOUS_STORE_SERVER_H
#define DDP_RENDEZVOUS_STORE_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* Every length read from the network is checked against these before
 * anything is allocated; a request over a limit closes that connection.
 * What connections hold in flight (a half-received query, replies not yet
 * read) counts too: against max_conn_bytes for each, and with what is
 * stored against max_total_bytes (store_budget.h: who is closed then). */
struct store_limits {
	size_t max_key_len;	     /* bytes in one key */
	size_t max_value_len;	     /* bytes in one value */
	size_t max_keys_per_request; /* keys in one CHECK/WAIT/MULTI_GET/MULTI_SET */
	size_t max_total_bytes;	     /* stored + held in flight, all together */
	size_t max_connections;	     /* open client connections */
	size_t max_barrier_world;    /* world size of one BARRIER */
	size_t max_list_keys;	     /* keys one LIST_KEYS may return */
	size_t max_conn_bytes;	     /* held in flight by one connection; also
				      * bounds one request; 0: the default below */
	size_t max_conns_per_addr;   /* open connections from one address (0: no
				      * bound); store_access.h */
	size_t max_silent_per_addr;  /* connections of one address kept although
				      * silent past the first request's deadline
				      * and vouched for by none; store_access.h */
};

/* Fills *limits with the defaults (sized for real jobs; see the .c file). */
void store_limits_default(struct store_limits *limits);

/* max_conn_bytes when it is 0: room for a query and a reply of the largest
 * key and value (twice max_value_len, plus max_key_len), and at least
 * STORE_CONN_BYTES_MIN (for queries that name many keys). */
#define STORE_CONN_BYTES_MIN ((size_t)64 * 1024 * 1024)
size_t store_conn_bytes_default(const struct store_limits *limits);

struct store_server;

/* Creates a server on `loop` (not started). `limits` is copied; NULL means
 * the defaults. Returns 0 or -ENOMEM.
 * libuv writes to sockets with write(2), so a client that has gone raises
 * SIGPIPE; if the process still has SIGPIPE's default action (which would
 * kill it), this sets it to be ignored. */
int store_server_new(uv_loop_t *loop, const struct store_limits *limits, struct store_server **out);

/* Binds host:port (port 0: the kernel chooses) and starts listening with a
 * large backlog. `host` is an IPv4 or IPv6 literal or a name; "0.0.0.0" or
 * "::" listens on every interface. Returns 0, or a negative errno (libuv's
 * codes unchanged: UV_EADDRINUSE when another process holds the port,
 * UV_EADDRNOTAVAIL, ...); on failure nothing stays open and the call may be
 * repeated with another port. Call at most once successfully. */
int store_server_listen(struct store_server *server, const char *host, int port);

/* Sets key to value (a NUL-terminated string) in the server's store, as
 * the embedding program's own key (e.g. who hosts the store: a client may
 * read it). Returns 0, -EINVAL (over the limits) or -ENOMEM. */
int store_server_put(struct store_server *server, const char *key, const char *value);

/* The port actually bound (after a successful listen), else 0. */
int store_server_port(const struct store_server *server);

/* Number of client connections open now (for tests and benchmarks). */
size_t store_server_connection_count(const struct store_server *server);

/* What the server did so far and holds now, for /metrics (ddp-rdzvd
 * --metrics-port). */
struct store_server_stats {
	size_t connections;	  /* client connections open now */
	uint64_t accepted;	  /* connections accepted, ever */
	uint64_t requests[40];	  /* requests run, by proto_op (proto.h), ever */
	size_t nops;		  /* entries of requests[] that are ops */
	size_t keys;		  /* keys stored now */
	size_t bytes_stored;	  /* bytes of keys and values stored now */
	size_t bytes_in_flight;	  /* bytes connections hold (queries, replies) */
	size_t refused;		  /* connections refused by who may connect */
	size_t closed_for_budget; /* connections closed for the memory budget */
	size_t waiters;		  /* requests waiting for keys now */
};

/* Fills *out. */
void store_server_get_stats(const struct store_server *server, struct store_server_stats *out);

/* The name of request kind `op` of struct store_server_stats (proto.h's
 * lowercase name). */
const char *store_server_op_name(size_t op);

/* Starts a fresh key space for the next group of clients (a restarted
 * worker group): closes every client connection open now (their pending
 * waits go with them, and bytes they sent that were not yet read are never
 * run), then drops every key and queue except those whose name begins with
 * one of the `nkeep` prefixes in `keep` (what the embedding program keeps
 * across groups). Keeps listening. Returns how many keys were dropped.
 * A client that connects afterwards sees only the kept keys. (A connection
 * still waiting in the kernel's listen backlog is accepted afterwards like
 * a new one.) */
size_t store_server_reset(struct store_server *server, const char *const *keep, size_t nkeep);

/* Stops listening and closes every connection. `done` (may be NULL) runs
 * once every handle is closed and the server's memory is freed; the loop
 * must keep running until then. Safe to call once. (When nothing was open,
 * i.e. the server never listened and has no clients, everything is freed
 * and `done` runs before this returns.) */
void store_server_close(struct store_server *server, void (*done)(void *arg), void *arg);

#endif
