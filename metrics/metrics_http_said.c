/* metrics_http_start_said (metrics_http.h): the start of /metrics and its
 * messages, the same for ddplaunch and ddp-rdzvd. */
#include "metrics_http.h"

#include <errno.h>
#include <log.h>
#include <string.h>

int metrics_http_start_said(uv_loop_t *loop, const char *prog, const char *opt, const char *addr,
			    int port, metrics_render_fn render, void *arg,
			    struct metrics_http **out)
{
	int rc = metrics_http_start(loop, addr, port, render, arg, out);
	const char *on = addr && *addr ? " on " : "";

	addr = addr ? addr : "";
	if (rc == -ENOTSUP)
		log_error("%s: this %s was built without metrics (libmicrohttpd); build it with "
			  "-Dmetrics=enabled, or leave %s out",
			  opt, prog, opt);
	else if (rc == -EADDRINUSE)
		log_error("%s: port %d%s%s is in use by another process; choose another, or 0 "
			  "for a free one",
			  opt, port, on, addr);
	else if (rc == -EADDRNOTAVAIL)
		log_error("%s: %s is not an address of this machine; give one of its own, or "
			  "leave ADDR out for every interface",
			  opt, addr);
	else if (rc)
		log_error("%s: cannot serve metrics on port %d%s%s: %s", opt, port, on, addr,
			  strerror(-rc));
	else
		log_info("serving metrics at http://%s%s%s:%d/metrics",
			 strchr(metrics_http_host(*out), ':') ? "[" : "", metrics_http_host(*out),
			 strchr(metrics_http_host(*out), ':') ? "]" : "", metrics_http_port(*out));
	return rc;
}
