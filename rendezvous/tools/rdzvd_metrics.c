/* ddp-rdzvd's /metrics (--metrics-port): what its store serves and holds
 * (rdzvd_metrics.h). */
#include "rdzvd_metrics.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "metrics_http.h"
#include "store_metrics.h"
#include "store_server.h"

void rdzvd_metrics_render(void *arg, struct metrics_out *o)
{
	struct store_server **server = arg;

	if (*server) /* NULL: closing */
		store_server_metrics(*server, o);
}

int rdzvd_metrics_start(uv_loop_t *loop, const char *spec, struct store_server **server,
			struct metrics_http **out)
{
	char addr[64] = "";
	const char *port_s = spec, *colon = strrchr(spec, ':');
	int port, rc;

	if (colon) {
		size_t n = (size_t)(colon - spec);

		if (n >= 2 && spec[0] == '[' && spec[n - 1] == ']') {
			spec++;
			n -= 2;
		}
		if (!n || n >= sizeof(addr)) {
			log_error("--metrics-port: '%s' is not [ADDR:]PORT", port_s);
			return -EINVAL;
		}
		memcpy(addr, spec, n);
		addr[n] = '\0';
		port_s = colon + 1;
	}
	if (sscanf(port_s, "%d", &port) != 1 || port < 0 || port > 65535 ||
	    strspn(port_s, "0123456789") != strlen(port_s)) {
		log_error("--metrics-port: '%s' is not a port (0-65535)", port_s);
		return -EINVAL;
	}
	rc = metrics_http_start(loop, addr, port, rdzvd_metrics_render, server, out);
	if (rc == -ENOTSUP)
		log_error("--metrics-port: this ddp-rdzvd was built without metrics "
			  "(libmicrohttpd); build it with -Dmetrics=enabled, or leave "
			  "--metrics-port out");
	else if (rc == -EADDRINUSE)
		log_error("--metrics-port: port %d%s%s is in use by another process; choose "
			  "another, or 0 for a free one",
			  port, addr[0] ? " on " : "", addr);
	else if (rc)
		log_error("--metrics-port: cannot serve metrics on %s port %d: %s", addr, port,
			  strerror(-rc));
	else
		log_info("serving metrics at http://%s%s%s:%d/metrics",
			 strchr(addr, ':') ? "[" : "", addr[0] ? addr : "0.0.0.0",
			 strchr(addr, ':') ? "]" : "", metrics_http_port(*out));
	return rc;
}
