/*
 * etcd_awatch.c - a watch on the client's loop (etcd_async.h): the
 * gateway's /v3/watch stream (a long HTTP response, one JSON message per
 * line) as a transfer on the client's multi handle, its messages parsed as
 * they arrive and their events handed on from the loop.
 *
 * When a stream ends - the member died, lost its leader, or the connection
 * broke - the watch resumes on the next endpoint from the revision after
 * the last event it delivered. A quiet stream's member is asked, now and
 * then, for a linearizable count of the key (one that needs a working
 * quorum): a member that froze, or was cut off without its connection
 * closing, fails it, and the watch moves on. The authentication and that
 * probe share a second transfer.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_async.h"
#include "etcd_codec.h"
#include "etcd_curl.h"
#include "etcd_int.h"
#include "timeutil.h"

struct watch_item {
	struct watch_item *next;
	struct etcd_event ev;
};

enum phase { PH_IDLE, PH_AUTH, PH_STREAM, PH_ENDED };

struct etcd_awatch {
	struct etcd_awatch *prev, *next;
	struct etcd_async *c;
	const struct etcd_cfg *cfg;
	char *key;
	bool prefix;
	etcd_awatch_cb cb;
	void *arg;
	enum phase phase;
	struct etcd_wake wake;

	struct etcd_xfer stream;
	char *s_body, *s_url;
	struct curl_slist *s_hdrs;
	char stream_err[CURL_ERROR_SIZE];
	struct etcd_linebuf lb;

	struct etcd_xfer aux; /* the authentication, or a probe */
	char *a_body, *a_url;
	struct curl_slist *a_hdrs;
	struct etcd_rxbuf rx;
	char aux_err[CURL_ERROR_SIZE];
	bool probing;

	char (*ep_err)[160]; /* per endpoint, for the message if all fail */
	int64_t next_rev;    /* resume from here; 0: from now (until created) */
	size_t ep;
	bool created;	     /* the current stream was accepted */
	int auth_rejections; /* token rejected since the last accepted stream */
	int stream_rc;	     /* why the write callback ended the stream */
	bool terminal;	     /* ... and not worth another endpoint */
	uint64_t created_deadline, slice_ms, last_activity;
	size_t failed; /* attempts since the last working stream */
	uint64_t down_since, delay;

	struct watch_item *head, *tail;
	int final_rc;
	char final_err[2048];
	bool dead, final_told;
};

static void connect_next(struct etcd_awatch *w);
static void stream_ended(struct etcd_awatch *w, int rc);

/* ---- small pieces ---- */

static void ep_note(struct etcd_awatch *w, const char *what)
{
	snprintf(w->ep_err[w->ep], sizeof(w->ep_err[w->ep]), "%.150s", what);
}

/* The watch's final message (etcd_error() while its callback runs). */
__attribute__((format(printf, 3, 4))) static int w_fail(struct etcd_awatch *w, int rc,
							const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(w->final_err, sizeof(w->final_err), fmt, ap);
	va_end(ap);
	return rc;
}

static uint64_t probe_interval(const struct etcd_awatch *w)
{
	uint64_t t = w->cfg->timeout_ms / 2;
	return t < 200 ? 200 : t;
}

static uint64_t probe_timeout(const struct etcd_awatch *w)
{
	uint64_t t = w->cfg->timeout_ms / 2;
	return t < ETCD_FIRST_ATTEMPT_MS ? t : ETCD_FIRST_ATTEMPT_MS;
}

static void stop_transfers(struct etcd_awatch *w)
{
	struct etcd_multi *m = etcd_async_multi(w->c);
	etcd_multi_stop(m, &w->stream);
	etcd_multi_stop(m, &w->aux);
	w->probing = false;
}

/* The end: stop everything; the callback hears from etcd_awatch_deliver. */
static void end(struct etcd_awatch *w, int rc)
{
	stop_transfers(w);
	etcd_async_unwake(w->c, &w->wake);
	w->phase = PH_ENDED;
	w->final_rc = rc;
}

/* Posts body to path on the current endpoint through the aux transfer. */
static int aux_post(struct etcd_awatch *w, const char *path, char *body, const char *token,
		    uint64_t timeout_ms)
{
	if (w->a_body) /* it may have held the password */
		explicit_bzero(w->a_body, strlen(w->a_body));
	free(w->a_body);
	free(w->a_url);
	etcd_curl.slist_free_all(w->a_hdrs);
	w->a_body = body;
	w->a_url = etcd_url(w->cfg->urls[w->ep], path);
	w->a_hdrs = etcd_headers(token);
	if (!w->a_body || !w->a_url || !w->a_hdrs)
		return -ENOMEM;
	etcd_easy_post(w->aux.easy, w->cfg, w->aux_err, w->a_url, w->a_hdrs, w->a_body, &w->rx,
		       timeout_ms);
	return etcd_multi_start(etcd_async_multi(w->c), &w->aux);
}

/* ---- the probe of a quiet stream ---- */

static void probe_start(struct etcd_awatch *w)
{
	w->last_activity = time_now_ms();
	w->probing = aux_post(w, "/v3/kv/range", etcd_req_count(w->key), etcd_async_token(w->c),
			      probe_timeout(w)) == 0;
	/* out of memory: try again at the next due time */
}

/* The probe's answer: 0, or why the stream's member is given up. */
static int probe_result(struct etcd_awatch *w, CURLcode code)
{
	char msg[120];
	int gcode = 0, rc;
	bool retry;

	w->probing = false;
	w->last_activity = time_now_ms();
	rc = etcd_post_result(w->aux.easy, code, w->aux_err, &w->rx, "/v3/kv/range",
			      probe_timeout(w), msg, sizeof(msg), &retry, &gcode);
	if (rc == 0)
		return 0;
	snprintf(w->ep_err[w->ep], sizeof(w->ep_err[w->ep]), "liveness check: %s", msg);
	if (code != CURLE_OK)
		return rc;
	/* An expired token is not the member's fault: renew it there. */
	if (w->cfg->user && etcd_token_rejected(msg, gcode)) {
		etcd_async_set_token(w->c, NULL);
		return -EACCES;
	}
	return -EAGAIN;
}

static void on_aux_done(struct etcd_xfer *x, CURLcode code);

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
	ep_note(w, m->reason[0] ? m->reason : "watch cancelled");
	if (m->compact_revision > 0) {
		w->terminal = true;
		return w_fail(w, -ESTALE,
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
	return w_fail(
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
			return w_fail(w, -ENOMEM, "etcd: out of memory");
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
		ep_note(w, "unexpected watch message");
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
			etcd_async_wake(w->c, &w->wake, time_now_ms() + probe_interval(w));
		}
		rc = on_events(w, &m);
	}
	etcd_watch_msg_release(&m);
	return rc;
}

/* curl's write callback of the stream: no call into curl from here. */
static size_t stream_write(char *p, size_t size, size_t n, void *userdata)
{
	struct etcd_awatch *w = userdata;
	const char *line;
	size_t len;
	int rc = etcd_linebuf_add(&w->lb, p, size * n);
	w->last_activity = time_now_ms();
	if (rc < 0) {
		ep_note(w, rc == -EMSGSIZE ? "watch message too long" : "out of memory");
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

/* ---- one stream on one endpoint ---- */

static void stream_release(struct etcd_awatch *w)
{
	free(w->s_body);
	free(w->s_url);
	etcd_curl.slist_free_all(w->s_hdrs);
	w->s_body = w->s_url = NULL;
	w->s_hdrs = NULL;
}

static void on_stream_done(struct etcd_xfer *x, CURLcode code)
{
	struct etcd_awatch *w =
	    (struct etcd_awatch *)((char *)x - offsetof(struct etcd_awatch, stream));
	int rc;

	if (w->stream_rc) {
		rc = w->stream_rc;
	} else if (code != CURLE_OK) {
		rc = etcd_curl_errno(x->easy, code, w->stream_err, w->slice_ms, w->ep_err[w->ep],
				     sizeof(w->ep_err[w->ep]));
	} else {
		rc = -ECONNRESET;
		ep_note(w, "the member ended the watch stream");
	}
	stream_ended(w, rc);
}

/* Opens the stream on w->ep. With require-leader (in the headers), a member
 * that loses its leader cancels the watch instead of keeping a stale one. */
static int stream_open(struct etcd_awatch *w)
{
	CURL *e = w->stream.easy;

	w->s_body = etcd_req_watch(w->key, w->prefix, w->next_rev);
	w->s_url = etcd_url(w->cfg->urls[w->ep], "/v3/watch");
	w->s_hdrs = etcd_headers(etcd_async_token(w->c));
	if (!w->s_body || !w->s_url || !w->s_hdrs)
		return -ENOMEM;
	w->stream_err[0] = '\0';
	etcd_curl.easy_reset(e);
	etcd_easy_common(e, w->cfg, w->stream_err);
	etcd_curl.easy_setopt(e, CURLOPT_URL, w->s_url);
	etcd_curl.easy_setopt(e, CURLOPT_HTTPHEADER, w->s_hdrs);
	etcd_curl.easy_setopt(e, CURLOPT_POSTFIELDS, w->s_body);
	etcd_curl.easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(w->s_body));
	etcd_curl.easy_setopt(e, CURLOPT_WRITEFUNCTION, stream_write);
	etcd_curl.easy_setopt(e, CURLOPT_WRITEDATA, w);
	etcd_curl.easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
			      (long)time_left_ms(w->created_deadline) + 1);
	w->phase = PH_STREAM;
	return etcd_multi_start(etcd_async_multi(w->c), &w->stream);
}

/* The authentication's answer: the token, then the stream. */
static void auth_done(struct etcd_awatch *w, CURLcode code)
{
	int gcode, rc;
	bool retry;
	char *token;

	rc = etcd_post_result(w->aux.easy, code, w->aux_err, &w->rx, "/v3/auth/authenticate",
			      w->slice_ms, w->ep_err[w->ep], sizeof(w->ep_err[w->ep]), &retry,
			      &gcode);
	rc = etcd_auth_result(rc, &w->rx, w->cfg->user, w->ep_err[w->ep], sizeof(w->ep_err[w->ep]),
			      &token);
	if (rc >= 0) {
		etcd_async_set_token(w->c, token);
		rc = stream_open(w);
		if (rc >= 0)
			return;
		retry = false;
	}
	w->terminal = !retry;
	stream_ended(w, rc);
}

static void on_aux_done(struct etcd_xfer *x, CURLcode code)
{
	struct etcd_awatch *w =
	    (struct etcd_awatch *)((char *)x - offsetof(struct etcd_awatch, aux));
	int rc;

	if (w->phase == PH_AUTH) {
		auth_done(w, code);
		return;
	}
	rc = probe_result(w, code);
	if (rc < 0) {
		etcd_multi_stop(etcd_async_multi(w->c), &w->stream);
		stream_ended(w, rc);
		return;
	}
	etcd_async_wake(w->c, &w->wake, time_now_ms() + probe_interval(w));
}

/* Starts a stream on w->ep within slice_ms (authenticating first when the
 * client has a user and no token yet). */
static void stream_start(struct etcd_awatch *w, uint64_t slice_ms)
{
	int rc;

	w->created = false;
	w->stream_rc = 0;
	w->terminal = false;
	w->lb.len = w->lb.scan = w->lb.taken = 0;
	w->slice_ms = slice_ms;
	w->created_deadline = time_now_ms() + slice_ms;
	etcd_async_wake(w->c, &w->wake, w->created_deadline);
	if (w->cfg->user && !etcd_async_token(w->c)) {
		w->phase = PH_AUTH;
		rc = aux_post(w, "/v3/auth/authenticate",
			      etcd_req_auth(w->cfg->user, w->cfg->password), NULL, slice_ms);
	} else {
		rc = stream_open(w);
	}
	if (rc < 0) {
		ep_note(w, "out of memory");
		w->terminal = true;
		stream_ended(w, rc);
	}
}

/* After a stream ended (or never opened): the end when no other endpoint
 * will do better; otherwise the next endpoint (a rejected token is renewed
 * on the same one), with a short pause after each round that found none. */
static void stream_ended(struct etcd_awatch *w, int rc)
{
	uint64_t now = time_now_ms();

	stop_transfers(w);
	stream_release(w);
	w->created_deadline = 0;
	w->phase = PH_IDLE;
	w->stream_rc = rc; /* for the message if all fail */
	if (w->terminal) {
		if (!w->final_err[0])
			w_fail(w, rc, "etcd %s: watch of '%s': %s", w->cfg->names[w->ep], w->key,
			       w->ep_err[w->ep]);
		end(w, rc);
		return;
	}
	if (rc != -EACCES)
		w->ep = (w->ep + 1) % w->cfg->n;
	if (w->created) {
		/* It had been working: a fresh budget for reconnecting. */
		w->down_since = now;
		w->failed = 0;
		w->delay = 10;
		etcd_async_wake(w->c, &w->wake, now);
	} else if (++w->failed % w->cfg->n == 0) {
		etcd_async_wake(w->c, &w->wake, now + w->delay);
		w->delay = w->delay * 2 > 250 ? 250 : w->delay * 2;
	} else {
		etcd_async_wake(w->c, &w->wake, now);
	}
}

/* Opens the next stream, unless no endpoint took the watch back within
 * timeout_ms of losing it. */
static void connect_next(struct etcd_awatch *w)
{
	size_t n = w->cfg->n;
	uint64_t down = time_now_ms() - w->down_since;

	if (down >= w->cfg->timeout_ms) {
		char what[400];
		snprintf(what, sizeof(what), "watch of '%.300s' lost: no endpoint took it back",
			 w->key);
		etcd_fail_all(w->stream_rc ? w->stream_rc : -ETIMEDOUT, w->cfg, w->ep_err, what);
		end(w, w_fail(w, w->stream_rc ? w->stream_rc : -ETIMEDOUT, "%s", etcd_error()));
		return;
	}
	/* As for unary calls: share what is left among the endpoints not yet
	 * tried this round. */
	stream_start(w, (w->cfg->timeout_ms - down) / (n - w->failed % n));
}

static void on_wake(struct etcd_wake *wk)
{
	struct etcd_awatch *w =
	    (struct etcd_awatch *)((char *)wk - offsetof(struct etcd_awatch, wake));
	uint64_t now = time_now_ms();

	if (w->phase == PH_IDLE) {
		connect_next(w);
	} else if (w->created_deadline && now >= w->created_deadline) {
		char msg[64];
		snprintf(msg, sizeof(msg), "no answer within %llu ms",
			 (unsigned long long)w->slice_ms);
		ep_note(w, msg);
		stream_ended(w, -ETIMEDOUT);
	} else if (w->created_deadline) {
		etcd_async_wake(w->c, &w->wake, w->created_deadline);
	} else if (w->created && !w->probing) {
		if (now - w->last_activity >= probe_interval(w))
			probe_start(w);
		etcd_async_wake(w->c, &w->wake, w->last_activity + probe_interval(w));
	}
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
	stream_release(w);
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
	w->stream.done = on_stream_done;
	w->aux.done = on_aux_done;
	w->wake.fn = on_wake;
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
	stop_transfers(w);
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
