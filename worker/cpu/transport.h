/*
 * transport.h - what every CPU transport (shared memory, TCP ring,
 * hierarchical) shares: the host-memory entries of a backend ops table,
 * the collective kinds that messages name, and deadlines as poll()
 * timeouts. Pure helpers: no state, no I/O.
 */
#ifndef DDP_WORKER_CPU_TRANSPORT_H
#define DDP_WORKER_CPU_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

/* Host-memory ops for a CPU transport's ops table (struct ddp_backend_ops):
 * synchronize does nothing (the collectives are synchronous); alloc gives
 * 64-byte aligned memory (-ENOMEM), freed by free_mem (NULL allowed); copy
 * is memmove (the ranges may overlap). */
int cpu_synchronize(struct ddp_backend *b);
int cpu_alloc(struct ddp_backend *b, size_t bytes, void **out);
void cpu_free_mem(struct ddp_backend *b, void *ptr);
int cpu_copy(struct ddp_backend *b, void *dst, const void *src, size_t bytes);

/* Collective kinds, for messages (same order as cpu_op_name's names). */
enum {
	COMM_KIND_ALLREDUCE = 0,
	COMM_KIND_BROADCAST = 1,
	COMM_KIND_ALLGATHER = 2,
	COMM_KIND_BARRIER = 3,
};

/* Human name of a collective kind for messages ("all-reduce", ...;
 * "collective" for an unknown kind). Static string. */
const char *cpu_op_name(int kind);

/* Milliseconds left until deadline (a time_now_ms() value) as a poll()
 * timeout: 0 when past, capped so that it never overflows an int. */
int cpu_poll_ms(uint64_t deadline);

#endif
