/*
 * rdzv_prims_etcd.c - the rendezvous primitives over etcd v3 (rdzv_prims.h;
 * docs/rendezvous.md has the mapping), with the client of rendezvous/etcd/.
 *
 * The client's calls block, so the loop never makes them: a worker thread
 * of the backend takes the requests from a queue, in order, and makes the
 * calls; the loop hears of each end through uv_async_send and answers the
 * sink there, in request order (a FIFO of the requests made), never from
 * inside the call that made the request.
 *
 * Session: a lease of LEASE_TTL_S, granted at open (tried again until the
 * connect deadline while no endpoint answers), renewed by a loop timer every
 * third of its TTL (the renewal goes ahead of the queue), revoked at close so
 * that a finished node's keys vanish at once; a killed agent's keys go when
 * its lease expires. SET_SESSION is a put with the lease.
 * CAS: one transaction comparing the value (absent: create revision 0).
 * ADD: a CAS loop on the counter's mod revision (etcd has no atomic add).
 * GET of several keys of one folder ("ddprdzv/RUN/s/"): one prefix read
 * (one revision); otherwise one read per key.
 * WATCH: the worker reads the key (its value is the first event) and starts
 * the watch from the read's revision + 1, so no change is missed; the loop
 * polls the watch's eventfd (uv_poll) and hands every event on.
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
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_etcd_int.h"
#include "timeutil.h"

static void be_lose(struct etcd_be *be, int status, const char *msg);
static void be_teardown(struct etcd_be *be, bool revoke);
static void be_try_finish(struct etcd_be *be);

/* ---- the loop's side: answers ---- */

static struct rdzv_value kv_value(const struct etcd_kv *kv)
{
	return (struct rdzv_value){kv->key != NULL,
				   {kv->key ? kv->value : NULL, kv->key ? kv->value_len : 0}};
}

static void watch_start(struct etcd_be *be, struct ewatch *w, struct ejob *j);

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
		if (status < 0 || j->w->cancelled) {
			if (!j->w->cancelled)
				k->event(be->drv, j->w->id, status, none);
			break;
		}
		watch_start(be, j->w, j);
		break;
	default:
		break;
	}
}

static void fifo_pop(struct etcd_be *be)
{
	be->fifo = be->fifo->fnext;
	if (!be->fifo)
		be->fifo_tail = NULL;
}

static bool job_done(struct etcd_be *be, struct ejob *j)
{
	bool done;

	pthread_mutex_lock(&be->mu);
	done = j->done;
	pthread_mutex_unlock(&be->mu);
	return done;
}

static void on_opened(struct etcd_be *be, struct ejob *j);

/* Answers the requests that are done, in request order, until one that is
 * not (or the backend closes: the sink may close it from an answer). */
static void deliver_due(struct etcd_be *be)
{
	while (!be->closed && be->fifo && job_done(be, be->fifo)) {
		struct ejob *j = be->fifo;

		if (j->kind == J_OPEN) {
			fifo_pop(be);
			on_opened(be, j);
		} else if (j->status < 0) {
			be_lose(be, j->status, j->msg);
			return;
		} else {
			fifo_pop(be);
			answer(be, j, 0);
		}
		pe_job_free(j);
	}
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

static void be_handle_closed(struct etcd_be *be);

static void on_watch_closed(uv_handle_t *h)
{
	struct ewatch *w = h->data;
	struct etcd_be *be = w->be;

	etcd_watch_free(w->ew);
	free(w);
	be_handle_closed(be);
}

/* Ends a watch: a polled one closes its handle (freed in the callback);
 * one whose WATCH is still in the queue is freed with that job. */
static void watch_stop(struct etcd_be *be, struct ewatch *w)
{
	watch_unlink(be, w);
	w->cancelled = true;
	if (w->polling)
		uv_close((uv_handle_t *)&w->poll, on_watch_closed);
}

static void on_watch_ready(uv_poll_t *h, int status, int events)
{
	struct ewatch *w = h->data;
	struct etcd_be *be = w->be;
	struct etcd_event ev;
	int rc;

	if (status < 0) {
		be_lose(be, status, "etcd: cannot poll a watch");
		return;
	}
	/* Every event, in order: the last one is the key's latest value. */
	while (!be->closed && !w->cancelled && (rc = etcd_watch_next(w->ew, 0, &ev)) != 0) {
		struct rdzv_value v = {false, {NULL, 0}};

		if (rc < 0) {
			be_lose(be, rc, etcd_error());
			return;
		}
		if (ev.type == ETCD_EVENT_PUT)
			v = (struct rdzv_value){true, {ev.kv.value, ev.kv.value_len}};
		be->sink->event(be->drv, w->id, 0, v);
		etcd_event_release(&ev);
	}
}

/* The WATCH's answer: the value read is the first event; then its changes. */
static void watch_start(struct etcd_be *be, struct ewatch *w, struct ejob *j)
{
	int rc = uv_poll_init(be->loop, &w->poll, etcd_watch_fd(j->ew));

	if (rc < 0) {
		be_lose(be, rc, "etcd: cannot poll a watch");
		return;
	}
	w->poll.data = w;
	w->polling = true;
	be->handles++;
	w->ew = j->ew;
	j->ew = NULL;
	uv_poll_start(&w->poll, UV_READABLE, on_watch_ready);
	be->sink->event(be->drv, w->id, 0, kv_value(&j->kv[0]));
}

/* ---- the session ---- */

static void on_ka_timer(uv_timer_t *t)
{
	struct etcd_be *be = t->data;
	struct ejob *j;

	if (be->ka_busy || be->closed)
		return;
	if (!(j = pe_job_new(J_KEEPALIVE, 0, NULL, 0))) {
		be_lose(be, -ENOMEM, "etcd: out of memory renewing the session's lease");
		return;
	}
	be->ka_busy = true;
	pe_job_submit(be, j, true);
}

/* The lease is granted (j->num: its TTL), or the session cannot be opened. */
static void on_opened(struct etcd_be *be, struct ejob *j)
{
	char msg[RDZV_PRIMS_MSG_MAX];
	uint64_t every;

	if (j->status < 0) {
		snprintf(msg, sizeof(msg), "cannot open a session with etcd at %s: %s", be->peer,
			 j->msg ? j->msg : strerror(-j->status));
		be->closed = true;
		be_teardown(be, false);
		be->sink->connected(be->drv, j->status, msg);
		return;
	}
	be->open = true;
	be->ttl_ms = (j->num > 0 ? j->num : LEASE_TTL_S) * 1000;
	every = (uint64_t)be->ttl_ms / 3;
	uv_timer_start(&be->ka, on_ka_timer, every, every);
	log_debug("etcd at %s: session lease granted (%lld s), renewed every %llu ms", be->peer,
		  (long long)j->num, (unsigned long long)every);
	be->sink->connected(be->drv, 0, NULL);
}

/* Finished internal jobs: a renewal that failed ends the session. */
static void take_internal(struct etcd_be *be)
{
	struct ejob *j;

	pthread_mutex_lock(&be->mu);
	j = be->idone;
	be->idone = NULL;
	pthread_mutex_unlock(&be->mu);
	while (j) {
		struct ejob *next = j->next;

		if (j->kind == J_KEEPALIVE) {
			be->ka_busy = false;
			if (j->status < 0 && j->status != -ECANCELED && !be->closed)
				be_lose(be, j->status, j->msg ? j->msg : strerror(-j->status));
		}
		pe_job_free(j);
		j = next;
	}
}

static void on_async(uv_async_t *a)
{
	struct etcd_be *be = a->data;

	if (!be->closed)
		take_internal(be);
	if (!be->closed)
		deliver_due(be);
	if (be->closed)
		be_try_finish(be);
}

/* The session ended by itself: every pending request fails, then lost(). */
static void be_lose(struct etcd_be *be, int status, const char *why)
{
	char msg[RDZV_PRIMS_MSG_MAX];

	if (be->closed || be->lost)
		return;
	be->lost = true;
	snprintf(msg, sizeof(msg), "%s", why && *why ? why : strerror(-status));
	/* The jobs stay in the FIFO (the worker may hold one): they are freed
	 * once it has stopped. */
	for (struct ejob *j = be->fifo; j && !be->closed; j = j->fnext)
		answer(be, j, -ECONNRESET);
	if (be->closed)
		return;
	be->closed = true;
	be_teardown(be, false);
	be->sink->lost(be->drv, status, msg);
}

/* ---- the end ---- */

/* Stops what runs: the renewal timer, the watches, and the worker (after
 * the revoke, when asked); the rest is freed once the worker has gone. */
static void be_teardown(struct etcd_be *be, bool revoke)
{
	struct ejob *j = revoke ? pe_job_new(J_REVOKE, 0, NULL, 0) : NULL;

	uv_timer_stop(&be->ka);
	while (be->watches)
		watch_stop(be, be->watches);
	/* The revoke is queued before the worker hears it may stop. */
	if (j)
		pe_job_submit(be, j, false);
	pthread_mutex_lock(&be->mu);
	be->quit = true;
	pthread_cond_signal(&be->cv);
	pthread_mutex_unlock(&be->mu);
	/* Without a worker (it could not start) there is nothing to wait for. */
	if (!be->worker_started)
		be_try_finish(be);
}

static void be_free(struct etcd_be *be)
{
	etcd_client_free(be->c);
	pthread_mutex_destroy(&be->mu);
	pthread_cond_destroy(&be->cv);
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

static void be_handle_closed(struct etcd_be *be)
{
	if (--be->handles == 0 && be->finishing)
		be_free(be);
}

static void on_be_handle_closed(uv_handle_t *h)
{
	be_handle_closed(h->data);
}

/* Once the worker has gone: frees the jobs, closes the handles (the
 * backend goes with the last one). */
static void be_try_finish(struct etcd_be *be)
{
	bool exited;
	struct ejob *j;

	pthread_mutex_lock(&be->mu);
	exited = be->worker_exited || !be->worker_started;
	pthread_mutex_unlock(&be->mu);
	if (!exited || be->finishing)
		return;
	be->finishing = true;
	if (be->worker_started)
		pthread_join(be->worker, NULL);
	while ((j = be->fifo)) {
		fifo_pop(be);
		pe_job_free(j);
	}
	while ((j = be->idone)) {
		be->idone = j->next;
		pe_job_free(j);
	}
	/* Left in the queue only when the worker never ran; the requests
	 * among them were freed with the FIFO. */
	while ((j = be->q_head)) {
		be->q_head = j->next;
		if (j->kind == J_KEEPALIVE || j->kind == J_REVOKE)
			pe_job_free(j);
	}
	uv_close((uv_handle_t *)&be->async, on_be_handle_closed);
	uv_close((uv_handle_t *)&be->ka, on_be_handle_closed);
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
	struct ejob *j = NULL;
	pthread_condattr_t ca;
	int rc;

	if (!be)
		return -ENOMEM;
	be->loop = cfg->loop;
	be->sink = sink;
	be->drv = drv;
	be->connect_deadline_ms =
	    (int64_t)time_now_ms() + (cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : 0);
	pthread_mutex_init(&be->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&be->cv, &ca);
	pthread_condattr_destroy(&ca);
	rc = be_options(be, cfg);
	if (rc == 0 && !be->opt.endpoints)
		rc = -EINVAL;
	if (rc == 0 && !(j = pe_job_new(J_OPEN, 0, NULL, 0)))
		rc = -ENOMEM;
	if (rc == 0)
		rc = uv_async_init(cfg->loop, &be->async, on_async);
	if (rc < 0) {
		pe_job_free(j);
		be_free(be);
		return rc;
	}
	uv_timer_init(cfg->loop, &be->ka);
	be->async.data = be->ka.data = be;
	be->handles = 2;
	pe_job_submit(be, j, false);
	rc = pe_worker_start(be);
	if (rc < 0) {
		/* handles are open: they free the backend when closed */
		be->closed = true;
		be_teardown(be, false);
		return rc;
	}
	*out = be;
	return 0;
}

static int pe_local_addr(void *p, char *buf, size_t len)
{
	struct etcd_be *be = p;

	if (!be->open || !be->local[0])
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

/* Requests are taken while the session is open and not ended. */
static int be_usable(const struct etcd_be *be)
{
	return be->open && !be->closed ? 0 : -ENOTCONN;
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
	pe_job_submit(be, j, false);
	return 0;
}

static int pe_cas(void *p, uint64_t tag, struct byteview key, bool has_expected,
		  struct byteview expected, struct byteview value)
{
	struct etcd_be *be = p;
	struct ejob *j;

	if (be_usable(be))
		return -ENOTCONN;
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
	pe_job_submit(be, j, false);
	return 0;
}

static int pe_add(void *p, uint64_t tag, struct byteview key, int64_t delta)
{
	struct etcd_be *be = p;
	struct ejob *j;

	if (be_usable(be))
		return -ENOTCONN;
	if (!(j = pe_job_new(J_ADD, tag, &key, 1)))
		return -ENOMEM;
	j->delta = delta;
	pe_job_submit(be, j, false);
	return 0;
}

static int pe_set(void *p, uint64_t tag, struct byteview key, struct byteview value, bool session)
{
	struct etcd_be *be = p;
	struct ejob *j;

	if (be_usable(be))
		return -ENOTCONN;
	if (!(j = pe_job_new(J_SET, tag, &key, 1)))
		return -ENOMEM;
	j->session = session;
	j->vlen = value.len;
	if (!(j->value = pe_mem_dup(value.data, value.len))) {
		pe_job_free(j);
		return -ENOMEM;
	}
	pe_job_submit(be, j, false);
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
	pe_job_submit(be, j, false);
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
    .death_delay_ms = pe_death_delay_ms,
    .get = pe_get,
    .cas = pe_cas,
    .add = pe_add,
    .set = pe_set,
    .watch = pe_watch,
    .unwatch = pe_unwatch,
    .close = pe_close,
};
