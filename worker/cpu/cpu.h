/*
 * cpu.h - pieces shared by the CPU backend's two transports (cpu_shm.c:
 * shared memory within a node; cpu_ring.c: TCP ring across nodes) and its
 * element-wise reduction kernels (reduce.c). Not installed.
 */
#ifndef DDP_WORKER_CPU_H
#define DDP_WORKER_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

/* dst[i] = dst[i] op src[i] for i < count (op SUM or MAX; AVG sums). */
void cpu_reduce_into(void *dst, const void *src, size_t count, enum ddp_dtype dtype,
		     enum ddp_op op);
/* dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[n-1][i], in that order
 * (a fixed order, so every rank computing it gets the same bits). */
void cpu_reduce_many(void *dst, const void *const *srcs, size_t nsrcs, size_t count,
		     enum ddp_dtype dtype, enum ddp_op op);
/* memcpy for large copies whose destination is not needed in cache soon:
 * non-temporal stores where the CPU has them. */
void cpu_copy_stream(void *dst, const void *src, size_t bytes);

/* buf[i] /= divisor (the AVG finish). */
void cpu_divide(void *buf, size_t count, enum ddp_dtype dtype, int divisor);

/* Host-memory ops used by both transports' ops tables. */
int cpu_synchronize(struct ddp_backend *b);
int cpu_alloc(struct ddp_backend *b, size_t bytes, void **out);
void cpu_free_mem(struct ddp_backend *b, void *ptr);
int cpu_copy(struct ddp_backend *b, void *dst, const void *src, size_t bytes);
int cpu_copy_host(struct ddp_backend *b, void *dst, const void *src, size_t bytes, int to_host);

/* Collective kinds, for messages (same order as cpu_op_name's names). */
enum {
	COMM_KIND_ALLREDUCE = 0,
	COMM_KIND_BROADCAST = 1,
	COMM_KIND_ALLGATHER = 2,
	COMM_KIND_BARRIER = 3,
};

/* Milliseconds left until deadline (a time_now_ms() value) as a poll()
 * timeout: 0 when past, capped so that it never overflows an int. */
int cpu_poll_ms(uint64_t deadline);

/* Human name of a collective for messages. */
const char *cpu_op_name(int kind);

int cpu_shm_new(const struct ddp_backend_params *p, struct ddp_backend **out, char *errbuf,
		size_t errbuf_len);
/* Ring set-up (ring_setup.c): listens on the address that routes to the
 * store (DDP_RING_ADDR overrides), publishes "ip port" through the store,
 * connects to rank+1 and accepts rank-1 (each side checks a hello carrying
 * the namespace token). Both fds come back non-blocking. */
int ring_setup(const struct ddp_backend_params *p, uint64_t token, int *fd_next, int *fd_prev,
	       char *errbuf, size_t errbuf_len);

int cpu_ring_new(const struct ddp_backend_params *p, struct ddp_backend **out, char *errbuf,
		 size_t errbuf_len);
/* Shared memory inside each node + ring between the nodes' local rank 0
 * (needs WORLD_SIZE a multiple of LOCAL_WORLD_SIZE, ranks numbered node by
 * node as the launcher does). */
int cpu_hier_new(const struct ddp_backend_params *p, struct ddp_backend **out, char *errbuf,
		 size_t errbuf_len);

#endif
