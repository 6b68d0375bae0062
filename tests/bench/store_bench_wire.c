/*
 * store_bench_wire.c - one blocking benchmark connection, either through our
 * C client (torch 2.x framing) or with torch 1.13 or 2.x frames encoded here.
 *
 * The frame paths encode with the store's codec (proto.h), write each query
 * with one send() and read the reply with blocking recv(), like torch's
 * clients (1.13's sends each field separately; one send is kinder to both
 * servers alike; 2.x's sends one buffer, and opens with validate + ping).
 */
#include "store_bench.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "store_client.h"
#include "timeutil.h"

struct sb_conn {
	enum sb_wire wire;
	struct store_client *client; /* SB_WIRE_API */
	int fd;			     /* the frame ways */
	enum proto_gen gen;	     /* their numbering */
	struct bytebuf out;
	uint8_t in[512];
};

static int frame_keyed(struct bytebuf *buf, enum proto_gen gen, enum proto_op op, const char *key)
{
	int rc = proto_put_op(buf, gen, op);

	return rc < 0 ? rc : proto_put_bytes(buf, key, strlen(key));
}

int sb_frame_set(struct bytebuf *buf, enum proto_gen gen, const char *key, const void *value,
		 size_t len)
{
	int rc = frame_keyed(buf, gen, PROTO_OP_SET, key);

	return rc < 0 ? rc : proto_put_bytes(buf, value, len);
}

int sb_frame_get(struct bytebuf *buf, enum proto_gen gen, const char *key)
{
	return frame_keyed(buf, gen, PROTO_OP_GET, key);
}

int sb_frame_add(struct bytebuf *buf, enum proto_gen gen, const char *key, int64_t delta)
{
	int rc = frame_keyed(buf, gen, PROTO_OP_ADD, key);

	return rc < 0 ? rc : proto_put_i64(buf, delta);
}

int sb_frame_wait(struct bytebuf *buf, enum proto_gen gen, const char *key)
{
	int rc = proto_put_op(buf, gen, PROTO_OP_WAIT);

	if (rc == 0)
		rc = proto_put_u64(buf, 1);
	return rc < 0 ? rc : proto_put_bytes(buf, key, strlen(key));
}

int sb_frame_num_keys(struct bytebuf *buf, enum proto_gen gen)
{
	return proto_put_op(buf, gen, PROTO_OP_NUM_KEYS);
}

int sb_frame_hello(struct bytebuf *buf, uint32_t nonce)
{
	int rc = proto_put_op(buf, PROTO_GEN_V2, PROTO_OP_VALIDATE);

	if (rc == 0)
		rc = proto_put_u32(buf, PROTO_VALIDATE_MAGIC);
	if (rc == 0)
		rc = proto_put_op(buf, PROTO_GEN_V2, PROTO_OP_PING);
	return rc < 0 ? rc : proto_put_u32(buf, nonce);
}

static int send_all(int fd, const uint8_t *p, size_t len)
{
	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Reads exactly len bytes; -ETIMEDOUT if none arrive for timeout_ms. */
static int recv_all(int fd, void *buf, size_t len, uint64_t timeout_ms)
{
	uint8_t *p = buf;

	while (len > 0) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int r = poll(&pfd, 1, (int)timeout_ms);
		ssize_t n;

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -ETIMEDOUT;
		n = recv(fd, p, len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ECONNRESET;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int raw_open(int port, uint64_t timeout_ms, int *out_fd)
{
	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	uint64_t deadline = time_now_ms() + timeout_ms;
	int one = 1, fd, rc;

	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	for (;;) {
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0)
			break;
		rc = -errno;
		close(fd);
		if (rc != -ECONNREFUSED || time_left_ms(deadline) == 0)
			return rc;
		usleep(10000);
	}
	*out_fd = fd;
	return 0;
}

static int flush_out(struct sb_conn *conn, int rc);

/* torch 2.x's opening: validate, then a ping whose nonce comes back. */
static int v2_hello(struct sb_conn *conn)
{
	uint32_t nonce = (uint32_t)getpid() ^ (uint32_t)time_now_ns();
	uint8_t echo[4];
	int rc = flush_out(conn, sb_frame_hello(&conn->out, nonce));

	if (rc == 0)
		rc = recv_all(conn->fd, echo, 4, 30000);
	if (rc == 0 && bytes_load_u32(echo) != nonce)
		rc = -EPROTO;
	return rc;
}

int sb_conn_open(enum sb_wire wire, int port, uint64_t timeout_ms, struct sb_conn **out)
{
	struct sb_conn *conn = calloc(1, sizeof(*conn));
	int rc;

	*out = NULL;
	if (!conn)
		return -ENOMEM;
	conn->wire = wire;
	conn->fd = -1;
	conn->gen = wire == SB_WIRE_V2 ? PROTO_GEN_V2 : PROTO_GEN_V1;
	if (wire == SB_WIRE_API)
		rc = store_client_connect("127.0.0.1", port, timeout_ms, &conn->client, NULL, 0);
	else
		rc = raw_open(port, timeout_ms, &conn->fd);
	if (rc == 0 && wire == SB_WIRE_V2)
		rc = v2_hello(conn);
	if (rc < 0) {
		sb_conn_free(conn);
		return rc;
	}
	*out = conn;
	return 0;
}

void sb_conn_free(struct sb_conn *conn)
{
	if (!conn)
		return;
	store_client_free(conn->client);
	if (conn->fd >= 0)
		close(conn->fd);
	bytebuf_release(&conn->out);
	free(conn);
}

/* Sends the frame built in conn->out and empties it. */
static int flush_out(struct sb_conn *conn, int rc)
{
	size_t first = conn->wire == SB_WIRE_V113_SPLIT ? 1 : conn->out.len;

	if (rc == 0)
		rc = send_all(conn->fd, conn->out.data, first);
	if (rc == 0 && first < conn->out.len)
		rc = send_all(conn->fd, conn->out.data + first, conn->out.len - first);
	conn->out.len = 0;
	return rc;
}

int sb_conn_set(struct sb_conn *conn, const char *key, const void *value, size_t len)
{
	if (conn->wire == SB_WIRE_API)
		return store_client_set(conn->client, key, value, len);
	return flush_out(conn, sb_frame_set(&conn->out, conn->gen, key, value, len));
}

static int frame_get(struct sb_conn *conn, const char *key, size_t expect_len)
{
	uint8_t lenbuf[8];
	uint64_t len;
	int rc = flush_out(conn, sb_frame_get(&conn->out, conn->gen, key));

	if (rc == 0)
		rc = recv_all(conn->fd, lenbuf, 8, 30000);
	if (rc < 0)
		return rc;
	len = bytes_load_u64(lenbuf);
	if (len != expect_len || len > sizeof(conn->in))
		return -EPROTO;
	return recv_all(conn->fd, conn->in, len, 30000);
}

int sb_conn_get(struct sb_conn *conn, const char *key, size_t expect_len)
{
	void *value = NULL;
	size_t len = 0;
	int rc;

	if (conn->wire != SB_WIRE_API)
		return frame_get(conn, key, expect_len);
	rc = store_client_get(conn->client, key, 30000, &value, &len);
	free(value);
	if (rc >= 0 && len != expect_len)
		rc = -EPROTO;
	return rc;
}

int sb_conn_add(struct sb_conn *conn, const char *key, int64_t delta, int64_t *result)
{
	uint8_t reply[8];
	int rc;

	if (conn->wire == SB_WIRE_API)
		return store_client_add(conn->client, key, delta, result);
	rc = flush_out(conn, sb_frame_add(&conn->out, conn->gen, key, delta));
	if (rc == 0)
		rc = recv_all(conn->fd, reply, 8, 30000);
	if (rc == 0)
		*result = (int64_t)bytes_load_u64(reply);
	return rc;
}

int sb_conn_wait(struct sb_conn *conn, const char *key, uint64_t timeout_ms)
{
	const char *keys[1] = {key};
	uint8_t reply;
	int rc;

	if (conn->wire == SB_WIRE_API)
		return store_client_wait(conn->client, keys, 1, timeout_ms);
	rc = flush_out(conn, sb_frame_wait(&conn->out, conn->gen, key));
	if (rc == 0)
		rc = recv_all(conn->fd, &reply, 1, timeout_ms);
	if (rc == 0 && reply != PROTO_WAIT_STOP_WAITING)
		rc = -EPROTO;
	return rc;
}

int sb_conn_ping(struct sb_conn *conn)
{
	uint8_t reply[8];

	if (conn->wire == SB_WIRE_API)
		return store_client_ping(conn->client);
	return flush_out(conn, sb_frame_num_keys(&conn->out, conn->gen))
		   ?: recv_all(conn->fd, reply, 8, 30000);
}
