/*
 * store_bench_idle.c - the server's memory with many idle connections.
 */
#include "store_bench.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int sb_idle_run(const struct sb_server *server, enum sb_wire wire, int conns,
		struct sb_idle_result *out)
{
	struct sb_conn **c = calloc((size_t)conns, sizeof(*c));
	int opened = 0, rc = 0;

	memset(out, 0, sizeof(*out));
	if (!c)
		return -ENOMEM;
	sb_server_quiesce(server, 3000);
	out->rss_before_kib = sb_proc_status_kib(server->pid, "VmRSS");
	for (; opened < conns && rc == 0; opened++) {
		rc = sb_conn_open(wire, server->port, 10000, &c[opened]);
		/* a round trip on each: the server has surely accepted it */
		if (rc == 0)
			rc = sb_conn_ping(c[opened]);
	}
	if (rc == 0) {
		sb_server_quiesce(server, 3000);
		out->rss_with_kib = sb_proc_status_kib(server->pid, "VmRSS");
		out->connections = conns;
		out->bytes_per_conn =
		    (double)(out->rss_with_kib - out->rss_before_kib) * 1024.0 / conns;
	}
	for (int i = 0; i < opened; i++)
		sb_conn_free(c[i]);
	free(c);
	return rc;
}
