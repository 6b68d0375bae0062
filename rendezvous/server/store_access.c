/*
 * store_access.c - the server's token and allowed addresses (store_access.h),
 * the rule applied at accept, rate-limited refusal logs, and the sweep that
 * ends agent sessions silent past their idle timeout.
 */
#include "store_access.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "proto_auth.h"
#include "store_agent.h"

#define ACCESS_LOG_GAP_MS   1000 /* at most one refusal line per second */
#define ACCESS_SWEEP_MS	    100
#define ACCESS_PAUSE_MS	    500	  /* a sweep this late: the process did not run */
#define ACCESS_HANDSHAKE_MS 10000 /* default: a stranger's time to prove the token */

/* What a stranger's decoder accepts: enough for a hello and a proof. */
static const struct proto_limits access_stranger_limits = {
    .max_key_len = STORE_STRANGER_FRAME_MAX,
    .max_value_len = STORE_STRANGER_FRAME_MAX,
    .max_keys_per_request = 4,
    .max_request_bytes = STORE_STRANGER_FRAME_MAX,
};

/* Addresses as 16 bytes: IPv6, IPv4 as its mapped form ::ffff:a.b.c.d. */
typedef uint8_t access_addr[16];

struct store_access {
	uint8_t *token;
	size_t token_len;
	bool restricted;
	access_addr *allow; /* sorted */
	size_t nallow;
	size_t allow_cap;
	size_t refused;
	size_t suppressed;
	uint64_t last_log_ms;
	bool logged;
	uint64_t handshake_ms;
	uv_timer_t *sweep;
	uint64_t swept_ms;	       /* uv_now() of the last sweep */
	struct store_agent *strangers; /* still to pass the handshake, newest first */
};

static struct store_access *access_get(struct store_server *server)
{
	if (!server->access) {
		server->access = calloc(1, sizeof(*server->access));
		if (server->access)
			server->access->handshake_ms = ACCESS_HANDSHAKE_MS;
	}
	return server->access;
}

static int addr_key(const struct sockaddr *sa, access_addr out)
{
	if (sa->sa_family == AF_INET) {
		memset(out, 0, 10);
		out[10] = out[11] = 0xff;
		memcpy(out + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		memcpy(out, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
		return 0;
	}
	return -EAFNOSUPPORT;
}

static bool addr_loopback(const access_addr a)
{
	static const access_addr v4 = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
	static const access_addr v6 = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
	return memcmp(a, v4, 16) == 0 || memcmp(a, v6, 16) == 0;
}

/* Index of the first entry >= a. */
static size_t allow_find(const struct store_access *acc, const access_addr a)
{
	size_t lo = 0, hi = acc->nallow;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (memcmp(acc->allow[mid], a, 16) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int allow_add(struct store_access *acc, const access_addr a)
{
	size_t i = allow_find(acc, a);
	if (i < acc->nallow && memcmp(acc->allow[i], a, 16) == 0)
		return 0;
	if (acc->nallow == acc->allow_cap) {
		size_t cap = acc->allow_cap ? acc->allow_cap * 2 : 16;
		access_addr *n = realloc(acc->allow, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		acc->allow = n;
		acc->allow_cap = cap;
	}
	memmove(acc->allow + i + 1, acc->allow + i, (acc->nallow - i) * sizeof(*acc->allow));
	memcpy(acc->allow[i], a, 16);
	acc->nallow++;
	return 0;
}

int store_server_set_token(struct store_server *server, const void *token, size_t len)
{
	if (!token || len < STORE_TOKEN_MIN || len > STORE_TOKEN_MAX || proto_auth_init() < 0)
		return -EINVAL;
	struct store_access *acc = access_get(server);
	uint8_t *copy = acc ? malloc(len) : NULL;
	if (!copy)
		return -ENOMEM;
	memcpy(copy, token, len);
	free(acc->token);
	acc->token = copy;
	acc->token_len = len;
	return 0;
}

int store_server_allow_sockaddr(struct store_server *server, const struct sockaddr *addr)
{
	access_addr a;
	int rc = addr_key(addr, a);
	if (rc < 0)
		return rc;
	struct store_access *acc = access_get(server);
	return acc ? allow_add(acc, a) : -ENOMEM;
}

int store_server_allow(struct store_server *server, const char *addr)
{
	struct sockaddr_storage ss;
	if (!addr)
		return -EINVAL;
	if (uv_ip4_addr(addr, 0, (struct sockaddr_in *)&ss) != 0 &&
	    uv_ip6_addr(addr, 0, (struct sockaddr_in6 *)&ss) != 0)
		return -EINVAL;
	return store_server_allow_sockaddr(server, (const struct sockaddr *)&ss);
}

void store_server_restrict(struct store_server *server)
{
	struct store_access *acc = access_get(server);
	if (acc)
		acc->restricted = true;
	else
		log_debug("store: out of memory restricting access");
}

static bool access_allowed(const struct store_access *acc, const access_addr a)
{
	if (addr_loopback(a))
		return true;
	size_t i = allow_find(acc, a);
	return i < acc->nallow && memcmp(acc->allow[i], a, 16) == 0;
}

bool store_server_allowed(const struct store_server *server, const struct sockaddr *addr)
{
	const struct store_access *acc = server->access;
	access_addr a;
	if (addr_key(addr, a) < 0)
		return false;
	if (!acc || (!acc->token && !acc->restricted))
		return true;
	return access_allowed(acc, a);
}

size_t store_server_refused_count(const struct store_server *server)
{
	return server->access ? server->access->refused : 0;
}

const uint8_t *store_access_token(const struct store_server *server, size_t *len)
{
	const struct store_access *acc = server->access;
	*len = acc && acc->token ? acc->token_len : 0;
	return *len ? acc->token : NULL;
}

static bool agent_key(struct byteview key)
{
	size_t n = sizeof(STORE_AGENT_KEYS) - 1;
	return key.len >= n && memcmp(key.data, STORE_AGENT_KEYS, n) == 0;
}

bool store_access_agent_write(const struct store_server *server, const struct proto_request *req)
{
	if (!server->access || !server->access->token || req->nfields == 0)
		return false;
	switch (req->op) {
	case PROTO_OP_MULTI_SET:
		for (size_t i = 0; i < req->nfields; i += 2) /* k0 v0 k1 v1 ... */
			if (agent_key(req->fields[i]))
				return true;
		return false;
	case PROTO_OP_SET:
	case PROTO_OP_COMPARE_SET:
	case PROTO_OP_ADD:
	case PROTO_OP_DELETE_KEY:
	case PROTO_OP_APPEND:
	case PROTO_OP_QUEUE_PUSH:
	case PROTO_OP_QUEUE_POP:
	case PROTO_OP_BARRIER:
		return agent_key(req->fields[0]);
	default:
		return false;
	}
}

/* "10.0.0.5:41234" (or "?" when the peer is unknown). */
void store_access_peer_text(struct store_conn *conn, char *buf, size_t len)
{
	struct sockaddr_storage ss;
	int n = sizeof(ss);
	char host[64] = "?";
	int port = 0;
	if (uv_tcp_getpeername(&conn->tcp, (struct sockaddr *)&ss, &n) == 0) {
		if (ss.ss_family == AF_INET) {
			uv_ip4_name((struct sockaddr_in *)&ss, host, sizeof(host));
			port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		} else if (ss.ss_family == AF_INET6) {
			uv_ip6_name((struct sockaddr_in6 *)&ss, host, sizeof(host));
			port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
		}
	}
	snprintf(buf, len, ss.ss_family == AF_INET6 ? "[%s]:%d" : "%s:%d", host, port);
}

void store_access_refused(struct store_conn *conn, const char *why)
{
	struct store_access *acc = access_get(conn->server);
	if (!acc)
		return;
	acc->refused++;
	uint64_t now = uv_now(conn->server->loop);
	if (acc->logged && now - acc->last_log_ms < ACCESS_LOG_GAP_MS) {
		acc->suppressed++;
		return;
	}
	char peer[96];
	store_access_peer_text(conn, peer, sizeof(peer));
	if (acc->suppressed)
		log_warn("store: refused a client from %s: %s (and %zu more refusal(s) since the "
			 "last report)",
			 peer, why, acc->suppressed);
	else
		log_warn("store: refused a client from %s: %s", peer, why);
	acc->suppressed = 0;
	acc->last_log_ms = now;
	acc->logged = true;
}

/* Makes room for one more stranger from `a` (store_access.h's bounds):
 * -EACCES when its address has too many already (refused, logged); when
 * there are too many in all, the oldest one is closed. The list holds at
 * most STORE_STRANGERS_MAX, so a flood costs no more per connection. */
static int access_bound(struct store_conn *conn, const access_addr a)
{
	struct store_agent *oldest = NULL;
	size_t all = 0, same = 0;
	for (struct store_agent *ag = conn->server->access->strangers; ag; ag = ag->snext) {
		all++;
		same += memcmp(ag->peer, a, 16) == 0;
		oldest = ag;
	}
	if (same >= STORE_STRANGERS_PER_ADDR) {
		store_access_refused(conn, "its address has too many connections that have not "
					   "passed the token handshake");
		return -EACCES;
	}
	if (all >= STORE_STRANGERS_MAX && oldest) {
		struct store_conn *c = oldest->conn;
		store_access_refused(c, "too many connections have not passed the token "
					"handshake; the oldest is closed");
		store_access_unlist(c); /* at once: its close may wait for a callback */
		store_conn_close(c);
	}
	return 0;
}

static void access_list(struct store_access *acc, struct store_conn *conn)
{
	struct store_agent *ag = conn->agent;
	ag->conn = conn;
	ag->sprev = NULL;
	ag->snext = acc->strangers;
	if (acc->strangers)
		acc->strangers->sprev = ag;
	acc->strangers = ag;
}

void store_access_unlist(struct store_conn *conn)
{
	struct store_agent *ag = conn->agent;
	struct store_access *acc = conn->server->access;
	if (!ag || !ag->conn || !acc)
		return;
	if (ag->sprev)
		ag->sprev->snext = ag->snext;
	else
		acc->strangers = ag->snext;
	if (ag->snext)
		ag->snext->sprev = ag->sprev;
	ag->conn = NULL;
	ag->snext = ag->sprev = NULL;
}

/* A stranger that must prove the token: its session state now, so that the
 * sweep ends one that never finishes (or never starts) the handshake. */
static int access_stranger(struct store_conn *conn, const access_addr a)
{
	int rc = access_bound(conn, a);
	if (rc < 0)
		return rc;
	struct store_agent *ag = calloc(1, sizeof(*ag));
	if (!ag)
		return -ENOMEM;
	ag->phase = AGENT_NEW;
	ag->handshake_until = store_access_handshake_deadline(conn->server);
	memcpy(ag->peer, a, 16);
	conn->agent = ag;
	conn->access = CONN_ACCESS_PROOF;
	conn->dec.limits = &access_stranger_limits;
	access_list(conn->server->access, conn);
	store_access_watch_idle(conn->server);
	return 0;
}

int store_access_admit(struct store_conn *conn)
{
	struct store_access *acc = conn->server->access;
	conn->access = CONN_ACCESS_OPEN;
	if (!acc || (!acc->token && !acc->restricted))
		return 0;
	struct sockaddr_storage ss;
	int n = sizeof(ss);
	access_addr a;
	if (uv_tcp_getpeername(&conn->tcp, (struct sockaddr *)&ss, &n) < 0 ||
	    addr_key((struct sockaddr *)&ss, a) < 0)
		memset(a, 0, sizeof(a));
	else if (access_allowed(acc, a))
		return 0;
	if (acc->token)
		return access_stranger(conn, a);
	store_access_refused(conn, "its address is not allowed (ddp-rdzvd --allow, or a token)");
	return -EACCES;
}

void store_access_frame_refused(struct store_conn *conn)
{
	_Static_assert(STORE_STRANGER_FRAME_MAX == 256, "the message below says 256");
	store_access_refused(conn, "it announced a frame over 256 bytes before passing the "
				   "token handshake");
}

size_t store_server_member_count(const struct store_server *server)
{
	size_t n = 0;
	for (const struct store_conn *c = server->conns; c; c = c->next)
		n += c->state != CONN_CLOSING && c->access != CONN_ACCESS_PROOF && c->spoke;
	return n;
}

void store_access_joined(struct store_conn *conn)
{
	struct sockaddr_storage ss;
	int n = sizeof(ss);
	struct store_access *acc = conn->server->access;
	access_addr a;
	if (!acc || uv_tcp_getpeername(&conn->tcp, (struct sockaddr *)&ss, &n) < 0 ||
	    addr_key((struct sockaddr *)&ss, a) < 0)
		return;
	if (allow_add(acc, a) < 0)
		log_debug("store: out of memory allowing a joined node's address");
}

/* After a pause of this process (SIGSTOP, a VM migration, a swapped-out
 * host) libuv runs the sweep before it reads the sockets, where the agents'
 * pings wait: their silence is counted from the thaw, not across it. */
static void access_thawed(struct store_server *server, uint64_t now)
{
	struct store_access *acc = server->access;
	uint64_t gap = now > acc->swept_ms ? now - acc->swept_ms : 0;
	acc->swept_ms = now;
	if (gap <= ACCESS_SWEEP_MS + ACCESS_PAUSE_MS)
		return;
	log_debug("store: this process did not run for %llu ms; agent sessions' silence counts "
		  "from now",
		  (unsigned long long)gap);
	for (struct store_conn *c = server->conns; c; c = c->next) {
		if (c->agent && c->agent->phase == AGENT_READY && c->agent->last_ms < now)
			c->agent->last_ms = now;
		/* Its first query may wait unread in the socket, like the pings. */
		if (!c->spoke && c->silent_until && c->silent_until < now + acc->handshake_ms)
			c->silent_until = now + acc->handshake_ms;
	}
}

/* Silent connections past their deadline, oldest first: of two silent
 * ones of an address, the older (a torch 1.13 client's callback
 * connection, opened with its query connection) is the one vouched for.
 * A closed connection stays linked until its close callback. */
static void access_sweep_silent(struct store_server *server, uint64_t now)
{
	struct store_conn *c = server->conns;

	while (c && c->next)
		c = c->next;
	for (; c; c = c->prev)
		if (c->state != CONN_CLOSING && store_bounds_silent(c, now))
			store_conn_close(c);
}

static void access_sweep(uv_timer_t *timer)
{
	struct store_server *server = timer->data;
	uint64_t now = uv_now(server->loop);
	access_thawed(server, now);
	access_sweep_silent(server, now);
	for (struct store_conn *c = server->conns; c; c = c->next) {
		struct store_agent *ag = c->agent;
		if (c->state == CONN_CLOSING || !ag)
			continue;
		if (ag->phase != AGENT_READY) {
			if (ag->handshake_until && now >= ag->handshake_until) {
				store_access_refused(c,
						     "it did not pass the token handshake in time");
				store_conn_close(c);
			}
			continue;
		}
		if (ag->idle_ms == 0 || now - ag->last_ms <= ag->idle_ms)
			continue;
		log_debug("store: an agent session was silent for over %llu ms; ending it",
			  (unsigned long long)ag->idle_ms);
		store_conn_close(c);
	}
}

uint64_t store_access_handshake_ms(const struct store_server *server)
{
	return server->access ? server->access->handshake_ms : ACCESS_HANDSHAKE_MS;
}

uint64_t store_access_handshake_deadline(struct store_server *server)
{
	const struct store_access *acc = server->access;
	return uv_now(server->loop) + (acc ? acc->handshake_ms : ACCESS_HANDSHAKE_MS);
}

void store_server_set_handshake_timeout(struct store_server *server, unsigned ms)
{
	struct store_access *acc = access_get(server);
	if (acc && ms > 0)
		acc->handshake_ms = ms;
}

void store_access_watch_idle(struct store_server *server)
{
	struct store_access *acc = access_get(server);
	if (!acc || acc->sweep || server->closing)
		return;
	uv_timer_t *t = malloc(sizeof(*t));
	if (!t || uv_timer_init(server->loop, t) < 0) {
		free(t);
		return;
	}
	t->data = server;
	uv_timer_start(t, access_sweep, ACCESS_SWEEP_MS, ACCESS_SWEEP_MS);
	acc->swept_ms = uv_now(server->loop); /* a pause before the first sweep counts */
	uv_unref((uv_handle_t *)t);	      /* never keeps the loop alive by itself */
	acc->sweep = t;
}

static void access_timer_closed(uv_handle_t *handle)
{
	free(handle);
}

void store_access_close(struct store_server *server)
{
	struct store_access *acc = server->access;
	if (!acc || !acc->sweep)
		return;
	uv_close((uv_handle_t *)acc->sweep, access_timer_closed);
	acc->sweep = NULL;
}

void store_access_free(struct store_access *access)
{
	if (!access)
		return;
	if (access->sweep)
		uv_close((uv_handle_t *)access->sweep, access_timer_closed);
	if (access->token)
		explicit_bzero(access->token, access->token_len);
	free(access->token);
	free(access->allow);
	free(access);
}
