/*
 * metrics_http.h - serves GET /metrics (metrics.h's text) over HTTP on a
 * libuv loop, for Prometheus to scrape.
 *
 * The HTTP is GNU libmicrohttpd's (Debian's libmicrohttpd-dev), run inside
 * the caller's loop, with no thread of its own: the daemon is started with
 * MHD_USE_EPOLL and no internal polling, its one epoll descriptor
 * (MHD_DAEMON_INFO_EPOLL_FD) is watched by one uv_poll_t, and a uv_timer_t
 * keeps MHD_get_timeout()'s deadline; either calls MHD_run(). So the render
 * callback runs on the loop's thread and reads the program's state with no
 * lock, between two of its other events. The listening socket is bound here
 * (a taken port is -EADDRINUSE, port 0 a free one, read back) and handed to
 * the daemon. At most METRICS_HTTP_MAX_CONN connections at once, each ended
 * after METRICS_HTTP_TIMEOUT_S silent seconds.
 *
 * Requests: GET (or HEAD) /metrics -> 200 with the text; any other path 404;
 * any other method 405. The render callback fills a struct metrics_out; an
 * error there answers 500.
 *
 * Built without libmicrohttpd (-Dmetrics=disabled), metrics_http_start
 * returns -ENOTSUP and METRICS_HTTP_BUILT is 0.
 */
#ifndef DDP_METRICS_METRICS_HTTP_H
#define DDP_METRICS_METRICS_HTTP_H

#include <stdbool.h>
#include <uv.h>

#include "metrics.h"

#define METRICS_HTTP_MAX_CONN  16
#define METRICS_HTTP_TIMEOUT_S 10

/* Writes the whole exposition into *out (initialised by the caller). */
typedef void (*metrics_render_fn)(void *arg, struct metrics_out *out);

struct metrics_http;

/* Whether this build serves metrics (libmicrohttpd was found). */
bool metrics_http_built(void);

/* Binds addr:port (addr a literal IPv4 or IPv6 address, NULL or "" for
 * every interface; port 0 for a free one) and serves on `loop` from now
 * on. Returns 0 with *out set, -EADDRINUSE (the port is taken),
 * -EADDRNOTAVAIL, -EINVAL (addr is not a literal), -ENOTSUP (built without
 * libmicrohttpd), -ENOMEM or another negative errno. */
int metrics_http_start(uv_loop_t *loop, const char *addr, int port, metrics_render_fn render,
		       void *arg, struct metrics_http **out);

/* The port it listens on. */
int metrics_http_port(const struct metrics_http *h);

/* The address it is bound to, as the kernel says (:: for every interface
 * of a dual-stack host, 0.0.0.0 where there is no IPv6). */
const char *metrics_http_host(const struct metrics_http *h);

/* metrics_http_start, then says what came of it for the option `opt`
 * (--metrics_port, --metrics-port) of `prog` (ddplaunch, ddp-rdzvd): on
 * success "serving metrics at http://HOST:PORT/metrics" (info) with the
 * address and port bound; otherwise (error) a taken port, a build without
 * metrics or another failure, each with its fix. Returns its rc. */
int metrics_http_start_said(uv_loop_t *loop, const char *prog, const char *opt, const char *addr,
			    int port, metrics_render_fn render, void *arg,
			    struct metrics_http **out);

/* How many scrapes of /metrics it answered. */
unsigned long metrics_http_scrapes(const struct metrics_http *h);

/* Stops serving: open connections are dropped, the handles close and the
 * memory goes once they have (keep the loop running). NULL allowed. */
void metrics_http_close(struct metrics_http *h);

#endif
