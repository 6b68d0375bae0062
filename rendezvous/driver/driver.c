/*
 * driver.c - the multi-node driver (driver.h): the machine's actions
 * performed over the backend, its answers fed back, its timer, and its
 * rounds told to the caller.
 */
#include <errno.h>
#include <inttypes.h>
#include <log.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver_int.h"
#include "rdzv_host.h"

/* The machine's timer this late means this process did not run (SIGSTOP, a
 * VM migration, a swapped-out host): rdzv_resumed. */
#define DRV_PAUSE_MS 500

static void drv_drain(struct rdzv_driver *d);

int64_t drv_now(void)
{
	return (int64_t)(uv_hrtime() / 1000000u);
}

/* Whether this node hosts the store: static, node 0; etcd, never (etcd is
 * the store); c10d, torchrun's rule: every agent on the endpoint's machine
 * tries to bind it, the first wins, the others join (keeper_host). */
static void drv_decide_host(struct rdzv_driver *d, bool self)
{
	const struct rdzv_driver_config *c = &d->c;

	if (c->mode == RDZV_DRIVER_STATIC)
		d->is_host = c->node_rank == 0;
	else if (c->mode == RDZV_DRIVER_ETCD)
		d->is_host = false;
	else {
		d->host_by_rule = c->is_host < 0;
		d->is_host = c->is_host >= 0	? c->is_host == 1
			     : c->host_is_node0 ? c->node_rank == 0
						: self;
	}
}

int rdzv_driver_new(const struct rdzv_driver_config *cfg, struct rdzv_driver **out, char *err,
		    size_t errlen)
{
	struct rdzv_driver *d = calloc(1, sizeof(*d));
	bool self = false;
	int rc;

	if (!d)
		return -ENOMEM;
	rc = drv_config_copy(d, cfg);
	if (rc == -EINVAL)
		snprintf(err, errlen, "the rendezvous host '%.40s...' is longer than %d bytes",
			 cfg->host, RDZV_DRIVER_HOST_MAX);
	if (rc < 0)
		goto fail;
	d->ops = cfg->prims			 ? cfg->prims
		 : cfg->mode == RDZV_DRIVER_ETCD ? &rdzv_prims_etcd
						 : &rdzv_prims_session;
	/* The host's address as a literal, to bind; a name that does not
	 * resolve only matters to the node that must bind it (the others'
	 * sessions keep trying until the join deadline). */
	rc = rdzv_host_is_self(d->c.host, &self, d->bind_lit, sizeof(d->bind_lit), err, errlen);
	d->store_here = rc == 0 && self;
	drv_decide_host(d, self);
	if (rc < 0 && d->is_host)
		goto fail;
	if (!d->bind_lit[0])
		snprintf(d->bind_lit, sizeof(d->bind_lit), "%s", d->c.host);
	rc = drv_check(d, err, errlen);
	if (rc < 0)
		goto fail;
	*out = d;
	return 0;
fail:
	rdzv_driver_free(d);
	return rc;
}

void rdzv_driver_free(struct rdzv_driver *d)
{
	if (!d)
		return;
	rdzv_machine_free(d->m);
	drv_config_release(d);
	free(d);
}

/* ---- ending ---- */

static void drv_end(struct rdzv_driver *d, enum rdzv_driver_outcome how, const char *msg)
{
	if (d->phase == DRV_ENDED)
		return;
	d->phase = DRV_ENDED;
	d->join_cb = NULL;
	if (!d->shutdown && d->ev)
		d->ev->ended(d->ev_arg, how, msg);
	if (d->shutdown)
		keeper_close_all(d, false);
}

void drv_fail(struct rdzv_driver *d, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	drv_end(d, RDZV_DRIVER_FAILED, msg);
}

/* An entry point of the machine returned rc: -ENOMEM leaves it unusable. */
static void drv_after(struct rdzv_driver *d, int rc)
{
	if (rc < 0)
		drv_fail(d, "the rendezvous ran out of memory");
	else
		drv_drain(d);
}

/* ---- rounds ---- */

static void drv_deliver(struct rdzv_driver *d)
{
	rdzv_driver_joined_fn cb = d->join_cb;

	d->join_cb = NULL;
	d->have_round = false;
	cb(d->join_arg, 0, &d->round);
}

static void drv_round(struct rdzv_driver *d)
{
	const struct rdzv_world *w = rdzv_machine_world(d->m);
	const struct rdzv_state *st = rdzv_machine_state(d->m);

	if (!w)
		return;
	snprintf(d->subject, sizeof(d->subject), "%s", st ? st->subject : "");
	snprintf(d->master_addr, sizeof(d->master_addr), "%s", w->master_addr);
	d->round = (struct rdzv_driver_round){
	    .round = w->round,
	    .restarts = w->restarts,
	    .rank = w->rank,
	    .size = w->size,
	    .first_proc = w->first_proc,
	    .world_procs = w->world_procs,
	    .master_addr = d->master_addr,
	    .master_port = w->master_port,
	    .local_addr = d->addr,
	    .members = w->members,
	    .reason = st ? st->reason : RDZV_WHY_START,
	    .subject = d->subject,
	};
	d->have_round = true;
	keeper_round(d, w);
	log_info("round %" PRIu32 " of run id '%s': node %" PRIu32 " of %" PRIu32 " (ranks %" PRIu64
		 " to %" PRIu64 " of %" PRIu64 "), master %s:%u",
		 w->round, d->run_id, w->rank, w->size, w->first_proc,
		 w->first_proc + (uint64_t)w->members[w->rank].nproc - 1, w->world_procs,
		 w->master_addr, w->master_port);
	if (d->join_cb && !d->shutdown && !d->leaving)
		drv_deliver(d);
}

/* Under a Slurm step a node that is gone never comes back: with fewer than
 * MIN left, waiting for it until the join deadline only keeps the step. */
static bool drv_lost_for_good(struct rdzv_driver *d)
{
	const struct rdzv_state *st = rdzv_machine_state(d->m);
	int left = (int)d->round.size - 1;

	if (!d->c.lost_nodes_final || !st || d->round.size == 0 ||
	    (st->reason != RDZV_WHY_DEAD && st->reason != RDZV_WHY_LEFT) || left >= d->c.min_nodes)
		return false;
	drv_fail(d,
		 "node '%s' is %s and the %d node%s left %s fewer than --nnodes' %d; under slurm a "
		 "lost node does not come back, so the job of run id '%s' ends "
		 "(--rdzv_backend=c10d with --nnodes=MIN:MAX goes on with fewer)",
		 st->subject, st->reason == RDZV_WHY_DEAD ? "gone" : "leaving", left,
		 left == 1 ? "" : "s", left == 1 ? "is" : "are", d->c.min_nodes, d->run_id);
	return true;
}

static void drv_round_over(struct rdzv_driver *d, const char *why)
{
	int port;

	if (drv_lost_for_good(d))
		return;
	d->have_round = false;
	/* The next round's workers get a store of their own; the machine
	 * writes this node's slot (with the port) only after its ticket
	 * comes back, so the port set now is the one published. */
	port = keeper_new_wstore(d);
	if (port < 0) {
		drv_fail(d, "cannot open a store for the next round's workers: %s",
			 strerror(-port));
		return;
	}
	rdzv_set_port(d->m, (uint16_t)port);
	if (!d->shutdown && d->ev)
		d->ev->round_over(d->ev_arg, why);
}

/* ---- the machine's actions ---- */

static void drv_timer_cb(uv_timer_t *t)
{
	struct rdzv_driver *d = t->data;
	int64_t now = drv_now();

	if (d->phase != DRV_ON)
		return;
	/* libuv runs the expired timers before it reads the sockets: after a
	 * pause the peers' beats wait unread, and must be heard first. */
	if (now > d->timer_due + DRV_PAUSE_MS) {
		/* How late the timer is understates the pause by the time from
		 * the stop to the timer's due time; the loop's last poll was
		 * before the stop (the pause's other bound, at most one
		 * keep-alive interval before it). */
		log_info("this agent did not run for %.1f s (stopped, or its host was); the "
			 "others' liveness is judged from now",
			 (double)(now - (d->polled_at ? d->polled_at : d->timer_due)) / 1000.0);
		rdzv_resumed(d->m, now);
	}
	drv_after(d, rdzv_on_timer(d->m, now));
}

/* Just before the loop waits for I/O: the last time this agent ran. */
static void drv_prepare_cb(uv_prepare_t *h)
{
	((struct rdzv_driver *)h->data)->polled_at = drv_now();
}

static void drv_arm(struct rdzv_driver *d, int64_t at)
{
	int64_t now = drv_now();

	uv_timer_stop(&d->timer);
	/* At least 1 ms: libuv 1.44 runs a timer started with 0 from inside a
	 * timer callback again in the same pass, before any I/O; a deadline
	 * already past (one the machine asks for again while it waits for an
	 * answer) would spin without ever reading the answer. */
	if (at < 0)
		return;
	d->timer_due = at > now + 1 ? at : now + 1;
	uv_timer_start(&d->timer, drv_timer_cb, (uint64_t)(d->timer_due - now), 0);
}

/* Performs one request; returns the backend's code. */
static int drv_request(struct rdzv_driver *d, const struct rdzv_action *a)
{
	switch (a->kind) {
	case RDZV_ACT_GET:
		return d->ops->get(d->be, a->id, a->keys, a->nkeys);
	case RDZV_ACT_CAS:
		return d->ops->cas(d->be, a->id, a->key, a->has_expected, a->expected, a->value);
	case RDZV_ACT_ADD:
		return d->ops->add(d->be, a->id, a->key, a->delta);
	case RDZV_ACT_SET:
	case RDZV_ACT_SET_SESSION:
		return d->ops->set(d->be, a->id, a->key, a->value, a->kind == RDZV_ACT_SET_SESSION);
	case RDZV_ACT_WATCH:
		return d->ops->watch(d->be, a->id, a->key);
	case RDZV_ACT_UNWATCH:
		d->ops->unwatch(d->be, a->watch);
		return 0;
	default:
		return 0;
	}
}

static const char *const drv_kind_names[] = {
    [RDZV_ACT_GET] = "get",
    [RDZV_ACT_CAS] = "cas",
    [RDZV_ACT_ADD] = "add",
    [RDZV_ACT_SET] = "set",
    [RDZV_ACT_SET_SESSION] = "set_session",
    [RDZV_ACT_WATCH] = "watch",
    [RDZV_ACT_UNWATCH] = "unwatch",
    [RDZV_ACT_TIMER] = "timer",
    [RDZV_ACT_ROUND] = "round",
    [RDZV_ACT_ROUND_OVER] = "round_over",
    [RDZV_ACT_LEFT] = "left",
    [RDZV_ACT_FINISHED] = "finished",
    [RDZV_ACT_FAILED] = "failed",
    [RDZV_ACT_REFUSED] = "refused",
    [RDZV_ACT_WAITING] = "waiting",
    [RDZV_ACT_NOTICE] = "notice",
};

static void drv_trace(const struct rdzv_action *a)
{
	int64_t at = a->at_ms >= 0 ? a->at_ms - drv_now() : -1;

	log_debug(
	    "rdzv %s #%llu %.*s%s%s n=%zu at=%+lld", drv_kind_names[a->kind],
	    (unsigned long long)(a->kind == RDZV_ACT_UNWATCH ? a->watch : a->id),
	    (int)(a->kind == RDZV_ACT_GET && a->nkeys ? a->keys[0].len : a->key.len),
	    (const char *)(a->kind == RDZV_ACT_GET && a->nkeys ? a->keys[0].data : a->key.data),
	    a->text ? " " : "", a->text ? a->text : "", a->nkeys, (long long)at);
}

static void drv_action(struct rdzv_driver *d, const struct rdzv_action *a)
{
	int rc;

	drv_trace(a);

	switch (a->kind) {
	case RDZV_ACT_TIMER:
		drv_arm(d, a->at_ms);
		break;
	case RDZV_ACT_ROUND:
		drv_round(d);
		break;
	case RDZV_ACT_ROUND_OVER:
		log_debug("%s", a->text);
		drv_round_over(d, a->text);
		break;
	case RDZV_ACT_LEFT:
		drv_end(d, RDZV_DRIVER_LEFT, a->text);
		break;
	case RDZV_ACT_FINISHED:
		drv_end(d, RDZV_DRIVER_FINISHED, a->text);
		break;
	case RDZV_ACT_FAILED:
		drv_end(d,
			rdzv_machine_failed_permanent(d->m) ? RDZV_DRIVER_PERMANENT
							    : RDZV_DRIVER_FAILED,
			a->text);
		break;
	case RDZV_ACT_REFUSED:
		drv_end(d, RDZV_DRIVER_REFUSED, a->text);
		break;
	case RDZV_ACT_WAITING:
		log_info("%s", a->text);
		break;
	case RDZV_ACT_NOTICE:
		log_warn("%s", a->text);
		break;
	default:
		rc = drv_request(d, a);
		if (rc < 0)
			drv_fail(d, "a request to the rendezvous store at %s failed: %s", d->peer,
				 strerror(-rc));
	}
}

/* Performs what the machine asks until nothing is due. Re-entered (an
 * event handler of the agent calling back), it leaves the work to the
 * outer loop. */
static void drv_drain(struct rdzv_driver *d)
{
	struct rdzv_action a;

	if (d->draining || !d->m)
		return;
	d->draining = true;
	while (d->phase == DRV_ON && rdzv_next_action(d->m, &a))
		drv_action(d, &a);
	d->draining = false;
}

/* ---- answers ---- */

/* A request that failed because the session is going is not the
 * machine's business: lost() follows with the real reason. */
static bool drv_gone(struct rdzv_driver *d, int status)
{
	return d->phase != DRV_ON || status == -ECONNRESET || status == -ECANCELED;
}

static void sink_got(void *p, uint64_t tag, int status, const struct rdzv_value *v, size_t n)
{
	struct rdzv_driver *d = p;

	log_debug("rdzv answer #%llu: %d", (unsigned long long)tag, status);

	if (notice_got(d, tag, status, v, n))
		return;
	if (tag == DRV_TAG_HOSTED) {
		if (status >= 0 && n == 1)
			d->store_kind = v[0].present ? DRV_STORE_AGENT : DRV_STORE_STANDALONE;
		return;
	}
	if (!drv_gone(d, status))
		drv_after(d, rdzv_on_get(d->m, drv_now(), tag, status, v, n));
}

static void sink_cased(void *p, uint64_t tag, int status, bool swapped, struct rdzv_value cur)
{
	struct rdzv_driver *d = p;

	log_debug("rdzv answer #%llu: %d", (unsigned long long)tag, status);

	if (!drv_gone(d, status))
		drv_after(d, rdzv_on_cas(d->m, drv_now(), tag, status, swapped, cur));
}

static void sink_added(void *p, uint64_t tag, int status, int64_t value)
{
	struct rdzv_driver *d = p;

	log_debug("rdzv answer #%llu: %d", (unsigned long long)tag, status);

	if (!drv_gone(d, status))
		drv_after(d, rdzv_on_add(d->m, drv_now(), tag, status, value));
}

static void sink_done(void *p, uint64_t tag, int status)
{
	struct rdzv_driver *d = p;

	log_debug("rdzv answer #%llu: %d", (unsigned long long)tag, status);

	if (tag == DRV_TAG_STATUS || notice_done(d, tag, status))
		return;
	if (!drv_gone(d, status))
		drv_after(d, rdzv_on_done(d->m, drv_now(), tag, status));
}

static void sink_event(void *p, uint64_t watch, int status, struct rdzv_value v)
{
	struct rdzv_driver *d = p;

	if (notice_event(d, watch, status, v))
		return;
	if (drv_gone(d, status))
		return;
	if (status < 0) {
		drv_fail(d, "the rendezvous store at %s stopped a watch: %s", d->peer,
			 strerror(-status));
		return;
	}
	drv_after(d, rdzv_on_key(d->m, drv_now(), watch, v));
}

static int drv_open(struct rdzv_driver *d, int64_t connect_timeout_ms);

/* What the store was, for the lines that say it is lost: hosted by an
 * agent, or a standalone ddp-rdzvd (DRV_HOSTED_KEY). */
static const char *drv_store_owner(struct rdzv_driver *d)
{
	if (d->store_kind == DRV_STORE_STANDALONE)
		snprintf(d->owner, sizeof(d->owner), "the standalone ddp-rdzvd at %s", d->peer);
	else
		snprintf(d->owner, sizeof(d->owner), "hosted by %s",
			 d->c.mode == RDZV_DRIVER_STATIC ? "node 0's agent"
							 : "the endpoint's host");
	return d->owner;
}

/* Whether the store is an agent's or a standalone ddp-rdzvd: read once
 * connected (answered in sink_got, never to the machine). */
static void drv_ask_store_kind(struct rdzv_driver *d)
{
	struct byteview key = {(const uint8_t *)DRV_HOSTED_KEY, strlen(DRV_HOSTED_KEY)};

	if (d->c.mode != RDZV_DRIVER_ETCD && d->ops->get(d->be, DRV_TAG_HOSTED, &key, 1) < 0)
		log_debug("cannot ask the store who hosts it");
}

/* The session ended while the job goes on: this node did not run for longer
 * than the keep-alive window (the store ended its session; the others
 * re-form without it), or the store did not answer for that long (its host
 * stopped, or a partition). A node that comes back is a joiner, not a
 * failure: its machine goes, its workers stop with no restart counted, and
 * a new session joins again as a new node. A closed connection gets one
 * attempt (a store that died refuses it at once), a silent store until the
 * join deadline. Returns whether the node rejoins. */
static bool drv_rejoin(struct rdzv_driver *d, int status, const char *msg)
{
	double secs = status == -ETIMEDOUT ? d->c.join_timeout : 0;
	char where[384];

	if (d->c.mode == RDZV_DRIVER_ETCD || d->shutdown || d->leaving || d->phase != DRV_ON ||
	    status == -EPROTO)
		return false;
	snprintf(d->lost_msg, sizeof(d->lost_msg), "%s", msg);
	uv_timer_stop(&d->timer);
	rdzv_machine_free(d->m);
	d->m = NULL;
	d->have_round = false;
	d->rejoins++;
	if (drv_open(d, (int64_t)(secs * 1000.0)) < 0)
		return false;
	where[0] = '\0';
	if (d->ev && d->ev->where) {
		memcpy(where, "; this node was in ", 19);
		d->ev->where(d->ev_arg, where + 19, sizeof(where) - 19);
	}
	if (secs > 0)
		log_warn("%s%s; this node rejoins run id '%s' as a new node, trying until the join "
			 "deadline (join_timeout=%g s)",
			 msg, where, d->run_id, secs);
	else
		log_warn("%s%s; this node rejoins run id '%s' as a new node if the store (%s) is "
			 "still there",
			 msg, where, d->run_id, drv_store_owner(d));
	if (d->ev)
		d->ev->round_over(d->ev_arg, "this node lost the rendezvous store");
	return true;
}

static void sink_lost(void *p, int status, const char *msg)
{
	struct rdzv_driver *d = p;

	d->be = NULL; /* the backend freed itself */
	if (d->phase == DRV_ENDED || drv_rejoin(d, status, msg))
		return;
	if (d->c.mode == RDZV_DRIVER_ETCD)
		drv_fail(d, "%s; run id '%s' cannot go on without etcd", msg, d->run_id);
	else
		drv_fail(d, "%s; run id '%s' cannot go on without its rendezvous store (%s)", msg,
			 d->run_id, drv_store_owner(d));
}

/* A node id that is unique per agent: its address and process id (and,
 * after it lost the store, the rejoin's number: the others may not yet have
 * seen the old one go). */
static void drv_node_id(struct rdzv_driver *d)
{
	char pid[40];
	int n = d->rejoins ? snprintf(pid, sizeof(pid), ":%d.%d", (int)getpid(), d->rejoins)
			   : snprintf(pid, sizeof(pid), ":%d", (int)getpid());
	size_t keep = strlen(d->addr);

	if (keep + (size_t)n > RDZV_ID_MAX)
		keep = RDZV_ID_MAX - (size_t)n;
	snprintf(d->node_id, sizeof(d->node_id), "%.*s%s", (int)keep, d->addr, pid);
}

static int drv_machine_new(struct rdzv_driver *d, int port)
{
	struct rdzv_config cfg;
	char msg[256];
	int rc;

	drv_machine_config(d, &cfg);
	cfg.node_id = d->node_id;
	cfg.addr = d->addr;
	cfg.port = (uint16_t)port;
	/* A peer's workers see a node die before the store says so; their
	 * failure waits that long for the membership change (not charged). */
	cfg.fail_grace_ms = d->ops->death_delay_ms(d->be) + d->c.fail_slack_ms;
	d->fail_grace_ms = cfg.fail_grace_ms;
	if (rdzv_config_check(&cfg, msg, sizeof(msg)) < 0) {
		drv_fail(d, "%s", msg);
		return -EINVAL;
	}
	rc = rdzv_machine_new(&cfg, &d->m);
	if (rc == 0 && d->nproc_now > 0)
		rc = rdzv_set_local_procs(d->m, (uint32_t)d->nproc_now);
	return rc;
}

static void sink_connected(void *p, int status, const char *msg)
{
	struct rdzv_driver *d = p;
	int port;

	uv_timer_stop(&d->timer); /* the reminder */
	if (status < 0) {
		d->be = NULL;
		if (d->rejoins)
			drv_fail(d,
				 "%s; and then %s; run id '%s' cannot go on without its "
				 "rendezvous store (%s)",
				 d->lost_msg, msg, d->run_id, drv_store_owner(d));
		else
			drv_fail(d, "%s", msg);
		return;
	}
	if (d->local_addr)
		snprintf(d->addr, sizeof(d->addr), "%s", d->local_addr);
	else if (d->ops->local_addr(d->be, d->addr, sizeof(d->addr)) < 0)
		snprintf(d->addr, sizeof(d->addr), "%s", d->bind_lit);
	drv_node_id(d);
	port = keeper_new_wstore(d);
	if (port < 0) {
		drv_fail(d, "cannot open a store for this node's workers: %s", strerror(-port));
		return;
	}
	if (drv_machine_new(d, port) < 0) {
		if (d->phase != DRV_ENDED)
			drv_fail(d, "the rendezvous ran out of memory");
		return;
	}
	log_debug("joining run id '%s' at %s as '%s'", d->run_id, d->peer, d->node_id);
	d->phase = DRV_ON;
	drv_ask_store_kind(d);
	notice_watch(d);
	drv_after(d, rdzv_start(d->m, drv_now()));
}

static const struct rdzv_prims_sink drv_sink = {
    .connected = sink_connected,
    .lost = sink_lost,
    .got = sink_got,
    .cased = sink_cased,
    .added = sink_added,
    .done = sink_done,
    .event = sink_event,
};

/* ---- the caller's calls ---- */

/* Opens the session (again, after a loss), connecting for up to
 * connect_timeout_ms. */
static int drv_open(struct rdzv_driver *d, int64_t connect_timeout_ms)
{
	struct rdzv_prims_config pc = {.loop = d->loop, .connect_timeout_ms = connect_timeout_ms};
	int rc;

	drv_prims_config(d, &pc);
	/* The host talks to its own store at the address it bound. */
	pc.host = d->rstore ? d->bind_lit : d->c.host;
	rc = d->ops->open(&pc, &drv_sink, d, &d->be);
	if (rc < 0) {
		log_error("cannot connect to the rendezvous store at %s: %s", d->peer,
			  strerror(-rc));
		return rc;
	}
	d->phase = DRV_CONNECTING;
	drv_wait_start(d);
	return 0;
}

int rdzv_driver_attach(struct rdzv_driver *d, uv_loop_t *loop, const struct rdzv_driver_events *ev,
		       void *arg)
{
	const char *host;
	int rc;

	d->loop = loop;
	d->ev = ev;
	d->ev_arg = arg;
	uv_timer_init(loop, &d->timer);
	uv_timer_init(loop, &d->linger);
	uv_prepare_init(loop, &d->prepare);
	d->timer.data = d->linger.data = d->prepare.data = d;
	uv_prepare_start(&d->prepare, drv_prepare_cb);
	uv_unref((uv_handle_t *)&d->prepare); /* it never keeps the loop alive */
	d->handles = true;
	if (d->is_host && (rc = keeper_host(d)) < 0)
		return rc;
	if (d->c.port == 0) { /* the host could not bind it (drv_check) */
		log_error("the rendezvous store's port is 0: only its host may choose one; give "
			  "the port that host reported");
		return -EINVAL;
	}
	host = d->rstore ? d->bind_lit : d->c.host;
	snprintf(d->peer, sizeof(d->peer), "%s%s%s:%d", strchr(host, ':') ? "[" : "", host,
		 strchr(host, ':') ? "]" : "", d->c.port);
	return drv_open(d, (int64_t)(d->c.join_timeout * 1000.0));
}

int rdzv_driver_join(struct rdzv_driver *d, rdzv_driver_joined_fn done, void *arg)
{
	if (d->phase == DRV_ENDED || d->phase == DRV_IDLE)
		return -ECANCELED;
	d->join_cb = done;
	d->join_arg = arg;
	if (d->have_round && !d->leaving)
		drv_deliver(d);
	return 0;
}

void rdzv_driver_group_exited(struct rdzv_driver *d, bool success)
{
	if (d->phase != DRV_ON)
		return;
	if (!success)
		log_info("waiting up to %.3g s (%s + %.3g s) for a node's death that may have "
			 "made the workers fail; a restart is counted only if there is none",
			 (double)d->fail_grace_ms / 1000.0,
			 d->c.mode == RDZV_DRIVER_ETCD ? "etcd's lease ttl"
						       : "the keep-alive window",
			 (double)d->c.fail_slack_ms / 1000.0);
	drv_after(d, rdzv_workers_exited(d->m, drv_now(), success));
}

struct store_server *rdzv_driver_hosted_store(const struct rdzv_driver *d)
{
	return d->rstore;
}

int rdzv_driver_publish(struct rdzv_driver *d, const void *rec, size_t len)
{
	char key[RDZV_RUN_ID_MAX + RDZV_ID_MAX + 32];
	struct byteview k, v = {rec, len};

	if (len > RDZV_STATUS_MAX)
		return -EMSGSIZE;
	if (d->phase != DRV_ON || d->leaving || d->shutdown || !d->node_id[0])
		return -ENOTCONN;
	snprintf(key, sizeof(key), RDZV_STATUS_KEY_FMT, d->run_id, d->node_id);
	k = (struct byteview){(const uint8_t *)key, strlen(key)};
	return d->ops->set(d->be, DRV_TAG_STATUS, k, v, true);
}

void rdzv_driver_renew(struct rdzv_driver *d)
{
	if (d->phase == DRV_ON)
		drv_after(d, rdzv_workers_renew(d->m, drv_now()));
}

void rdzv_driver_grow(struct rdzv_driver *d)
{
	if (d->phase == DRV_ON)
		drv_after(d, rdzv_workers_grow(d->m, drv_now()));
}

int rdzv_driver_set_nproc(struct rdzv_driver *d, int nproc)
{
	if (nproc < 1 || nproc > d->c.nproc)
		return -EINVAL;
	/* A machine made afresh (this node rejoins as a new node) starts
	 * with it too. */
	d->nproc_now = nproc;
	return d->m ? rdzv_set_local_procs(d->m, (uint32_t)nproc) : 0;
}

void rdzv_driver_evict(struct rdzv_driver *d, uint32_t rank)
{
	if (d->phase == DRV_ON && d->m)
		drv_after(d, rdzv_member_hung(d->m, drv_now(), rank));
}

void rdzv_driver_leave(struct rdzv_driver *d)
{
	/* A round formed while leaving would only start workers to stop. */
	d->leaving = true;
	if (d->phase == DRV_ON)
		drv_after(d, rdzv_stop(d->m, drv_now()));
	else if (d->phase == DRV_CONNECTING)
		drv_end(d, RDZV_DRIVER_LEFT, "left before reaching the rendezvous store");
}

void rdzv_driver_leave_permanent(struct rdzv_driver *d, const char *cause)
{
	d->leaving = true;
	if (d->phase == DRV_ON)
		drv_after(d, rdzv_stop_permanent(d->m, drv_now(), cause));
	else
		rdzv_driver_leave(d);
}

void rdzv_driver_shutdown(struct rdzv_driver *d, int exit_status)
{
	if (d->shutdown)
		return;
	d->shutdown = true;
	d->exit_status = exit_status;
	d->join_cb = NULL;
	if (d->phase == DRV_ON) {
		/* Leave first (the others re-form at once); LEFT closes. */
		drv_after(d, rdzv_stop(d->m, drv_now()));
		return;
	}
	d->phase = DRV_ENDED;
	keeper_close_all(d, false);
}

void rdzv_driver_kill(struct rdzv_driver *d)
{
	d->shutdown = true;
	d->join_cb = NULL;
	d->phase = DRV_ENDED;
	keeper_close_all(d, true);
}
