/*
 * store_bench_storm.c - the barrier storm: N clients connect at once, add 1
 * to a counter, and wait for a release key that the N-th adder sets.
 *
 * sb_storm_raw() drives every client from one thread with epoll, encoding
 * frames with the store's codec, so the generator costs little CPU next to
 * the server (both share this machine's cores). Sockets are closed with
 * SO_LINGER 0 so that runs leave no TIME_WAIT behind.
 */
#include "store_bench.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "timeutil.h"

enum storm_state {
	ST_CONNECTING,
	ST_JOINING, /* hello reply (V2) and add reply expected */
	ST_WAITING, /* wait reply expected */
	ST_DONE,
	ST_FAILED,
};

struct storm_conn {
	int fd;
	uint8_t state;
	uint8_t got;
	uint8_t in[16];
};

struct storm {
	enum proto_gen gen;
	int clients;
	int epfd;
	int connected, released, failed;
	uint64_t t0, t_connected, t_released;
	char count_key[64], release_key[64];
	struct bytebuf out;
	struct storm_conn *conns;
};

static void conn_fail(struct storm *s, struct storm_conn *c)
{
	c->state = ST_FAILED;
	epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	s->failed++;
}

/* Sends s->out on c; the socket is fresh, so a short send means trouble. */
static int send_out(struct storm *s, struct storm_conn *c)
{
	ssize_t n = send(c->fd, s->out.data, s->out.len, MSG_NOSIGNAL);
	int ok = n == (ssize_t)s->out.len;

	s->out.len = 0;
	return ok ? 0 : -EIO;
}

static void on_connected(struct storm *s, struct storm_conn *c, uint32_t index)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.u32 = index};
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err != 0) {
		conn_fail(s, c);
		return;
	}
	epoll_ctl(s->epfd, EPOLL_CTL_MOD, c->fd, &ev);
	s->connected++;
	s->t_connected = time_now_ns();
	c->state = ST_JOINING;
	if (s->gen == PROTO_GEN_V2)
		sb_frame_hello(&s->out, index);
	sb_frame_add(&s->out, s->gen, s->count_key, 1);
	if (send_out(s, c) < 0)
		conn_fail(s, c);
}

static void on_joined(struct storm *s, struct storm_conn *c)
{
	size_t off = s->gen == PROTO_GEN_V2 ? 4 : 0;
	int64_t count = (int64_t)bytes_load_u64(c->in + off);

	/* V2: the ping must echo this connection's nonce (its index) */
	if (off && bytes_load_u32(c->in) != (uint32_t)(c - s->conns)) {
		conn_fail(s, c);
		return;
	}
	if (count == s->clients)
		sb_frame_set(&s->out, s->gen, s->release_key, "1", 1);
	sb_frame_wait(&s->out, s->gen, s->release_key);
	c->state = ST_WAITING;
	c->got = 0;
	if (send_out(s, c) < 0)
		conn_fail(s, c);
}

static void on_readable(struct storm *s, struct storm_conn *c)
{
	size_t want = c->state == ST_WAITING ? 1 : (s->gen == PROTO_GEN_V2 ? 12 : 8);
	ssize_t n = recv(c->fd, c->in + c->got, want - c->got, 0);

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		conn_fail(s, c);
		return;
	}
	c->got += (uint8_t)n;
	if (c->got < want)
		return;
	if (c->state == ST_JOINING) {
		on_joined(s, c);
		return;
	}
	c->state = ST_DONE;
	epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	s->released++;
	s->t_released = time_now_ns();
}

static int start_connect(struct storm *s, uint32_t index, const struct sockaddr_in *addr)
{
	struct storm_conn *c = &s->conns[index];
	struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN, .data.u32 = index};
	int one = 1;

	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return -errno;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->state = ST_CONNECTING;
	if (connect(c->fd, (const struct sockaddr *)addr, sizeof(*addr)) < 0 &&
	    errno != EINPROGRESS)
		return -errno;
	return epoll_ctl(s->epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0 ? -errno : 0;
}

static void storm_loop(struct storm *s, uint64_t deadline_ms)
{
	struct epoll_event events[256];

	while (s->released + s->failed < s->clients && time_left_ms(deadline_ms) > 0) {
		int n = epoll_wait(s->epfd, events, 256, (int)time_left_ms(deadline_ms));

		for (int i = 0; i < n; i++) {
			uint32_t index = events[i].data.u32;
			struct storm_conn *c = &s->conns[index];

			if (c->state == ST_CONNECTING)
				on_connected(s, c, index);
			else if (c->state == ST_JOINING || c->state == ST_WAITING)
				on_readable(s, c);
		}
	}
}

static void storm_close_all(struct storm *s, int opened)
{
	struct linger lg = {.l_onoff = 1, .l_linger = 0};

	for (int i = 0; i < opened; i++) {
		setsockopt(s->conns[i].fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		close(s->conns[i].fd);
	}
}

int sb_storm_raw(const struct sb_server *server, enum proto_gen gen, int clients,
		 uint64_t timeout_ms, struct sb_storm_result *out)
{
	static unsigned run;
	struct sockaddr_in addr = {.sin_family = AF_INET,
				   .sin_port = htons((uint16_t)server->port)};
	struct storm s = {.gen = gen, .clients = clients};
	uint64_t deadline = time_now_ms() + timeout_ms;
	int64_t cpu0, cpu1;
	int opened = 0, rc = 0;

	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	memset(out, 0, sizeof(*out));
	run++;
	snprintf(s.count_key, sizeof(s.count_key), "/bench/storm/%d/%u/count", clients, run);
	snprintf(s.release_key, sizeof(s.release_key), "/bench/storm/%d/%u/go", clients, run);
	s.conns = calloc((size_t)clients, sizeof(*s.conns));
	s.epfd = epoll_create1(EPOLL_CLOEXEC);
	if (!s.conns || s.epfd < 0) {
		rc = s.conns ? -errno : -ENOMEM;
		goto out;
	}
	cpu0 = sb_proc_cpu_ns(server->pid);
	s.t0 = time_now_ns();
	for (; opened < clients && rc == 0; opened++)
		rc = start_connect(&s, (uint32_t)opened, &addr);
	if (rc == 0)
		storm_loop(&s, deadline);
	cpu1 = sb_proc_cpu_ns(server->pid);
	out->clients = clients;
	out->released = s.released;
	out->seconds = (double)(s.t_released - s.t0) / 1e9;
	out->connect_s = s.connected ? (double)(s.t_connected - s.t0) / 1e9 : 0;
	out->cpu_ns_per_op = (double)(cpu1 - cpu0) / (2.0 * clients);
	if (s.released < clients)
		out->seconds = (double)(time_now_ns() - s.t0) / 1e9;
	storm_close_all(&s, opened);
out:
	if (s.epfd >= 0)
		close(s.epfd);
	bytebuf_release(&s.out);
	free(s.conns);
	return rc;
}

void sb_server_quiesce(const struct sb_server *server, uint64_t timeout_ms)
{
	uint64_t deadline = time_now_ms() + timeout_ms;
	int64_t last = sb_proc_cpu_ns(server->pid);

	while (time_left_ms(deadline) > 0) {
		int64_t now;

		usleep(100000);
		now = sb_proc_cpu_ns(server->pid);
		if (now == last)
			return;
		last = now;
	}
}
