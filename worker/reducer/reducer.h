/*
 * reducer.h - what the reducer (reducer.c, ddp.h's ddp_reducer_*) tells
 * libddp's own tests beyond the public API.
 */
#ifndef DDP_WORKER_REDUCER_H
#define DDP_WORKER_REDUCER_H

#include <stddef.h>

#include "ddp.h"

/* How many of r's buckets are reduced in place: ranges of the parameters'
 * own gradient memory (their gradients lie back to back, in parameter
 * order), with no bucket buffer and no copy in or out. */
size_t reducer_num_in_place(const struct ddp_reducer *r);

#endif
