/*
 * prims_fake.h - an in-memory store behind the rendezvous primitives
 * (rdzv_prims.h), on a real libuv loop, for the driver's tests: GET, CAS
 * with TCPStore's compare_set answers, ADD, SET, session-bound SET and
 * WATCH, with the ordering contract of rdzv_prims.h (every request is
 * served at once, in the order made; its answer and every watch event go
 * through one FIFO and reach the sinks from the loop, never from inside a
 * call). Closing a backend (a killed node) deletes its session keys, and
 * the watchers hear it.
 */
#ifndef DDP_TESTS_PRIMS_FAKE_H
#define DDP_TESTS_PRIMS_FAKE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "rdzv_prims.h"

/* How long the fake says a dead node's keys may outlive it. */
#define PRIMS_FAKE_DEATH_DELAY_MS 100

/* The one store of the test process; its ops table. */
extern const struct rdzv_prims_ops prims_fake;

/* Creates the store on `loop` (one at a time). */
void prims_fake_init(uv_loop_t *loop);
/* Closes its handle (every backend must be closed); run the loop after. */
void prims_fake_release(void);

/* Sessions open; keys present; requests served. */
size_t prims_fake_sessions(void);
size_t prims_fake_keys(void);
uint64_t prims_fake_requests(void);

#endif
