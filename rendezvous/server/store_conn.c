/*
 * store_conn.c - reading, decoding and writing of one client connection.
 */
#include "store_conn.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "store_agent.h"

/* libuv buffers hold an unsigned int length: larger replies go in pieces. */
#define CONN_WRITE_PIECE ((size_t)1 << 30)

/* An emptied reply buffer up to this size is kept for the next replies
 * (small ones need no malloc); a larger one is freed. The budget does not
 * count it, so it is a fixed cost of every connection, --max-connections
 * times over: 4 KiB was 256 MiB. */
#define CONN_OUT_KEEP 256

struct conn_write {
	uv_write_t req;
	struct store_conn *conn;
	struct bytebuf buf;
	uv_buf_t pieces[];
};

/* Drops the connection's waits and watches from the store. */
static void conn_forget(struct store_conn *conn)
{
	struct store *store = conn->server->store;
	size_t dropped = store_owner_cancel(store, &conn->owner);
	store_owner_unwatch(store, &conn->owner);
	store_agent_forget(conn); /* after unwatch: its own deletions go to others only */
	if (dropped)
		log_debug("store: client gone; dropped %zu pending wait(s)", dropped);
}

static void conn_closed(uv_handle_t *handle)
{
	struct store_conn *conn = (struct store_conn *)handle;
	struct store_server *server = conn->server;
	if (conn->prev)
		conn->prev->next = conn->next;
	else if (server->conns == conn)
		server->conns = conn->next;
	if (conn->next)
		conn->next->prev = conn->prev;
	conn_forget(conn); /* if a store callback closed it, not done yet */
	proto_decoder_release(&conn->dec);
	bytebuf_release(&conn->out);
	bytebuf_release(&conn->stash);
	store_budget_release(conn);
	free(conn);
	server->nconns--;
	store_server_conn_gone(server);
}

void store_conn_close(struct store_conn *conn)
{
	if (conn->state == CONN_CLOSING)
		return;
	conn->state = CONN_CLOSING;
	store_budget_forget(conn);
	store_access_unlist(conn); /* a stranger no longer counts */
	/* At once, so a queue push cannot wake a closing client instead of a
	 * live one; but a store callback must not change the store under
	 * itself, so from there it waits for the close callback. */
	if (conn->server->in_callback == 0)
		conn_forget(conn);
	uv_close((uv_handle_t *)&conn->tcp, conn_closed);
}

static void conn_flush(struct store_conn *conn);
static void conn_resume(struct store_conn *conn);

static void conn_write_done(uv_write_t *req, int status)
{
	struct conn_write *w = (struct conn_write *)req;
	struct store_conn *conn = w->conn;
	bytebuf_release(&w->buf);
	free(w);
	conn->inflight = 0;
	conn->inflight_cap = 0;
	if (conn->state == CONN_CLOSING)
		return;
	if (status < 0) {
		log_debug("store: write to a client failed (%s); closing it", uv_strerror(status));
		store_conn_close(conn);
		return;
	}
	store_budget_progress(conn);
	store_budget_recount(conn);
	conn_flush(conn);
	conn_resume(conn);
}

static void conn_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
	struct store_conn *conn = (struct store_conn *)handle;
	buf->base = (char *)conn->server->readbuf;
	buf->len = sizeof(conn->server->readbuf);
}

static void conn_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);

static bool conn_over(const struct store_conn *conn)
{
	return conn->inflight + conn->out.len > CONN_MAX_PENDING;
}

/* Hands conn->out to the kernel (uv_try_write), and what does not fit to one
 * uv_write at a time. Closes the connection on a write error. */
static void conn_flush(struct store_conn *conn)
{
	if (conn->state == CONN_CLOSING || conn->inflight || conn->out.len == 0)
		return;
	size_t first = conn->out.len < CONN_WRITE_PIECE ? conn->out.len : CONN_WRITE_PIECE;
	uv_buf_t b = uv_buf_init((char *)conn->out.data, (unsigned)first);
	int n = uv_try_write((uv_stream_t *)&conn->tcp, &b, 1);
	if (n < 0 && n != UV_EAGAIN) {
		log_debug("store: write to a client failed (%s); closing it", uv_strerror(n));
		store_conn_close(conn);
		return;
	}
	if (n < 0)
		n = 0;
	if (n > 0)
		store_budget_progress(conn);
	bytebuf_consume(&conn->out, (size_t)n);
	if (conn->out.len == 0) {
		if (conn->out.cap > CONN_OUT_KEEP)
			bytebuf_release(&conn->out);
		store_budget_recount(conn);
		return;
	}
	/* The kernel buffer is full: hand the rest, buffer and all, to libuv. */
	size_t npieces = (conn->out.len + CONN_WRITE_PIECE - 1) / CONN_WRITE_PIECE;
	struct conn_write *w = malloc(sizeof(*w) + npieces * sizeof(uv_buf_t));
	if (!w) {
		store_conn_close(conn);
		return;
	}
	w->conn = conn;
	w->buf = conn->out;
	conn->out = (struct bytebuf){0};
	for (size_t i = 0; i < npieces; i++) {
		size_t off = i * CONN_WRITE_PIECE, left = w->buf.len - off;
		w->pieces[i] =
		    uv_buf_init((char *)w->buf.data + off,
				(unsigned)(left < CONN_WRITE_PIECE ? left : CONN_WRITE_PIECE));
	}
	int rc = uv_write(&w->req, (uv_stream_t *)&conn->tcp, w->pieces, (unsigned)npieces,
			  conn_write_done);
	if (rc < 0) {
		bytebuf_release(&w->buf);
		free(w);
		store_conn_close(conn);
		return;
	}
	conn->inflight = w->buf.len;
	conn->inflight_cap = w->buf.cap;
	store_budget_recount(conn);
}

void store_conn_wake(void *ctx, struct store_owner *owner)
{
	struct store_conn *conn =
	    (struct store_conn *)((char *)owner - offsetof(struct store_conn, owner));
	if (conn->state == CONN_CLOSING)
		return;
	conn->server->in_callback++;
	if (proto_put_u8(&conn->out, PROTO_WAIT_STOP_WAITING) < 0 || store_budget_check(conn) < 0)
		store_conn_close(conn);
	else
		conn_flush(conn);
	conn->server->in_callback--;
}

void store_conn_notify(void *ctx, struct store_owner *owner, enum store_change change,
		       struct byteview key, struct byteview old_value, struct byteview new_value)
{
	struct store_conn *conn =
	    (struct store_conn *)((char *)owner - offsetof(struct store_conn, owner));
	if (conn->state == CONN_CLOSING)
		return;
	conn->server->in_callback++;
	int rc;
	if (conn->agent) {
		rc = store_agent_event(conn, change, key, new_value);
	} else {
		rc = proto_put_u8(&conn->out, (uint8_t)change);
		if (rc == 0)
			rc = proto_put_bytes(&conn->out, key.data, key.len);
		if (rc == 0)
			rc = proto_put_bytes(&conn->out, old_value.data, old_value.len);
		if (rc == 0)
			rc = proto_put_bytes(&conn->out, new_value.data, new_value.len);
	}
	/* A watcher that does not read is held to its share too. */
	if (rc < 0 || store_budget_check(conn) < 0)
		store_conn_close(conn);
	else
		conn_flush(conn);
	conn->server->in_callback--;
}

/* Says (at debug level: ddp-rdzvd -v) why a query closes the connection:
 * the protocol has no error reply, so this is the only place it is told. */
static void conn_log_refusal(struct store_conn *conn, int rc)
{
	enum proto_op op = conn->dec.req.op;
	const char *why = strerror(-rc);
	if (rc == -EMSGSIZE)
		why = "a key, value, key count or query over the limits (--max-key-len, "
		      "--max-value-len, --max-keys-per-request, --max-conn-bytes, "
		      "--max-list-keys, --max-barrier-world)";
	else if (rc == -EPROTO)
		why = "a bad or unknown query";
	else if (rc == -ENOBUFS)
		why = "a reply over --max-conn-bytes";
	else if (rc == -ENOSPC)
		why = "the store is full (--max-total-bytes)";
	else if (rc == -EINVAL && (op == PROTO_OP_ADD || op == PROTO_OP_BARRIER))
		why = "the value there is not an integer";
	char peer[96];
	store_access_peer_text(conn, peer, sizeof(peer));
	log_debug("store: closing a client from %s at %s: %s", peer,
		  rc == -EPROTO ? "a query" : proto_op_name(op), why);
}

/* Decodes and runs the requests in p[0..len). When the replies waiting for a
 * slow reader pass CONN_MAX_PENDING, the unread rest is kept in conn->stash
 * and reading stops until the replies drain (conn_write_done). */
static void conn_process(struct store_conn *conn, const uint8_t *p, size_t left)
{
	while (left > 0 && conn->state == CONN_OPEN) {
		size_t used = 0;
		const struct proto_request *req = NULL;
		int rc = proto_decoder_feed(&conn->dec, p, left, &used, &req);
		p += used;
		left -= used;
		if (rc == 1) {
			conn->spoke = true;
			rc = store_conn_execute(conn, req);
		}
		if (rc == -EMSGSIZE && conn->access == CONN_ACCESS_PROOF)
			store_access_frame_refused(conn);
		if (rc < 0) {
			conn_log_refusal(conn, rc);
			store_conn_close(conn);
			return;
		}
		if (conn_over(conn))
			conn_flush(conn);
		/* What the query left (a partial frame, a reply the kernel did
		 * not take) counts before the next one runs. */
		if (conn->state == CONN_OPEN && store_budget_check(conn) < 0) {
			store_conn_close(conn);
			return;
		}
		if (conn->state == CONN_OPEN && conn_over(conn)) {
			if (bytebuf_append(&conn->stash, p, left) < 0 ||
			    store_budget_check(conn) < 0) {
				store_conn_close(conn);
				return;
			}
			uv_read_stop((uv_stream_t *)&conn->tcp);
			conn->state = CONN_PAUSED;
			return;
		}
	}
	if (conn->state != CONN_OPEN)
		return;
	if (proto_decoder_idle(&conn->dec))
		proto_decoder_trim(&conn->dec);
	store_budget_recount(conn);
	conn_flush(conn);
}

/* A paused connection whose replies drained: run what was kept, then read
 * again unless it paused once more. */
static void conn_resume(struct store_conn *conn)
{
	if (conn->state != CONN_PAUSED || conn->inflight + conn->out.len > CONN_MAX_PENDING / 2)
		return;
	conn->state = CONN_OPEN;
	struct bytebuf kept = conn->stash;
	conn->stash = (struct bytebuf){0};
	conn_process(conn, kept.data, kept.len);
	bytebuf_release(&kept);
	if (conn->state == CONN_OPEN &&
	    uv_read_start((uv_stream_t *)&conn->tcp, conn_alloc, conn_read) < 0)
		store_conn_close(conn);
}

static void conn_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
	struct store_conn *conn = (struct store_conn *)stream;
	if (nread < 0) {
		if (!proto_decoder_idle(&conn->dec))
			log_debug("store: client closed in the middle of a frame");
		store_conn_close(conn);
		return;
	}
	if (nread > 0)
		store_budget_progress(conn);
	if (conn->state == CONN_PAUSED) {
		/* Not expected after uv_read_stop, but never drop bytes. */
		if (bytebuf_append(&conn->stash, buf->base, (size_t)nread) < 0 ||
		    store_budget_check(conn) < 0)
			store_conn_close(conn);
		return;
	}
	conn_process(conn, (const uint8_t *)buf->base, (size_t)nread);
}

void store_conn_accept(struct store_server *server)
{
	struct store_conn *conn = calloc(1, sizeof(*conn));
	if (!conn)
		return;
	conn->server = server;
	store_budget_progress(conn);
	int rc = uv_tcp_init(server->loop, &conn->tcp);
	if (rc < 0) {
		free(conn);
		return;
	}
	conn->next = server->conns;
	if (server->conns)
		server->conns->prev = conn;
	server->conns = conn;
	server->nconns++;
	server->accepted++;
	proto_decoder_init(&conn->dec, &server->plimits);
	rc = uv_accept((uv_stream_t *)server->listener, (uv_stream_t *)&conn->tcp);
	if (rc == 0 && server->nconns > server->limits.max_connections) {
		log_debug("store: connection limit (%zu) reached; closing a new client",
			  server->limits.max_connections);
		rc = -EMFILE;
	}
	if (rc == 0)
		rc = store_bounds_admit(conn);
	if (rc == 0)
		rc = store_access_admit(conn);
	if (rc == 0) {
		uv_tcp_nodelay(&conn->tcp, 1);
		/* A peer whose machine died without a FIN is found and its
		 * waits dropped, instead of being held forever. */
		uv_tcp_keepalive(&conn->tcp, 1, CONN_KEEPALIVE_S);
		rc = uv_read_start((uv_stream_t *)&conn->tcp, conn_alloc, conn_read);
	}
	if (rc < 0)
		store_conn_close(conn);
}
