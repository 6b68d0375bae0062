/* ddp-rdzvd's /metrics (--metrics-port): what its store serves and holds
 * (rdzvd_metrics.h). */
#include "rdzvd_metrics.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "metrics_http.h"
#include "store_server.h"

static void one(struct metrics_out *o, const char *name, enum metrics_type t, const char *help,
		double v)
{
	metrics_family(o, name, t, help);
	metrics_sample(o, NULL, 0, v);
}

void rdzvd_metrics_render(void *arg, struct metrics_out *o)
{
	struct store_server **server = arg;
	struct store_server_stats st;
	struct metrics_label l;

	if (!*server)
		return; /* closing */
	store_server_get_stats(*server, &st);
	one(o, "ddp_store_connections", METRICS_GAUGE, "Client connections open now.",
	    (double)st.connections);
	one(o, "ddp_store_connections_accepted_total", METRICS_COUNTER,
	    "Client connections accepted.", (double)st.accepted);
	one(o, "ddp_store_refused_connections_total", METRICS_COUNTER,
	    "Connections refused by who may connect: strangers without the token, addresses "
	    "with too many connections, writes to the agents' keys without a session.",
	    (double)st.refused);
	one(o, "ddp_store_budget_closed_connections_total", METRICS_COUNTER,
	    "Connections closed to keep the store within --max-total-bytes.",
	    (double)st.closed_for_budget);
	metrics_family(o, "ddp_store_requests_total", METRICS_COUNTER,
		       "Requests run, by kind (torch's TCPStore requests, and the agents' "
		       "session requests, session_*).");
	for (size_t op = 0; op < st.nops; op++) {
		l = (struct metrics_label){"kind", store_server_op_name(op)};
		metrics_sample(o, &l, 1, (double)st.requests[op]);
	}
	one(o, "ddp_store_keys", METRICS_GAUGE, "Keys stored now.", (double)st.keys);
	one(o, "ddp_store_stored_bytes", METRICS_GAUGE, "Bytes of keys and values stored now.",
	    (double)st.bytes_stored);
	one(o, "ddp_store_in_flight_bytes", METRICS_GAUGE,
	    "Bytes the connections hold in flight: queries half received, replies not yet read.",
	    (double)st.bytes_in_flight);
	one(o, "ddp_store_waiting_requests", METRICS_GAUGE, "Requests waiting for keys now.",
	    (double)st.waiters);
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
