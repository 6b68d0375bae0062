/*
 * store_budget.h - the store server's memory bound: what its connections
 * hold in flight is counted against the limits, as what the store holds is.
 *
 * A connection holds its half-received query (the decoder's buffers, the
 * bytes kept while it is paused) and the replies it has not read yet (not
 * yet handed to the kernel, or in the uv_write in progress). Two limits:
 *   - one connection may hold up to limits.max_conn_bytes; past it, it is
 *     closed;
 *   - all of them together may hold what the store leaves of
 *     limits.max_total_bytes (beside store_bytes_used), but at least one
 *     connection's worth (max_conn_bytes, or max_total_bytes if less), so
 *     that a full store still answers. Past that room, the connections past
 *     their share (the room divided among the connections that hold
 *     anything) are closed, the one that has gone longest without sending
 *     or reading anything first, until they hold 1/16 less than the room (a
 *     flood of clients costs a scan per 1/16 of the room, not per read).
 *     The connection whose growth passed the room is spared while others
 *     can go: it is the one making progress.
 * So the server holds at most max_total_bytes plus one connection's worth,
 * plus a small fixed cost per connection. Its RSS follows: buffers of
 * 4 MiB and more are mapped apart and given back when freed (ddp-rdzvd
 * fixes malloc's mmap threshold), and the heap's free pages are given back
 * (malloc_trim) each time held + stored has fallen by 1/16 of
 * max_total_bytes (at least 1 MiB) from its highest since the last time.
 * Clients that read their replies and finish their queries hold little and
 * are served on. Every close is logged (warning level, at most one line a
 * second with a count of the rest), naming the peer and the limit.
 *
 * Buffers count by their capacity: a reply buffer that the kernel has
 * taken part of stays as resident as it was, and one that grew by doubling
 * may have been touched to its end (the decoder's grow with the bytes that
 * arrive, up to the field announced).
 */
#ifndef DDP_RENDEZVOUS_STORE_BUDGET_H
#define DDP_RENDEZVOUS_STORE_BUDGET_H

#include <stddef.h>
#include <stdint.h>

struct store_conn;
struct store_server;

/* The server's side of the count (embedded in struct store_server). */
struct store_budget {
	size_t held;	     /* bytes every connection holds, together */
	size_t nholding;     /* connections holding any */
	size_t closed;	     /* connections closed for the budget, ever */
	uint64_t tick;	     /* counts progress events (store_budget_progress) */
	uint64_t log_ms;     /* when the last close was logged */
	size_t unlogged;     /* closes since then not logged */
	size_t closing;	     /* held by closing connections, not yet freed */
	size_t trim_mark;    /* held + closing + stored, highest since a trim */
	unsigned logged : 1; /* a close was logged once */
};

/* Bytes conn holds in flight now (a connection that is closing: 0). */
size_t store_budget_conn_bytes(const struct store_conn *conn);

/* Recounts conn after its buffers changed (shrank, or grew in a way the
 * caller checks separately); after a shrink, may trim malloc's heap (see
 * store_budget_release). */
void store_budget_recount(struct store_conn *conn);

/* conn's buffers have been freed (its close callback): what it held when
 * forgotten is no longer allocated. Each time the connections and the store
 * hold 1/16 of max_total_bytes (at least 1 MiB) less than at their highest
 * since the last time, the heap's free pages go back to the system
 * (malloc_trim). */
void store_budget_release(struct store_conn *conn);

/* Recounts conn after its buffers grew and enforces both limits. Returns 0,
 * or -ENOBUFS when conn itself is over its limit or is the one to go (logged
 * here; the caller closes it). May close other connections past their share
 * (store_conn_close). */
int store_budget_check(struct store_conn *conn);

/* Before a reply of `bytes` is built for conn (a query whose answer may be
 * large: multi_get, list_keys): 0, or -ENOBUFS (logged) when it would take
 * conn past max_conn_bytes. */
int store_budget_reserve(struct store_conn *conn, size_t bytes);

/* conn is closing: what it holds no longer counts (but stays allocated
 * until store_budget_release). Idempotent. */
void store_budget_forget(struct store_conn *conn);

/* Notes that conn sent or read something now: of those past their share,
 * the one that did so longest ago goes first. */
void store_budget_progress(struct store_conn *conn);

#endif
