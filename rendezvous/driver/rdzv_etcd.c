/*
 * rdzv_etcd.c - the rendezvous primitives over etcd v3 (rdzv_prims.h;
 * docs/rendezvous.md has the mapping), with the client of rendezvous/etcd/.
 *
 * Everything runs on the agent's loop, with the async client of
 * rendezvous/etcd/ (curl's multi-socket interface on the loop's polls and
 * timers): no thread. The requests run one at a time, in the order they
 * were made (a FIFO: the head's chain of etcd calls runs, the next starts
 * when it has been answered), so writes reach etcd in that order and the
 * answers come in it; a request starts from a loop timer, so its answer is
 * never given inside the call that made it.
 *
 * A reader (read_only: ddplaunch status) has no lease and writes nothing.
 * Session: a lease of LEASE_TTL_S, granted at open (tried again until the
 * connect deadline while no endpoint answers), renewed by a loop timer every
 * third of its TTL (the renewal runs beside the requests), revoked at close so
 * that a finished node's keys vanish at once; a killed agent's keys go when
 * its lease expires. SET_SESSION is a put with the lease.
 * CAS: one transaction comparing the value (absent: create revision 0).
 * ADD: a CAS loop on the counter's mod revision (etcd has no atomic add).
 * GET of several keys of one folder ("ddprdzv/RUN/s/"): one prefix read
 * (one revision); otherwise one read per key.
 * WATCH: a read of the key (its value is the first event), then a watch
 * from the read's revision + 1, so no change is missed; a streaming request
 * on the same multi handle, whose events are handed on as they arrive.
 *
 * A failed etcd call ends the session: no endpoint answered within the
 * request's deadline (etcd_error() names each endpoint tried, with its
 * error), the lease expired, or etcd refused (permission, authentication).
 * The pending requests fail with -ECONNRESET, then lost() says why.
 * An ADD whose transaction was applied but whose answer was lost (the
 * connection broke) is sent again by the client and may count twice: the
 * round then has a ticket whose slot is never written, which its closer
 * waits for at most close_timeout. A lease that expired (the agent froze
 * for its TTL) ends the session for good: the others have re-formed
 * without this node already.
 * Not used here: bind_addr (the client connects from the default source
 * address), token and idle_timeout_ms (etcd has its own authentication, and
 * the lease is the session's liveness).
 */
#include <errno.h>
#include <log.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_etcd_int.h"
#include "timeutil.h"

static void be_teardown(struct etcd_be *be, bool revoke);

/* ---- answers ---- */

static struct rdzv_value kv_value(const struct etcd_kv *kv)
{
	return (struct rdzv_value){kv->key != NULL,
				   {kv->key ? kv->value : NULL, kv->key ? kv->value_len : 0}};
}

/* Gives the sink j's answer (status < 0: its failure, without results). */
static void answer(struct etcd_be *be, struct ejob *j, int status)
{
	const struct rdzv_prims_sink *k = be->sink;
	struct rdzv_value small[16], *v = small, none = {false, {NULL, 0}};

	switch (j->kind) {
	case J_GET:
		if (status >= 0 && j->nkeys > 16 && !(v = calloc(j->nkeys, sizeof(*v))))
			status = -ENOMEM;
		for (size_t i = 0; status >= 0 && i < j->nkeys; i++)
			v[i] = kv_value(&j->kv[i]);
		k->got(be->drv, j->tag, status, status >= 0 ? v : NULL, status >= 0 ? j->nkeys : 0);
		if (v != small)
			free(v);
		break;
	case J_CAS:
		k->cased(be->drv, j->tag, status, status >= 0 && j->swapped,
			 status >= 0 && !j->swapped ? kv_value(&j->kv[0]) : none);
		break;
	case J_ADD:
		k->added(be->drv, j->tag, status, status >= 0 ? j->num : 0);
		break;
	case J_SET:
		k->done(be->drv, j->tag, status);
		break;
	case J_WATCH:
		/* The value read is the first event; the watch's follow. */
		if (!j->w->cancelled)
			k->event(be->drv, j->w->id, status,
				 status >= 0 ? kv_value(&j->kv[0]) : none);
		break;
	}
}

static void fifo_pop(struct etcd_be *be)
{
	be->fifo = be->fifo->next;
	if (!be->fifo)
		be->fifo_tail = NULL;
}

/* Runs the FIFO: starts its head, answers the heads that are done, in
 * request order, until one is still running (or the backend closes: the
 * sink may close it from an answer). Called from the loop only. */
static void pump(struct etcd_be *be)
{
	while (!be->closed && be->fifo) {
		struct ejob *j = be->fifo;

		if (!j->running) {
			pe_job_run(be, j);
			continue;
		}
		if (!j->done)
			return;
		if (j->status < 0) {
			pe_lose(be, j->status, j->msg);
			return;
		}
		fifo_pop(be);
		answer(be, j, 0);
		pe_job_free(j);
	}
}

void pe_job_ended(struct etcd_be *be)
{
	pump(be);
}

static void on_kick(uv_timer_t *t);

/* Takes a request: it starts from the loop. */
static void be_submit(struct etcd_be *be, struct ejob *j)
{
	if (be->fifo_tail)
		be->fifo_tail->next = j;
	else
		be->fifo = j;
	be->fifo_tail = j;
	uv_timer_start(&be->kick, on_kick, 0, 0);
}

/* ---- watches ---- */

static void watch_unlink(struct etcd_be *be, struct ewatch *w)
{
	if (w->prev)
		w->prev->next = w->next;
	else
		be->watches = w->next;
	if (w->next)
		w->next->prev = w->prev;
	w->prev = w->next = NULL;
}

/* Ends a watch: a running one goes at once; one whose WATCH is still in the
 * FIFO is freed with that job. */
static void watch_stop(struct etcd_be *be, struct ewatch *w)
{
	watch_unlink(be, w);
	w->cancelled = true;
	if (w->aw) {
		etcd_awatch_free(w->aw);
		free(w);
	}
}

void pe_on_event(void *arg, int status, struct etcd_event *ev)
{
	struct ewatch *w = arg;
	struct etcd_be *be = w->be;
	struct rdzv_value v = {false, {NULL, 0}};

	if (status < 0) {
		pe_lose(be, status, etcd_error());
		return;
	}
	if (ev->type == ETCD_EVENT_PUT)
		v = (struct rdzv_value){true, {ev->kv.value, ev->kv.value_len}};
	if (!be->closed)
		be->sink->event(be->drv, w->id, 0, v);
	etcd_event_release(ev);
}

/* ---- the session ---- */

static void on_keepalive(void *arg, int status, struct etcd_result *r)
{
	struct etcd_be *be = arg;
	char msg[RDZV_PRIMS_MSG_MAX];

	(void)r;
	be->ka_busy = false;
	if (status >= 0 || be->closed)
		return;
	if (status == -ENOENT)
		snprintf(msg, sizeof(msg),
			 "etcd: this node's session (lease %llx) expired: it did not reach "
			 "etcd at %s within %d s (frozen, or cut off), so its keys are gone",
			 (unsigned long long)be->lease, be->peer, LEASE_TTL_S);
	else
		snprintf(msg, sizeof(msg), "%s", etcd_error());
	pe_lose(be, status, msg);
}

static void on_ka_timer(uv_timer_t *t)
{
	struct etcd_be *be = t->data;
	int rc;

	if (be->ka_busy || be->closed)
		return;
	rc = etcd_async_keepalive(be->c, be->lease, on_keepalive, be);
	if (rc < 0)
		pe_lose(be, rc, "etcd: cannot renew the session's lease: out of memory");
	else
		be->ka_busy = true;
}

void pe_open_failed(struct etcd_be *be, int status, const char *why)
{
	char msg[RDZV_PRIMS_MSG_MAX];

	snprintf(msg, sizeof(msg), "cannot open a session with etcd at %s: %s", be->peer,
		 why && *why ? why : strerror(-status));
	be->closed = true;
	be_teardown(be, false);
	be->sink->connected(be->drv, status, msg);
}

/* No endpoint answered until the connect deadline (the join deadline):
 * each endpoint with its last error, not one request's deadline. */
static void deadline_failed(struct etcd_be *be, int status)
{
	char list[RDZV_PRIMS_MSG_MAX / 2 + 64], msg[RDZV_PRIMS_MSG_MAX];

	if (!etcd_async_failures(be->c, list, sizeof(list)))
		snprintf(list, sizeof(list), "%s",
			 etcd_error()[0] ? etcd_error() : "no answer yet");
	snprintf(msg, sizeof(msg),
		 "no etcd endpoint answered within the join deadline (%g s): %s; check that "
		 "etcd runs there and that --rdzv_endpoint lists its client URLs (port 2379 "
		 "by default)",
		 (double)be->connect_timeout_ms / 1000.0, list);
	pe_open_failed(be, status, msg);
}

static bool unavailable(int rc)
{
	return rc == -ETIMEDOUT || rc == -ECONNREFUSED || rc == -ECONNRESET ||
	       rc == -EHOSTUNREACH || rc == -EAGAIN;
}

/* The lease is granted, or the session cannot be opened (while no
 * endpoint answers, tried again until the connect deadline: the nodes may
 * start before etcd). */
static void on_granted(void *arg, int status, struct etcd_result *r)
{
	struct etcd_be *be = arg;
	uint64_t every;

	if (be->closed)
		return;
	if (status < 0 && unavailable(status) && (int64_t)time_now_ms() < be->connect_deadline_ms) {
		log_debug("etcd at %s: no answer yet (%s); trying again", be->peer, etcd_error());
		be->state = BE_WAITING;
		uv_timer_start(&be->kick, on_kick, 100, 0);
		return;
	}
	if (status < 0 && unavailable(status) && be->connect_timeout_ms > 0) {
		deadline_failed(be, status);
		return;
	}
	if (status < 0) {
		pe_open_failed(be, status, etcd_error());
		return;
	}
	uv_timer_stop(&be->kick); /* the join deadline */
	be->lease = r->id;
	be->state = BE_OPEN;
	be->ttl_ms = (r->ttl > 0 ? r->ttl : LEASE_TTL_S) * 1000;
	pe_local_toward(etcd_async_endpoint(be->c), be->local, sizeof(be->local));
	every = (uint64_t)be->ttl_ms / 3;
	uv_timer_start(&be->ka, on_ka_timer, every, every);
	log_debug("etcd at %s: session lease granted (%lld s), renewed every %llu ms", be->peer,
		  (long long)r->ttl, (unsigned long long)every);
	be->sink->connected(be->drv, 0, NULL);
}

static int be_grant(struct etcd_be *be)
{
	int64_t left = be->connect_deadline_ms - (int64_t)time_now_ms();

	be->state = BE_GRANTING;
	/* The join deadline ends the grant in flight too (its own deadline
	 * may be later); without one, the grant's own deadline is the end. */
	if (be->connect_timeout_ms > 0)
		uv_timer_start(&be->kick, on_kick, left > 0 ? (uint64_t)left : 0, 0);
	return etcd_async_grant(be->c, LEASE_TTL_S, on_granted, be);
}

/* The first step, from the loop: the client, then the lease. */
static void be_start(struct etcd_be *be)
{
	int rc;

	if (be->opt.user && !be->opt.password) {
		char msg[RDZV_PRIMS_MSG_MAX];
		snprintf(msg, sizeof(msg),
			 "etcd user '%s' needs a password: set %s (or password= in "
			 "--rdzv_conf, visible to every local user)",
			 be->opt.user, RDZV_PRIMS_ETCD_PASSWORD_ENV);
		pe_open_failed(be, -EINVAL, msg);
		return;
	}
	rc = etcd_async_new(be->loop, &be->opt, &be->c);
	if (rc == 0)
		be->handles++; /* the client, until its close callback */
	if (rc < 0) {
		pe_open_failed(be, rc, etcd_error());
		return;
	}
	be->state = BE_NAMES;
	if ((rc = pe_names_check(be)) < 0)
		pe_open_failed(be, rc, "cannot look up the endpoints' names");
}

/* A reader's session: no lease; the first request asks etcd. */
static void be_open_read_only(struct etcd_be *be)
{
	uv_timer_stop(&be->kick);
	be->state = BE_OPEN;
	log_debug("etcd at %s: reading only (no lease)", be->peer);
	be->sink->connected(be->drv, 0, NULL);
}

void pe_names_ok(struct etcd_be *be)
{
	int rc;

	if (be->closed)
		return;
	if (be->read_only) {
		be_open_read_only(be);
		return;
	}
	if ((rc = be_grant(be)) < 0)
		pe_open_failed(be, rc, etcd_error());
}

static void on_kick(uv_timer_t *t)
{
	struct etcd_be *be = t->data;
	int rc;

	if (be->closed)
		return;
	switch (be->state) {
	case BE_NEW:
		be_start(be);
		break;
	case BE_WAITING:
		if ((rc = be_grant(be)) < 0)
			pe_open_failed(be, rc, etcd_error());
		break;
	case BE_GRANTING: {
		/* The loop's cached time may run a timer a few ms early. */
		int64_t left = be->connect_deadline_ms - (int64_t)time_now_ms();

		if (left > 0)
			uv_timer_start(&be->kick, on_kick, (uint64_t)left + 1, 0);
		else
			deadline_failed(be, -ETIMEDOUT);
		break;
	}
	case BE_NAMES:
		break;
	case BE_OPEN:
		pump(be);
		break;
	}
}

/* The session ended by itself: every pending request fails, then lost(). */
void pe_lose(struct etcd_be *be, int status, const char *why)
{
	char msg[RDZV_PRIMS_MSG_MAX];

	if (be->closed || be->lost)
		return;
	be->lost = true;
	snprintf(msg, sizeof(msg), "%s", why && *why ? why : strerror(-status));
	for (struct ejob *j = be->fifo; j && !be->closed; j = j->next)
		answer(be, j, -ECONNRESET);
	if (be->closed)
		return;
	be->closed = true;
	be_teardown(be, false);
	be->sink->lost(be->drv, status, msg);
}

/* ---- the end ---- */

static void be_free(struct etcd_be *be)
{
	struct ejob *j;

	while ((j = be->fifo)) {
		fifo_pop(be);
		pe_job_free(j);
	}
	free((char *)be->opt.endpoints);
	free((char *)be->opt.ca_file);
	free((char *)be->opt.cert_file);
	free((char *)be->opt.key_file);
	free((char *)be->opt.user);
	if (be->opt.password)
		explicit_bzero((char *)be->opt.password, strlen(be->opt.password));
	free((char *)be->opt.password);
	free(be->peer);
	free(be);
}

/* The backend goes with the last of its handles (the client counts as one:
 * until it is closed, a request's chain may still hold a job). */
void pe_handle_closed(struct etcd_be *be)
{
	if (--be->handles == 0)
		be_free(be);
}

static void on_client_closed(void *arg)
{
	pe_handle_closed(arg);
}

static void on_timer_closed(uv_handle_t *h)
{
	pe_handle_closed(h->data);
}

/* Closes the client (dropping what still runs) and the timers. */
static void be_finish(struct etcd_be *be)
{
	if (be->c)
		etcd_async_close(be->c, on_client_closed, be);
	uv_close((uv_handle_t *)&be->ka, on_timer_closed);
	uv_close((uv_handle_t *)&be->kick, on_timer_closed);
}

static void on_revoked(void *arg, int status, struct etcd_result *r)
{
	struct etcd_be *be = arg;

	(void)r;
	/* Its keys vanish at once; a lease already gone is as good. */
	if (status < 0)
		log_debug("etcd: revoking the session's lease: %s", etcd_error());
	else
		log_debug("etcd: the session's lease %llx is revoked",
			  (unsigned long long)be->lease);
	be_finish(be);
}

/* Stops what runs: the renewal timer, the watches; revokes the lease when
 * asked (the client is closed after its answer, within the request's
 * deadline), then closes the client and the timers. */
static void be_teardown(struct etcd_be *be, bool revoke)
{
	uv_timer_stop(&be->ka);
	uv_timer_stop(&be->kick);
	while (be->watches)
		watch_stop(be, be->watches);
	if (revoke && be->c && be->lease &&
	    etcd_async_revoke(be->c, be->lease, on_revoked, be) == 0)
		return;
	be_finish(be);
}

/* ---- the ops ---- */

static int opt_dup(const char *s, const char **out)
{
	*out = NULL;
	if (!s || !*s)
		return 0;
	*out = strdup(s);
	return *out ? 0 : -ENOMEM;
}

static int be_options(struct etcd_be *be, const struct rdzv_prims_config *cfg)
{
	int rc = opt_dup(cfg->endpoints, &be->opt.endpoints);

	rc |= opt_dup(cfg->ca_file, &be->opt.ca_file);
	rc |= opt_dup(cfg->cert_file, &be->opt.cert_file);
	rc |= opt_dup(cfg->key_file, &be->opt.key_file);
	rc |= opt_dup(cfg->user, &be->opt.user);
	rc |= opt_dup(cfg->password, &be->opt.password);
	be->opt.timeout_ms = cfg->request_timeout_ms > 0 && cfg->request_timeout_ms < INT32_MAX
				 ? (int)cfg->request_timeout_ms
				 : 0;
	be->peer = strdup(cfg->endpoints ? cfg->endpoints : "");
	return rc || !be->peer ? -ENOMEM : 0;
}

static int pe_open(const struct rdzv_prims_config *cfg, const struct rdzv_prims_sink *sink,
		   void *drv, void **out)
{
	struct etcd_be *be = calloc(1, sizeof(*be));
	int rc;

	if (!be)
		return -ENOMEM;
	be->loop = cfg->loop;
	be->sink = sink;
	be->drv = drv;
	be->connect_timeout_ms = cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : 0;
	be->connect_deadline_ms = (int64_t)time_now_ms() + be->connect_timeout_ms;
	be->read_only = cfg->read_only;
	rc = be_options(be, cfg);
	if (rc == 0 && !be->opt.endpoints)
		rc = -EINVAL;
	if (rc < 0) {
		be_free(be);
		return rc;
	}
	uv_timer_init(cfg->loop, &be->ka);
	uv_timer_init(cfg->loop, &be->kick);
	be->ka.data = be->kick.data = be;
	be->handles = 2;
	/* The client is made from the loop: what fails is said by connected(). */
	uv_timer_start(&be->kick, on_kick, 0, 0);
	*out = be;
	return 0;
}

static int pe_local_addr(void *p, char *buf, size_t len)
{
	struct etcd_be *be = p;

	if (be->state != BE_OPEN || !be->local[0])
		return -ENOTCONN;
	if (strlen(be->local) >= len)
		return -ENOSPC;
	strcpy(buf, be->local);
	return 0;
}

static const char *pe_peer(void *p)
{
	return ((struct etcd_be *)p)->peer;
}

/* While the session is being opened: each endpoint whose last attempt
 * failed, with why (before the grant's own deadline). */
static const char *pe_last_error(void *p)
{
	struct etcd_be *be = p;

	if (be->state == BE_OPEN || be->closed || !be->c ||
	    !etcd_async_failures(be->c, be->why, sizeof(be->why)))
		return NULL;
	return be->why;
}

/* Requests are taken while the session is open and not ended. */
static int be_usable(const struct etcd_be *be)
{
	return be->state == BE_OPEN && !be->closed ? 0 : -ENOTCONN;
}

static int pe_get(void *p, uint64_t tag, const struct byteview *keys, size_t n)
{
	struct etcd_be *be = p;
	struct ejob *j;

	if (be_usable(be))
		return -ENOTCONN;
	if (n == 0)
		return -EINVAL;
	if (!(j = pe_job_new(J_GET, tag, keys, n)))
		return -ENOMEM;
	be_submit(be, j);
	return 0;
}

static int pe_cas(void *p, uint64_t tag, struct byteview key, bool has_expected,
		  struct byteview expected, struct byteview value)
{
	struct etcd_be *be = p;
	struct ejob *j;

	if (be_usable(be))
		return -ENOTCONN;
	if (be->read_only)
		return -EROFS;
	if (!(j = pe_job_new(J_CAS, tag, &key, 1)))
		return -ENOMEM;
	j->has_expected = has_expected;
	j->value = pe_mem_dup(value.data, value.len);
	j->vlen = value.len;
	j->expected = pe_mem_dup(expected.data, has_expected ? expected.len : 0);
	j->elen = has_expected ? expected.len : 0;
	if (!j->value || !j->expected) {
		pe_job_free(j);
		return -ENOMEM;
	}
	be_submit(be, j);
	return 0;
}

static int pe_add(void *p, uint64_t tag, struct byteview key, int64_t delta)
{
	struct etcd_be *be = p;
	struct ejob *j;

	if (be_usable(be))
		return -ENOTCONN;
	if (be->read_only)
		return -EROFS;
	if (!(j = pe_job_new(J_ADD, tag, &key, 1)))
		return -ENOMEM;
	j->delta = delta;
	be_submit(be, j);
	return 0;
}

static int pe_set(void *p, uint64_t tag, struct byteview key, struct byteview value, bool session)
{
	struct etcd_be *be = p;
	struct ejob *j;

	if (be_usable(be))
		return -ENOTCONN;
	if (be->read_only)
		return -EROFS;
	if (!(j = pe_job_new(J_SET, tag, &key, 1)))
		return -ENOMEM;
	j->session = session;
	j->vlen = value.len;
	if (!(j->value = pe_mem_dup(value.data, value.len))) {
		pe_job_free(j);
		return -ENOMEM;
	}
	be_submit(be, j);
	return 0;
}

static int pe_watch(void *p, uint64_t id, struct byteview key)
{
	struct etcd_be *be = p;
	struct ewatch *w;
	struct ejob *j;

	if (be_usable(be))
		return -ENOTCONN;
	w = calloc(1, sizeof(*w));
	j = w ? pe_job_new(J_WATCH, id, &key, 1) : NULL;
	if (!j) {
		free(w);
		return -ENOMEM;
	}
	w->be = be;
	w->id = id;
	j->w = w;
	w->next = be->watches;
	if (w->next)
		w->next->prev = w;
	be->watches = w;
	be_submit(be, j);
	return 0;
}

static void pe_unwatch(void *p, uint64_t id)
{
	struct etcd_be *be = p;

	for (struct ewatch *w = be->watches; w; w = w->next)
		if (w->id == id) {
			watch_stop(be, w);
			return;
		}
}

static void pe_close(void *p)
{
	struct etcd_be *be = p;

	if (!be || be->closed)
		return;
	be->closed = true;
	be_teardown(be, true);
}

static int64_t pe_death_delay_ms(void *p)
{
	struct etcd_be *be = p;

	return be->ttl_ms;
}

const struct rdzv_prims_ops rdzv_prims_etcd = {
    .name = "etcd",
    .open = pe_open,
    .local_addr = pe_local_addr,
    .peer = pe_peer,
    .last_error = pe_last_error,
    .death_delay_ms = pe_death_delay_ms,
    .get = pe_get,
    .cas = pe_cas,
    .add = pe_add,
    .set = pe_set,
    .watch = pe_watch,
    .unwatch = pe_unwatch,
    .close = pe_close,
};
