/*
 * etcd_awatch_events.c - what a watch hands on (etcd_awatch_int.h): the
 * stream's messages parsed as they arrive (in curl's write callback, which
 * only queues), the queue of events, and their delivery from the loop
 * outside every curl callback (etcd_awatch_deliver); making and freeing a
 * watch, which may happen from inside its own callback.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_awatch_int.h"
#include "etcd_curl.h"
#include "timeutil.h"

/* ---- small pieces ---- */

void awatch_note(struct etcd_awatch *w, const char *what)
{
	snprintf(w->ep_err[w->ep], sizeof(w->ep_err[w->ep]), "%.150s", what);
}

/* The watch's final message (etcd_error() while its callback runs). */
int awatch_fail(struct etcd_awatch *w, int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(w->final_err, sizeof(w->final_err), fmt, ap);
	va_end(ap);
	return rc;
}

/* ---- the stream's messages ---- */

static bool auth_reason(const char *r)
{
	return strstr(r, "invalid auth token") || strstr(r, "user name is empty") ||
	       strstr(r, "auth: ");
}

/* A cancelled watch: worth another try (another endpoint, a new token), or
 * the end. */
static int on_cancel(struct etcd_awatch *w, const struct etcd_watch_msg *m)
{
	awatch_note(w, m->reason[0] ? m->reason : "watch cancelled");
	if (m->compact_revision > 0) {
		w->terminal = true;
		return awatch_fail(w, -ESTALE,
				   "etcd: watch of '%s' from revision %lld: compacted (the oldest "
				   "revision kept is %lld); read again and watch from there",
				   w->key, (long long)w->next_rev, (long long)m->compact_revision);
	}
	if (m->error_code ? etcd_grpc_retryable(m->error_code, m->reason)
			  : !!strstr(m->reason, "no leader"))
		return -EAGAIN;
	if (w->cfg->user && auth_reason(m->reason) && w->auth_rejections++ < 2) {
		etcd_async_set_token(w->c, NULL);
		return -EACCES;
	}
	w->terminal = true;
	return awatch_fail(
	    w,
	    auth_reason(m->reason) || strstr(m->reason, "permission denied") ? -EACCES : -ECANCELED,
	    "etcd %s: watch of '%s' cancelled: %s", w->cfg->names[w->ep], w->key, m->reason);
}

static int push_event(struct etcd_awatch *w, struct etcd_event *ev)
{
	struct watch_item *it = malloc(sizeof(*it));
	if (!it)
		return -ENOMEM;
	it->next = NULL;
	it->ev = *ev;
	memset(ev, 0, sizeof(*ev));
	if (w->tail)
		w->tail->next = it;
	else
		w->head = it;
	w->tail = it;
	return 0;
}

/* Queues the events of one message, dropping any a resumed stream repeats
 * (all events of one revision come in one message). */
static int on_events(struct etcd_awatch *w, struct etcd_watch_msg *m)
{
	int64_t floor = w->next_rev, top = 0;
	for (size_t i = 0; i < m->nevents; i++) {
		struct etcd_event *ev = &m->events[i];
		if (ev->kv.mod_revision < floor)
			continue;
		if (ev->kv.mod_revision > top)
			top = ev->kv.mod_revision;
		if (push_event(w, ev) < 0) {
			w->terminal = true;
			return awatch_fail(w, -ENOMEM, "etcd: out of memory");
		}
	}
	if (top >= w->next_rev)
		w->next_rev = top + 1;
	/* A progress notification: everything up to its revision was sent. */
	if (!m->nevents && !m->created && w->created && m->revision >= w->next_rev)
		w->next_rev = m->revision + 1;
	return 0;
}

static int on_message(struct etcd_awatch *w, const char *line, size_t len)
{
	struct etcd_watch_msg m;
	int rc = etcd_parse_watch_msg(line, len, &m);
	if (rc < 0) {
		awatch_note(w, "unexpected watch message");
		return rc;
	}
	if (m.canceled) {
		rc = on_cancel(w, &m);
	} else {
		if (m.created && !w->created) {
			w->created = true;
			w->created_deadline = 0;
			w->auth_rejections = 0;
			if (!w->next_rev)
				w->next_rev = m.revision + 1;
			for (size_t i = 0; i < w->cfg->n; i++)
				w->ep_err[i][0] = '\0';
			etcd_async_wake(w->c, &w->wake, time_now_ms() + awatch_probe_interval(w));
		}
		rc = on_events(w, &m);
	}
	etcd_watch_msg_release(&m);
	return rc;
}

/* curl's write callback of the stream: no call into curl from here. */
size_t awatch_stream_write(char *p, size_t size, size_t n, void *userdata)
{
	struct etcd_awatch *w = userdata;
	const char *line;
	size_t len;
	int rc = etcd_linebuf_add(&w->lb, p, size * n);
	w->last_activity = time_now_ms();
	if (rc < 0) {
		awatch_note(w, rc == -EMSGSIZE ? "watch message too long" : "out of memory");
		w->stream_rc = rc;
		return 0;
	}
	while ((len = etcd_linebuf_peek(&w->lb, &line))) {
		rc = on_message(w, line, len);
		if (rc < 0) {
			w->stream_rc = rc;
			return 0;
		}
	}
	return size * n;
}

/* ---- the consumer's side ---- */

static void watch_free_now(struct etcd_awatch *w)
{
	struct watch_item *it = w->head;
	while (it) {
		struct watch_item *next = it->next;
		etcd_event_release(&it->ev);
		free(it);
		it = next;
	}
	if (w->stream.easy)
		etcd_curl.easy_cleanup(w->stream.easy);
	if (w->aux.easy)
		etcd_curl.easy_cleanup(w->aux.easy);
	awatch_stream_release(w);
	if (w->a_body)
		explicit_bzero(w->a_body, strlen(w->a_body));
	free(w->a_body);
	free(w->a_url);
	etcd_curl.slist_free_all(w->a_hdrs);
	free(w->rx.data);
	etcd_linebuf_release(&w->lb);
	free(w->ep_err);
	free(w->key);
	free(w);
}

static void unlink_watch(struct etcd_awatch *w)
{
	struct etcd_awatch_list *l = etcd_async_watches(w->c);
	if (w->prev)
		w->prev->next = w->next;
	else
		l->head = w->next;
	if (w->next)
		w->next->prev = w->prev;
}

int etcd_async_watch(struct etcd_async *c, const char *key, unsigned flags, int64_t start_revision,
		     etcd_awatch_cb cb, void *arg, struct etcd_awatch **out)
{
	struct etcd_awatch_list *l = etcd_async_watches(c);
	struct etcd_awatch *w;

	*out = NULL;
	etcd_error_clear();
	if (!key || !*key)
		return etcd_fail(-EINVAL, "etcd: empty key");
	if (!(w = calloc(1, sizeof(*w))))
		return etcd_fail(-ENOMEM, "etcd: out of memory");
	w->c = c;
	w->cfg = etcd_async_cfg(c);
	w->key = strdup(key);
	w->ep_err = calloc(w->cfg->n, sizeof(*w->ep_err));
	w->stream.easy = etcd_curl.easy_init();
	w->aux.easy = etcd_curl.easy_init();
	if (!w->key || !w->ep_err || !w->stream.easy || !w->aux.easy) {
		watch_free_now(w);
		return etcd_fail(-ENOMEM, "etcd: out of memory");
	}
	w->prefix = flags & ETCD_WATCH_PREFIX;
	w->cb = cb;
	w->arg = arg;
	w->next_rev = start_revision > 0 ? start_revision : 0;
	w->ep = etcd_async_last_ep(c);
	w->lb.max = ETCD_MAX_BODY;
	w->stream.done = awatch_on_stream_done;
	w->aux.done = awatch_on_aux_done;
	w->wake.fn = awatch_on_wake;
	w->down_since = time_now_ms();
	w->delay = 10;
	w->next = l->head;
	if (w->next)
		w->next->prev = w;
	l->head = w;
	etcd_async_wake(c, &w->wake, w->down_since);
	*out = w;
	return 0;
}

void etcd_awatch_free(struct etcd_awatch *w)
{
	if (!w || w->dead)
		return;
	awatch_stop(w);
	etcd_async_unwake(w->c, &w->wake);
	w->dead = true;
	if (!etcd_async_watches(w->c)->delivering) {
		unlink_watch(w);
		watch_free_now(w);
	}
}

void etcd_awatch_drop_all(struct etcd_async *c)
{
	struct etcd_awatch *w = etcd_async_watches(c)->head, *next;
	for (; w; w = next) {
		next = w->next;
		etcd_awatch_free(w);
	}
}

/* Hands on one watch's queued events, then its end. */
static void deliver_one(struct etcd_awatch *w)
{
	while (!w->dead && w->head) {
		struct watch_item *it = w->head;
		struct etcd_event ev = it->ev;
		w->head = it->next;
		if (!w->head)
			w->tail = NULL;
		free(it);
		w->cb(w->arg, 0, &ev);
	}
	if (!w->dead && w->phase == PH_ENDED && !w->final_told) {
		w->final_told = true;
		etcd_fail(w->final_rc, "%s", w->final_err);
		w->cb(w->arg, w->final_rc, NULL);
	}
}

void etcd_awatch_deliver(struct etcd_async *c)
{
	struct etcd_awatch_list *l = etcd_async_watches(c);
	struct etcd_awatch *w, *next;

	if (l->delivering)
		return;
	l->delivering = true;
	for (w = l->head; w; w = w->next)
		deliver_one(w);
	l->delivering = false;
	for (w = l->head; w; w = next) {
		next = w->next;
		if (w->dead) {
			unlink_watch(w);
			watch_free_now(w);
		}
	}
}
