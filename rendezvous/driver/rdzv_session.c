/*
 * rdzv_session.c - the rendezvous primitives over an agent session
 * with our store (store_session.h): a thin mapping, plus the table from
 * the driver's watch ids to the session's.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_prims.h"
#include "store_session.h"

struct sess_watch {
	struct sess_be *be;
	uint64_t id;  /* the driver's */
	uint64_t sid; /* the session's */
	struct sess_watch *prev, *next;
};

struct sess_be {
	struct store_session *s;
	const struct rdzv_prims_sink *sink;
	void *drv;
	bool closed;
	uint32_t idle_timeout_ms;
	struct sess_watch *watches;
};

static struct byteview sb(struct byteview b)
{
	return (struct byteview){b.data, b.len};
}

static struct rdzv_value rv(struct store_session_value v)
{
	return (struct rdzv_value){v.present, {v.bytes.data, v.bytes.len}};
}

static void watch_unlink(struct sess_watch *w)
{
	if (w->prev)
		w->prev->next = w->next;
	else
		w->be->watches = w->next;
	if (w->next)
		w->next->prev = w->prev;
	free(w);
}

static void be_free(struct sess_be *be)
{
	while (be->watches)
		watch_unlink(be->watches);
	free(be);
}

static void on_connect(struct store_session *s, void *arg, int status, const char *msg)
{
	struct sess_be *be = arg;

	if (be->closed)
		return;
	if (status < 0) {
		/* The session frees itself after this callback. */
		be->s = NULL;
		be->closed = true;
	}
	be->sink->connected(be->drv, status, msg);
	if (status < 0)
		be_free(be);
}

static void on_close(struct store_session *s, void *arg, int status, const char *msg)
{
	struct sess_be *be = arg;

	if (be->closed)
		return;
	be->s = NULL;
	be->closed = true;
	be->sink->lost(be->drv, status, msg);
	be_free(be);
}

static int sess_open(const struct rdzv_prims_config *cfg, const struct rdzv_prims_sink *sink,
		     void *drv, void **out)
{
	struct store_session_opts o;
	struct sess_be *be = calloc(1, sizeof(*be));
	int rc;

	if (!be)
		return -ENOMEM;
	be->sink = sink;
	be->drv = drv;
	be->idle_timeout_ms = cfg->idle_timeout_ms;
	store_session_opts_default(&o);
	o.host = cfg->host;
	o.port = cfg->port;
	o.token = cfg->token;
	o.token_len = cfg->token ? cfg->token_len : 0;
	o.bind_addr = cfg->bind_addr;
	o.connect_timeout_ms = cfg->connect_timeout_ms;
	o.server_idle_timeout_ms = cfg->idle_timeout_ms;
	/* Both sides judge liveness by the keep-alive window. */
	if (cfg->ping_interval_ms && cfg->idle_timeout_ms > cfg->ping_interval_ms) {
		o.ping_interval_ms = cfg->ping_interval_ms;
		o.ping_timeout_ms = cfg->idle_timeout_ms;
	}
	rc = store_session_connect(cfg->loop, &o, on_connect, on_close, be, &be->s);
	if (rc < 0) {
		free(be);
		return rc;
	}
	*out = be;
	return 0;
}

static int sess_local_addr(void *p, char *buf, size_t len)
{
	struct sess_be *be = p;

	return be->s ? store_session_local_addr(be->s, buf, len) : -ENOTCONN;
}

static const char *sess_peer(void *p)
{
	struct sess_be *be = p;

	return be->s ? store_session_peer(be->s) : "the store";
}

static const char *sess_last_error(void *p)
{
	struct sess_be *be = p;

	return be->s ? store_session_last_error(be->s) : NULL;
}

static bool sess_peer_silent(void *p)
{
	struct sess_be *be = p;

	return be->s && store_session_peer_silent(be->s);
}

static int64_t sess_death_delay_ms(void *p)
{
	struct sess_be *be = p;

	return be->idle_timeout_ms;
}

static void on_get(void *arg, uint64_t tag, int status, const struct store_session_value *vals,
		   size_t n)
{
	struct sess_be *be = arg;
	struct rdzv_value small[16], *v = n <= 16 ? small : calloc(n, sizeof(*v));

	if (be->closed)
		return;
	if (!v) {
		status = -ENOMEM;
		n = 0;
		v = small;
	}
	for (size_t i = 0; status >= 0 && i < n; i++)
		v[i] = rv(vals[i]);
	be->sink->got(be->drv, tag, status, status >= 0 ? v : NULL, status >= 0 ? n : 0);
	if (v != small)
		free(v);
}

static int sess_get(void *p, uint64_t tag, const struct byteview *keys, size_t n)
{
	struct sess_be *be = p;

	/* struct byteview and struct byteview have one layout. */
	_Static_assert(sizeof(struct byteview) == sizeof(struct byteview), "byte views differ");
	return be->s ? store_session_get(be->s, (const struct byteview *)keys, n, on_get, be, tag)
		     : -ENOTCONN;
}

static void on_cas(void *arg, uint64_t tag, int status, bool swapped,
		   struct store_session_value cur)
{
	struct sess_be *be = arg;

	if (!be->closed)
		be->sink->cased(be->drv, tag, status, swapped, rv(cur));
}

static int sess_cas(void *p, uint64_t tag, struct byteview key, bool has_expected,
		    struct byteview expected, struct byteview value)
{
	struct sess_be *be = p;

	return be->s ? store_session_cas(be->s, sb(key), has_expected, sb(expected), sb(value),
					 on_cas, be, tag)
		     : -ENOTCONN;
}

static void on_add(void *arg, uint64_t tag, int status, int64_t value)
{
	struct sess_be *be = arg;

	if (!be->closed)
		be->sink->added(be->drv, tag, status, value);
}

static int sess_add(void *p, uint64_t tag, struct byteview key, int64_t delta)
{
	struct sess_be *be = p;

	return be->s ? store_session_add(be->s, sb(key), delta, on_add, be, tag) : -ENOTCONN;
}

static void on_done(void *arg, uint64_t tag, int status)
{
	struct sess_be *be = arg;

	if (!be->closed)
		be->sink->done(be->drv, tag, status);
}

static int sess_set(void *p, uint64_t tag, struct byteview key, struct byteview value, bool session)
{
	struct sess_be *be = p;

	if (!be->s)
		return -ENOTCONN;
	return session ? store_session_set_session(be->s, sb(key), sb(value), on_done, be, tag)
		       : store_session_set(be->s, sb(key), sb(value), on_done, be, tag);
}

static void on_event(void *arg, uint64_t sid, int status, struct store_session_value v)
{
	struct sess_watch *w = arg;
	struct sess_be *be = w->be;
	uint64_t id = w->id;

	if (be->closed)
		return;
	if (status < 0)
		watch_unlink(w); /* it never runs again */
	be->sink->event(be->drv, id, status, rv(v));
}

static int sess_watch(void *p, uint64_t id, struct byteview key)
{
	struct sess_be *be = p;
	struct sess_watch *w;
	int rc;

	if (!be->s)
		return -ENOTCONN;
	if (!(w = calloc(1, sizeof(*w))))
		return -ENOMEM;
	w->be = be;
	w->id = id;
	rc = store_session_watch(be->s, sb(key), on_event, w, &w->sid);
	if (rc < 0) {
		free(w);
		return rc;
	}
	w->next = be->watches;
	if (w->next)
		w->next->prev = w;
	be->watches = w;
	return 0;
}

static void sess_unwatch(void *p, uint64_t id)
{
	struct sess_be *be = p;

	for (struct sess_watch *w = be->watches; w; w = w->next)
		if (w->id == id) {
			if (be->s)
				store_session_unwatch(be->s, w->sid);
			watch_unlink(w);
			return;
		}
}

static void sess_close(void *p)
{
	struct sess_be *be = p;

	if (!be)
		return;
	/* Callbacks that store_session_close() runs (-ECANCELED) find it
	 * closed and are dropped. */
	be->closed = true;
	store_session_close(be->s);
	be_free(be);
}

const struct rdzv_prims_ops rdzv_prims_session = {
    .name = "store",
    .open = sess_open,
    .local_addr = sess_local_addr,
    .peer = sess_peer,
    .last_error = sess_last_error,
    .peer_silent = sess_peer_silent,
    .death_delay_ms = sess_death_delay_ms,
    .get = sess_get,
    .cas = sess_cas,
    .add = sess_add,
    .set = sess_set,
    .watch = sess_watch,
    .unwatch = sess_unwatch,
    .close = sess_close,
};
