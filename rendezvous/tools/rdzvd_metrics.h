/*
 * rdzvd_metrics.h - ddp-rdzvd's /metrics (--metrics-port): its store's
 * connections, requests by kind, keys and bytes held, and the clients it
 * refused, in Prometheus' text format (metrics.h), served on its loop
 * (metrics_http.h).
 */
#ifndef DDP_RENDEZVOUS_RDZVD_METRICS_H
#define DDP_RENDEZVOUS_RDZVD_METRICS_H

#include <uv.h>

#include "metrics.h"

struct store_server;
struct metrics_http;

/* Writes the store's families; arg is a struct store_server ** (NULL
 * behind it: nothing, the store is closing). */
void rdzvd_metrics_render(void *arg, struct metrics_out *o);

/* Serves /metrics at spec ("[ADDR:]PORT", ADDR a literal, port 0: a free
 * one) on loop, rendering *server. Returns 0 (the address said on the log)
 * or a negative errno, reported in one line (-EADDRINUSE: the port is
 * taken; -ENOTSUP: built without metrics; -EINVAL: not [ADDR:]PORT). */
int rdzvd_metrics_start(uv_loop_t *loop, const char *spec, struct store_server **server,
			struct metrics_http **out);

#endif
