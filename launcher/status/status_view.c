/* What `ddplaunch status` shows (status_view.h). */
#include "status_view.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void status_snap_release(struct status_snap *s)
{
	for (size_t i = 0; i < s->nnodes; i++)
		json_decref(s->nodes[i].rec);
	free(s->nodes);
	s->nodes = NULL;
	s->nnodes = 0;
}

const char *status_phase_word(enum rdzv_phase p)
{
	switch (p) {
	case RDZV_OPEN:
		return "forming a round";
	case RDZV_RUNNING:
		return "running";
	case RDZV_FINISHED:
		return "finished";
	case RDZV_FAILED:
		return "failed";
	}
	return "?";
}

const char *status_reason_text(enum rdzv_reason r)
{
	switch (r) {
	case RDZV_WHY_START:
		return "the job started";
	case RDZV_WHY_JOIN:
		return "nodes joined";
	case RDZV_WHY_DEAD:
		return "a node died";
	case RDZV_WHY_LEFT:
		return "a node left";
	case RDZV_WHY_RESTART:
		return "workers failed";
	case RDZV_WHY_REFORM:
		return "too few live nodes";
	case RDZV_WHY_REPLACE:
		return "a worker is replaced";
	case RDZV_WHY_PERMANENT:
		return "a failure that will repeat";
	}
	return "?";
}

static double num(const json_t *o, const char *k, double dflt)
{
	const json_t *v = json_object_get(o, k);

	return json_is_number(v) ? json_number_value(v) : dflt;
}

static const char *str(const json_t *o, const char *k)
{
	const char *v = json_string_value(json_object_get(o, k));

	return v ? v : "";
}

/* A node's ranks: their lowest step, summed rate, and the first one's step
 * and wait times. */
static void node_steps(const json_t *rec, double *step, double *rate, double *step_s,
		       double *wait_s)
{
	const json_t *ranks = json_object_get(rec, "ranks"), *r;
	size_t i;

	*step = *rate = *step_s = *wait_s = -1;
	json_array_foreach(ranks, i, r)
	{
		double st = num(r, "step", -1), rt = num(r, "steps_per_s", -1);

		if (st >= 0 && (*step < 0 || st < *step))
			*step = st;
		if (rt >= 0)
			*rate = (*rate < 0 ? 0 : *rate) + rt / (double)json_array_size(ranks);
		if (i == 0) {
			*step_s = num(r, "step_s", -1);
			*wait_s = num(r, "wait_s", -1);
		}
	}
}

static void cell_num(FILE *f, int width, double v, int prec)
{
	if (v < 0)
		fprintf(f, "%*s", width, "-");
	else
		fprintf(f, "%*.*f", width, prec, v);
}

static void render_node(FILE *f, const struct status_node *n, time_t now)
{
	double step, rate, step_s, wait_s;
	int base, nproc;

	if (!n->rec) {
		fprintf(f,
			"  %-4s %-22s %-15s %-10s (no record: the node is gone, or has not "
			"written one yet)\n",
			"-", n->id, n->addr, "gone");
		return;
	}
	base = (int)num(n->rec, "rank_base", 0);
	nproc = (int)num(n->rec, "nproc", n->nproc);
	node_steps(n->rec, &step, &rate, &step_s, &wait_s);
	fprintf(f, "  %-4d %-22s %-15s %-10s %5d-%-5d", (int)num(n->rec, "node_rank", -1), n->id,
		str(n->rec, "addr")[0] ? str(n->rec, "addr") : n->addr, str(n->rec, "state"), base,
		base + nproc - 1);
	cell_num(f, 9, step, 0);
	cell_num(f, 9, rate, 1);
	cell_num(f, 8, step_s, 3);
	cell_num(f, 8, wait_s, 3);
	cell_num(f, 8, num(n->rec, "lost_s", -1), 2);
	fprintf(f, " %5llds ago\n", (long long)(now - (time_t)num(n->rec, "time", (double)now)));
}

/* The rounds after the first that the records name (each node keeps its
 * last three), oldest first, at most five, with why; a re-formation in
 * place adds its wait and the rendezvous' words. */
struct seen_round {
	double time;
	int round, nodes;
	bool in_place;
	const char *reason, *subject, *why;
	double waited;
};

static const json_t *find_reform(const struct status_snap *s, int round)
{
	for (size_t i = 0; i < s->nnodes; i++) {
		const json_t *a = json_object_get(s->nodes[i].rec, "reformations"), *r;
		size_t j;

		json_array_foreach(a, j, r) if ((int)num(r, "round", -1) == round) return r;
	}
	return NULL;
}

static size_t collect_rounds(const struct status_snap *s, struct seen_round *seen, size_t cap)
{
	size_t n = 0;

	for (size_t i = 0; i < s->nnodes; i++) {
		const json_t *a = json_object_get(s->nodes[i].rec, "rounds"), *r;
		size_t j;

		json_array_foreach(a, j, r)
		{
			int round = (int)num(r, "round", -1);
			bool dup = !strcmp(str(r, "reason"), "start");

			for (size_t k = 0; k < n; k++)
				dup |= seen[k].round == round;
			if (dup || n == cap)
				continue;
			seen[n] = (struct seen_round){num(r, "time", 0),
						      round,
						      (int)num(r, "nodes", -1),
						      json_is_true(json_object_get(r, "in_place")),
						      str(r, "reason"),
						      str(r, "subject"),
						      NULL,
						      -1};
			n++;
		}
	}
	for (size_t i = 1; i < n; i++) /* by round */
		for (size_t k = i; k > 0 && seen[k - 1].round > seen[k].round; k--) {
			struct seen_round t = seen[k];

			seen[k] = seen[k - 1];
			seen[k - 1] = t;
		}
	return n;
}

static void render_reforms(FILE *f, const struct status_snap *s)
{
	struct seen_round seen[64];
	size_t n = collect_rounds(s, seen, sizeof(seen) / sizeof(seen[0]));

	fprintf(f, "last re-formations:%s\n", n ? "" : " none");
	for (size_t i = n > 5 ? n - 5 : 0; i < n; i++) {
		const json_t *rf = find_reform(s, seen[i].round);
		char when[32] = "?";
		time_t t = (time_t)seen[i].time;
		struct tm tm;

		if (localtime_r(&t, &tm))
			strftime(when, sizeof(when), "%H:%M:%S", &tm);
		fprintf(f, "  %s  round %d, %d node%s: %s%s%s%s; %s", when, seen[i].round,
			seen[i].nodes, seen[i].nodes == 1 ? "" : "s", seen[i].reason,
			seen[i].subject[0] ? " '" : "", seen[i].subject,
			seen[i].subject[0] ? "'" : "",
			seen[i].in_place ? "the workers re-formed in place"
					 : "the workers started again");
		if (rf)
			fprintf(f, " after %.2f s (%s)", num(rf, "waited_s", 0), str(rf, "why"));
		fputc('\n', f);
	}
}

/* The hangs the nodes' records list, each once (by round, rank and
 * collective), oldest first; the last 5 shown, and how many nodes say so,
 * with who waits on whom as the node that heard the most waiters says. */
struct seen_hang {
	const json_t *h;
	int round, rank;
	double seq, time;
	size_t nodes;
	bool cut;
	const char *waits;
};

static void render_hangs(FILE *f, const struct status_snap *s)
{
	struct seen_hang seen[64];
	size_t n = 0, total = 0;

	for (size_t i = 0; i < s->nnodes; i++) {
		const json_t *a = json_object_get(s->nodes[i].rec, "hangs"), *h;
		double t = num(s->nodes[i].rec, "hangs_total", 0);
		size_t j;

		total = t > total ? (size_t)t : total;
		json_array_foreach(a, j, h)
		{
			int round = (int)num(h, "round", -1), rank = (int)num(h, "rank", -1);
			double seq = num(h, "seq", -1);
			size_t k;

			for (k = 0; k < n; k++)
				if (seen[k].round == round && seen[k].rank == rank &&
				    seen[k].seq == seq)
					break;
			if (k < n) {
				seen[k].nodes++;
				seen[k].cut |= json_is_true(json_object_get(h, "cut"));
				if (strlen(str(h, "waits")) > strlen(seen[k].waits))
					seen[k].waits = str(h, "waits");
				continue;
			}
			if (n == sizeof(seen) / sizeof(seen[0]))
				continue;
			seen[n++] = (struct seen_hang){h,
						       round,
						       rank,
						       seq,
						       num(h, "time", 0),
						       1,
						       json_is_true(json_object_get(h, "cut")),
						       str(h, "waits")};
		}
	}
	for (size_t i = 1; i < n; i++) /* by time */
		for (size_t k = i; k > 0 && seen[k - 1].time > seen[k].time; k--) {
			struct seen_hang t = seen[k];

			seen[k] = seen[k - 1];
			seen[k - 1] = t;
		}
	if (!n) {
		fprintf(f, "hangs named: none\n");
		return;
	}
	fprintf(f, "hangs named: %zu (the last %zu)\n", total > n ? total : n, n > 5 ? 5 : n);
	for (size_t i = n > 5 ? n - 5 : 0; i < n; i++) {
		const json_t *h = seen[i].h;
		char when[32] = "?";
		time_t t = (time_t)seen[i].time;
		struct tm tm;
		const char *phase = str(h, "phase");
		bool in = !strcmp(phase, "collective");

		if (localtime_r(&t, &tm))
			strftime(when, sizeof(when), "%H:%M:%S", &tm);
		fprintf(f, "  %s  round %d: node %d rank %d pid %d ", when, seen[i].round,
			(int)num(h, "node", -1), seen[i].rank, (int)num(h, "pid", 0));
		if (in || !strcmp(phase, "compute"))
			fprintf(f, "has not %s %s #%.0f", in ? "left" : "entered", str(h, "op"),
				seen[i].seq);
		else
			fprintf(f, "stuck in %s", phase);
		fprintf(
		    f, ", %.2f s past its deadline of %.2f s; its process is %s%s (%zu node%s)\n",
		    num(h, "late_s", 0), num(h, "deadline_s", 0), str(h, "state"),
		    seen[i].cut ? "; cut out" : "", seen[i].nodes, seen[i].nodes == 1 ? "" : "s");
		if (seen[i].waits[0])
			fprintf(f, "            who waits on whom (rank>rank): %s\n",
				seen[i].waits);
	}
}

int status_render_text(FILE *f, const struct status_snap *s, time_t now)
{
	const struct rdzv_state *st = &s->st;
	size_t live = 0;

	for (size_t i = 0; i < s->nnodes; i++)
		live += s->nodes[i].rec != NULL;
	fprintf(f, "job '%s' at %s%s%s: %s, round %u (opened because %s%s%s%s)\n", s->run_id,
		s->backend ? s->backend : "", s->backend ? " " : "", s->endpoint,
		status_phase_word(st->phase), st->round, status_reason_text(st->reason),
		st->subject[0] ? ": '" : "", st->subject, st->subject[0] ? "'" : "");
	fprintf(f, "nodes %zu live of %zu in round %u (wants %u", live, s->nnodes, s->world_round,
		st->min_nodes);
	if (st->max_nodes != st->min_nodes)
		fprintf(f, "..%u", st->max_nodes);
	fprintf(f, "), restarts %u of %u\n", st->restarts, st->max_restarts);
	if (st->phase == RDZV_FAILED)
		fprintf(f, "failed: %s\n", st->msg);
	fprintf(f, "\n  %-4s %-22s %-15s %-10s %11s %9s %9s %8s %8s %8s %9s\n", "NODE", "ID",
		"ADDRESS", "STATE", "RANKS", "STEP", "STEPS/S", "STEP_S", "WAIT_S", "LOST_S",
		"UPDATED");
	for (size_t i = 0; i < s->nnodes; i++)
		render_node(f, &s->nodes[i], now);
	fprintf(f, "\n");
	render_reforms(f, s);
	render_hangs(f, s);
	return ferror(f) ? -EIO : 0;
}

int status_render_json(FILE *f, const struct status_snap *s)
{
	json_t *nodes = json_array();
	json_t *o = json_pack(
	    "{s:s, s:s, s:s, s:i, s:s, s:s, s:i, s:i, s:i, s:i, s:s, s:i}", "run_id", s->run_id,
	    "endpoint", s->endpoint, "phase", status_phase_word(s->st.phase), "round",
	    (int)s->st.round, "reason", status_reason_text(s->st.reason), "subject", s->st.subject,
	    "nodes_min", (int)s->st.min_nodes, "nodes_max", (int)s->st.max_nodes, "restarts",
	    (int)s->st.restarts, "max_restarts", (int)s->st.max_restarts, "message", s->st.msg,
	    "world_round", (int)s->world_round);
	int rc = -EIO;

	if (!o || !nodes)
		goto out;
	for (size_t i = 0; i < s->nnodes; i++) {
		const struct status_node *n = &s->nodes[i];

		json_array_append_new(nodes, json_pack("{s:s, s:s, s:i, s:O}", "id", n->id, "addr",
						       n->addr, "nproc", (int)n->nproc, "record",
						       n->rec ? n->rec : json_null()));
	}
	json_object_set_new(o, "backend", json_string(s->backend ? s->backend : "store"));
	json_object_set(o, "nodes", nodes);
	if (json_dumpf(o, f, JSON_INDENT(1) | JSON_REAL_PRECISION(6)) == 0 && fputc('\n', f) != EOF)
		rc = 0;
out:
	json_decref(nodes);
	json_decref(o);
	return rc;
}
