/*
 * rdzv_multi.c - the multi-node driver (rdzv_multi.h): the machine's
 * actions performed over the backend, its answers fed back, its timer, and
 * its rounds told to the agent.
 */
#include <errno.h>
#include <inttypes.h>
#include <log.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_host.h"
#include "rdzv_multi_int.h"

/* Beyond the store's delay in telling a death (rdzv_prims_ops.death_delay_ms):
 * etcd's lease checks and the watcher's census and state CAS on a loaded
 * host. */
#define DRV_FAIL_SLACK_MS 2000

/* The machine's timer this late means this process did not run (SIGSTOP, a
 * VM migration, a swapped-out host): rdzv_resumed. */
#define DRV_PAUSE_MS 500

static void drv_drain(struct rdzv_multi *d);

int64_t drv_now(void)
{
	return (int64_t)(uv_hrtime() / 1000000u);
}

static char *dup_or_null(const char *s, bool *oom)
{
	char *c = s ? strdup(s) : NULL;

	if (s && !c)
		*oom = true;
	return c;
}

static int drv_config_check(const struct rdzv_multi *d, char *err, size_t errlen);

/* What can never work, refused before anything is bound or connected (the
 * run and --dry_run alike): a --local_addr not of this machine, a port 0
 * that only the store's host may choose, what the machine refuses. */
static int drv_check(const struct rdzv_multi *d, char *err, size_t errlen)
{
	int rc;

	if (d->local_addr &&
	    (rc = rdzv_host_local_check(
		 d->local_addr, d->c.mode == OPTS_RDZV_ETCD ? "" : d->bind_lit, err, errlen)) < 0)
		return rc;
	if (d->c.port == 0 && !d->is_host) {
		snprintf(err, errlen,
			 "the rendezvous store's port is 0 but this node does not host it: only "
			 "its host may let the kernel choose one; give the port the host "
			 "reported in --rdzv_endpoint");
		return -EINVAL;
	}
	return drv_config_check(d, err, errlen);
}

int rdzv_multi_new(const struct opts_rdzv *cfg, int nproc, int max_restarts,
		   struct rdzv_multi **out, char *err, size_t errlen)
{
	struct rdzv_multi *d = calloc(1, sizeof(*d));
	bool oom = !d, self = false;
	int rc;

	if (oom)
		return -ENOMEM;
	d->c = *cfg;
	d->run_id = dup_or_null(cfg->run_id, &oom);
	d->token = dup_or_null(cfg->token, &oom);
	d->local_addr = dup_or_null(cfg->local_addr, &oom);
	d->c.run_id = d->run_id;
	d->c.token = d->token;
	d->c.local_addr = d->local_addr;
	d->nproc = nproc;
	d->max_restarts = max_restarts;
	d->ops = cfg->mode == OPTS_RDZV_ETCD ? &rdzv_prims_etcd : &rdzv_prims_session;
	if (oom) {
		rdzv_multi_free(d);
		return -ENOMEM;
	}
	/* The host's address as a literal, to bind; a name that does not
	 * resolve only matters to the node that must bind it (the others'
	 * sessions keep trying until the join deadline). */
	rc = rdzv_host_is_self(cfg->host, &self, d->bind_lit, sizeof(d->bind_lit), err, errlen);
	d->store_here = rc == 0 && self;
	if (cfg->mode == OPTS_RDZV_STATIC)
		d->is_host = cfg->node_rank == 0;
	else if (cfg->mode == OPTS_RDZV_ETCD)
		d->is_host = false; /* etcd is the store */
	else {
		/* torchrun's rule: every agent on the endpoint's machine tries
		 * to bind it; the first wins, the others join (keeper_host). */
		d->host_by_rule = cfg->conf.is_host < 0;
		d->is_host = cfg->conf.is_host >= 0 ? cfg->conf.is_host == 1
			     : cfg->host_is_node0   ? cfg->node_rank == 0
						    : self;
	}
	if (rc < 0 && d->is_host) {
		rdzv_multi_free(d);
		return rc;
	}
	if (!d->bind_lit[0])
		snprintf(d->bind_lit, sizeof(d->bind_lit), "%s", cfg->host);
	rc = drv_check(d, err, errlen);
	if (rc < 0) {
		rdzv_multi_free(d);
		return rc;
	}
	*out = d;
	return 0;
}

void rdzv_multi_free(struct rdzv_multi *d)
{
	if (!d)
		return;
	rdzv_machine_free(d->m);
	if (d->token)
		explicit_bzero(d->token, strlen(d->token));
	explicit_bzero(d->c.conf.password, sizeof(d->c.conf.password));
	free(d->run_id);
	free(d->token);
	free(d->local_addr);
	free(d);
}

/* ---- ending ---- */

static void drv_end(struct rdzv_multi *d, enum rdzv_outcome how, const char *msg)
{
	if (d->phase == DRV_ENDED)
		return;
	d->phase = DRV_ENDED;
	d->join_cb = NULL;
	if (!d->shutdown && d->ev)
		d->ev->ended(d->ev_arg, how, msg);
	if (d->shutdown)
		keeper_close_all(d);
}

void drv_fail(struct rdzv_multi *d, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	drv_end(d, RDZV_OUT_FAILED, msg);
}

/* An entry point of the machine returned rc: -ENOMEM leaves it unusable. */
static void drv_after(struct rdzv_multi *d, int rc)
{
	if (rc < 0)
		drv_fail(d, "the rendezvous ran out of memory");
	else
		drv_drain(d);
}

/* ---- rounds ---- */

static void drv_deliver(struct rdzv_multi *d)
{
	rdzv_joined_fn cb = d->join_cb;

	d->join_cb = NULL;
	d->have_round = false;
	cb(d->join_arg, 0, &d->round);
}

static void drv_round(struct rdzv_multi *d)
{
	const struct rdzv_world *w = rdzv_machine_world(d->m);

	if (!w)
		return;
	snprintf(d->master_addr, sizeof(d->master_addr), "%s", w->master_addr);
	d->round = (struct rdzv_round){
	    .round = (int)w->round,
	    .restart_count = (int)w->restarts,
	    .group_rank = (int)w->rank,
	    .group_world_size = (int)w->size,
	    .rank_base = (int)w->first_proc,
	    .world_size = (int)w->world_procs,
	    .master_addr = d->master_addr,
	    .master_port = w->master_port,
	    .local_addr = d->addr,
	};
	d->have_round = true;
	keeper_round(d, w);
	log_info("round %" PRIu32 " of run id '%s': node %" PRIu32 " of %" PRIu32 " (ranks %" PRIu64
		 " to %" PRIu64 " of %" PRIu64 "), master %s:%u",
		 w->round, d->run_id, w->rank, w->size, w->first_proc,
		 w->first_proc + (uint64_t)d->nproc - 1, w->world_procs, w->master_addr,
		 w->master_port);
	if (d->join_cb && !d->shutdown && !d->leaving)
		drv_deliver(d);
}

/* Under a Slurm step a node that is gone never comes back: with fewer than
 * MIN left, waiting for it until the join deadline only keeps the step. */
static bool drv_lost_for_good(struct rdzv_multi *d)
{
	const struct rdzv_state *st = rdzv_machine_state(d->m);
	int left = d->round.group_world_size - 1;

	if (!d->c.lost_nodes_final || !st || d->round.group_world_size == 0 ||
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

static void drv_round_over(struct rdzv_multi *d, const char *why)
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
	struct rdzv_multi *d = t->data;
	int64_t now = drv_now();

	if (d->phase != DRV_ON)
		return;
	/* libuv runs the expired timers before it reads the sockets: after a
	 * pause the peers' beats wait unread, and must be heard first. */
	if (now > d->timer_due + DRV_PAUSE_MS) {
		log_info("this agent did not run for %.1f s (stopped, or its host was); the "
			 "others' liveness is judged from now",
			 (double)(now - d->timer_due) / 1000.0);
		rdzv_resumed(d->m, now);
	}
	drv_after(d, rdzv_on_timer(d->m, now));
}

static void drv_arm(struct rdzv_multi *d, int64_t at)
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
static int drv_request(struct rdzv_multi *d, const struct rdzv_action *a)
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

static void drv_action(struct rdzv_multi *d, const struct rdzv_action *a)
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
		drv_end(d, RDZV_OUT_LEFT, a->text);
		break;
	case RDZV_ACT_FINISHED:
		drv_end(d, RDZV_OUT_FINISHED, a->text);
		break;
	case RDZV_ACT_FAILED:
		drv_end(d, RDZV_OUT_FAILED, a->text);
		break;
	case RDZV_ACT_REFUSED:
		drv_end(d, RDZV_OUT_REFUSED, a->text);
		break;
	case RDZV_ACT_WAITING:
		log_info("%s", a->text);
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
static void drv_drain(struct rdzv_multi *d)
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
static bool drv_gone(struct rdzv_multi *d, int status)
{
	return d->phase != DRV_ON || status == -ECONNRESET || status == -ECANCELED;
}

static void sink_got(void *p, uint64_t tag, int status, const struct rdzv_value *v, size_t n)
{
	struct rdzv_multi *d = p;

	log_debug("rdzv answer #%llu: %d", (unsigned long long)tag, status);

	if (!drv_gone(d, status))
		drv_after(d, rdzv_on_get(d->m, drv_now(), tag, status, v, n));
}

static void sink_cased(void *p, uint64_t tag, int status, bool swapped, struct rdzv_value cur)
{
	struct rdzv_multi *d = p;

	log_debug("rdzv answer #%llu: %d", (unsigned long long)tag, status);

	if (!drv_gone(d, status))
		drv_after(d, rdzv_on_cas(d->m, drv_now(), tag, status, swapped, cur));
}

static void sink_added(void *p, uint64_t tag, int status, int64_t value)
{
	struct rdzv_multi *d = p;

	log_debug("rdzv answer #%llu: %d", (unsigned long long)tag, status);

	if (!drv_gone(d, status))
		drv_after(d, rdzv_on_add(d->m, drv_now(), tag, status, value));
}

static void sink_done(void *p, uint64_t tag, int status)
{
	struct rdzv_multi *d = p;

	log_debug("rdzv answer #%llu: %d", (unsigned long long)tag, status);

	if (!drv_gone(d, status))
		drv_after(d, rdzv_on_done(d->m, drv_now(), tag, status));
}

static void sink_event(void *p, uint64_t watch, int status, struct rdzv_value v)
{
	struct rdzv_multi *d = p;

	if (drv_gone(d, status))
		return;
	if (status < 0) {
		drv_fail(d, "the rendezvous store at %s stopped a watch: %s", d->peer,
			 strerror(-status));
		return;
	}
	drv_after(d, rdzv_on_key(d->m, drv_now(), watch, v));
}

static int drv_open(struct rdzv_multi *d, int64_t connect_timeout_ms);

static const char *drv_store_owner(const struct rdzv_multi *d)
{
	return d->c.mode == OPTS_RDZV_STATIC ? "node 0's agent" : "the endpoint's host";
}

/* The session ended while the job goes on: this node did not run for longer
 * than the keep-alive window (the store ended its session; the others
 * re-form without it), or the store did not answer for that long (its host
 * stopped, or a partition). A node that comes back is a joiner, not a
 * failure: its machine goes, its workers stop with no restart counted, and
 * a new session joins again as a new node. A closed connection gets one
 * attempt (a store that died refuses it at once), a silent store until the
 * join deadline. Returns whether the node rejoins. */
static bool drv_rejoin(struct rdzv_multi *d, int status, const char *msg)
{
	double secs = status == -ETIMEDOUT ? d->c.conf.join_timeout : 0;

	if (d->c.mode == OPTS_RDZV_ETCD || d->shutdown || d->leaving || d->phase != DRV_ON ||
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
	if (secs > 0)
		log_warn("%s; this node rejoins run id '%s' as a new node, trying until the join "
			 "deadline (join_timeout=%g s)",
			 msg, d->run_id, secs);
	else
		log_warn("%s; this node rejoins run id '%s' as a new node if the store (hosted by "
			 "%s) is still there",
			 msg, d->run_id, drv_store_owner(d));
	if (d->ev)
		d->ev->round_over(d->ev_arg, "this node lost the rendezvous store");
	return true;
}

static void sink_lost(void *p, int status, const char *msg)
{
	struct rdzv_multi *d = p;

	d->be = NULL; /* the backend freed itself */
	if (d->phase == DRV_ENDED || drv_rejoin(d, status, msg))
		return;
	if (d->c.mode == OPTS_RDZV_ETCD)
		drv_fail(d, "%s; run id '%s' cannot go on without etcd", msg, d->run_id);
	else
		drv_fail(d,
			 "%s; run id '%s' cannot go on without its rendezvous store (hosted by %s)",
			 msg, d->run_id, drv_store_owner(d));
}

/* A node id that is unique per agent: its address and process id (and,
 * after it lost the store, the rejoin's number: the others may not yet have
 * seen the old one go). */
static void drv_node_id(struct rdzv_multi *d)
{
	char pid[40];
	int n = d->rejoins ? snprintf(pid, sizeof(pid), ":%d.%d", (int)getpid(), d->rejoins)
			   : snprintf(pid, sizeof(pid), ":%d", (int)getpid());
	size_t keep = strlen(d->addr);

	if (keep + (size_t)n > RDZV_ID_MAX)
		keep = RDZV_ID_MAX - (size_t)n;
	snprintf(d->node_id, sizeof(d->node_id), "%.*s%s", (int)keep, d->addr, pid);
}

/* The machine's configuration but for the node's id, address, port and
 * failure grace, known only once connected. */
static void drv_config(const struct rdzv_multi *d, struct rdzv_config *cfg_out)
{
	const struct opts_rdzv_conf *c = &d->c.conf;
	struct rdzv_config cfg;

	rdzv_config_defaults(&cfg);
	cfg.run_id = d->run_id;
	cfg.nproc = (uint32_t)d->nproc;
	cfg.min_nodes = (uint32_t)d->c.min_nodes;
	cfg.max_nodes = (uint32_t)d->c.max_nodes;
	cfg.node_rank = d->c.node_rank;
	cfg.max_restarts = (uint32_t)d->max_restarts;
	cfg.job = d->c.job;
	cfg.job_text = d->c.job_text;
	/* A static job's store is its node 0's alone: node 0 names its job
	 * there, the others check that name before joining. */
	if (d->c.mode == OPTS_RDZV_STATIC)
		cfg.store_role = d->is_host ? RDZV_STORE_OWN : RDZV_STORE_OWNED;
	cfg.join_timeout_ms = (int64_t)(c->join_timeout * 1000.0 + 0.5);
	cfg.last_call_timeout_ms = (int64_t)(c->last_call_timeout * 1000.0 + 0.5);
	cfg.close_timeout_ms = (int64_t)(c->close_timeout * 1000.0 + 0.5);
	cfg.keep_alive_interval_ms = (int64_t)(c->keep_alive_interval * 1000.0 + 0.5);
	cfg.keep_alive_max_attempt = (uint32_t)c->keep_alive_max_attempt;
	/* A node that waits for others says for whom, as one waiting for the
	 * store does (DRV_WAIT_FIRST_MS). */
	cfg.report_first_ms = DRV_WAIT_FIRST_MS;
	*cfg_out = cfg;
}

/* What the machine would refuse once connected, refused before: with
 * stand-ins for what only the connection tells (rdzv_new runs this for
 * --dry_run too). */
static int drv_config_check(const struct rdzv_multi *d, char *err, size_t errlen)
{
	struct rdzv_config cfg;

	drv_config(d, &cfg);
	cfg.node_id = "node:1";
	cfg.addr = d->local_addr ? d->local_addr : "127.0.0.1";
	return rdzv_config_check(&cfg, err, errlen);
}

static int drv_machine_new(struct rdzv_multi *d, int port)
{
	struct rdzv_config cfg;
	char msg[256];

	drv_config(d, &cfg);
	cfg.node_id = d->node_id;
	cfg.addr = d->addr;
	cfg.port = (uint16_t)port;
	/* A peer's workers see a node die before the store says so; their
	 * failure waits that long for the membership change (not charged). */
	cfg.fail_grace_ms = d->ops->death_delay_ms(d->be) + DRV_FAIL_SLACK_MS;
	d->fail_grace_ms = cfg.fail_grace_ms;
	if (rdzv_config_check(&cfg, msg, sizeof(msg)) < 0) {
		drv_fail(d, "%s", msg);
		return -EINVAL;
	}
	return rdzv_machine_new(&cfg, &d->m);
}

static void sink_connected(void *p, int status, const char *msg)
{
	struct rdzv_multi *d = p;
	int port;

	uv_timer_stop(&d->timer); /* the reminder */
	if (status < 0) {
		d->be = NULL;
		if (d->rejoins)
			drv_fail(d,
				 "%s; and then %s; run id '%s' cannot go on without its "
				 "rendezvous store (hosted by %s)",
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

/* ---- the agent's calls ---- */

/* etcd: the endpoints, TLS files, user and password (OPTS_ETCD_PASSWORD_ENV
 * when --rdzv_conf has none), each request's deadline. */
static void drv_etcd_config(struct rdzv_multi *d, struct rdzv_prims_config *pc)
{
	const struct opts_rdzv_conf *c = &d->c.conf;
	const char *pw = getenv(OPTS_ETCD_PASSWORD_ENV);

	pc->endpoints = d->c.endpoints;
	pc->ca_file = c->cacert[0] ? c->cacert : NULL;
	pc->cert_file = c->cert[0] ? c->cert : NULL;
	pc->key_file = c->key[0] ? c->key : NULL;
	pc->user = c->user[0] ? c->user : NULL;
	pc->password = c->password[0] ? c->password : pc->user && pw && *pw ? pw : NULL;
	pc->request_timeout_ms = (int64_t)(c->read_timeout * 1000.0 + 0.5);
	snprintf(d->peer, sizeof(d->peer), "%.*s", (int)sizeof(d->peer) - 1, d->c.endpoints);
}

/* Opens the session (again, after a loss), connecting for up to
 * connect_timeout_ms. Liveness, on both sides, is the keep-alive window: the
 * store ends a session silent that long, and the session is lost when a
 * ping waits that long; a ping each keep_alive_interval, at least two
 * within the window. */
static int drv_open(struct rdzv_multi *d, int64_t connect_timeout_ms)
{
	const struct opts_rdzv_conf *c = &d->c.conf;
	uint32_t every = (uint32_t)(c->keep_alive_interval * 1000.0 + 0.5);
	uint32_t window =
	    (uint32_t)(c->keep_alive_interval * 1000.0 * (double)c->keep_alive_max_attempt + 0.5);
	struct rdzv_prims_config pc = {
	    .loop = d->loop,
	    .token = d->token,
	    .token_len = d->token ? strlen(d->token) : 0,
	    .connect_timeout_ms = connect_timeout_ms,
	    .idle_timeout_ms = window,
	    .ping_interval_ms = every < window / 2 ? every : window / 2,
	};
	int rc;

	/* The host talks to its own store at the address it bound. */
	pc.host = d->rstore ? d->bind_lit : d->c.host;
	pc.port = (uint16_t)d->c.port;
	pc.bind_addr = d->local_addr && rdzv_host_is_literal(d->local_addr) ? d->local_addr : NULL;
	if (d->c.mode == OPTS_RDZV_ETCD)
		drv_etcd_config(d, &pc);
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

int rdzv_multi_attach(struct rdzv_multi *d, uv_loop_t *loop, const struct rdzv_events *ev,
		      void *arg)
{
	const char *host;
	int rc;

	d->loop = loop;
	d->ev = ev;
	d->ev_arg = arg;
	uv_timer_init(loop, &d->timer);
	uv_timer_init(loop, &d->linger);
	d->timer.data = d->linger.data = d;
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
	return drv_open(d, (int64_t)(d->c.conf.join_timeout * 1000.0));
}

int rdzv_multi_join(struct rdzv_multi *d, rdzv_joined_fn done, void *arg)
{
	if (d->phase == DRV_ENDED || d->phase == DRV_IDLE)
		return -ECANCELED;
	d->join_cb = done;
	d->join_arg = arg;
	if (d->have_round && !d->leaving)
		drv_deliver(d);
	return 0;
}

void rdzv_multi_group_exited(struct rdzv_multi *d, bool success)
{
	if (d->phase != DRV_ON)
		return;
	if (!success)
		log_info("waiting up to %.3g s (%s + 2 s) for a node's death that may have made "
			 "the workers fail; a restart is counted only if there is none",
			 (double)d->fail_grace_ms / 1000.0,
			 d->c.mode == OPTS_RDZV_ETCD ? "etcd's lease ttl"
						     : "the keep-alive window");
	drv_after(d, rdzv_workers_exited(d->m, drv_now(), success));
}

void rdzv_multi_leave(struct rdzv_multi *d)
{
	/* A round formed while leaving would only start workers to stop. */
	d->leaving = true;
	if (d->phase == DRV_ON)
		drv_after(d, rdzv_stop(d->m, drv_now()));
	else if (d->phase == DRV_CONNECTING)
		drv_end(d, RDZV_OUT_LEFT, "left before reaching the rendezvous store");
}

void rdzv_multi_shutdown(struct rdzv_multi *d, int exit_status)
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
	keeper_close_all(d);
}
