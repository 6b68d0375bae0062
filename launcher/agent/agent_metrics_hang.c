/*
 * agent_metrics_hang.c - the hangs on an agent's /metrics (agent_metrics.c
 * renders them): every hang this node printed (its own, and those other
 * nodes named, heard through the notice board), counted by the culprit's
 * phase and op; those this node cut out; when the last one was printed;
 * and the deadlines the watch has learned from the job (agent_hang.h), per
 * phase and, inside a collective, per op. All from struct agent, read
 * between two of its loop's events.
 */
#include "agent_int.h"
#include "metrics_http.h"

#include <stdio.h>
#include <string.h>

#define HANG_LABELS 16 /* (phase, op) pairs counted apart; more are "other" */

struct hang_count {
	const char *phase, *op;
	unsigned n;
};

static void count(struct hang_count *c, size_t *n, const char *phase, const char *op)
{
	for (size_t i = 0; i < *n; i++)
		if (!strcmp(c[i].phase, phase) && !strcmp(c[i].op, op)) {
			c[i].n++;
			return;
		}
	if (*n == HANG_LABELS) {
		c[*n - 1] = (struct hang_count){"other", "other", c[*n - 1].n + 1};
		return;
	}
	c[(*n)++] = (struct hang_count){phase, op, 1};
}

static void render_deadlines(struct agent *ag, struct metrics_out *o)
{
	struct metrics_label l[2];

	metrics_family(o, "ddp_hang_deadline_seconds", METRICS_GAUGE,
		       "The deadline this node's watch holds now, learned from the job (or "
		       "--hang_timeout), per phase and, inside a collective, per op; absent "
		       "while it has too few samples of that kind to judge.");
	if (!ag->hang.on)
		return;
	for (uint32_t ph = DDP_PHASE_NONE + 1; ph < DDP_PHASE_COUNT; ph++) {
		uint32_t op0 = ph == DDP_PHASE_COLLECTIVE ? DDP_OP_NONE + 1 : DDP_OP_NONE;
		uint32_t op1 = ph == DDP_PHASE_COLLECTIVE ? DDP_OP_COUNT : DDP_OP_NONE + 1;

		for (uint32_t op = op0; op < op1; op++) {
			uint64_t ns = hang_deadline_get(&ag->hang.dl, (enum ddp_progress_phase)ph,
							(enum ddp_progress_op)op);

			if (!ns)
				continue;
			l[0] = (struct metrics_label){"phase", agent_phase_word(ph)};
			l[1] = (struct metrics_label){"op", op == DDP_OP_NONE ? "none"
									      : hang_op_name(op)};
			metrics_sample(o, l, 2, ns / 1e9);
		}
	}
}

void agent_metrics_hangs(struct agent *ag, struct metrics_out *o)
{
	struct hang_count c[HANG_LABELS];
	size_t n = 0, cut = 0;
	int64_t last_ms = 0;
	struct metrics_label l[2];

	for (size_t i = 0; i < ag->summary.nhangs; i++) {
		const struct summary_hang *h = &ag->summary.hangs[i];

		count(c, &n, h->phase[0] ? h->phase : "unknown", h->op[0] ? h->op : "unknown");
		cut += h->cut;
		if (h->time_ms > last_ms)
			last_ms = h->time_ms;
	}
	metrics_family(o, "ddp_hangs_total", METRICS_COUNTER,
		       "Hangs this node printed (named by it, or by another node and heard "
		       "through the rendezvous), by the culprit's phase and the collective it had "
		       "not entered or left.");
	for (size_t i = 0; i < n; i++) {
		l[0] = (struct metrics_label){"phase", c[i].phase};
		l[1] = (struct metrics_label){"op", c[i].op};
		metrics_sample(o, l, 2, c[i].n);
	}
	metrics_family(o, "ddp_hang_cuts_total", METRICS_COUNTER,
		       "Workers of this node ended by its agent because they hung.");
	metrics_sample(o, NULL, 0, (double)cut);
	metrics_family(o, "ddp_last_hang_timestamp_seconds", METRICS_GAUGE,
		       "When this node printed the last hang (Unix time); absent before the "
		       "first.");
	if (last_ms)
		metrics_sample(o, NULL, 0, last_ms / 1000.0);
	render_deadlines(ag, o);
}
