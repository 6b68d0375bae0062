/*
 * store_budget.c - what the server's connections hold in flight, counted
 * against max_conn_bytes and, with what the store holds, max_total_bytes.
 */
#include "store_budget.h"

#include <errno.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

#include "log.h"
#include "store_agent.h"
#include "store_conn.h"

#define BUDGET_LOG_GAP_MS 1000 /* at most one line a second */

size_t store_budget_conn_bytes(const struct store_conn *conn)
{
	if (conn->state == CONN_CLOSING)
		return 0;
	/* An empty reply buffer (at most 256 bytes, kept for reuse) is not
	 * counted: an idle connection holds nothing. */
	return proto_decoder_held(&conn->dec) + (conn->stash.len ? conn->stash.cap : 0) +
	       (conn->out.len ? conn->out.cap : 0) + conn->inflight_cap;
}

/* The heap's free pages go back to the system (malloc_trim) once the
 * connections and the store hold this fraction of --max-total-bytes (at
 * least BUDGET_TRIM_MIN) less than at their highest since the last time:
 * small buffers and values freed between live ones, which malloc keeps,
 * then never stay resident beside new ones. Traffic whose buffers come and
 * go by less reuses them as they are. */
#define BUDGET_TRIM_SHARE 16
#define BUDGET_TRIM_MIN	  (1024 * 1024)

/* Checks the level (what is allocated: held, closing, stored) against its
 * mark; called only after memory was freed. */
static void budget_trim(struct store_server *s)
{
	struct store_budget *b = &s->budget;
	size_t level = b->held + b->closing + store_bytes_used(s->store);
	size_t step = s->limits.max_total_bytes / BUDGET_TRIM_SHARE;
	if (step < BUDGET_TRIM_MIN)
		step = BUDGET_TRIM_MIN;
	if (level > b->trim_mark)
		b->trim_mark = level;
	if (b->trim_mark - level < step)
		return;
	malloc_trim(0);
	b->trim_mark = level;
}

void store_budget_release(struct store_conn *conn)
{
	conn->server->budget.closing -= conn->unfreed;
	conn->unfreed = 0;
	budget_trim(conn->server);
}

/* Sets conn's count to `now`, and the server's total with it. */
static void budget_set(struct store_conn *conn, size_t now)
{
	struct store_budget *b = &conn->server->budget;
	if (conn->held == 0 && now > 0)
		b->nholding++;
	else if (conn->held > 0 && now == 0)
		b->nholding--;
	b->held = b->held - conn->held + now;
	conn->held = now;
}

void store_budget_recount(struct store_conn *conn)
{
	budget_set(conn, store_budget_conn_bytes(conn));
	budget_trim(conn->server);
}

void store_budget_forget(struct store_conn *conn)
{
	/* Its buffers stay allocated until its close callback. */
	conn->server->budget.closing += conn->held;
	conn->unfreed += conn->held;
	budget_set(conn, 0);
}

void store_budget_progress(struct store_conn *conn)
{
	conn->active = ++conn->server->budget.tick;
}

/* "12.5 MiB", for logs. */
static const char *size_text(size_t v, char *buf, size_t len)
{
	if (v >= 1024 * 1024)
		snprintf(buf, len, "%.1f MiB", (double)v / (1024.0 * 1024.0));
	else if (v >= 1024)
		snprintf(buf, len, "%.1f KiB", (double)v / 1024.0);
	else
		snprintf(buf, len, "%zu bytes", v);
	return buf;
}

/* Logs one close (or refused reply) for the budget: at most one line a
 * second, with the count of those not logged since. */
static void budget_log(struct store_conn *conn, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void budget_log(struct store_conn *conn, const char *fmt, ...)
{
	struct store_budget *b = &conn->server->budget;
	uint64_t now = uv_now(conn->server->loop);
	b->closed++;
	if (b->logged && now - b->log_ms < BUDGET_LOG_GAP_MS) {
		b->unlogged++;
		return;
	}
	char peer[96], why[320];
	store_access_peer_text(conn, peer, sizeof(peer));
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if (b->unlogged)
		log_warn("store: closed a client from %s: %s (and %zu more since the last report)",
			 peer, why, b->unlogged);
	else
		log_warn("store: closed a client from %s: %s", peer, why);
	b->unlogged = 0;
	b->log_ms = now;
	b->logged = true;
}

/* The connection to close first among those holding more than `share`,
 * other than `spare`: the one that has gone longest without sending or
 * reading anything (a client that stopped in the middle of a query, or
 * stopped reading). NULL if none. */
static struct store_conn *budget_victim(struct store_server *s, size_t share,
					const struct store_conn *spare)
{
	struct store_conn *v = NULL;
	for (struct store_conn *c = s->conns; c; c = c->next) {
		if (c == spare || c->state == CONN_CLOSING || c->held <= share)
			continue;
		if (!v || c->active < v->active)
			v = c;
	}
	return v;
}

/* What the connections may hold together now: what the store leaves of
 * max_total_bytes, but at least one connection's worth (a full store still
 * answers). */
static size_t budget_room(const struct store_server *s, size_t used)
{
	size_t limit = s->limits.max_total_bytes;
	size_t floor = s->limits.max_conn_bytes < limit ? s->limits.max_conn_bytes : limit;
	size_t left = limit > used ? limit - used : 0;
	return left > floor ? left : floor;
}

static void budget_log_share(struct store_conn *v, size_t share, size_t room, size_t used)
{
	const struct store_budget *b = &v->server->budget;
	char a[32], c[32], d[32], e[32], f[32], g[32];
	budget_log(v,
		   "it held %s of half-sent queries and unread replies, past its share (%s) of "
		   "the %s that --max-total-bytes (%s) leaves beside the %s stored (%s held by "
		   "%zu clients)",
		   size_text(v->held, a, sizeof(a)), size_text(share, c, sizeof(c)),
		   size_text(room, d, sizeof(d)),
		   size_text(v->server->limits.max_total_bytes, e, sizeof(e)),
		   size_text(used, f, sizeof(f)), size_text(b->held, g, sizeof(g)), b->nholding);
}

/* The connections hold more than their room: closes the others past their
 * share until they hold 1/16 less. `conn`, which has just sent or been sent
 * something, goes only when that is not enough to come under the room
 * itself: then returns -ENOBUFS (conn forgotten here; the caller closes
 * it), else 0. */
static int budget_shed(struct store_conn *conn)
{
	struct store_server *s = conn->server;
	struct store_budget *b = &s->budget;
	for (;;) {
		size_t used = store_bytes_used(s->store), room = budget_room(s, used);
		if (b->nholding == 0 || b->held <= room - room / 16)
			return 0;
		size_t share = room / b->nholding;
		struct store_conn *v = budget_victim(s, share, conn);
		if (v) {
			budget_log_share(v, share, room, used);
			store_conn_close(v);
			continue;
		}
		if (b->held <= room || conn->held <= share)
			return 0;
		budget_log_share(conn, share, room, used);
		store_budget_forget(conn);
		return -ENOBUFS;
	}
}

int store_budget_check(struct store_conn *conn)
{
	struct store_server *s = conn->server;
	store_budget_recount(conn);
	if (conn->held > s->limits.max_conn_bytes) {
		char a[32], c[32];
		budget_log(
		    conn,
		    "it held %s of half-sent queries and unread replies, over --max-conn-bytes "
		    "(%s)",
		    size_text(conn->held, a, sizeof(a)),
		    size_text(s->limits.max_conn_bytes, c, sizeof(c)));
		store_budget_forget(conn);
		return -ENOBUFS;
	}
	if (s->budget.held <= budget_room(s, store_bytes_used(s->store)))
		return 0;
	return budget_shed(conn);
}

int store_budget_reserve(struct store_conn *conn, size_t bytes)
{
	size_t max = conn->server->limits.max_conn_bytes;
	size_t held = store_budget_conn_bytes(conn);
	if (bytes <= max && held <= max - bytes)
		return 0;
	char a[32], c[32];
	budget_log(conn, "it asked for a reply of %s, over --max-conn-bytes (%s)",
		   size_text(bytes, a, sizeof(a)), size_text(max, c, sizeof(c)));
	return -ENOBUFS;
}
