/*
 * etcd_watch.c - a watch: one thread per watch holding the gateway's
 * /v3/watch stream open (a long HTTP response, one JSON message per line),
 * handing its events to the consumer through a queue and an eventfd.
 *
 * The thread runs every transfer (the stream and any authentication)
 * through its own curl multi handle, so etcd_watch_free() interrupts it at
 * once with etcd_curl.multi_wakeup(). When a stream ends - the member died, lost
 * its leader, or the connection broke - the thread resumes on the next
 * endpoint from the revision after the last event it delivered.
 */
#include "etcd_client.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "etcd_codec.h"
#include "etcd_curl.h"
#include "etcd_int.h"
#include "timeutil.h"

struct watch_item {
	struct watch_item *next;
	struct etcd_event ev;
};

struct etcd_watch {
	const struct etcd_cfg *cfg;
	char *key;
	bool prefix;
	pthread_t thread;
	CURLM *multi;
	atomic_bool stop;

	/* The thread's own. */
	struct etcd_conn auth; /* authentication; its ep_err is the per-endpoint log */
	int64_t next_rev;      /* resume from here; 0: from now (until created) */
	size_t ep;
	bool created;	     /* the current stream was accepted */
	int auth_rejections; /* token rejected since the last accepted stream */
	int stream_rc;	     /* why the write callback ended the stream */
	bool terminal;	     /* ... and not worth another endpoint */
	uint64_t created_deadline;
	struct etcd_linebuf lb;
	CURL *stream; /* the stream's transfer, while it runs */
	char stream_err[CURL_ERROR_SIZE];
	uint64_t last_activity; /* bytes from the stream, or a probe's answer */
	bool probing;		/* a probe runs on auth.easy */
	char *probe_body, *probe_url;
	struct curl_slist *probe_hdrs;

	/* Shared with the consumer, under mu. */
	pthread_mutex_t mu;
	int efd;
	struct watch_item *head, *tail;
	bool done;
	int final_rc;
	char final_err[2048];
};

/* ---- the queue (the fd is readable while head or done) ---- */

static void efd_signal(struct etcd_watch *w)
{
	uint64_t one = 1;
	ssize_t r = write(w->efd, &one, sizeof(one));
	(void)r; /* an eventfd counter cannot overflow with one write per push */
}

static void efd_drain(struct etcd_watch *w)
{
	uint64_t v;
	ssize_t r = read(w->efd, &v, sizeof(v));
	(void)r; /* EAGAIN: already 0 */
}

static int push_event(struct etcd_watch *w, struct etcd_event *ev)
{
	struct watch_item *it = malloc(sizeof(*it));
	if (!it)
		return -ENOMEM;
	it->next = NULL;
	it->ev = *ev;
	memset(ev, 0, sizeof(*ev));
	pthread_mutex_lock(&w->mu);
	if (w->tail)
		w->tail->next = it;
	else
		w->head = it;
	w->tail = it;
	if (w->head == it && !w->done)
		efd_signal(w);
	pthread_mutex_unlock(&w->mu);
	return 0;
}

/* Ends the watch with rc and the calling thread's etcd_error() message. */
static void finish(struct etcd_watch *w, int rc)
{
	pthread_mutex_lock(&w->mu);
	w->final_rc = rc;
	snprintf(w->final_err, sizeof(w->final_err), "%s", etcd_error());
	if (!w->head)
		efd_signal(w);
	w->done = true;
	pthread_mutex_unlock(&w->mu);
}

/* ---- transfers through the multi handle ---- */

/* A quiet stream's member is asked, now and then, for a linearizable count
 * of the key (one that needs a working quorum): a member that froze, or was
 * cut off without its connection closing, or lost its leader, fails it, and
 * the watch moves on. */
static uint64_t probe_interval(const struct etcd_watch *w)
{
	uint64_t t = w->cfg->timeout_ms / 2;
	return t < 200 ? 200 : t;
}

static bool probe_due(const struct etcd_watch *w)
{
	return w->created && !w->probing && time_now_ms() - w->last_activity >= probe_interval(w);
}

static void probe_start(struct etcd_watch *w)
{
	uint64_t t = w->cfg->timeout_ms / 2;
	CURL *e = w->auth.easy;
	if (!w->probe_body)
		w->probe_body = etcd_req_count(w->key);
	if (!w->probe_url)
		w->probe_url = etcd_url(w->cfg->urls[w->ep], "/v3/kv/range");
	etcd_curl.slist_free_all(w->probe_hdrs);
	w->probe_hdrs = etcd_headers(w->auth.token);
	if (!w->probe_body || !w->probe_url || !w->probe_hdrs)
		return; /* out of memory: try again at the next due time */
	etcd_curl.easy_reset(e);
	etcd_easy_common(e, w->cfg, w->auth.curl_err);
	etcd_curl.easy_setopt(e, CURLOPT_URL, w->probe_url);
	etcd_curl.easy_setopt(e, CURLOPT_HTTPHEADER, w->probe_hdrs);
	etcd_curl.easy_setopt(e, CURLOPT_POSTFIELDS, w->probe_body);
	etcd_curl.easy_setopt(e, CURLOPT_WRITEFUNCTION, etcd_rx_write);
	etcd_curl.easy_setopt(e, CURLOPT_WRITEDATA, &w->auth.rx);
	etcd_curl.easy_setopt(e, CURLOPT_TIMEOUT_MS,
			      (long)(t < ETCD_FIRST_ATTEMPT_MS ? t : ETCD_FIRST_ATTEMPT_MS));
	w->auth.rx.len = 0;
	w->auth.curl_err[0] = '\0';
	w->probing = etcd_curl.multi_add_handle(w->multi, e) == CURLM_OK;
	w->last_activity = time_now_ms();
}

/* The probe's answer: 0, or why the stream's member is given up. */
static int probe_done(struct etcd_watch *w, CURLcode code)
{
	char *err = w->auth.ep_err[w->ep], msg[120];
	size_t errlen = sizeof(w->auth.ep_err[w->ep]);
	long status = 0;
	int gcode, rc;
	etcd_curl.multi_remove_handle(w->multi, w->auth.easy);
	w->probing = false;
	if (code != CURLE_OK) {
		rc = etcd_curl_errno(w->auth.easy, code, w->auth.curl_err,
				     w->cfg->timeout_ms / 2 < ETCD_FIRST_ATTEMPT_MS
					 ? w->cfg->timeout_ms / 2
					 : ETCD_FIRST_ATTEMPT_MS,
				     msg, sizeof(msg));
		snprintf(err, errlen, "liveness check: %s", msg);
		return rc;
	}
	etcd_curl.easy_getinfo(w->auth.easy, CURLINFO_RESPONSE_CODE, &status);
	if (status == 200)
		return 0;
	if (!etcd_parse_error(w->auth.rx.data, w->auth.rx.len, &gcode, msg, sizeof(msg)))
		snprintf(msg, sizeof(msg), "HTTP %ld", status);
	snprintf(err, errlen, "liveness check: %s", msg);
	/* An expired token is not the member's fault: renew it there. */
	if (w->cfg->user && (gcode == 16 || strstr(msg, "invalid auth token"))) {
		free(w->auth.token);
		w->auth.token = NULL;
		return -EACCES;
	}
	return -EAGAIN;
}

/* The results of finished transfers: true when easy is done (*res) or the
 * probe failed (w->stream_rc). */
static bool collect(struct etcd_watch *w, CURL *easy, CURLcode *res)
{
	bool done = false;
	CURLMsg *m;
	int left;
	while ((m = etcd_curl.multi_info_read(w->multi, &left))) {
		if (m->msg != CURLMSG_DONE)
			continue;
		if (m->easy_handle == easy) {
			*res = m->data.result;
			done = true;
		} else if (w->probing && m->easy_handle == w->auth.easy) {
			int rc = probe_done(w, m->data.result);
			if (rc < 0) {
				w->stream_rc = rc;
				done = true;
			}
		}
	}
	return done;
}

/* How long to wait for the sockets: to the creation deadline, or the next
 * probe of a quiet stream. */
static int wait_ms(const struct etcd_watch *w, bool stream)
{
	uint64_t t = 60000;
	if (w->created_deadline)
		t = time_left_ms(w->created_deadline) + 1;
	else if (stream && w->created && !w->probing)
		t = probe_interval(w) - (time_now_ms() - w->last_activity) + 1;
	return t > 60000 ? 60000 : (int)t;
}

/* Runs easy to its end, or until stop, or (while the stream is not yet
 * accepted) created_deadline; while the stream is quiet, probes its member. */
static CURLcode watch_perform(CURL *easy, void *arg)
{
	struct etcd_watch *w = arg;
	bool stream = easy == w->stream;
	CURLcode res = CURLE_OK;
	if (etcd_curl.multi_add_handle(w->multi, easy) != CURLM_OK)
		return CURLE_OUT_OF_MEMORY;
	for (;;) {
		int running;
		etcd_curl.multi_perform(w->multi, &running);
		if (collect(w, easy, &res))
			break;
		if (atomic_load(&w->stop)) {
			res = CURLE_ABORTED_BY_CALLBACK;
			break;
		}
		if (w->created_deadline && !time_left_ms(w->created_deadline)) {
			res = CURLE_OPERATION_TIMEDOUT;
			break;
		}
		if (stream && probe_due(w))
			probe_start(w);
		etcd_curl.multi_poll(w->multi, NULL, 0, wait_ms(w, stream), NULL);
	}
	if (w->probing) {
		etcd_curl.multi_remove_handle(w->multi, w->auth.easy);
		w->probing = false;
	}
	etcd_curl.multi_remove_handle(w->multi, easy);
	return res;
}

/* Waits ms unless stopped; false when stopped. */
static bool watch_pause(struct etcd_watch *w, uint64_t ms)
{
	uint64_t deadline = time_now_ms() + ms;
	while (!atomic_load(&w->stop) && time_left_ms(deadline))
		etcd_curl.multi_poll(w->multi, NULL, 0, (int)time_left_ms(deadline), NULL);
	return !atomic_load(&w->stop);
}

/* ---- messages of the stream ---- */

/* Notes why the current endpoint failed (for the message if all fail). */
static void ep_note(struct etcd_watch *w, const char *what)
{
	snprintf(w->auth.ep_err[w->ep], sizeof(w->auth.ep_err[w->ep]), "%.150s", what);
}

static bool auth_reason(const char *r)
{
	return strstr(r, "invalid auth token") || strstr(r, "user name is empty") ||
	       strstr(r, "auth: ");
}

/* A cancelled watch: worth another try (another endpoint, a new token), or
 * the end. */
static int on_cancel(struct etcd_watch *w, const struct etcd_watch_msg *m)
{
	ep_note(w, m->reason[0] ? m->reason : "watch cancelled");
	if (m->compact_revision > 0) {
		w->terminal = true;
		return etcd_fail(-ESTALE,
				 "etcd: watch of '%s' from revision %lld: compacted (the oldest "
				 "revision kept is %lld); read again and watch from there",
				 w->key, (long long)w->next_rev, (long long)m->compact_revision);
	}
	if (m->error_code ? etcd_grpc_retryable(m->error_code, m->reason)
			  : !!strstr(m->reason, "no leader"))
		return -EAGAIN;
	if (w->cfg->user && auth_reason(m->reason) && w->auth_rejections++ < 2) {
		free(w->auth.token);
		w->auth.token = NULL;
		return -EACCES;
	}
	w->terminal = true;
	return etcd_fail(
	    auth_reason(m->reason) || strstr(m->reason, "permission denied") ? -EACCES : -ECANCELED,
	    "etcd %s: watch of '%s' cancelled: %s", w->cfg->names[w->ep], w->key, m->reason);
}

/* Delivers the events of one message, dropping any a resumed stream repeats
 * (all events of one revision come in one message). */
static int on_events(struct etcd_watch *w, struct etcd_watch_msg *m)
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
			return etcd_fail(-ENOMEM, "etcd: out of memory");
		}
	}
	if (top >= w->next_rev)
		w->next_rev = top + 1;
	/* A progress notification: everything up to its revision was sent. */
	if (!m->nevents && !m->created && w->created && m->revision >= w->next_rev)
		w->next_rev = m->revision + 1;
	return 0;
}

static int on_message(struct etcd_watch *w, const char *line, size_t len)
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
			w->last_activity = time_now_ms();
			w->created_deadline = 0;
			w->auth_rejections = 0;
			if (!w->next_rev)
				w->next_rev = m.revision + 1;
			for (size_t i = 0; i < w->cfg->n; i++)
				w->auth.ep_err[i][0] = '\0';
		}
		rc = on_events(w, &m);
	}
	etcd_watch_msg_release(&m);
	return rc;
}

static size_t stream_write(char *p, size_t size, size_t n, void *userdata)
{
	struct etcd_watch *w = userdata;
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

static CURL *stream_easy(struct etcd_watch *w, char *url, struct curl_slist *hdrs, char *body)
{
	CURL *e = etcd_curl.easy_init();
	if (!e)
		return NULL;
	etcd_easy_common(e, w->cfg, w->stream_err);
	etcd_curl.easy_setopt(e, CURLOPT_URL, url);
	etcd_curl.easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);
	etcd_curl.easy_setopt(e, CURLOPT_POSTFIELDS, body);
	etcd_curl.easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
	etcd_curl.easy_setopt(e, CURLOPT_WRITEFUNCTION, stream_write);
	etcd_curl.easy_setopt(e, CURLOPT_WRITEDATA, w);
	etcd_curl.easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
			      (long)time_left_ms(w->created_deadline) + 1);
	return e;
}

/* Opens the stream on w->ep and runs it until it ends. Returns the reason it
 * ended (w->terminal when no other endpoint will do better). */
static int stream_run(struct etcd_watch *w, uint64_t slice_ms)
{
	char *body = etcd_req_watch(w->key, w->prefix, w->next_rev);
	char *url = etcd_url(w->cfg->urls[w->ep], "/v3/watch");
	struct curl_slist *hdrs = NULL;
	CURL *e = NULL;
	CURLcode code;
	bool retry;
	int rc = -ENOMEM;
	w->created = false;
	w->stream_rc = 0;
	w->terminal = false;
	w->lb.len = w->lb.scan = w->lb.taken = 0;
	w->created_deadline = time_now_ms() + slice_ms;
	if (!body || !url)
		goto out;
	rc = etcd_conn_auth(&w->auth, w->ep, slice_ms, &retry);
	if (rc < 0) {
		w->terminal = !retry;
		goto out;
	}
	/* With require-leader (in the headers), a member that loses its leader
	 * cancels the watch instead of keeping a stale one open. */
	hdrs = etcd_headers(w->auth.token);
	e = hdrs ? stream_easy(w, url, hdrs, body) : NULL;
	if (!e)
		goto out;
	w->stream = e;
	w->stream_err[0] = '\0';
	code = watch_perform(e, w);
	w->stream = NULL;
	if (w->stream_rc) {
		rc = w->stream_rc;
	} else if (code == CURLE_ABORTED_BY_CALLBACK) {
		rc = -ECANCELED;
	} else if (code != CURLE_OK) {
		rc = etcd_curl_errno(e, code, w->stream_err, slice_ms, w->auth.ep_err[w->ep],
				     sizeof(w->auth.ep_err[w->ep]));
	} else {
		rc = -ECONNRESET;
		ep_note(w, "the member ended the watch stream");
	}
out:
	if (rc == -ENOMEM && !w->auth.ep_err[w->ep][0])
		ep_note(w, "out of memory");
	w->created_deadline = 0;
	if (e)
		etcd_curl.easy_cleanup(e);
	etcd_curl.slist_free_all(hdrs);
	etcd_curl.slist_free_all(w->probe_hdrs);
	free(w->probe_url);
	free(url);
	free(body);
	w->probe_hdrs = NULL;
	w->probe_url = NULL;
	return rc;
}

static int lost_all(struct etcd_watch *w, int rc)
{
	char list[1700];
	size_t off = 0;
	list[0] = '\0';
	for (size_t i = 0; i < w->cfg->n && off < sizeof(list); i++)
		if (w->auth.ep_err[i][0])
			off +=
			    (size_t)snprintf(list + off, sizeof(list) - off, "%s%s (%s)",
					     off ? ", " : "", w->cfg->names[i], w->auth.ep_err[i]);
	return etcd_fail(rc,
			 "etcd: watch of '%s' lost: no endpoint took it back within %llu ms: %s",
			 w->key, (unsigned long long)w->cfg->timeout_ms, list);
}

/* Keeps a stream open, endpoint after endpoint, until stopped or until no
 * endpoint takes the watch back within timeout_ms of losing it. */
static void *watch_main(void *arg)
{
	struct etcd_watch *w = arg;
	size_t n = w->cfg->n, failed = 0; /* attempts since the last working stream */
	uint64_t down_since = time_now_ms(), delay = 10;
	int rc = -ETIMEDOUT;
	while (!atomic_load(&w->stop)) {
		uint64_t down = time_now_ms() - down_since;
		etcd_error_clear();
		if (down >= w->cfg->timeout_ms) {
			finish(w, lost_all(w, rc));
			break;
		}
		/* As for unary calls: share what is left among the endpoints not
		 * yet tried this round. */
		rc = stream_run(w, (w->cfg->timeout_ms - down) / (n - failed % n));
		if (atomic_load(&w->stop))
			break;
		if (w->terminal) {
			if (!etcd_error()[0])
				etcd_fail(rc, "etcd %s: watch of '%s': %s", w->cfg->names[w->ep],
					  w->key, w->auth.ep_err[w->ep]);
			finish(w, rc);
			break;
		}
		if (w->created) {
			/* It had been working: a fresh budget for reconnecting. */
			down_since = time_now_ms();
			failed = 0;
			delay = 10;
		} else if (++failed % n == 0) {
			if (!watch_pause(w, delay))
				break;
			delay = delay * 2 > 250 ? 250 : delay * 2;
		}
		/* A rejected token is renewed on the same member. */
		if (rc != -EACCES)
			w->ep = (w->ep + 1) % n;
	}
	return NULL;
}

/* ---- the consumer's side ---- */

static int watch_alloc(struct etcd_client *c, const char *key, unsigned flags,
		       int64_t start_revision, struct etcd_watch **out)
{
	struct etcd_watch *w = calloc(1, sizeof(*w));
	int rc;
	if (!w)
		return -ENOMEM;
	*out = w;
	w->cfg = etcd_client_cfg(c);
	w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	w->key = strdup(key);
	w->prefix = flags & ETCD_WATCH_PREFIX;
	w->next_rev = start_revision > 0 ? start_revision : 0;
	w->ep = etcd_client_last_ep(c);
	w->lb.max = ETCD_MAX_BODY;
	w->multi = etcd_curl.multi_init();
	pthread_mutex_init(&w->mu, NULL);
	if (w->efd < 0 || !w->key || !w->multi)
		return w->efd < 0 ? -errno : -ENOMEM;
	rc = etcd_conn_init(&w->auth, w->cfg);
	w->auth.perform = watch_perform;
	w->auth.perform_arg = w;
	return rc;
}

static void watch_release(struct etcd_watch *w)
{
	struct watch_item *it = w->head;
	while (it) {
		struct watch_item *next = it->next;
		etcd_event_release(&it->ev);
		free(it);
		it = next;
	}
	if (w->auth.cfg)
		etcd_conn_release(&w->auth);
	if (w->multi)
		etcd_curl.multi_cleanup(w->multi);
	if (w->efd >= 0)
		close(w->efd);
	etcd_linebuf_release(&w->lb);
	free(w->probe_body);
	pthread_mutex_destroy(&w->mu);
	free(w->key);
	free(w);
}

int etcd_watch_new(struct etcd_client *c, const char *key, unsigned flags, int64_t start_revision,
		   struct etcd_watch **out)
{
	struct etcd_watch *w = NULL;
	int rc;
	*out = NULL;
	etcd_error_clear();
	if (!key || !*key)
		return etcd_fail(-EINVAL, "etcd: empty key");
	rc = watch_alloc(c, key, flags, start_revision, &w);
	if (!rc)
		rc = -pthread_create(&w->thread, NULL, watch_main, w);
	if (rc < 0) {
		if (w)
			watch_release(w);
		return etcd_fail(rc, "etcd: cannot set up a watch: %s", strerror(-rc));
	}
	*out = w;
	return 0;
}

int etcd_watch_fd(const struct etcd_watch *w)
{
	return w->efd;
}

/* Takes the next event, or the final error; 0 when neither is there. */
static int take(struct etcd_watch *w, struct etcd_event *ev)
{
	struct watch_item *it;
	int rc = 0;
	pthread_mutex_lock(&w->mu);
	it = w->head;
	if (it) {
		w->head = it->next;
		if (!w->head) {
			w->tail = NULL;
			if (!w->done)
				efd_drain(w);
		}
		*ev = it->ev;
		free(it);
		rc = 1;
	} else if (w->done) {
		rc = etcd_fail(w->final_rc, "%s", w->final_err);
	}
	pthread_mutex_unlock(&w->mu);
	return rc;
}

int etcd_watch_next(struct etcd_watch *w, int timeout_ms, struct etcd_event *ev)
{
	uint64_t deadline = timeout_ms > 0 ? time_now_ms() + (uint64_t)timeout_ms : 0;
	memset(ev, 0, sizeof(*ev));
	etcd_error_clear();
	for (;;) {
		struct pollfd p = {.fd = w->efd, .events = POLLIN};
		int rc = take(w, ev), wait;
		if (rc)
			return rc;
		if (timeout_ms == 0 || (deadline && !time_left_ms(deadline)))
			return 0;
		wait = timeout_ms < 0 ? -1 : (int)time_left_ms(deadline);
		if (poll(&p, 1, wait) < 0 && errno != EINTR)
			return etcd_fail(-errno, "etcd: poll: %s", strerror(errno));
	}
}

void etcd_watch_free(struct etcd_watch *w)
{
	if (!w)
		return;
	atomic_store(&w->stop, true);
	etcd_curl.multi_wakeup(w->multi);
	pthread_join(w->thread, NULL);
	watch_release(w);
}
