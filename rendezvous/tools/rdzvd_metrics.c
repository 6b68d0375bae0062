/* ddp-rdzvd's /metrics (--metrics-port): what its store serves and holds
 * (rdzvd_metrics.h). */
#include "rdzvd_metrics.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "metrics_http.h"
#include "metrics_spec.h"
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
	char addr[METRICS_ADDR_MAX], err[256];
	int port, rc = metrics_spec_parse(spec, addr, sizeof(addr), &port, err, sizeof(err));

	if (rc) {
		log_error("--metrics-port: %s", err);
		return rc;
	}
	return metrics_http_start_said(loop, "ddp-rdzvd", "--metrics-port", addr, port,
				       rdzvd_metrics_render, server, out);
}
