/*
 * cpu_ring.c - the CPU backend's TCP ring (ranks on several nodes). Rank r
 * sends to rank r+1 and receives from rank r-1 over two connections set up
 * through the store (each rank listens on a kernel-chosen port of the
 * address that routes to the store, and publishes "ip port").
 *
 * All-reduce = ring reduce-scatter then ring all-gather over world_size
 * segments; in each step the send and the receive run together (poll on
 * non-blocking sockets) and the received bytes are reduced piece by piece as
 * they arrive, so arithmetic overlaps the transfer. Segment j's sum is
 * always accumulated in the same ring order, and the all-gather copies its
 * bits, so every rank gets identical results, run after run.
 *
 * Failure: a peer that dies closes its sockets (EOF/ECONNRESET); a rank that
 * fails shuts both of its sockets down, so the failure travels round the
 * ring and every rank stops within moments, not at the deadline.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cpu_ring.h"
#include "progress_page.h"
#include "reduce.h"
#include "ring_setup.h"
#include "timeutil.h"
#include "transport.h"

#define RING_PIECE  (512u << 10)
#define RING_IO_MAX (2u << 20)

struct cpu_ring {
	struct ddp_backend base;
	int fd_next, fd_prev;
	int next, prev;
	uint64_t timeout_ms;
	uint64_t token;
	char *tmp;
	int name_base, name_stride; /* how messages number ranks */
};

/* One step: send slen bytes of sbuf to next while receiving rlen bytes from
 * prev into rbuf (reduced into it when reduce is set). forward: sbuf is
 * rbuf and only bytes already received are sent (broadcast chains). */
struct ring_xfer {
	const char *sbuf;
	size_t slen, sent;
	char *rbuf;
	size_t rlen, got;
	int reduce, forward;
	enum ddp_dtype dtype;
	enum ddp_op op;
	size_t fill;
};

static void ring_fail(struct cpu_ring *g)
{
	if (g->fd_next >= 0)
		shutdown(g->fd_next, SHUT_RDWR);
	if (g->fd_prev >= 0)
		shutdown(g->fd_prev, SHUT_RDWR);
}

static int ring_error(struct cpu_ring *g, int kind, int rc, int peer, const char *what)
{
	snprintf(g->base.err, sizeof(g->base.err),
		 "%s: rank %d %s (re-form with ddp_reform or restart the group)", cpu_op_name(kind),
		 g->name_base + peer * g->name_stride, what);
	ring_fail(g);
	return rc;
}

static int ring_recv_some(struct cpu_ring *g, struct ring_xfer *x)
{
	size_t esz = ddp_dtype_size(x->dtype);
	size_t want = x->rlen - x->got;
	char *dst = x->rbuf + x->got;
	ssize_t n;

	if (x->reduce) {
		if (want > RING_PIECE - x->fill)
			want = RING_PIECE - x->fill;
		dst = g->tmp + x->fill;
	} else if (want > RING_IO_MAX) {
		want = RING_IO_MAX;
	}
	n = recv(g->fd_prev, dst, want, MSG_DONTWAIT);
	if (n == 0)
		return -ECONNRESET;
	if (n < 0)
		return (errno == EAGAIN || errno == EINTR) ? 0 : -errno;
	x->got += (size_t)n;
	if (x->reduce) {
		x->fill += (size_t)n;
		if (x->fill == RING_PIECE || x->got == x->rlen) {
			char *at = x->rbuf + x->got - x->fill;

			cpu_reduce_into(at, g->tmp, x->fill / esz, x->dtype, x->op);
			x->fill = 0;
		}
	}
	return 0;
}

static int ring_send_some(struct cpu_ring *g, struct ring_xfer *x)
{
	size_t limit = x->forward && x->got < x->slen ? x->got : x->slen;
	size_t want = limit - x->sent;
	ssize_t n;

	if (want > RING_IO_MAX)
		want = RING_IO_MAX;
	n = send(g->fd_next, x->sbuf + x->sent, want, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (n < 0)
		return (errno == EAGAIN || errno == EINTR) ? 0 : -errno;
	x->sent += (size_t)n;
	return 0;
}

static int ring_run(struct cpu_ring *g, struct ring_xfer *x, int kind, uint64_t deadline)
{
	while (x->sent < x->slen || x->got < x->rlen) {
		struct pollfd pf[2];
		int n = 0, si = -1, ri = -1, rc;
		size_t limit = x->forward && x->got < x->slen ? x->got : x->slen;

		if (x->sent < limit) {
			pf[n] = (struct pollfd){.fd = g->fd_next, .events = POLLOUT};
			si = n++;
		}
		if (x->got < x->rlen) {
			pf[n] = (struct pollfd){.fd = g->fd_prev, .events = POLLIN};
			ri = n++;
		}
		/* The progress page names the neighbour this step waits on:
		 * the one it receives from, else the one it sends to. */
		progress_waiting(g->name_base + (ri >= 0 ? g->prev : g->next) * g->name_stride);
		rc = poll(pf, (nfds_t)n, cpu_poll_ms(deadline));
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc == 0) {
			int peer = x->got < x->rlen ? g->prev : g->next;

			snprintf(g->base.err, sizeof(g->base.err),
				 "%s: timed out after %llu ms waiting for rank %d (DDP_TIMEOUT_MS "
				 "sets the deadline)",
				 cpu_op_name(kind), (unsigned long long)g->timeout_ms,
				 g->name_base + peer * g->name_stride);
			ring_fail(g);
			return -ETIMEDOUT;
		}
		if (ri >= 0 && pf[ri].revents) {
			rc = ring_recv_some(g, x);
			if (rc < 0)
				return ring_error(g, kind, -ECONNRESET, g->prev,
						  "closed its connection (it probably died)");
		}
		if (si >= 0 && pf[si].revents) {
			rc = ring_send_some(g, x);
			if (rc < 0)
				return ring_error(g, kind, -ECONNRESET, g->next,
						  "closed its connection (it probably died)");
		}
	}
	progress_waiting(-1);
	return 0;
}

static size_t ring_seg_lo(size_t count, int w, int i)
{
	return count * (size_t)i / (size_t)w;
}

static int ring_allreduce(struct ddp_backend *b, void *buf, size_t count, enum ddp_dtype dtype,
			  enum ddp_op op)
{
	struct cpu_ring *g = (struct cpu_ring *)b;
	size_t esz = ddp_dtype_size(dtype);
	int w = b->world_size, me = b->rank, rc;
	uint64_t deadline = time_now_ms() + g->timeout_ms;
	char *p = buf;

	if (w == 1 || count == 0)
		return 0;
	for (int s = 0; s < 2 * (w - 1); s++) {
		int rs = s < w - 1;
		int si = rs ? (me - s + w) % w : (me + 1 - (s - w + 1) + w) % w;
		int ri = rs ? (me - s - 1 + 2 * w) % w : (me - (s - w + 1) + w) % w;
		struct ring_xfer x = {
		    .sbuf = p + ring_seg_lo(count, w, si) * esz,
		    .slen = (ring_seg_lo(count, w, si + 1) - ring_seg_lo(count, w, si)) * esz,
		    .rbuf = p + ring_seg_lo(count, w, ri) * esz,
		    .rlen = (ring_seg_lo(count, w, ri + 1) - ring_seg_lo(count, w, ri)) * esz,
		    .reduce = rs,
		    .dtype = dtype,
		    .op = op,
		};

		rc = ring_run(g, &x, COMM_KIND_ALLREDUCE, deadline);
		if (rc < 0)
			return rc;
		if (s == w - 2 && op == DDP_AVG) {
			int own = (me + 1) % w;
			size_t lo = ring_seg_lo(count, w, own);

			cpu_divide(p + lo * esz, ring_seg_lo(count, w, own + 1) - lo, dtype, w);
		}
	}
	return 0;
}

static int ring_broadcast(struct ddp_backend *b, void *buf, size_t count, enum ddp_dtype dtype,
			  int root)
{
	struct cpu_ring *g = (struct cpu_ring *)b;
	int w = b->world_size, pos = (b->rank - root + w) % w;
	size_t bytes = count * ddp_dtype_size(dtype);
	struct ring_xfer x = {.sbuf = buf, .rbuf = buf, .dtype = dtype};

	if (w == 1 || bytes == 0)
		return 0;
	if (pos == 0) {
		x.slen = bytes;
	} else {
		x.rlen = bytes;
		x.slen = pos == w - 1 ? 0 : bytes;
		x.forward = 1;
	}
	return ring_run(g, &x, COMM_KIND_BROADCAST, time_now_ms() + g->timeout_ms);
}

static int ring_allgather(struct ddp_backend *b, const void *send, void *recv, size_t count,
			  enum ddp_dtype dtype)
{
	struct cpu_ring *g = (struct cpu_ring *)b;
	size_t blk = count * ddp_dtype_size(dtype);
	int w = b->world_size, me = b->rank, rc;
	uint64_t deadline = time_now_ms() + g->timeout_ms;
	char *out = recv;

	if (blk && (const char *)send != out + (size_t)me * blk)
		memcpy(out + (size_t)me * blk, send, blk);
	if (w == 1 || blk == 0)
		return 0;
	for (int s = 0; s < w - 1; s++) {
		struct ring_xfer x = {
		    .sbuf = out + (size_t)((me - s + w) % w) * blk,
		    .slen = blk,
		    .rbuf = out + (size_t)((me - s - 1 + w) % w) * blk,
		    .rlen = blk,
		    .dtype = dtype,
		};

		rc = ring_run(g, &x, COMM_KIND_ALLGATHER, deadline);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int ring_barrier(struct ddp_backend *b)
{
	/* One element per segment, so every step moves data and synchronises. */
	float tokens[b->world_size > 0 ? b->world_size : 1];

	memset(tokens, 0, sizeof(tokens));
	return ring_allreduce(b, tokens, (size_t)b->world_size, DDP_FLOAT32, DDP_SUM);
}

static void ring_abort(struct ddp_backend *b)
{
	ring_fail((struct cpu_ring *)b);
}

static void ring_close(struct ddp_backend *b)
{
	struct cpu_ring *g = (struct cpu_ring *)b;

	if (g->fd_next >= 0)
		close(g->fd_next);
	if (g->fd_prev >= 0)
		close(g->fd_prev);
	free(g->tmp);
	free(g);
}

static const struct ddp_backend_ops ring_ops = {
    .name = "cpu-ring",
    .device_memory = 0,
    .allreduce = ring_allreduce,
    .broadcast = ring_broadcast,
    .allgather = ring_allgather,
    .barrier = ring_barrier,
    .synchronize = cpu_synchronize,
    .alloc = cpu_alloc,
    .free_mem = cpu_free_mem,
    .copy = cpu_copy,
    .abort = ring_abort,
    .close = ring_close,
};

static uint64_t ring_token(const char *prefix)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a of the namespace */

	for (const char *c = prefix; *c; c++)
		h = (h ^ (unsigned char)*c) * 1099511628211ull;
	return h;
}

int cpu_ring_new(const struct ddp_backend_params *p, struct ddp_backend **out, char *errbuf,
		 size_t errbuf_len)
{
	struct cpu_ring *g = calloc(1, sizeof(*g));
	int rc;

	*out = NULL;
	if (!g)
		return -ENOMEM;
	g->base.ops = &ring_ops;
	g->base.rank = p->rank;
	g->base.world_size = p->world_size;
	g->base.device = -1;
	g->fd_next = g->fd_prev = -1;
	g->timeout_ms = p->timeout_ms;
	g->next = (p->rank + 1) % p->world_size;
	g->prev = (p->rank - 1 + p->world_size) % p->world_size;
	g->token = ring_token(p->prefix);
	g->name_base = backend_rank_name(p, 0);
	g->name_stride = backend_rank_name(p, 1) - g->name_base;
	g->tmp = malloc(RING_PIECE);
	if (!g->tmp) {
		rc = -ENOMEM;
		goto fail;
	}
	if (p->world_size > 1) {
		rc = ring_setup(p, g->token, &g->fd_next, &g->fd_prev, errbuf, errbuf_len);
		if (rc < 0)
			goto fail;
	}
	*out = &g->base;
	return 0;
fail:
	ring_close(&g->base);
	return rc;
}
