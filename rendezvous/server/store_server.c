/*
 * store_server.c - the listening socket, the limits and the life cycle of
 * the store server (connections are in store_conn.c).
 */
#include "store_server.h"

#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "store_access.h"
#include "store_agent.h"
#include "store_conn.h"

/* listen() backlog: the kernel caps it at net.core.somaxconn, so asking for
 * the most means "the system maximum". */
#define SERVER_BACKLOG 65535

void store_limits_default(struct store_limits *limits)
{
	limits->max_key_len = 64 * 1024;
	limits->max_value_len = 64 * 1024 * 1024;
	limits->max_keys_per_request = 128 * 1024;
	limits->max_total_bytes = (size_t)1024 * 1024 * 1024;
	limits->max_connections = 65536;
	/* More ranks than any job has; a larger one is taken for garbage. */
	limits->max_barrier_world = 1024 * 1024;
	/* torch's libuv server takes at most 128 Ki keys in one request. */
	limits->max_list_keys = 128 * 1024;
	limits->max_conn_bytes = 0; /* store_conn_bytes_default() */
	/* No bound: a shared store's clients may all come through one
	 * address (a NAT, a benchmark); an agent's stores set one
	 * (STORE_CONNS_PER_ADDR, driver_keeper.c). */
	limits->max_conns_per_addr = 0;
	limits->max_silent_per_addr = STORE_SILENT_PER_ADDR;
}

size_t store_conn_bytes_default(const struct store_limits *limits)
{
	size_t v = limits->max_value_len, k = limits->max_key_len;
	size_t two = v > (SIZE_MAX - k) / 2 ? SIZE_MAX : 2 * v + k;
	return two > STORE_CONN_BYTES_MIN ? two : STORE_CONN_BYTES_MIN;
}

int store_server_new(uv_loop_t *loop, const struct store_limits *limits, struct store_server **out)
{
	struct sigaction sa;
	if (sigaction(SIGPIPE, NULL, &sa) == 0 && !(sa.sa_flags & SA_SIGINFO) &&
	    sa.sa_handler == SIG_DFL)
		signal(SIGPIPE, SIG_IGN);
	struct store_server *server = calloc(1, sizeof(*server));
	if (!server)
		return -ENOMEM;
	server->loop = loop;
	server->fd_reserve = STORE_FD_RESERVE;
	if (limits)
		server->limits = *limits;
	else
		store_limits_default(&server->limits);
	server->plimits.max_key_len = server->limits.max_key_len;
	server->plimits.max_value_len = server->limits.max_value_len;
	server->plimits.max_keys_per_request = server->limits.max_keys_per_request;
	struct store_limits *l = &server->limits;
	if (l->max_conn_bytes == 0)
		l->max_conn_bytes = store_conn_bytes_default(l);
	/* A request is held whole before it runs. */
	server->plimits.max_request_bytes =
	    l->max_conn_bytes < l->max_total_bytes ? l->max_conn_bytes : l->max_total_bytes;
	int rc = store_new(server->limits.max_total_bytes, store_conn_wake, server, &server->store);
	if (rc < 0) {
		free(server);
		return rc;
	}
	store_set_watch_callback(server->store, store_conn_notify);
	*out = server;
	return 0;
}

static void server_on_connection(uv_stream_t *listener, int status)
{
	struct store_server *server = listener->data;
	if (status < 0) {
		log_debug("store: accept failed: %s", uv_strerror(status));
		return;
	}
	store_conn_accept(server);
}

/* Resolves host (a literal, or a name through getaddrinfo) for binding. */
static int server_resolve(const char *host, int port, struct sockaddr_storage *addr)
{
	if (uv_ip4_addr(host, port, (struct sockaddr_in *)addr) == 0)
		return 0;
	if (uv_ip6_addr(host, port, (struct sockaddr_in6 *)addr) == 0)
		return 0;
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	struct addrinfo *res = NULL;
	if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res)
		return UV_EADDRNOTAVAIL;
	memcpy(addr, res->ai_addr, res->ai_addrlen);
	if (res->ai_family == AF_INET)
		((struct sockaddr_in *)addr)->sin_port = htons((uint16_t)port);
	else
		((struct sockaddr_in6 *)addr)->sin6_port = htons((uint16_t)port);
	freeaddrinfo(res);
	return 0;
}

static void server_free_handle(uv_handle_t *handle)
{
	free(handle);
}

int store_server_listen(struct store_server *server, const char *host, int port)
{
	struct sockaddr_storage addr;
	if (server->listener || server->closing || port < 0 || port > 65535)
		return UV_EINVAL;
	int rc = server_resolve(host, port, &addr);
	if (rc < 0)
		return rc;
	uv_tcp_t *listener = malloc(sizeof(*listener));
	if (!listener)
		return UV_ENOMEM;
	rc = uv_tcp_init(server->loop, listener);
	if (rc < 0) {
		free(listener);
		return rc;
	}
	listener->data = server;
	rc = uv_tcp_bind(listener, (const struct sockaddr *)&addr, 0);
	if (rc == 0)
		rc = uv_listen((uv_stream_t *)listener, SERVER_BACKLOG, server_on_connection);
	struct sockaddr_storage bound;
	int len = sizeof(bound);
	if (rc == 0)
		rc = uv_tcp_getsockname(listener, (struct sockaddr *)&bound, &len);
	if (rc < 0) {
		uv_close((uv_handle_t *)listener, server_free_handle);
		return rc;
	}
	server->port =
	    ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
					      : ((struct sockaddr_in *)&bound)->sin_port);
	server->listener = listener;
	return 0;
}

struct keep_list {
	const char *const *prefixes;
	size_t n;
};

static bool keep_prefixed(void *ctx, struct byteview key)
{
	const struct keep_list *k = ctx;
	for (size_t i = 0; i < k->n; i++) {
		size_t len = strlen(k->prefixes[i]);
		if (key.len >= len && memcmp(key.data, k->prefixes[i], len) == 0)
			return true;
	}
	return false;
}

size_t store_server_reset(struct store_server *server, const char *const *keep, size_t nkeep)
{
	/* Connections first: a closed one reads nothing more, so a late query
	 * of the old group cannot bring its keys back. */
	size_t nconns = 0;
	for (struct store_conn *c = server->conns; c; c = c->next) {
		if (c->state != CONN_CLOSING)
			nconns++;
		store_conn_close(c); /* unlinked only in its close callback */
	}
	struct keep_list k = {keep, nkeep};
	size_t n = store_clear(server->store, nkeep ? keep_prefixed : NULL, &k);
	log_debug("store: reset: closed %zu connection(s), dropped %zu key(s)", nconns, n);
	return n;
}

int store_server_put(struct store_server *server, const char *key, const char *value)
{
	return store_set(server->store, (struct byteview){(const uint8_t *)key, strlen(key)},
			 (struct byteview){(const uint8_t *)value, strlen(value)});
}

int store_server_port(const struct store_server *server)
{
	return server->listener ? server->port : 0;
}

size_t store_server_connection_count(const struct store_server *server)
{
	return server->nconns;
}

/* Finishes closing once the listener and every connection are closed. */
void store_server_conn_gone(struct store_server *server)
{
	if (!server->closing || server->nconns > 0 || server->listener)
		return;
	void (*done)(void *) = server->done;
	void *arg = server->done_arg;
	store_access_free(server->access);
	store_free(server->store);
	free(server);
	if (done)
		done(arg);
}

static void server_listener_closed(uv_handle_t *handle)
{
	struct store_server *server = handle->data;
	free(handle);
	server->listener = NULL;
	store_server_conn_gone(server);
}

void store_server_close(struct store_server *server, void (*done)(void *arg), void *arg)
{
	if (server->closing)
		return;
	server->closing = true;
	server->done = done;
	server->done_arg = arg;
	store_access_close(server);
	for (struct store_conn *c = server->conns; c; c = c->next)
		store_conn_close(c);
	if (server->listener)
		uv_close((uv_handle_t *)server->listener, server_listener_closed);
	else
		store_server_conn_gone(server);
}

_Static_assert(PROTO_OP_COUNT <= 40, "struct store_server_stats.requests holds every op");

void store_server_get_stats(const struct store_server *server, struct store_server_stats *out)
{
	memset(out, 0, sizeof(*out));
	out->connections = server->nconns;
	out->accepted = server->accepted;
	out->nops = PROTO_OP_COUNT;
	memcpy(out->requests, server->requests, sizeof(server->requests));
	out->keys = (size_t)store_num_keys(server->store);
	out->bytes_stored = store_bytes_used(server->store);
	out->bytes_in_flight = server->budget.held;
	out->refused = store_server_refused_count(server);
	out->closed_for_budget = server->budget.closed;
	out->waiters = store_waiter_count(server->store);
}

const char *store_server_op_name(size_t op)
{
	return proto_op_name((enum proto_op)op);
}
