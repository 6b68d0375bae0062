/*
 * store_agent.h - the server side of agent sessions (internal to the
 * server): the handshake, the session queries, watch events, session-key
 * expiry (store_agent.c), and the access rule applied to every connection
 * (store_access.c; its public half is store_access.h).
 */
#ifndef DDP_RENDEZVOUS_STORE_AGENT_H
#define DDP_RENDEZVOUS_STORE_AGENT_H

#include <stdbool.h>
#include <stdint.h>

#include "proto.h"
#include "store_conn.h"

enum agent_phase {
	AGENT_NEW,	  /* a stranger that must open a session: nothing yet */
	AGENT_CHALLENGED, /* HELLO answered with a challenge; AUTH must follow */
	AGENT_READY,	  /* every session query is served */
};

struct store_agent {
	enum agent_phase phase;
	uint64_t idle_ms;		   /* the client's idle timeout (0: none) */
	uint64_t handshake_until;	   /* uv_now() by which AUTH must pass (0: none) */
	uint64_t last_ms;		   /* uv_now() of its last request */
	uint8_t peer[16];		   /* a stranger's address (IPv4 mapped), for the bounds */
	struct store_conn *conn;	   /* a stranger's connection, while listed */
	struct store_agent *snext, *sprev; /* the server's strangers, newest first */
	uint8_t client_nonce[PROTO_SESSION_NONCE_LEN];
	uint8_t server_nonce[PROTO_SESSION_NONCE_LEN];
};

/* Runs a request of a connection that opened (or must open) an agent
 * session, or a session query on any connection. Returns 0, or a negative
 * errno after which the connection is closed. */
int store_agent_execute(struct store_conn *conn, const struct proto_request *req);

/* Encodes a watch event (tag, key, present, value) for an agent session.
 * Returns 0 or -ENOMEM. */
int store_agent_event(struct store_conn *conn, enum store_change change, struct byteview key,
		      struct byteview value);

/* The connection is going: its session keys are deleted (watchers told)
 * and the session state freed. Must not run inside a store callback. */
void store_agent_forget(struct store_conn *conn);

/* At accept: decides conn->access (a stranger that must prove the token
 * gets its session state at once, with the handshake deadline). Returns 0,
 * or -EACCES when the client is refused at once (logged), or -ENOMEM. */
int store_access_admit(struct store_conn *conn);

/* At accept, before store_access_admit: the bounds on every connection
 * (store_access.h, "Every client"). Returns 0, or -EMFILE (the descriptor
 * reserve) or -EACCES (its address holds too many), logged. */
int store_bounds_admit(struct store_conn *conn);

/* From the sweep: whether conn is past its first request's deadline
 * (logged; the caller closes it). */
bool store_bounds_silent(struct store_conn *conn, uint64_t now);

/* The first request's and the token handshake's time, in ms. */
uint64_t store_access_handshake_ms(const struct store_server *server);

/* Logs (rate-limited) and counts the refusal of a connection. */
void store_access_refused(struct store_conn *conn, const char *why);

/* The peer's "10.0.0.5:41234" ("[::1]:41234"; "?:0" when unknown), for
 * logs. */
void store_access_peer_text(struct store_conn *conn, char *buf, size_t len);

/* Whether `req`, a torch query, would write one of the agents' keys on a
 * server with a token (store_access.h): then it must be refused. */
bool store_access_agent_write(const struct store_server *server, const struct proto_request *req);

/* The server's token, or NULL (*len 0) when it has none. */
const uint8_t *store_access_token(const struct store_server *server, size_t *len);

/* An agent session passed the handshake: its address is allowed from now
 * on (its node joined). */
void store_access_joined(struct store_conn *conn);

/* The deadline of the token handshake (uv_now() based) for a connection
 * accepted or saying HELLO now. */
uint64_t store_access_handshake_deadline(struct store_server *server);

/* Makes sure idle agent sessions, and handshakes past their deadline, are
 * looked for (a sweep every 100 ms). */
void store_access_watch_idle(struct store_server *server);

/* Stops the sweep (store_server_close). */
void store_access_close(struct store_server *server);

/* The connection is no longer a stranger (it passed the handshake, or it
 * is going): it leaves the list the bounds are counted on. Idempotent. */
void store_access_unlist(struct store_conn *conn);

/* Says why a stranger's frame over STORE_STRANGER_FRAME_MAX closed it
 * (logged and counted as a refusal). */
void store_access_frame_refused(struct store_conn *conn);

/* Frees the server's access state (NULL allowed). */
void store_access_free(struct store_access *access);

#endif
