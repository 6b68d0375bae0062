/*
 * etcd_awatch.c - a watch on the client's loop (etcd_async.h), the life of
 * its stream (etcd_awatch_events.c has its messages): the
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
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_awatch_int.h"
#include "etcd_curl.h"
#include "timeutil.h"

static void connect_next(struct etcd_awatch *w);
static void stream_ended(struct etcd_awatch *w, int rc);

/* ---- small pieces ---- */

static uint64_t probe_timeout(const struct etcd_awatch *w)
{
	uint64_t t = w->cfg->timeout_ms / 2;
	return t < ETCD_FIRST_ATTEMPT_MS ? t : ETCD_FIRST_ATTEMPT_MS;
}

void awatch_stop(struct etcd_awatch *w)
{
	struct etcd_multi *m = etcd_async_multi(w->c);
	etcd_multi_stop(m, &w->stream);
	etcd_multi_stop(m, &w->aux);
	w->probing = false;
}

/* The end: stop everything; the callback hears from etcd_awatch_deliver. */
static void end(struct etcd_awatch *w, int rc)
{
	awatch_stop(w);
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

/* ---- one stream on one endpoint ---- */

void awatch_stream_release(struct etcd_awatch *w)
{
	free(w->s_body);
	free(w->s_url);
	etcd_curl.slist_free_all(w->s_hdrs);
	w->s_body = w->s_url = NULL;
	w->s_hdrs = NULL;
}

void awatch_on_stream_done(struct etcd_xfer *x, CURLcode code)
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
		awatch_note(w, "the member ended the watch stream");
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
	etcd_curl.easy_setopt(e, CURLOPT_WRITEFUNCTION, awatch_stream_write);
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

void awatch_on_aux_done(struct etcd_xfer *x, CURLcode code)
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
	etcd_async_wake(w->c, &w->wake, time_now_ms() + awatch_probe_interval(w));
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
		awatch_note(w, "out of memory");
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

	awatch_stop(w);
	awatch_stream_release(w);
	w->created_deadline = 0;
	w->phase = PH_IDLE;
	w->stream_rc = rc; /* for the message if all fail */
	if (w->terminal) {
		if (!w->final_err[0])
			awatch_fail(w, rc, "etcd %s: watch of '%s': %s", w->cfg->names[w->ep],
				    w->key, w->ep_err[w->ep]);
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
		end(w,
		    awatch_fail(w, w->stream_rc ? w->stream_rc : -ETIMEDOUT, "%s", etcd_error()));
		return;
	}
	/* As for unary calls: share what is left among the endpoints not yet
	 * tried this round. */
	stream_start(w, (w->cfg->timeout_ms - down) / (n - w->failed % n));
}

void awatch_on_wake(struct etcd_wake *wk)
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
		awatch_note(w, msg);
		stream_ended(w, -ETIMEDOUT);
	} else if (w->created_deadline) {
		etcd_async_wake(w->c, &w->wake, w->created_deadline);
	} else if (w->created && !w->probing) {
		if (now - w->last_activity >= awatch_probe_interval(w))
			probe_start(w);
		etcd_async_wake(w->c, &w->wake, w->last_activity + awatch_probe_interval(w));
	}
}
