/*
 * store_bounds.c - the bounds every connection is held to, whoever it is
 * (store_access.h, "Every client"): the descriptors kept in reserve for the
 * embedding program, the connections one address may hold, and the first
 * request's deadline.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "log.h"
#include "store_access.h"
#include "store_agent.h"
#include "store_conn.h"

/* The peer's address as 16 bytes (IPv4 as ::ffff:a.b.c.d); false when
 * unknown. */
static bool bounds_peer(struct store_conn *conn, uint8_t out[16])
{
	struct sockaddr_storage ss;
	int n = sizeof(ss);

	if (uv_tcp_getpeername(&conn->tcp, (struct sockaddr *)&ss, &n) < 0)
		return false;
	if (ss.ss_family == AF_INET) {
		memset(out, 0, 10);
		out[10] = out[11] = 0xff;
		memcpy(out + 12, &((struct sockaddr_in *)&ss)->sin_addr, 4);
		return true;
	}
	if (ss.ss_family == AF_INET6) {
		memcpy(out, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
		return true;
	}
	return false;
}

/* The kernel gives the lowest free descriptor, so one at `fd` means that
 * 0..fd-1 are all open: past RLIMIT_NOFILE minus the reserve, the process
 * is that close to its limit. A server that never keeps a descriptor there
 * leaves the reserve to its program, however many clients come. */
static int bounds_fd(struct store_conn *conn)
{
	struct store_server *s = conn->server;
	struct rlimit rl;
	uv_os_fd_t fd;
	char why[160];

	if (uv_fileno((uv_handle_t *)&conn->tcp, &fd) < 0 || getrlimit(RLIMIT_NOFILE, &rl) < 0 ||
	    rl.rlim_cur == RLIM_INFINITY || (rlim_t)fd + s->fd_reserve < rl.rlim_cur)
		return 0;
	snprintf(why, sizeof(why),
		 "this process is near its limit on open files (ulimit -n %llu) and keeps the "
		 "last %u for its own work",
		 (unsigned long long)rl.rlim_cur, s->fd_reserve);
	store_access_refused(conn, why);
	return -EMFILE;
}

static int bounds_addr(struct store_conn *conn)
{
	struct store_server *s = conn->server;
	size_t same = 0, max = s->limits.max_conns_per_addr;
	char why[160];

	conn->peer_known = bounds_peer(conn, conn->peer);
	if (!conn->peer_known || max == 0)
		return 0;
	for (const struct store_conn *c = s->conns; c; c = c->next)
		same += c != conn && c->state != CONN_CLOSING && c->peer_known &&
			memcmp(c->peer, conn->peer, 16) == 0;
	if (same < max)
		return 0;
	snprintf(why, sizeof(why),
		 "its address has %zu connections open, the most one address may hold "
		 "(a bound against floods; ddp-rdzvd --max-conns-per-addr sets its own)",
		 same);
	store_access_refused(conn, why);
	return -EACCES;
}

int store_bounds_admit(struct store_conn *conn)
{
	int rc = bounds_fd(conn);

	if (rc == 0)
		rc = bounds_addr(conn);
	if (rc == 0) {
		conn->silent_until = store_access_handshake_deadline(conn->server);
		store_access_watch_idle(conn->server);
	}
	return rc;
}

/* A torch 1.13 TCPStore opens two connections: one for its queries, which
 * speaks at once, and a callback connection that stays silent for the life
 * of the store unless the C++ watchKey is used. So each connection that
 * has spoken vouches for one silent connection from its address: that one
 * is kept, however long it stays silent. */
static bool bounds_vouched(struct store_conn *conn)
{
	for (struct store_conn *c = conn->server->conns; c; c = c->next) {
		if (c == conn || !c->spoke || c->vouches || c->state == CONN_CLOSING ||
		    !c->peer_known || !conn->peer_known || memcmp(c->peer, conn->peer, 16) != 0)
			continue;
		c->vouches = true;
		return true;
	}
	return false;
}

/* A torch 1.13 TCPStore made without a world size (or with
 * wait_for_workers=False) sends nothing until it is used, on either of its
 * connections: an address keeps up to max_silent_per_addr silent
 * connections that nobody vouches for, the oldest. One that speaks gives
 * its place back. */
static bool bounds_kept(struct store_conn *conn)
{
	size_t kept = 0, max = conn->server->limits.max_silent_per_addr;

	if (!conn->peer_known)
		return false;
	for (const struct store_conn *c = conn->server->conns; c; c = c->next)
		kept += c != conn && c->kept_silent && !c->spoke && c->state != CONN_CLOSING &&
			memcmp(c->peer, conn->peer, 16) == 0;
	return kept < max;
}

bool store_bounds_silent(struct store_conn *conn, uint64_t now)
{
	char why[240];

	if (conn->spoke || conn->access != CONN_ACCESS_OPEN || !conn->silent_until ||
	    now < conn->silent_until)
		return false;
	if (bounds_vouched(conn)) {
		conn->silent_until = 0; /* kept from now on */
		return false;
	}
	if (bounds_kept(conn)) {
		conn->kept_silent = true;
		conn->silent_until = 0;
		return false;
	}
	snprintf(why, sizeof(why),
		 "it sent no complete request within %.1f s of connecting, and its address "
		 "already holds %zu such connections beside those of its clients that spoke; "
		 "closed so that idle connections cannot take the descriptors",
		 (double)store_access_handshake_ms(conn->server) / 1000.0,
		 conn->server->limits.max_silent_per_addr);
	store_access_refused(conn, why);
	return true;
}

void store_server_set_fd_reserve(struct store_server *server, unsigned n)
{
	server->fd_reserve = n;
}
