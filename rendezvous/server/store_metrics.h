/*
 * store_metrics.h - a store server's families in Prometheus' text format
 * (metrics.h): connections open and accepted, requests by kind, keys and
 * bytes stored and in flight, waiting requests, connections refused and
 * closed for the budget (ddp_store_*). Written by ddp-rdzvd's /metrics and
 * by an agent that hosts the rendezvous store.
 */
#ifndef DDP_RENDEZVOUS_STORE_METRICS_H
#define DDP_RENDEZVOUS_STORE_METRICS_H

#include "metrics.h"

struct store_server;

/* Writes the families of `server` (its state now) into o. */
void store_server_metrics(const struct store_server *server, struct metrics_out *o);

#endif
