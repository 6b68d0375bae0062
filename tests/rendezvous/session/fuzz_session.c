/*
 * fuzz_session.c - libFuzzer target over both ends of the agent-session
 * handshake and the frames that follow it, over real loopback sockets:
 *
 *  - the server side a stranger talks to (rendezvous/server/: the store
 *    server with a token, as a hosting agent runs it): a raw client sends the
 *    input's bytes in chunks, from 127.0.0.2 (a stranger that must pass the
 *    handshake) or from 127.0.0.1 (served as a TCPStore client), optionally
 *    after passing the handshake itself with the token (an authenticated
 *    agent that misbehaves);
 *  - the client side (rendezvous/session/: store_session_connect and its
 *    requests) facing a malicious store: a raw listener accepts the
 *    session, answers its HELLO with the input's bytes or with a valid
 *    challenge, then sends the rest of the input as replies and events to
 *    the requests the input made the session issue.
 *
 * The input's first byte picks the side and the options; chunk sizes and
 * requests come from the input. One loop, one server and one listener live
 * for the whole run (built at the first input). Invariants: no crash, leak
 * or undefined behaviour; every request's callback runs exactly once, and
 * the session ends with its callbacks run; the server closes every
 * connection the client closed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "fuzz_input.h"
#include "log.h"
#include "proto.h"
#include "proto_auth.h"
#include "store_access.h"
#include "store_conn.h"
#include "store_server.h"
#include "store_session.h"

#define FUZZ_TOKEN  "fuzz-token-0123456789abcdef"
#define PUMP_ROUNDS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- the shared loop, server and listener ---- */

static uv_loop_t loop;
static struct store_server *server;
static int server_port;
static int evil_fd = -1; /* the malicious store's listener */
static int evil_port;

static int listen_raw(int *port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 16) < 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &alen) < 0)
		abort();
	*port = ntohs(a.sin_port);
	return fd;
}

static void setup_once(void)
{
	struct store_limits lim;
	if (server)
		return;
	log_init("fuzz_session", LOG_ERROR);
	if (uv_loop_init(&loop) < 0 || proto_auth_init() < 0)
		abort();
	store_limits_default(&lim);
	lim.max_total_bytes = 1 << 20;
	lim.max_conn_bytes = 256 << 10;
	lim.max_value_len = 64 << 10;
	lim.max_connections = 64;
	if (store_server_new(&loop, &lim, &server) < 0 ||
	    store_server_set_token(server, FUZZ_TOKEN, strlen(FUZZ_TOKEN)) < 0 ||
	    store_server_listen(server, "127.0.0.1", 0) < 0)
		abort();
	server_port = store_server_port(server);
	evil_fd = listen_raw(&evil_port);
}

/* Runs the loop once without blocking, then waits up to ms for fd. The
 * server and the session run in this loop, so what one end sent is read by
 * the other in the same turn; only name lookups (the thread pool) need a
 * wait. */
static void turn(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	uv_run(&loop, UV_RUN_NOWAIT);
	if (fd >= 0)
		poll(&p, 1, ms);
}

/* Reads what fd has into buf (up to cap; NULL: discards), turning the loop,
 * until `want` bytes came or `rounds` turns passed. Returns the bytes read;
 * *closed is set when the peer closed. */
static size_t pump(int fd, uint8_t *buf, size_t cap, size_t want, int rounds, bool *closed)
{
	uint8_t sink[4096];
	size_t got = 0;
	for (int r = 0; r < rounds && got < want && !*closed; r++) {
		turn(fd, 0);
		for (;;) {
			uint8_t *dst = buf ? buf + got : sink;
			size_t room = buf ? cap - got : sizeof(sink);
			if (room == 0)
				break;
			ssize_t n = recv(fd, dst, room, MSG_DONTWAIT);
			if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
				*closed = true;
			if (n <= 0)
				break;
			got += buf ? (size_t)n : 0;
			want -= buf ? 0 : (want < (size_t)n ? want : (size_t)n);
		}
	}
	return got;
}

static void send_all(int fd, const void *p, size_t len)
{
	/* Loopback buffers hold what one input sends; a full one ends it. */
	while (len) {
		ssize_t n = send(fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n <= 0)
			return;
		p = (const uint8_t *)p + n;
		len -= (size_t)n;
	}
}

/* Sends the rest of the input in chunks of 1 to 64 bytes, reading between. */
static void send_chunks(int fd, struct fuzz_input *in, bool *closed)
{
	while (in->n && !*closed) {
		size_t chunk = 1 + fuzz_u8(in) % 64;
		if (chunk > in->n)
			chunk = in->n;
		send_all(fd, in->p, chunk);
		in->p += chunk;
		in->n -= chunk;
		pump(fd, NULL, 0, SIZE_MAX, 2, closed);
	}
}

/* ---- the server side: a raw client ---- */

static int connect_from(const char *src)
{
	struct sockaddr_in a = {.sin_family = AF_INET}, to = {.sin_family = AF_INET};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	inet_pton(AF_INET, src, &a.sin_addr);
	to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	to.sin_port = htons((uint16_t)server_port);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		abort();
	if (connect(fd, (struct sockaddr *)&to, sizeof(to)) < 0 && errno != EINPROGRESS) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Takes the HELLO reply in buf: the server's nonce. Returns 1, or 0 when it
 * is not a challenge. */
static int take_challenge(const uint8_t *buf, size_t len, uint8_t nonce[PROTO_SESSION_NONCE_LEN])
{
	size_t off = 0, n;
	uint8_t tag, auth;
	int64_t status;
	struct byteview v;
	if (proto_take_u8(buf, len, &tag, &n) != 1 || tag != PROTO_SESSION_REPLY)
		return 0;
	off += n;
	if (proto_take_i64(buf + off, len - off, &status, &n) != 1 || status != 0)
		return 0;
	off += n;
	if (proto_take_u8(buf + off, len - off, &auth, &n) != 1 || auth != PROTO_SESSION_AUTH_TOKEN)
		return 0;
	off += n;
	if (proto_take_bytes(buf + off, len - off, 64, &v, &n) != 1 ||
	    v.len != PROTO_SESSION_NONCE_LEN)
		return 0;
	memcpy(nonce, v.data, PROTO_SESSION_NONCE_LEN);
	return 1;
}

/* Passes the handshake as an agent that knows the token (the exchange of
 * proto_auth.h); a server that answers otherwise is left as it is. */
static void prove(int fd, bool *closed)
{
	uint8_t cn[PROTO_SESSION_NONCE_LEN], sn[PROTO_SESSION_NONCE_LEN],
	    pc[PROTO_SESSION_PROOF_LEN];
	uint8_t buf[256];
	struct bytebuf b = {0};
	memset(cn, 7, sizeof(cn));
	proto_put_op(&b, PROTO_GEN_V2, PROTO_OP_VALIDATE);
	proto_put_u32(&b, PROTO_VALIDATE_MAGIC);
	proto_put_op(&b, PROTO_GEN_V2, PROTO_OP_S_HELLO);
	proto_put_i64(&b, 0);
	proto_put_bytes(&b, cn, sizeof(cn));
	send_all(fd, b.data, b.len);
	b.len = 0;
	/* The challenge carries the nonce and an empty proof: the client
	 * proves first, and the store's proof comes in the AUTH reply. */
	size_t got = pump(fd, buf, sizeof(buf), 1 + 8 + 1 + 8 + 32 + 8, PUMP_ROUNDS, closed);
	if (take_challenge(buf, got, sn)) {
		proto_auth_proof(FUZZ_TOKEN, strlen(FUZZ_TOKEN), false, cn, sn, pc);
		proto_put_op(&b, PROTO_GEN_V2, PROTO_OP_S_AUTH);
		proto_put_bytes(&b, pc, sizeof(pc));
		send_all(fd, b.data, b.len);
		pump(fd, buf, sizeof(buf), 1 + 8 + 8 + PROTO_SESSION_PROOF_LEN, PUMP_ROUNDS,
		     closed);
	}
	bytebuf_release(&b);
}

static void fuzz_server(uint8_t flags, struct fuzz_input *in)
{
	size_t before = server->nconns;
	bool closed = false;
	int fd = connect_from(flags & 2 ? "127.0.0.1" : "127.0.0.2");
	if (fd < 0)
		return;
	pump(fd, NULL, 0, SIZE_MAX, 2, &closed);
	if (flags & 4)
		prove(fd, &closed);
	send_chunks(fd, in, &closed);
	close(fd);
	/* The server notices the close and frees the connection. */
	for (int r = 0; r < 4 * PUMP_ROUNDS && server->nconns > before; r++)
		turn(-1, 0);
	if (server->nconns > before)
		abort();
}

/* ---- the client side: a malicious store ---- */

struct client {
	struct store_session *s;
	bool ended;	   /* on_connect failed, or on_close ran */
	bool close_in_cb;  /* a callback closes the session (from the input) */
	size_t issued;	   /* requests whose callback is due */
	size_t answered;   /* callbacks run (a watch counts once, when it ends) */
	uint64_t watch_id; /* the last watch, for unwatch */
	unsigned sum;	   /* bytes seen by callbacks (so ASan checks them) */
};

static void touch(struct client *c, struct store_session_value v)
{
	for (size_t i = 0; i < v.bytes.len; i++)
		c->sum += v.bytes.data[i];
}

static void answered(struct client *c)
{
	c->answered++;
	if (c->answered > c->issued)
		abort(); /* a callback ran twice */
	if (c->close_in_cb && c->s) {
		store_session_close(c->s);
		c->s = NULL;
	}
}

static void on_done(void *arg, uint64_t tag, int status)
{
	answered(arg);
}

static void on_get(void *arg, uint64_t tag, int status, const struct store_session_value *v,
		   size_t n)
{
	if (status == 0 && n != tag)
		abort(); /* one value per key */
	for (size_t i = 0; status == 0 && i < n; i++)
		touch(arg, v[i]);
	answered(arg);
}

static void on_cas(void *arg, uint64_t tag, int status, bool swapped,
		   struct store_session_value cur)
{
	touch(arg, cur);
	answered(arg);
}

static void on_add(void *arg, uint64_t tag, int status, int64_t value)
{
	answered(arg);
}

static void on_event(void *arg, uint64_t id, int status, struct store_session_value v)
{
	struct client *c = arg;
	touch(c, v);
	if (status < 0)
		answered(c); /* a watch ends once */
}

static void on_connect(struct store_session *s, void *arg, int status, const char *msg)
{
	struct client *c = arg;
	if (status < 0) {
		(void)strlen(msg);
		c->ended = true;
		c->s = NULL;
	}
}

static void on_close(struct store_session *s, void *arg, int status, const char *msg)
{
	struct client *c = arg;
	(void)strlen(msg);
	c->ended = true;
	c->s = NULL;
}

/* One request of the session, chosen by the input. */
static void request(struct client *c, struct fuzz_input *in)
{
	static const struct byteview keys[] = {
	    {(const uint8_t *)"k0", 2}, {(const uint8_t *)"k1", 2}, {(const uint8_t *)"k2", 2}};
	struct byteview v = {(const uint8_t *)"value", 5};
	uint8_t op = fuzz_u8(in);
	int rc;
	c->issued++;
	switch (op % 7) {
	case 0:
		rc = store_session_get(c->s, keys, 1 + op / 7 % 3, on_get, c, 1 + op / 7 % 3);
		break;
	case 1:
		rc = store_session_cas(c->s, keys[0], op & 8, v, v, on_cas, c, 0);
		break;
	case 2:
		rc = store_session_add(c->s, keys[1], op, on_add, c, 0);
		break;
	case 3:
		rc = store_session_set(c->s, keys[2], v, on_done, c, 0);
		break;
	case 4:
		rc = store_session_set_session(c->s, keys[2], v, on_done, c, 0);
		break;
	case 5:
		rc = store_session_watch(c->s, keys[op / 7 % 3], on_event, c, &c->watch_id);
		break;
	default:
		c->issued--;
		rc = 0;
		if (c->watch_id && store_session_unwatch(c->s, c->watch_id) == 0)
			c->answered++; /* an unwatched watch never calls back */
		break;
	}
	if (rc < 0)
		c->issued--;
}

static int accept_session(struct client *c)
{
	for (int r = 0; r < 4 * PUMP_ROUNDS && !c->ended; r++) {
		int fd = accept4(evil_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0)
			return fd;
		turn(evil_fd, 1);
	}
	return -1;
}

/* Answers the session's HELLO as a store that knows the token (or has none
 * when the session has none): a challenge without a proof, then the AUTH
 * reply with the store's proof (proto_auth.h: the client proves first). */
static void challenge(int fd, bool token, bool *closed)
{
	uint8_t buf[128], sn[PROTO_SESSION_NONCE_LEN], ps[PROTO_SESSION_PROOF_LEN];
	const size_t hello = 1 + 4 + 1 + 8 + 8 + PROTO_SESSION_NONCE_LEN;
	struct bytebuf b = {0};
	if (pump(fd, buf, sizeof(buf), hello, PUMP_ROUNDS, closed) < hello)
		return;
	memset(sn, 9, sizeof(sn));
	proto_auth_proof(FUZZ_TOKEN, strlen(FUZZ_TOKEN), true, buf + hello - sizeof(sn), sn, ps);
	proto_put_u8(&b, PROTO_SESSION_REPLY);
	proto_put_i64(&b, 0);
	proto_put_u8(&b, token ? PROTO_SESSION_AUTH_TOKEN : PROTO_SESSION_AUTH_NONE);
	proto_put_bytes(&b, sn, token ? sizeof(sn) : 0);
	proto_put_bytes(&b, NULL, 0); /* the store proves only after the client */
	if (token) {
		send_all(fd, b.data, b.len);
		b.len = 0;
		pump(fd, buf, sizeof(buf), 1 + 8 + PROTO_SESSION_PROOF_LEN, PUMP_ROUNDS, closed);
		proto_put_u8(&b, PROTO_SESSION_REPLY);
		proto_put_i64(&b, 0);
		proto_put_bytes(&b, ps, sizeof(ps));
	}
	send_all(fd, b.data, b.len);
	bytebuf_release(&b);
}

static void end_session(struct client *c, int fd)
{
	bool closed = false;
	if (c->s) {
		store_session_close(c->s);
		c->s = NULL;
	}
	/* The session's handles close in the loop's next turns. */
	for (int r = 0; r < 8; r++)
		uv_run(&loop, UV_RUN_NOWAIT);
	if (fd >= 0) {
		pump(fd, NULL, 0, SIZE_MAX, 2, &closed);
		close(fd);
	}
	if (c->answered != c->issued)
		abort(); /* a request whose callback never ran */
}

static void fuzz_client(uint8_t flags, struct fuzz_input *in)
{
	struct client c = {.close_in_cb = flags & 8};
	struct store_session_opts o;
	bool closed = false;
	store_session_opts_default(&o);
	o.host = "127.0.0.1";
	o.port = (uint16_t)evil_port;
	o.token = flags & 2 ? FUZZ_TOKEN : NULL;
	o.token_len = flags & 2 ? strlen(FUZZ_TOKEN) : 0;
	o.connect_timeout_ms = 0;
	o.ping_interval_ms = flags & 16 ? 5 : 0;
	o.ping_timeout_ms = 1000;
	/* A session of an earlier input that was accepted too late is not this one. */
	for (int fd; (fd = accept4(evil_fd, NULL, NULL, SOCK_CLOEXEC)) >= 0;)
		close(fd);
	if (store_session_connect(&loop, &o, on_connect, on_close, &c, &c.s) < 0)
		abort();
	for (int n = fuzz_u8(in) % 8; n > 0 && c.s; n--)
		request(&c, in);
	int fd = accept_session(&c);
	if (fd >= 0 && (flags & 4))
		challenge(fd, flags & 2, &closed);
	while (fd >= 0 && in->n && !closed && c.s) {
		if (fuzz_u8(in) % 4 == 0 && c.s)
			request(&c, in);
		size_t chunk = 1 + fuzz_u8(in) % 64;
		chunk = chunk < in->n ? chunk : in->n;
		send_all(fd, in->p, chunk);
		in->p += chunk;
		in->n -= chunk;
		pump(fd, NULL, 0, SIZE_MAX, 2, &closed);
	}
	end_session(&c, fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_input in = {data, size};
	if (size < 1)
		return 0;
	setup_once();
	uint8_t flags = fuzz_u8(&in);
	if (flags & 1)
		fuzz_client(flags, &in);
	else
		fuzz_server(flags, &in);
	return 0;
}
