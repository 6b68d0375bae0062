/*
 * driver_wait.c - the driver's word while it waits for the store: what
 * does not answer, since when, until when, and what to do about it, said
 * after DRV_WAIT_FIRST_MS and again each time the time waited has doubled
 * (etcd: each endpoint with its last attempt's error, from the backend).
 */
#include <log.h>
#include <stdio.h>
#include <unistd.h>

#include "driver_int.h"
#include "rdzv_host.h"

/* Why this node does not host the store (c10d). */
static const char *drv_not_host_why(const struct rdzv_driver *d)
{
	if (d->is_host)
		return "another process holds that port here";
	if (d->c.is_host == 0)
		return "this node does not host it (is_host=false)";
	if (d->c.host_is_node0)
		return "node 0 of slurm's step hosts it, not this node";
	return "this node is not on the endpoint's machine";
}

/* What to do about a store that does not answer. */
static void drv_wait_advice(const struct rdzv_driver *d, char *buf, size_t len)
{
	if (d->c.mode == RDZV_DRIVER_ETCD) {
		snprintf(buf, len,
			 "check that etcd runs there and that --rdzv_endpoint lists its client "
			 "URLs (--advertise-client-urls, port 2379 by default)");
		return;
	}
	if (d->c.mode == RDZV_DRIVER_STATIC) {
		snprintf(buf, len,
			 "node 0's agent hosts it (--node_rank=0 on %s): start it, or check "
			 "--master_addr and --master_port",
			 d->c.host);
		return;
	}
	snprintf(buf, len,
		 "%s; set is_host=true in --rdzv_conf on the node that should host it, or start "
		 "ddp-rdzvd --host %s --port %d there",
		 drv_not_host_why(d), d->c.host, d->c.port);
}

/* What to do about a peer that accepts and never answers the handshake:
 * on this machine, name who holds the port. */
static void drv_silent_advice(const struct rdzv_driver *d, char *buf, size_t len)
{
	const char *flag =
	    d->c.mode == RDZV_DRIVER_STATIC ? "--master_port" : "port in --rdzv_endpoint";
	char owner[160];

	if (d->store_here) {
		rdzv_port_owner(d->c.port, owner, sizeof(owner));
		snprintf(buf, len,
			 "%s holds that port on this machine: stop it if it is not the job's "
			 "store, or give every node another %s",
			 owner, flag);
		return;
	}
	snprintf(buf, len,
		 "check what listens on port %d of %s: if it is not the job's store, stop it or "
		 "give every node another %s",
		 d->c.port, d->c.host, flag);
}

static void drv_waiting_cb(uv_timer_t *t)
{
	struct rdzv_driver *d = t->data;
	bool silent = d->be && d->ops->peer_silent && d->ops->peer_silent(d->be);
	const char *why = silent ? "it accepts connections but does not answer the session "
				   "handshake: not a ddp-rdzvd or ddplaunch store, or a frozen one"
			  : d->be && d->ops->last_error ? d->ops->last_error(d->be)
							: NULL;
	double waited = (double)(drv_now() - d->wait_since) / 1000.0;
	double left = d->c.join_timeout - waited;
	char me[256], advice[512];

	if (d->phase != DRV_CONNECTING)
		return;
	if (d->local_addr)
		snprintf(me, sizeof(me), "%s", d->local_addr);
	else if (gethostname(me, sizeof(me)) < 0)
		snprintf(me, sizeof(me), "this machine");
	me[sizeof(me) - 1] = '\0';
	if (silent)
		drv_silent_advice(d, advice, sizeof(advice));
	else
		drv_wait_advice(d, advice, sizeof(advice));
	log_warn("no %s answers at %s (%s) after %.0f s; node %s keeps trying "
		 "until the join deadline (join_timeout=%g s, %.0f s left): %s",
		 d->c.mode == RDZV_DRIVER_ETCD ? "etcd endpoint" : "rendezvous store", d->peer,
		 why ? why : "no answer yet", waited, me, d->c.join_timeout, left > 0 ? left : 0.0,
		 advice);
	/* The next at twice the time waited so far: 3, 6, 12, 24 s, ... */
	d->wait_delay = (uint64_t)(waited * 1000.0);
	if (d->wait_delay > DRV_WAIT_MAX_MS)
		d->wait_delay = DRV_WAIT_MAX_MS;
	uv_timer_start(&d->timer, drv_waiting_cb, d->wait_delay, 0);
}

void drv_wait_start(struct rdzv_driver *d)
{
	d->wait_since = drv_now();
	d->wait_delay = DRV_WAIT_FIRST_MS;
	uv_timer_start(&d->timer, drv_waiting_cb, d->wait_delay, 0);
}
