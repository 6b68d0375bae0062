/*
 * store_access.h - who may use a store server: the job's token (agent
 * sessions prove they know it, store_session.h) and the addresses served
 * without proof (torch clients cannot authenticate).
 *
 * The rule, applied when a connection is accepted:
 *  - no token and not restricted (the default): every client is served, as
 *    a TCPStore is; agent sessions need no proof;
 *  - a token, or store_server_restrict(): a client whose address is
 *    allowed is served as today (torch 1.13 and 2.x clients, our blocking
 *    client); one from any other address must open an agent session and
 *    pass the token handshake before anything else, or it is closed (a
 *    stranger without a token, when only restricted, is closed at once).
 *    Every refusal is logged at warning level, at most one line per second
 *    (the lines suppressed in between are counted in the next one).
 * With a token, every agent session must pass the handshake, whatever its
 * address, before any of its queries is served, and the agents' keys (every
 * key whose name begins with STORE_AGENT_KEYS: the rendezvous state,
 * membership, rounds) are written only by such sessions: a torch query
 * that would write one (SET, COMPARE_SET, ADD, APPEND, DELETE_KEY,
 * MULTI_SET, BARRIER, the queue queries), from any address, is refused and
 * its connection closed. Torch clients keep every other key, and may read
 * the agents' (ddp-store get). Without a token nothing is protected: whoever
 * may connect may also open a session.
 *
 * Strangers (connections that must still pass the handshake) are bounded
 * so that they cannot take the host's file descriptors or memory: at most
 * STORE_STRANGERS_PER_ADDR from one address (a new one over it is closed at
 * once), at most STORE_STRANGERS_MAX in all (the oldest is closed to make
 * room, so a real agent's handshake, done in a round trip, still passes
 * during a flood), each for at most the handshake timeout (10 s by
 * default); and a frame of a stranger that announces more than
 * STORE_STRANGER_FRAME_MAX bytes (a proof is 32) closes it before anything
 * of it is buffered. Torch clients from allowed addresses are not
 * strangers: they are served at once.
 *
 * Allowed addresses: loopback means exactly 127.0.0.1 and ::1 (and
 * ::ffff:127.0.0.1), not all of 127.0.0.0/8, so that simulated nodes on
 * 127.0.0.2, 127.0.0.3, ... are told apart from the host itself (a client
 * connecting to any 127.x address without binding comes from 127.0.0.1);
 * the addresses given to store_server_allow(); and the address of every
 * agent session that passed the handshake (a node that joined: its workers
 * may then use the store without a token). IPv4-mapped IPv6 addresses
 * count as their IPv4 address.
 */
#ifndef DDP_RENDEZVOUS_STORE_ACCESS_H
#define DDP_RENDEZVOUS_STORE_ACCESS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "store_server.h"

/* The agents' key space (docs/rendezvous.md, "Keys"). */
#define STORE_AGENT_KEYS "ddprdzv/"

#define STORE_TOKEN_MIN 16   /* bytes: shorter ones can be guessed (proto_auth.h) */
#define STORE_TOKEN_MAX 4096 /* bytes */

#define STORE_STRANGERS_PER_ADDR 16  /* handshakes in progress from one address */
#define STORE_STRANGERS_MAX	 128 /* handshakes in progress in all */
#define STORE_STRANGER_FRAME_MAX 256 /* bytes of one frame before the handshake */

/* Every client, token or not, allowed address or not, is bounded so that
 * a local process cannot take the descriptors of the program that embeds
 * the server (the agent that must start the next round's workers):
 *  - a connection that would hold a descriptor among the last fd_reserve
 *    of RLIMIT_NOFILE (STORE_FD_RESERVE unless store_server_set_fd_reserve
 *    says otherwise) is closed at once: the kernel gives the lowest free
 *    descriptor, so the server never keeps one there, and the program
 *    always has them;
 *  - one address holds at most limits.max_conns_per_addr connections
 *    (an agent's stores: STORE_CONNS_PER_ADDR; a new one over it is closed
 *    at once);
 *  - a connection that has not sent one complete request within the
 *    handshake timeout (10 s by default) of connecting is closed, unless a
 *    connection of its address that has spoken vouches for it (each vouches
 *    for one: a torch 1.13 TCPStore's callback connection stays silent for
 *    the life of the store beside its query connection), or its address
 *    holds fewer than limits.max_silent_per_addr (STORE_SILENT_PER_ADDR)
 *    silent connections kept so far and still silent (one that speaks gives
 *    its place back; a 1.13 TCPStore made without a world
 *    size, or with wait_for_workers=False, sends nothing until it is used);
 *    the oldest are kept first. Clients speak at once otherwise (torch 2.x
 *    validates, 1.13 adds its init key, agents say hello, our client
 *    validates); one that has spoken is never cut for being idle: a worker
 *    waiting on a key, or holding its store connection between steps,
 *    stays. A flood of silent connections from one address is so held to
 *    max_silent_per_addr plus one per client of that address that spoke.
 * Each is logged as a refusal (rate-limited, as below). */
#define STORE_FD_RESERVE 64
/* A bound per address for the stores an agent hosts: far more than a
 * node's workers and agents, so that a flood from one address (a local
 * process) stops there. store_limits_default sets none (a shared store's
 * clients may all come through one address). */
#define STORE_CONNS_PER_ADDR  512
#define STORE_SILENT_PER_ADDR 64

/* Keeps the last `n` descriptors of RLIMIT_NOFILE free of connections (see
 * above; 0: none). */
void store_server_set_fd_reserve(struct store_server *server, unsigned n);

/* Sets the job's token (copied; STORE_TOKEN_MIN..STORE_TOKEN_MAX bytes, any
 * bytes).
 * Applies to connections accepted afterwards (call it before
 * store_server_listen). Returns 0, -EINVAL or -ENOMEM. */
int store_server_set_token(struct store_server *server, const void *token, size_t len);

/* Allows an address (an IPv4 or IPv6 literal; no names, no masks) to be
 * served without the handshake, from now on. Adding one twice is harmless.
 * Returns 0, -EINVAL (not a literal) or -ENOMEM. */
int store_server_allow(struct store_server *server, const char *addr);

/* The same for an address as a socket address (AF_INET or AF_INET6; the
 * port is ignored). Returns 0, -EAFNOSUPPORT or -ENOMEM. */
int store_server_allow_sockaddr(struct store_server *server, const struct sockaddr *addr);

/* Refuses clients from addresses not allowed even without a token (e.g.
 * ddp-rdzvd --allow without --token-file). A token implies it. */
void store_server_restrict(struct store_server *server);

/* How long a client that must prove the token has to pass the handshake
 * after it connected (default 10 s), and any client to send its first
 * complete request; then it is closed and logged, so strangers and silent
 * clients cannot hold connections. 0 keeps the current value. */
void store_server_set_handshake_timeout(struct store_server *server, unsigned ms);

/* Whether a connection from `addr` would be served without the handshake
 * now (for tests and logs). */
bool store_server_allowed(const struct store_server *server, const struct sockaddr *addr);

/* Connections open now that are not strangers (not closing and not
 * waiting to pass the handshake) and have sent a request: the job's agents
 * and workers (a silent connection, kept or not yet judged, never counts:
 * a flood of them cannot keep a finished job's store). Without a token
 * every such connection counts. */
size_t store_server_member_count(const struct store_server *server);

/* Connections refused so far (for tests). */
size_t store_server_refused_count(const struct store_server *server);

#endif
