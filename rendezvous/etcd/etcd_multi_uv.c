/*
 * etcd_multi_uv.c - curl's multi-socket interface driven by a libuv loop,
 * as curl's own multi-uv example does: curl says which sockets to watch for
 * what (CURLMOPT_SOCKETFUNCTION: a uv_poll each) and when to call it back
 * (CURLMOPT_TIMERFUNCTION: one uv_timer); the loop calls
 * curl_multi_socket_action() when a socket is ready or the timer fires, and
 * then hands the finished transfers to their owners. No thread.
 */
#include <errno.h>
#include <stdlib.h>

#include "etcd_curl.h"
#include "etcd_int.h"

/* One socket curl asked us to watch. */
struct etcd_sock {
	uv_poll_t poll;
	struct etcd_multi *m;
	curl_socket_t fd;
	struct etcd_sock *prev, *next;
};

static void handle_closed(uv_handle_t *h)
{
	struct etcd_multi *m = h->data;

	if (h->type == UV_POLL)
		free(h); /* the poll is an etcd_sock's first member */
	if (--m->handles == 0 && m->closed)
		m->closed(m);
}

/* The transfers that ended: each leaves the multi handle, then its owner
 * hears. An owner may close everything from there (m->multi goes NULL). */
static void collect(struct etcd_multi *m)
{
	CURLMsg *msg;
	int left;

	while (m->multi && (msg = etcd_curl.multi_info_read(m->multi, &left))) {
		struct etcd_xfer *x = NULL;

		if (msg->msg != CURLMSG_DONE)
			continue;
		etcd_curl.easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
		CURLcode code = msg->data.result;
		etcd_curl.multi_remove_handle(m->multi, msg->easy_handle);
		x->running = false;
		x->done(x, code);
	}
	if (m->multi && m->after)
		m->after(m);
}

static void act(struct etcd_multi *m, curl_socket_t fd, int flags)
{
	int running;

	if (!m->multi)
		return;
	etcd_curl.multi_socket_action(m->multi, fd, flags, &running);
	collect(m);
}

static void on_poll(uv_poll_t *p, int status, int events)
{
	struct etcd_sock *s = (struct etcd_sock *)p;
	int flags = 0;

	if (status < 0)
		flags = CURL_CSELECT_ERR;
	if (events & UV_READABLE)
		flags |= CURL_CSELECT_IN;
	if (events & UV_WRITABLE)
		flags |= CURL_CSELECT_OUT;
	act(s->m, s->fd, flags);
}

static void on_timer(uv_timer_t *t)
{
	act(t->data, CURL_SOCKET_TIMEOUT, 0);
}

static void sock_close(struct etcd_multi *m, struct etcd_sock *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else
		m->socks = s->next;
	if (s->next)
		s->next->prev = s->prev;
	uv_poll_stop(&s->poll);
	uv_close((uv_handle_t *)&s->poll, handle_closed);
}

static struct etcd_sock *sock_open(struct etcd_multi *m, curl_socket_t fd)
{
	struct etcd_sock *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	if (uv_poll_init_socket(m->loop, &s->poll, fd) < 0) {
		free(s);
		return NULL;
	}
	s->poll.data = m;
	s->m = m;
	s->fd = fd;
	s->next = m->socks;
	if (s->next)
		s->next->prev = s;
	m->socks = s;
	m->handles++;
	etcd_curl.multi_assign(m->multi, fd, s);
	return s;
}

/* curl's CURLMOPT_SOCKETFUNCTION: what to watch on fd. */
static int on_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
	struct etcd_multi *m = userp;
	struct etcd_sock *s = socketp;
	int events = 0;

	(void)easy;
	if (what == CURL_POLL_REMOVE) {
		if (s) {
			etcd_curl.multi_assign(m->multi, fd, NULL);
			sock_close(m, s);
		}
		return 0;
	}
	if (!s && !(s = sock_open(m, fd)))
		return -1; /* curl fails the transfers on this socket */
	if (what & CURL_POLL_IN)
		events |= UV_READABLE;
	if (what & CURL_POLL_OUT)
		events |= UV_WRITABLE;
	return uv_poll_start(&s->poll, events, on_poll) < 0 ? -1 : 0;
}

/* curl's CURLMOPT_TIMERFUNCTION: call back in ms (-1: never). It must not
 * call curl from here, so even 0 goes through the loop. */
static int on_timeout(CURLM *multi, long ms, void *userp)
{
	struct etcd_multi *m = userp;

	(void)multi;
	if (ms < 0)
		uv_timer_stop(&m->timer);
	else
		uv_timer_start(&m->timer, on_timer, (uint64_t)ms, 0);
	return 0;
}

int etcd_multi_init(struct etcd_multi *m, uv_loop_t *loop)
{
	m->loop = loop;
	m->socks = NULL;
	m->handles = 0;
	m->closed = NULL;
	m->multi = etcd_curl.multi_init();
	if (!m->multi)
		return -ENOMEM;
	uv_timer_init(loop, &m->timer);
	m->timer.data = m;
	m->handles = 1;
	etcd_curl.multi_setopt(m->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
	etcd_curl.multi_setopt(m->multi, CURLMOPT_SOCKETDATA, m);
	etcd_curl.multi_setopt(m->multi, CURLMOPT_TIMERFUNCTION, on_timeout);
	etcd_curl.multi_setopt(m->multi, CURLMOPT_TIMERDATA, m);
	return 0;
}

int etcd_multi_start(struct etcd_multi *m, struct etcd_xfer *x)
{
	etcd_curl.easy_setopt(x->easy, CURLOPT_PRIVATE, x);
	if (!m->multi || etcd_curl.multi_add_handle(m->multi, x->easy) != CURLM_OK)
		return -ENOMEM;
	x->running = true;
	return 0;
}

void etcd_multi_stop(struct etcd_multi *m, struct etcd_xfer *x)
{
	if (!x->running)
		return;
	if (m->multi)
		etcd_curl.multi_remove_handle(m->multi, x->easy);
	x->running = false;
}

void etcd_multi_close(struct etcd_multi *m, void (*closed)(struct etcd_multi *m))
{
	m->closed = closed;
	if (m->multi) {
		CURLM *multi = m->multi;

		/* The cleanup may still tell on_socket to remove sockets. */
		etcd_curl.multi_cleanup(multi);
		m->multi = NULL;
	}
	while (m->socks)
		sock_close(m, m->socks);
	uv_timer_stop(&m->timer);
	uv_close((uv_handle_t *)&m->timer, handle_closed);
}
