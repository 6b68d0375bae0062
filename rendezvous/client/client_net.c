/*
 * client_net.c - blocking sockets with deadlines for the store client.
 */
#include "client_net.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "timeutil.h"

int client_net_retryable(int err)
{
	switch (err) {
	case -ECONNREFUSED:
	case -ENETUNREACH:
	case -EHOSTUNREACH:
	case -ETIMEDOUT:
	case -ECONNRESET:
	case -ECONNABORTED:
	case -EPIPE:
	case -EAGAIN:
	case -EADDRNOTAVAIL:
		return 1;
	default:
		return 0;
	}
}

static int wait_fd(int fd, short events, uint64_t deadline_ms)
{
	for (;;) {
		uint64_t left = time_left_ms(deadline_ms);
		if (left == 0)
			return -ETIMEDOUT;
		struct pollfd p = {.fd = fd, .events = events};
		int n = poll(&p, 1, left > 60000 ? 60000 : (int)left);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

/* One attempt at one address; returns the fd or -errno. */
static int connect_one(const struct addrinfo *ai, uint64_t deadline_ms)
{
	int fd =
	    socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
	if (fd < 0)
		return -errno;
	int rc = 0;
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		rc = -errno;
		if (rc == -EINPROGRESS) {
			rc = wait_fd(fd, POLLOUT, deadline_ms);
			int err = 0;
			socklen_t len = sizeof(err);
			if (rc == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
				err = errno;
			if (rc == 0)
				rc = -err;
		}
	}
	if (rc < 0)
		goto fail;
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	int flags = fcntl(fd, F_GETFL);
	if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0) {
		rc = -errno;
		goto fail;
	}
	return fd;
fail:
	close(fd);
	return rc;
}

void client_net_backoff(uint64_t *delay_ms, uint64_t deadline_ms)
{
	static __thread unsigned seed; /* per thread: rand_r state is not shared */
	if (seed == 0)
		seed = (unsigned)time_now_ns() ^ (unsigned)getpid();
	uint64_t d = *delay_ms / 2 + (uint64_t)rand_r(&seed) % (*delay_ms / 2 + 1);
	uint64_t left = time_left_ms(deadline_ms);
	if (d > left)
		d = left;
	struct timespec ts = {.tv_sec = (time_t)(d / 1000), .tv_nsec = (long)(d % 1000) * 1000000};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
	*delay_ms = *delay_ms * 2 > 1000 ? 1000 : *delay_ms * 2;
}

int client_net_connect(const char *host, int port, uint64_t deadline_ms, int *gai_err)
{
	char service[16];
	snprintf(service, sizeof(service), "%d", port);
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	uint64_t delay = 10;
	int rc = -ECONNREFUSED, last = 0;
	for (;;) {
		struct addrinfo *res = NULL;
		int gai = getaddrinfo(host, service, &hints, &res);
		if (gai_err)
			*gai_err = gai;
		if (gai != 0) {
			rc = -EHOSTUNREACH;
		} else {
			for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
				rc = connect_one(ai, deadline_ms);
				if (rc >= 0)
					break;
			}
			freeaddrinfo(res);
		}
		if (rc >= 0)
			return rc;
		/* An attempt cut short by the deadline says less than the
		 * refusal seen before it. */
		if (rc == -ETIMEDOUT && time_left_ms(deadline_ms) == 0 && last)
			rc = last;
		if ((gai == 0 && !client_net_retryable(rc)) || time_left_ms(deadline_ms) == 0)
			return rc;
		last = rc;
		client_net_backoff(&delay, deadline_ms);
	}
}

int client_net_send(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Sets SO_RCVTIMEO to about `left` ms unless the one set already is close:
 * at most 50 ms longer (a recv may overrun the deadline that much) or 1 s
 * shorter (one more pass of the loop). Most calls set nothing. */
static int recv_timeout(int fd, uint64_t left, uint64_t *cached)
{
	if (*cached && left + 50 >= *cached && left <= *cached + 1000)
		return 0;
	struct timeval tv = {.tv_sec = (time_t)(left / 1000),
			     .tv_usec = (suseconds_t)(left % 1000) * 1000};
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
		return -errno;
	*cached = left;
	return 0;
}

int client_net_recv(int fd, struct bytebuf *buf, uint64_t deadline_ms, uint64_t *timeo_cache)
{
	int rc = bytebuf_reserve(buf, 16384);
	if (rc < 0)
		return rc;
	/* A blocking recv bounded by SO_RCVTIMEO: one system call per reply
	 * instead of poll + recv. */
	for (;;) {
		uint64_t left = time_left_ms(deadline_ms);
		if (left == 0)
			return -ETIMEDOUT;
		rc = recv_timeout(fd, left, timeo_cache);
		if (rc < 0)
			return rc;
		ssize_t n = recv(fd, buf->data + buf->len, buf->cap - buf->len, 0);
		if (n > 0) {
			buf->len += (size_t)n;
			return 0;
		}
		if (n == 0)
			return -ECONNRESET;
		if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
	}
}
