/*
 * ring_setup.c - builds the TCP ring's two connections through the store.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ring_setup.h"
#include "timeutil.h"
#include "transport.h"

#define RING_MAGIC   0x474e495250444444ull /* "DDDPRING" */
#define RING_SOCKBUF (4 << 20)

struct ring_hello {
	uint64_t magic;
	uint32_t rank;
	uint32_t world;
	uint64_t token;
};

/* The local IPv4 address the kernel would use to reach host (a UDP
 * "connect" sends nothing). Returns 0 or -EADDRNOTAVAIL. */
static int ring_route_addr(const char *host, struct in_addr *out)
{
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM}, *ai = NULL;
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);
	int fd, rc = -EADDRNOTAVAIL;

	if (getaddrinfo(host, "9", &hints, &ai) != 0 || !ai)
		return rc;
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &len) == 0) {
		*out = sa.sin_addr;
		rc = 0;
	}
	if (fd >= 0)
		close(fd);
	freeaddrinfo(ai);
	return rc;
}

/* The address this rank publishes for the others to connect to, in this
 * order: DDP_RING_ADDR (the user's), DDP_LOCAL_ADDR (the launcher's: this
 * node's address as the other nodes reach it, e.g. --local_addr), the
 * interface that reaches the store's host, the interface of the default
 * route (file:// initialisation has no store host; 192.0.2.1 is a
 * documentation address, and nothing is sent to it). Loopback only when
 * none of these exists: then no other host is reachable anyway. */
static int ring_local_addr(const char *host, struct in_addr *out)
{
	const char *env = getenv("DDP_RING_ADDR");
	const char *node = getenv("DDP_LOCAL_ADDR");

	if (env && *env)
		return inet_pton(AF_INET, env, out) == 1 ? 0 : -EINVAL;
	if (node && inet_pton(AF_INET, node, out) == 1)
		return 0;
	if (host && *host && ring_route_addr(host, out) == 0)
		return 0;
	if (ring_route_addr("192.0.2.1", out) == 0)
		return 0;
	out->s_addr = htonl(INADDR_LOOPBACK);
	return 0;
}

static void ring_tune(int fd)
{
	int one = 1, sz = RING_SOCKBUF;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
}

/* poll(2) on one fd until the deadline; with a cancel flag, in slices of
 * KV_CANCEL_POLL_MS that look at it. 1: ready (or an error that the I/O
 * call will name), 0: the deadline passed, -ECANCELED. */
static int ring_poll_one(struct pollfd *pf, uint64_t deadline, const atomic_int *cancel)
{
	for (;;) {
		int ms = cpu_poll_ms(deadline), n;

		if (cancel && atomic_load(cancel))
			return -ECANCELED;
		if (cancel && ms > KV_CANCEL_POLL_MS)
			ms = KV_CANCEL_POLL_MS;
		n = poll(pf, 1, ms);
		if (n < 0 && errno == EINTR)
			continue;
		if (n != 0 || time_left_ms(deadline) == 0)
			return n < 0 ? 1 : n;
	}
}

/* Blocking I/O of exactly len bytes with a deadline (fd is non-blocking). */
static int ring_io_all(int fd, void *buf, size_t len, int sending, uint64_t deadline,
		       const atomic_int *cancel)
{
	size_t done = 0;

	while (done < len) {
		struct pollfd pf = {.fd = fd, .events = sending ? POLLOUT : POLLIN};
		ssize_t n;
		int rc = ring_poll_one(&pf, deadline, cancel);

		if (rc <= 0)
			return rc < 0 ? rc : -ETIMEDOUT;
		n = sending ? send(fd, (char *)buf + done, len - done, MSG_NOSIGNAL)
			    : recv(fd, (char *)buf + done, len - done, 0);
		if (n == 0)
			return -ECONNRESET;
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		if (n > 0)
			done += (size_t)n;
	}
	return 0;
}

static int ring_listen(struct in_addr addr, int *fd_out, int *port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr = addr, .sin_port = 0};
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd < 0)
		return -errno;
	ring_tune(fd);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 16) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
		int rc = -errno;

		close(fd);
		return rc;
	}
	*fd_out = fd;
	*port = ntohs(sa.sin_port);
	return 0;
}

static int ring_connect(const char *ipport, uint64_t deadline, const atomic_int *cancel, int *out)
{
	char ip[64];
	int port, fd, rc;
	struct sockaddr_in sa = {.sin_family = AF_INET};
	struct pollfd pf;

	if (sscanf(ipport, "%63s %d", ip, &port) != 2 || inet_pton(AF_INET, ip, &sa.sin_addr) != 1)
		return -EPROTO;
	sa.sin_port = htons((uint16_t)port);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	ring_tune(fd);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS) {
		rc = -errno;
		goto fail;
	}
	pf = (struct pollfd){.fd = fd, .events = POLLOUT};
	rc = ring_poll_one(&pf, deadline, cancel);
	if (rc <= 0) {
		rc = rc < 0 ? rc : -ETIMEDOUT;
		goto fail;
	}
	socklen_t len = sizeof(rc);
	getsockopt(fd, SOL_SOCKET, SO_ERROR, &rc, &len);
	if (rc) {
		rc = -rc;
		goto fail;
	}
	*out = fd;
	return 0;
fail:
	close(fd);
	return rc;
}

/* Accepts until the expected predecessor presents a valid hello. */
static int ring_accept(int lfd, int prev, int world, uint64_t token, uint64_t deadline,
		       const atomic_int *cancel, int *out)
{
	for (;;) {
		struct pollfd pf = {.fd = lfd, .events = POLLIN};
		struct ring_hello h;
		int fd, rc = ring_poll_one(&pf, deadline, cancel);

		if (rc <= 0)
			return rc < 0 ? rc : -ETIMEDOUT;
		fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
				continue;
			return -errno;
		}
		ring_tune(fd);
		rc = ring_io_all(fd, &h, sizeof(h), 0, deadline, cancel);
		if (rc == -ECANCELED) {
			close(fd);
			return rc;
		}
		if (rc == 0 && h.magic == RING_MAGIC && h.token == token &&
		    h.rank == (uint32_t)prev && h.world == (uint32_t)world) {
			*out = fd;
			return 0;
		}
		/* A stray or stale connection: drop it and keep listening. */
		close(fd);
	}
}

int ring_setup(const struct ddp_backend_params *p, uint64_t token, int *fd_next, int *fd_prev,
	       char *errbuf, size_t errbuf_len)
{
	uint64_t deadline = time_now_ms() + p->timeout_ms;
	int next = (p->rank + 1) % p->world_size,
	    prev = (p->rank - 1 + p->world_size) % p->world_size;
	struct ring_hello h = {RING_MAGIC, (uint32_t)p->rank, (uint32_t)p->world_size, token};
	char key[320], mine[96], ip[INET_ADDRSTRLEN], err[512] = "";
	void **vals = calloc((size_t)p->world_size, sizeof(*vals));
	size_t *lens = calloc((size_t)p->world_size, sizeof(*lens));
	struct in_addr addr;
	int lfd = -1, port = 0, rc;

	if (!vals || !lens) {
		rc = -ENOMEM;
		goto out;
	}
	rc = ring_local_addr(p->master_addr, &addr);
	if (rc == 0)
		rc = ring_listen(addr, &lfd, &port);
	if (rc < 0) {
		snprintf(err, sizeof(err), "cannot listen for the ring: %s (set DDP_RING_ADDR)",
			 strerror(-rc));
		goto out;
	}
	inet_ntop(AF_INET, &addr, ip, sizeof(ip));
	snprintf(mine, sizeof(mine), "%s %d", ip, port);
	snprintf(key, sizeof(key), "%s/ring_addr", p->prefix);
	rc = kv_exchange(p->kv, key, p->rank, p->world_size, mine, strlen(mine), p->timeout_ms,
			 "ring set-up", vals, lens, err, sizeof(err));
	if (rc < 0)
		goto out;
	rc = ring_connect((char *)vals[next], deadline, p->cancel, fd_next);
	if (rc == 0) {
		rc = ring_io_all(*fd_next, &h, sizeof(h), 1, deadline, p->cancel);
		if (rc < 0)
			snprintf(err, sizeof(err), "cannot greet rank %d at %s: %s",
				 backend_rank_name(p, next), (char *)vals[next], strerror(-rc));
	} else {
		snprintf(err, sizeof(err), "cannot connect to rank %d at %s: %s",
			 backend_rank_name(p, next), (char *)vals[next], strerror(-rc));
	}
	if (rc == 0) {
		rc = ring_accept(lfd, prev, p->world_size, token, deadline, p->cancel, fd_prev);
		if (rc < 0)
			snprintf(err, sizeof(err), "rank %d never connected: %s",
				 backend_rank_name(p, prev), strerror(-rc));
	}
	for (int r = 0; r < p->world_size; r++)
		free(vals[r]);
out:
	if (lfd >= 0)
		close(lfd);
	if (rc < 0 && *fd_next >= 0) {
		close(*fd_next);
		*fd_next = -1;
	}
	if (rc < 0)
		snprintf(errbuf, errbuf_len, "cpu-ring: %s", err);
	free(vals);
	free(lens);
	return rc;
}
