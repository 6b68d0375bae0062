/*
 * store_conn.h - one client connection of the store server, and the server
 * state it shares (internal to store_server.c and store_conn.c).
 *
 * A connection is a small state machine: OPEN (reading; replies written with
 * uv_try_write, the rest handed to one uv_write at a time), PAUSED (more than
 * CONN_MAX_PENDING bytes of replies wait for a slow reader: reading stopped,
 * the undecoded rest of the last read kept in `stash`, resumed when the
 * replies drain below half), CLOSING (uv_close called; its waits and watches
 * dropped at once, or in the close callback when closed from inside a store
 * callback; freed in the close callback). Idle, it holds no buffer: the read
 * buffer is the server's, and the decoder and output buffers are freed
 * whenever no frame is partial. What it holds in flight is counted against
 * the server's limits (store_budget.h), and over them it is closed.
 */
#ifndef DDP_RENDEZVOUS_STORE_CONN_H
#define DDP_RENDEZVOUS_STORE_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "bytes.h"
#include "proto.h"
#include "store.h"
#include "store_budget.h"
#include "store_server.h"

#define CONN_READ_BUF_SIZE (64 * 1024)
#define CONN_MAX_PENDING   (4 * 1024 * 1024)
#define CONN_KEEPALIVE_S   60 /* idle seconds before TCP keepalive probes */

enum conn_state {
	CONN_OPEN,
	CONN_PAUSED,
	CONN_CLOSING,
};

/* What a connection may do (store_access.h): be served as a TCPStore
 * client, or only open an agent session and pass the token handshake. */
enum conn_access {
	CONN_ACCESS_OPEN,
	CONN_ACCESS_PROOF,
};

struct store_agent;  /* an agent session's state (store_agent.h) */
struct store_access; /* the server's token and allowed addresses */

struct store_conn {
	uv_tcp_t tcp; /* first: the handle's address is the connection's */
	struct store_server *server;
	struct store_conn *prev;
	struct store_conn *next;
	struct store_owner owner;
	struct proto_decoder dec;
	struct bytebuf out;   /* replies not yet handed to the kernel or uv_write */
	struct bytebuf stash; /* PAUSED: received bytes not yet decoded */
	size_t inflight;      /* bytes in the uv_write in progress (0: none) */
	size_t inflight_cap;  /* the capacity of its buffer (for the budget) */
	enum conn_state state;
	enum conn_access access;
	struct store_agent *agent; /* NULL unless the client opened a session */
	size_t held;		   /* bytes counted in server->budget (store_budget.h) */
	size_t unfreed;		   /* CLOSING: what it held, until its buffers are freed */
	uint64_t active;	   /* budget.tick when it last sent or read anything */
	uint8_t peer[16];	   /* its address (store_bounds.c), if peer_known */
	bool peer_known;
	bool spoke;	       /* a complete request came from it */
	bool vouches;	       /* spoke, and keeps a silent one of its address */
	bool kept_silent;      /* silent, kept within max_silent_per_addr */
	uint64_t silent_until; /* uv_now() by which it must have spoken, or 0 */
};

struct store_server {
	uv_loop_t *loop;
	uv_tcp_t *listener; /* NULL until listening */
	struct store_limits limits;
	struct proto_limits plimits;
	struct store *store;
	struct store_conn *conns;
	size_t nconns;
	struct store_access *access; /* NULL: no token, every address served */
	struct store_budget budget;  /* what the connections hold in flight */
	int port;
	uint64_t accepted;		   /* connections accepted, ever */
	uint64_t requests[PROTO_OP_COUNT]; /* requests run, by op */
	unsigned fd_reserve;		   /* descriptors never taken (store_bounds.c) */
	bool closing;
	int in_callback; /* > 0 while a store callback runs */
	void (*done)(void *arg);
	void *done_arg;
	uint8_t readbuf[CONN_READ_BUF_SIZE]; /* shared: reads are handled at once */
};

/* Accepts one pending connection from the listener (called from the
 * connection callback). Over the connection limit it is accepted and closed
 * at once. */
void store_conn_accept(struct store_server *server);

/* Starts closing the connection (idempotent). */
void store_conn_close(struct store_conn *conn);

/* The store's wake callback: a wait of this owner completed. */
void store_conn_wake(void *ctx, struct store_owner *owner);

/* The store's watch callback: pushes a torch 1.13 key-change message (type
 * byte, key, old value, new value) to the watching connection. */
void store_conn_notify(void *ctx, struct store_owner *owner, enum store_change change,
		       struct byteview key, struct byteview old_value, struct byteview new_value);

/* Runs one decoded request; replies go to conn->out. Returns 0, or a
 * negative errno after which the connection must be closed. */
int store_conn_execute(struct store_conn *conn, const struct proto_request *req);

/* Called by the connection code when a connection has been freed. */
void store_server_conn_gone(struct store_server *server);

#endif
