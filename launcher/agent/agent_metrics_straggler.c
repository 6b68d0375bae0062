/*
 * agent_metrics_straggler.c - the stragglers on an agent's /metrics
 * (agent_metrics.c renders them): the ranks its workers named slow (their
 * "straggler" lines on the agent channel, kept in ag->summary), counted by
 * cause, and how much slower each rank named now is. Read between two of
 * the agent loop's events.
 */
#include "agent_int.h"
#include "metrics_http.h"

#include <stdio.h>

void agent_metrics_stragglers(struct agent *ag, struct metrics_out *o)
{
	const struct summary *s = &ag->summary;
	struct metrics_label l[1];
	char rank[16];

	metrics_family(o, "ddp_stragglers_total", METRICS_COUNTER,
		       "Ranks named slow by the workers' straggler detector (ddp-train), by "
		       "cause: compute (its own work per shard grew) or link (its transfers).");
	for (int c = 1; c <= 2; c++) {
		l[0] = (struct metrics_label){"cause", summary_cause_name(c)};
		metrics_sample(o, l, 1, (double)s->stragglers_named[c]);
	}
	metrics_family(o, "ddp_straggler_slower_ratio", METRICS_GAUGE,
		       "How much slower than the others each rank named slow now was when "
		       "named; absent for a rank not named (or cleared since).");
	for (size_t i = 0; i < s->nstragglers; i++) {
		const struct summary_straggler *g = &s->stragglers[i];

		if (g->cleared_step >= 0)
			continue;
		snprintf(rank, sizeof(rank), "%d", g->rank);
		l[0] = (struct metrics_label){"rank", rank};
		metrics_sample(o, l, 1, g->slower);
	}
}
