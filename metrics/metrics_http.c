/* GET /metrics over libmicrohttpd inside a libuv loop (metrics_http.h). */
#include "metrics_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#if DDP_HAVE_MHD
#include <microhttpd.h>

struct metrics_http {
	uv_loop_t *loop;
	struct MHD_Daemon *mhd;
	int port;
	char host[INET6_ADDRSTRLEN]; /* the address bound, as getsockname says */
	int nopen;		     /* handles not yet closed */
	unsigned long scrapes;
	metrics_render_fn render;
	void *arg;
	uv_poll_t poll;	  /* the daemon's epoll descriptor */
	uv_timer_t timer; /* MHD_get_timeout's deadline */
};

bool metrics_http_built(void)
{
	return true;
}

static void http_run(struct metrics_http *h);

static void on_poll(uv_poll_t *p, int status, int events)
{
	http_run(p->data);
}

static void on_timer(uv_timer_t *t)
{
	http_run(t->data);
}

/* Runs the daemon, then arms the timer for its next deadline. A deadline of
 * 0 (data already read and waiting) becomes 1 ms: libuv 1.44 runs a timer
 * started with 0 from its own callback again before any I/O. */
static void http_run(struct metrics_http *h)
{
	MHD_UNSIGNED_LONG_LONG ms;

	MHD_run(h->mhd);
	uv_timer_stop(&h->timer);
	if (MHD_get_timeout(h->mhd, &ms) == MHD_YES)
		uv_timer_start(&h->timer, on_timer, ms ? ms : 1, 0);
}

static enum MHD_Result http_reply(struct MHD_Connection *c, unsigned code, const char *type,
				  const char *body, size_t len)
{
	struct MHD_Response *r =
	    MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
	enum MHD_Result ret;

	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	if (code == MHD_HTTP_METHOD_NOT_ALLOWED)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
	ret = MHD_queue_response(c, code, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **con_cls)
{
	struct metrics_http *h = cls;
	struct metrics_out out;
	const char *text;
	enum MHD_Result ret;
	size_t len;

	if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
		return http_reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", "GET /metrics\n",
				  13);
	if (strcmp(url, "/metrics"))
		return http_reply(c, MHD_HTTP_NOT_FOUND, "text/plain", "see /metrics\n", 13);
	metrics_out_init(&out);
	h->render(h->arg, &out);
	text = metrics_out_text(&out, &len);
	if (text) {
		h->scrapes++;
		ret = http_reply(c, MHD_HTTP_OK, METRICS_CONTENT_TYPE, text, len);
	} else {
		ret = http_reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "text/plain",
				 "the metrics could not be written\n", 33);
	}
	metrics_out_release(&out);
	return ret;
}

/* A listening TCP socket on addr:port; its fd or a negative errno; the
 * port and address bound into *bound and host. */
static int http_listen(const char *addr, int port, int *bound, char *host, size_t hostlen)
{
	struct sockaddr_storage ss = {0};
	socklen_t sl;
	int fd, one = 1, rc;

	if (!addr || !*addr) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

		s6->sin6_family = AF_INET6;
		s6->sin6_addr = in6addr_any;
		s6->sin6_port = htons((uint16_t)port);
		sl = sizeof(*s6);
	} else if (inet_pton(AF_INET, addr, &((struct sockaddr_in *)&ss)->sin_addr) == 1) {
		((struct sockaddr_in *)&ss)->sin_family = AF_INET;
		((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)port);
		sl = sizeof(struct sockaddr_in);
	} else if (inet_pton(AF_INET6, addr, &((struct sockaddr_in6 *)&ss)->sin6_addr) == 1) {
		((struct sockaddr_in6 *)&ss)->sin6_family = AF_INET6;
		((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)port);
		sl = sizeof(struct sockaddr_in6);
	} else {
		return -EINVAL;
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 && (!addr || !*addr)) {
		/* No IPv6 here: every IPv4 interface. */
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;

		memset(&ss, 0, sizeof(ss));
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
		sl = sizeof(*s4);
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	}
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, sl) || listen(fd, 64))
		goto fail;
	sl = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &sl))
		goto fail;
	*bound = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
					       : ((struct sockaddr_in6 *)&ss)->sin6_port);
	if (!inet_ntop(ss.ss_family,
		       ss.ss_family == AF_INET ? (void *)&((struct sockaddr_in *)&ss)->sin_addr
					       : (void *)&((struct sockaddr_in6 *)&ss)->sin6_addr,
		       host, (socklen_t)hostlen))
		snprintf(host, hostlen, "?");
	return fd;
fail:
	rc = -errno;
	close(fd);
	return rc;
}

int metrics_http_start(uv_loop_t *loop, const char *addr, int port, metrics_render_fn render,
		       void *arg, struct metrics_http **out)
{
	struct metrics_http *h;
	const union MHD_DaemonInfo *info;
	int fd, rc;

	if (port < 0 || port > 65535)
		return -EINVAL;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->loop = loop;
	h->render = render;
	h->arg = arg;
	fd = http_listen(addr, port, &h->port, h->host, sizeof(h->host));
	if (fd < 0) {
		free(h);
		return fd;
	}
	/* No MHD_USE_INTERNAL_POLLING_THREAD: the loop runs it. */
	h->mhd = MHD_start_daemon(MHD_USE_EPOLL, 0, NULL, NULL, on_request, h,
				  MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT,
				  (unsigned)METRICS_HTTP_MAX_CONN, MHD_OPTION_CONNECTION_TIMEOUT,
				  (unsigned)METRICS_HTTP_TIMEOUT_S, MHD_OPTION_END);
	info = h->mhd ? MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_EPOLL_FD) : NULL;
	if (!info) {
		rc = -EIO;
		goto fail;
	}
	if ((rc = uv_poll_init(loop, &h->poll, info->epoll_fd)))
		goto fail;
	uv_timer_init(loop, &h->timer);
	h->poll.data = h->timer.data = h;
	h->nopen = 2;
	uv_poll_start(&h->poll, UV_READABLE, on_poll);
	*out = h;
	return 0;
fail:
	if (h->mhd)
		MHD_stop_daemon(h->mhd); /* closes fd */
	else
		close(fd);
	free(h);
	return rc;
}

int metrics_http_port(const struct metrics_http *h)
{
	return h->port;
}

const char *metrics_http_host(const struct metrics_http *h)
{
	return h->host;
}

unsigned long metrics_http_scrapes(const struct metrics_http *h)
{
	return h->scrapes;
}

static void on_closed(uv_handle_t *hd)
{
	struct metrics_http *h = hd->data;

	if (--h->nopen)
		return;
	/* The poll handle is gone from the loop: the epoll descriptor and the
	 * listening socket may close now. */
	MHD_stop_daemon(h->mhd);
	free(h);
}

void metrics_http_close(struct metrics_http *h)
{
	if (!h)
		return;
	uv_close((uv_handle_t *)&h->poll, on_closed);
	uv_close((uv_handle_t *)&h->timer, on_closed);
}

#else /* built without libmicrohttpd */

struct metrics_http {
	int port;
};

bool metrics_http_built(void)
{
	return false;
}

int metrics_http_start(uv_loop_t *loop, const char *addr, int port, metrics_render_fn render,
		       void *arg, struct metrics_http **out)
{
	return -ENOTSUP;
}

int metrics_http_port(const struct metrics_http *h)
{
	return h->port;
}

const char *metrics_http_host(const struct metrics_http *h)
{
	return "";
}

unsigned long metrics_http_scrapes(const struct metrics_http *h)
{
	return 0;
}

void metrics_http_close(struct metrics_http *h)
{
}

#endif
