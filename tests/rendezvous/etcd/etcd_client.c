/*
 * etcd_client.c - the tests' blocking etcd client (etcd_client.h): the
 * async client (etcd_async.h) on a private libuv loop, which each call runs
 * until its answer is in. One HTTP engine, no thread: the watches of a
 * client run on its loop too, whenever a call or etcd_watch_next() runs it.
 */
#include "etcd_client.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "etcd_async.h"
#include "etcd_int.h"
#include "timeutil.h"

struct etcd_client {
	uv_loop_t loop;
	uv_timer_t nap; /* bounds etcd_watch_next()'s wait */
	struct etcd_async *a;
};

struct watch_item {
	struct watch_item *next;
	struct etcd_event ev;
};

struct etcd_watch {
	struct etcd_client *c;
	struct etcd_awatch *aw;
	struct watch_item *head, *tail;
	bool ended;
	int rc;
	char err[2048];
};

int etcd_client_new(const struct etcd_options *opt, struct etcd_client **out)
{
	struct etcd_client *c = calloc(1, sizeof(*c));
	int rc;

	*out = NULL;
	if (!c)
		return etcd_fail(-ENOMEM, "etcd: out of memory");
	if ((rc = uv_loop_init(&c->loop)) < 0) {
		free(c);
		return etcd_fail(rc, "etcd: cannot make a loop: %s", uv_strerror(rc));
	}
	uv_timer_init(&c->loop, &c->nap);
	rc = etcd_async_new(&c->loop, opt, &c->a);
	if (rc < 0) {
		char msg[2048];
		snprintf(msg, sizeof(msg), "%s", etcd_error());
		etcd_client_free(c);
		return etcd_fail(rc, "%s", msg);
	}
	*out = c;
	return 0;
}

void etcd_client_free(struct etcd_client *c)
{
	if (!c)
		return;
	etcd_async_close(c->a, NULL, NULL);
	uv_close((uv_handle_t *)&c->nap, NULL);
	uv_run(&c->loop, UV_RUN_DEFAULT);
	uv_loop_close(&c->loop);
	free(c);
}

const char *etcd_client_endpoint(const struct etcd_client *c)
{
	return etcd_async_endpoint(c->a);
}

/* ---- one call ---- */

struct call {
	bool done;
	int rc;
	struct etcd_result r;
	char err[2048];
};

static void on_call(void *arg, int status, struct etcd_result *r)
{
	struct call *k = arg;

	k->done = true;
	k->rc = status;
	if (status < 0) {
		snprintf(k->err, sizeof(k->err), "%s", etcd_error());
		return;
	}
	k->r = *r;
	r->kvs = NULL; /* taken */
	r->n = 0;
}

/* Runs the loop until the request made (rc: its return) is answered. */
static int wait_call(struct etcd_client *c, int rc, struct call *k)
{
	if (rc < 0)
		return rc;
	while (!k->done)
		uv_run(&c->loop, UV_RUN_ONCE);
	if (k->rc < 0)
		return etcd_fail(k->rc, "%s", k->err);
	etcd_error_clear();
	return k->rc;
}

/* ---- leases ---- */

int etcd_lease_grant(struct etcd_client *c, int64_t ttl_s, int64_t *id, int64_t *granted_ttl)
{
	struct call k = {0};
	int rc = wait_call(c, etcd_async_grant(c->a, ttl_s, on_call, &k), &k);

	if (rc < 0)
		return rc;
	*id = k.r.id;
	if (granted_ttl)
		*granted_ttl = k.r.ttl;
	return 0;
}

int etcd_lease_keepalive(struct etcd_client *c, int64_t id, int64_t *ttl)
{
	struct call k = {0};
	int rc = wait_call(c, etcd_async_keepalive(c->a, id, on_call, &k), &k);

	if (rc == 0 && ttl)
		*ttl = k.r.ttl;
	return rc;
}

int etcd_lease_revoke(struct etcd_client *c, int64_t id)
{
	struct call k = {0};
	return wait_call(c, etcd_async_revoke(c->a, id, on_call, &k), &k);
}

/* ---- keys ---- */

int etcd_put(struct etcd_client *c, const char *key, const void *value, size_t len, int64_t lease,
	     int64_t *revision)
{
	struct call k = {0};
	int rc = wait_call(c, etcd_async_put(c->a, key, value, len, lease, on_call, &k), &k);

	if (rc == 0 && revision)
		*revision = k.r.revision;
	return rc;
}

int etcd_get(struct etcd_client *c, const char *key, struct etcd_kv *kv, int64_t *revision)
{
	struct call k = {0};
	int rc = wait_call(c, etcd_async_range(c->a, key, false, on_call, &k), &k);

	memset(kv, 0, sizeof(*kv));
	if (rc < 0)
		return rc;
	if (revision)
		*revision = k.r.revision;
	if (k.r.n) {
		*kv = k.r.kvs[0];
		memset(&k.r.kvs[0], 0, sizeof(k.r.kvs[0]));
	}
	etcd_kvs_free(k.r.kvs, k.r.n);
	return kv->key ? 1 : 0;
}

int etcd_get_prefix(struct etcd_client *c, const char *prefix, struct etcd_kv **kvs, size_t *n,
		    int64_t *revision)
{
	struct call k = {0};
	int rc = wait_call(c, etcd_async_range(c->a, prefix, true, on_call, &k), &k);

	*kvs = rc < 0 ? NULL : k.r.kvs;
	*n = rc < 0 ? 0 : k.r.n;
	if (rc == 0 && revision)
		*revision = k.r.revision;
	return rc;
}

int etcd_delete(struct etcd_client *c, const char *key)
{
	struct call k = {0};
	int rc = wait_call(c, etcd_async_delete(c->a, key, on_call, &k), &k);

	return rc < 0 ? rc : k.r.deleted > 0;
}

int etcd_cas(struct etcd_client *c, const char *key, const struct etcd_cmp *cmp, const void *value,
	     size_t len, int64_t lease, struct etcd_kv *cur)
{
	struct call k = {0};
	int rc = wait_call(c, etcd_async_cas(c->a, key, cmp, value, len, lease, on_call, &k), &k);
	struct etcd_kv none = {0};

	if (cur)
		*cur = none;
	if (rc < 0)
		return rc;
	if (cur && k.r.n)
		*cur = k.r.kvs[0];
	else if (k.r.kvs)
		etcd_kv_release(&k.r.kvs[0]);
	free(k.r.kvs);
	if (cur && k.r.succeeded)
		cur->mod_revision = k.r.revision;
	return k.r.succeeded ? 1 : 0;
}

/* ---- watches ---- */

static void on_watch(void *arg, int status, struct etcd_event *ev)
{
	struct etcd_watch *w = arg;
	struct watch_item *it;

	if (status < 0) {
		w->ended = true;
		w->rc = status;
		snprintf(w->err, sizeof(w->err), "%s", etcd_error());
		return;
	}
	if (!(it = malloc(sizeof(*it)))) {
		etcd_event_release(ev);
		w->ended = true;
		w->rc = -ENOMEM;
		snprintf(w->err, sizeof(w->err), "etcd: out of memory");
		return;
	}
	it->next = NULL;
	it->ev = *ev;
	if (w->tail)
		w->tail->next = it;
	else
		w->head = it;
	w->tail = it;
}

int etcd_watch_new(struct etcd_client *c, const char *key, unsigned flags, int64_t start_revision,
		   struct etcd_watch **out)
{
	struct etcd_watch *w = calloc(1, sizeof(*w));
	int rc;

	*out = NULL;
	if (!w)
		return etcd_fail(-ENOMEM, "etcd: out of memory");
	w->c = c;
	rc = etcd_async_watch(c->a, key, flags, start_revision, on_watch, w, &w->aw);
	if (rc < 0) {
		free(w);
		return rc;
	}
	*out = w;
	return 0;
}

static void on_nap(uv_timer_t *t)
{
	(void)t;
}

int etcd_watch_next(struct etcd_watch *w, int timeout_ms, struct etcd_event *ev)
{
	uint64_t deadline = timeout_ms > 0 ? time_now_ms() + (uint64_t)timeout_ms : 0;

	memset(ev, 0, sizeof(*ev));
	etcd_error_clear();
	if (timeout_ms == 0) /* what is already there, without waiting */
		uv_run(&w->c->loop, UV_RUN_NOWAIT);
	for (;;) {
		if (w->head) {
			struct watch_item *it = w->head;
			*ev = it->ev;
			w->head = it->next;
			if (!w->head)
				w->tail = NULL;
			free(it);
			return 1;
		}
		if (w->ended)
			return etcd_fail(w->rc, "%s", w->err);
		if (timeout_ms == 0 || (deadline && !time_left_ms(deadline)))
			return 0;
		if (deadline)
			uv_timer_start(&w->c->nap, on_nap, time_left_ms(deadline), 0);
		uv_run(&w->c->loop, UV_RUN_ONCE);
		uv_timer_stop(&w->c->nap);
	}
}

void etcd_watch_free(struct etcd_watch *w)
{
	struct watch_item *it;

	if (!w)
		return;
	etcd_awatch_free(w->aw);
	while ((it = w->head)) {
		w->head = it->next;
		etcd_event_release(&it->ev);
		free(it);
	}
	free(w);
}
