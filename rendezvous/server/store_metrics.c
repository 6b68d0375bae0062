/* A store server's families for /metrics (store_metrics.h). */
#include "store_metrics.h"
#include "store_server.h"

void store_server_metrics(const struct store_server *server, struct metrics_out *o)
{
	struct store_server_stats st;
	struct metrics_label l;

	store_server_get_stats(server, &st);
	metrics_single(o, "ddp_store_connections", METRICS_GAUGE, "Client connections open now.",
		       (double)st.connections);
	metrics_single(o, "ddp_store_connections_accepted_total", METRICS_COUNTER,
		       "Client connections accepted.", (double)st.accepted);
	metrics_single(
	    o, "ddp_store_refused_connections_total", METRICS_COUNTER,
	    "Connections refused by who may connect: strangers without the token, addresses "
	    "with too many connections, writes to the agents' keys without a session.",
	    (double)st.refused);
	metrics_single(o, "ddp_store_budget_closed_connections_total", METRICS_COUNTER,
		       "Connections closed to keep the store within --max-total-bytes.",
		       (double)st.closed_for_budget);
	metrics_family(o, "ddp_store_requests_total", METRICS_COUNTER,
		       "Requests run, by kind (torch's TCPStore requests, and the agents' "
		       "session requests, session_*).");
	for (size_t op = 0; op < st.nops; op++) {
		l = (struct metrics_label){"kind", store_server_op_name(op)};
		metrics_sample(o, &l, 1, (double)st.requests[op]);
	}
	metrics_single(o, "ddp_store_keys", METRICS_GAUGE, "Keys stored now.", (double)st.keys);
	metrics_single(o, "ddp_store_stored_bytes", METRICS_GAUGE,
		       "Bytes of keys and values stored now.", (double)st.bytes_stored);
	metrics_single(
	    o, "ddp_store_in_flight_bytes", METRICS_GAUGE,
	    "Bytes the connections hold in flight: queries half received, replies not yet read.",
	    (double)st.bytes_in_flight);
	metrics_single(o, "ddp_store_waiting_requests", METRICS_GAUGE,
		       "Requests waiting for keys now.", (double)st.waiters);
}
