/*
 * store_session_conn.c - the agent session's connection: resolving and
 * connecting with retries until the deadline, reading and writing, and the
 * end of the session (lost, failed or closed). The handshake and the pings
 * are in store_session_hello.c.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "proto_auth.h"
#include "store_session_int.h"

#define SESS_BACKOFF_FIRST_MS 50
#define SESS_BACKOFF_MAX_MS   1000
#define SESS_ATTEMPT_MAX_MS   5000 /* one attempt: connect and handshake */
#define SESS_READ_CHUNK	      16384

uint64_t sess_now_ms(void)
{
	return uv_hrtime() / 1000000;
}

static void attempt_start(struct store_session *s);
static void first_attempt(uv_timer_t *t);
static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);

/* ---- freeing ---- */

static void handle_closed(uv_handle_t *h)
{
	struct store_session *s = h->data;
	s->handles--;
	sess_maybe_free(s);
}

static void link_closed(uv_handle_t *h)
{
	struct sess_link *l = h->data;
	struct store_session *s = l->s;
	bytebuf_release(&l->wbuf);
	free(l);
	s->handles--;
	sess_maybe_free(s);
}

/* Drops the current connection attempt (its bytes in flight go too). */
static void link_drop(struct store_session *s)
{
	struct sess_link *l = s->link;
	if (!l)
		return;
	s->link = NULL;
	uv_close((uv_handle_t *)&l->tcp, link_closed);
	s->out.len = 0;
	s->in.len = 0;
}

void sess_maybe_free(struct store_session *s)
{
	if (s->phase != SESS_DEAD || s->dispatching || s->handles || s->gai_pending)
		return;
	while (s->watches) {
		struct sess_watch *w = s->watches;
		s->watches = w->next;
		free(w);
	}
	bytebuf_release(&s->out);
	bytebuf_release(&s->queued);
	bytebuf_release(&s->in);
	free(s->scratch);
	if (s->token)
		explicit_bzero(s->token, s->opts.token_len);
	free(s->token);
	free(s);
}

void sess_release(struct store_session *s)
{
	s->phase = SESS_DEAD;
	link_drop(s);
	if (s->gai) {
		uv_cancel((uv_req_t *)s->gai); /* its callback still comes */
		s->gai = NULL;
	}
	if (!s->timers_closed) {
		s->timers_closed = true;
		uv_close((uv_handle_t *)&s->timer, handle_closed);
		uv_close((uv_handle_t *)&s->ping, handle_closed);
	}
	sess_maybe_free(s);
}

void store_session_close(struct store_session *s)
{
	if (!s || s->phase == SESS_DEAD)
		return;
	s->phase = SESS_DEAD;
	link_drop(s);
	sess_fail_all(s, -ECANCELED);
	sess_release(s);
}

void sess_connect_failed(struct store_session *s, int status, const char *msg)
{
	if (s->phase == SESS_DEAD)
		return;
	s->phase = SESS_DEAD;
	link_drop(s);
	s->dispatching++;
	sess_fail_all(s, status);
	s->on_connect(s, s->arg, status, msg);
	s->dispatching--;
	sess_release(s);
}

void sess_lost(struct store_session *s, int status, const char *why)
{
	if (s->phase == SESS_DEAD)
		return;
	char msg[STORE_SESSION_MSG_MAX];
	snprintf(msg, sizeof(msg), "lost the store at %s: %s", s->peer, why);
	s->phase = SESS_DEAD;
	link_drop(s);
	s->dispatching++;
	sess_fail_all(s, -ECONNRESET);
	if (s->on_close)
		s->on_close(s, s->arg, status, msg);
	s->dispatching--;
	sess_release(s);
}

/* ---- retries ---- */

void sess_seconds_text(uint64_t ms, char *buf, size_t len)
{
	if (ms % 1000 == 0)
		snprintf(buf, len, "%llu s", (unsigned long long)(ms / 1000));
	else
		snprintf(buf, len, "%.1f s", (double)ms / 1000.0);
}

/* This attempt failed (silent: its peer accepted the connection but never
 * answered the handshake): retry after the backoff while the deadline
 * allows. */
static void attempt_failed_as(struct store_session *s, const char *why, bool silent)
{
	s->silent_peer = silent;
	snprintf(s->last_error, sizeof(s->last_error), "%s", why);
	link_drop(s);
	s->phase = SESS_CONNECTING;
	uint64_t now = sess_now_ms();
	if (now + s->backoff < s->deadline) {
		uv_timer_start(&s->timer, first_attempt, s->backoff, 0);
		s->backoff =
		    s->backoff * 2 > SESS_BACKOFF_MAX_MS ? SESS_BACKOFF_MAX_MS : s->backoff * 2;
		return;
	}
	char msg[STORE_SESSION_MSG_MAX], t[32];
	sess_seconds_text((uint64_t)s->opts.connect_timeout_ms, t, sizeof(t));
	if (s->opts.connect_timeout_ms > 0)
		snprintf(msg, sizeof(msg), "cannot reach the store at %s within %s: %s", s->peer, t,
			 s->last_error);
	else
		snprintf(msg, sizeof(msg), "cannot reach the store at %s: %s", s->peer,
			 s->last_error);
	sess_connect_failed(s, -ETIMEDOUT, msg);
}

static void attempt_failed(struct store_session *s, const char *why)
{
	attempt_failed_as(s, why, false);
}

static void attempt_timeout(uv_timer_t *t)
{
	struct store_session *s = t->data;
	if (s->gai) {
		uv_cancel((uv_req_t *)s->gai);
		s->gai = NULL;
	}
	if (s->phase == SESS_CONNECTING)
		attempt_failed(s, "connecting timed out");
	else
		attempt_failed_as(s,
				  "it accepts connections but does not answer the session "
				  "handshake (not a ddp-rdzvd or ddplaunch store, or a frozen one)",
				  true);
}

/* Arms the attempt's deadline (the overall deadline or SESS_ATTEMPT_MAX_MS). */
static void attempt_arm(struct store_session *s)
{
	uint64_t now = sess_now_ms();
	uint64_t left = s->deadline > now ? s->deadline - now : 0;
	if (left > SESS_ATTEMPT_MAX_MS || s->opts.connect_timeout_ms == 0)
		left = SESS_ATTEMPT_MAX_MS;
	uv_timer_start(&s->timer, attempt_timeout, left, 0);
}

/* ---- writing ---- */

static void on_write(uv_write_t *req, int status)
{
	struct sess_link *l = req->data;
	struct store_session *s = l->s;
	l->writing = false;
	bytebuf_release(&l->wbuf);
	if (s->link != l)
		return; /* a dropped attempt: its close callback frees it */
	if (status < 0) {
		if (s->phase == SESS_READY)
			sess_lost(s, -ECONNRESET, uv_strerror(status));
		else
			attempt_failed(s, uv_strerror(status));
		sess_maybe_free(s);
		return;
	}
	sess_flush(s);
}

void sess_flush(struct store_session *s)
{
	struct sess_link *l = s->link;
	if (!l || !l->connected || l->writing || s->out.len == 0)
		return;
	uv_buf_t b = uv_buf_init((char *)s->out.data, (unsigned)s->out.len);
	int n = uv_try_write((uv_stream_t *)&l->tcp, &b, 1);
	if (n > 0)
		bytebuf_consume(&s->out, (size_t)n);
	else if (n < 0 && n != UV_EAGAIN)
		return; /* the read side reports the broken connection */
	if (s->out.len == 0)
		return;
	l->wbuf = s->out;
	s->out = (struct bytebuf){0};
	b = uv_buf_init((char *)l->wbuf.data, (unsigned)l->wbuf.len);
	l->wreq.data = l;
	if (uv_write(&l->wreq, (uv_stream_t *)&l->tcp, &b, 1, on_write) == 0)
		l->writing = true;
	else
		bytebuf_release(&l->wbuf);
}

/* ---- reading ---- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct sess_link *l = h->data;
	struct store_session *s = l->s;
	if (s->link != l || bytebuf_reserve(&s->in, SESS_READ_CHUNK) < 0) {
		*buf = uv_buf_init(NULL, 0); /* libuv reports UV_ENOBUFS */
		return;
	}
	*buf = uv_buf_init((char *)s->in.data + s->in.len, (unsigned)(s->in.cap - s->in.len));
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
	struct sess_link *l = stream->data;
	struct store_session *s = l->s;
	if (s->link != l || nread == 0)
		return;
	if (nread < 0) {
		const char *why =
		    nread == UV_EOF ? "the store closed the connection" : uv_strerror((int)nread);
		if (s->phase == SESS_READY)
			sess_lost(s, nread == UV_ETIMEDOUT ? -ETIMEDOUT : -ECONNRESET, why);
		else
			attempt_failed(s, nread == UV_EOF
					      ? "the store closed the connection during "
						"the handshake (this node's address may "
						"not be allowed there, or it is not a "
						"ddp-rdzvd or ddplaunch store)"
					      : why);
		sess_maybe_free(s);
		return;
	}
	s->in.len += (size_t)nread;
	s->last_heard = sess_now_ms();
	s->dispatching++;
	sess_on_bytes(s);
	s->dispatching--;
	if (s->phase != SESS_DEAD && s->in.len == 0 && s->in.cap > 4 * SESS_READ_CHUNK)
		bytebuf_release(&s->in);
	sess_maybe_free(s);
}

/* ---- connecting ---- */

/* Fast detection of a dead peer: keep-alive probes after 1 s of silence,
 * and unacknowledged data failing the socket after the ping timeout. */
static void tune_socket(struct store_session *s, struct sess_link *l)
{
	uv_os_fd_t fd;
	uv_tcp_nodelay(&l->tcp, 1);
	uv_tcp_keepalive(&l->tcp, 1, 1);
	if (uv_fileno((uv_handle_t *)&l->tcp, &fd) < 0)
		return;
	int intvl = 1, cnt = 3;
	unsigned user = s->opts.ping_interval_ms ? s->opts.ping_timeout_ms : 10000;
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user, sizeof(user));
}

static void note_local(struct store_session *s, struct sess_link *l)
{
	struct sockaddr_storage ss;
	int n = sizeof(ss);
	s->local[0] = 0;
	if (uv_tcp_getsockname(&l->tcp, (struct sockaddr *)&ss, &n) < 0)
		return;
	if (ss.ss_family == AF_INET)
		uv_ip4_name((struct sockaddr_in *)&ss, s->local, sizeof(s->local));
	else if (ss.ss_family == AF_INET6)
		uv_ip6_name((struct sockaddr_in6 *)&ss, s->local, sizeof(s->local));
}

static void on_connected(uv_connect_t *req, int status)
{
	struct sess_link *l = req->data;
	struct store_session *s = l->s;
	if (s->link != l)
		return;
	if (status < 0) {
		attempt_failed(s, uv_strerror(status));
		sess_maybe_free(s);
		return;
	}
	l->connected = true;
	tune_socket(s, l);
	note_local(s, l);
	int rc = uv_read_start((uv_stream_t *)&l->tcp, on_alloc, on_read);
	if (rc == 0)
		rc = sess_send_hello(s);
	if (rc < 0)
		attempt_failed(s, rc == -ENOMEM ? "out of memory" : uv_strerror(rc));
	sess_maybe_free(s);
}

static void connect_addr(struct store_session *s)
{
	char why[320];
	struct sess_link *l = calloc(1, sizeof(*l));
	if (!l) {
		attempt_failed(s, "out of memory");
		return;
	}
	l->s = s;
	if (uv_tcp_init(s->loop, &l->tcp) < 0) {
		free(l);
		attempt_failed(s, "cannot create a socket");
		return;
	}
	l->tcp.data = l;
	l->creq.data = l;
	s->handles++;
	s->link = l;
	int rc = 0;
	if (s->opts.bind_addr) {
		struct sockaddr_storage b;
		if (uv_ip4_addr(s->bind, 0, (struct sockaddr_in *)&b) != 0)
			uv_ip6_addr(s->bind, 0, (struct sockaddr_in6 *)&b);
		rc = uv_tcp_bind(&l->tcp, (struct sockaddr *)&b, 0);
		if (rc < 0) {
			snprintf(why, sizeof(why), "cannot connect from %s: %s", s->bind,
				 uv_strerror(rc));
			attempt_failed(s, why);
			return;
		}
	}
	rc = uv_tcp_connect(&l->creq, &l->tcp, (struct sockaddr *)&s->addr, on_connected);
	if (rc < 0) {
		attempt_failed(s, uv_strerror(rc));
		return;
	}
	attempt_arm(s);
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
	struct store_session *s = req->data;
	bool current = s->gai == req;
	s->gai_pending--;
	free(req);
	if (!current || s->phase == SESS_DEAD) {
		uv_freeaddrinfo(res);
		sess_maybe_free(s);
		return;
	}
	s->gai = NULL;
	const struct addrinfo *pick = NULL;
	int want = s->opts.bind_addr ? (strchr(s->bind, ':') ? AF_INET6 : AF_INET) : AF_UNSPEC;
	for (const struct addrinfo *a = status == 0 ? res : NULL; a && !pick; a = a->ai_next)
		if (want == AF_UNSPEC || a->ai_family == want)
			pick = a;
	if (!pick) {
		char why[320];
		snprintf(why, sizeof(why), "cannot resolve '%s': %s", s->host,
			 status < 0 ? uv_strerror(status)
				    : "no address of the bind address' family");
		uv_freeaddrinfo(res);
		attempt_failed(s, why);
		return;
	}
	memcpy(&s->addr, pick->ai_addr, pick->ai_addrlen);
	uv_freeaddrinfo(res);
	if (s->addr.ss_family == AF_INET)
		((struct sockaddr_in *)&s->addr)->sin_port = htons(s->opts.port);
	else
		((struct sockaddr_in6 *)&s->addr)->sin6_port = htons(s->opts.port);
	connect_addr(s);
}

static void attempt_start(struct store_session *s)
{
	if (s->phase == SESS_DEAD)
		return;
	if (s->init_error) {
		sess_connect_failed(s, -EIO, "cannot initialise libsodium");
		return;
	}
	if (uv_ip4_addr(s->host, s->opts.port, (struct sockaddr_in *)&s->addr) == 0 ||
	    uv_ip6_addr(s->host, s->opts.port, (struct sockaddr_in6 *)&s->addr) == 0) {
		connect_addr(s);
		return;
	}
	uv_getaddrinfo_t *req = calloc(1, sizeof(*req));
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	if (!req) {
		attempt_failed(s, "out of memory");
		return;
	}
	req->data = s;
	int rc = uv_getaddrinfo(s->loop, req, on_resolved, s->host, NULL, &hints);
	if (rc < 0) {
		free(req);
		attempt_failed(s, uv_strerror(rc));
		return;
	}
	s->gai = req;
	s->gai_pending++;
	attempt_arm(s);
}

static void first_attempt(uv_timer_t *t)
{
	attempt_start(t->data);
}

void sess_conn_start(struct store_session *s)
{
	uv_timer_init(s->loop, &s->timer);
	uv_timer_init(s->loop, &s->ping);
	s->timer.data = s->ping.data = s;
	s->handles = 2;
	s->init_error = proto_auth_init() < 0;
	s->backoff = SESS_BACKOFF_FIRST_MS;
	s->deadline = sess_now_ms() + (uint64_t)s->opts.connect_timeout_ms;
	/* From the loop, so that on_connect never runs inside the call. */
	uv_timer_start(&s->timer, first_attempt, 0, 0);
}
