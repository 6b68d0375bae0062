/*
 * summary_stragglers.c - the ranks named slow (summary.h): each told by
 * every worker of every node, kept once, said once, listed in
 * summary.json and counted for /metrics.
 */
#include "summary.h"

#include "log.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

const char *summary_cause_name(int cause)
{
	return cause == 1 ? "compute" : cause == 2 ? "link" : "none";
}

/* Whether k is among the last lines; if not, it is remembered. */
static bool straggler_repeat(struct summary *s, const struct summary_straggler_key *k)
{
	size_t n = s->nstragglers_recent < SUMMARY_STRAGGLERS_RECENT ? s->nstragglers_recent
								     : SUMMARY_STRAGGLERS_RECENT;

	for (size_t i = 0; i < n; i++) {
		const struct summary_straggler_key *o = &s->stragglers_recent[i];

		if (o->step == k->step && o->rank == k->rank && o->cause == k->cause)
			return true;
	}
	s->stragglers_recent[s->nstragglers_recent++ % SUMMARY_STRAGGLERS_RECENT] = *k;
	return false;
}

/* The rank's open entry (named, not cleared), or NULL. */
static struct summary_straggler *open_entry(struct summary *s, int rank)
{
	for (size_t i = s->nstragglers; i-- > 0;)
		if (s->stragglers[i].rank == rank && s->stragglers[i].cleared_step < 0)
			return &s->stragglers[i];
	return NULL;
}

int summary_add_straggler(struct summary *s, const struct summary_straggler *g)
{
	struct summary_straggler_key k = {.step = g->step, .rank = g->rank, .cause = g->cause};
	struct summary_straggler *open, *v;

	if (g->cause < 0 || g->cause > 2)
		return -EINVAL;
	if (straggler_repeat(s, &k))
		return 0;
	open = open_entry(s, g->rank);
	if (open)
		open->cleared_step = g->step;
	if (g->cause == 0) {
		if (open) /* one kept: said; past the cap, counted quietly */
			log_info(
			    "straggler: rank %d (node %d) is no longer slower (%.2fx) from step %d",
			    g->rank, g->node, g->slower, g->step);
		return 1;
	}
	s->stragglers_named[g->cause]++;
	if (s->nstragglers >= SUMMARY_STRAGGLERS_MAX) {
		if (s->stragglers_more++ == 0)
			log_warn("more stragglers were named than the %d listed: the rest are "
				 "counted in summary.json's stragglers_more (each is in rank 0's "
				 "--metrics_file)",
				 SUMMARY_STRAGGLERS_MAX);
		return 1;
	}
	v = realloc(s->stragglers, (s->nstragglers + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	s->stragglers = v;
	log_warn("straggler: rank %d (node %d) was named %.2fx slower than the others (%s) at "
		 "step %d",
		 g->rank, g->node, g->slower, summary_cause_name(g->cause), g->step);
	v[s->nstragglers] = *g;
	v[s->nstragglers++].cleared_step = -1;
	return 1;
}

void summary_print_stragglers(const struct summary *s)
{
	char line[1024];
	size_t n = 0;

	if (!s->nstragglers)
		return;
	for (size_t i = 0; i < s->nstragglers && n < sizeof(line); i++) {
		const struct summary_straggler *g = &s->stragglers[i];
		char to[24];

		if (g->cleared_step >= 0)
			snprintf(to, sizeof(to), "%d", g->cleared_step);
		else
			snprintf(to, sizeof(to), "the end");
		n += (size_t)snprintf(line + n, sizeof(line) - n,
				      "%srank %d (node %d, %.2fx, %s, steps %d to %s)",
				      i ? "; " : "", g->rank, g->node, g->slower,
				      summary_cause_name(g->cause), g->step, to);
	}
	log_info("stragglers: %s%s", line,
		 s->stragglers_more ? " (and more: summary.json's stragglers_more)" : "");
}

int summary_stragglers_json(const struct summary *s, json_t *root)
{
	json_t *a = json_array();

	if (!a)
		return -ENOMEM;
	for (size_t i = 0; i < s->nstragglers; i++) {
		const struct summary_straggler *g = &s->stragglers[i];

		if (json_array_append_new(a, json_pack("{s:i, s:i, s:i, s:s, s:f, s:o}", "step",
						       g->step, "rank", g->rank, "node", g->node,
						       "cause", summary_cause_name(g->cause),
						       "slower", g->slower, "cleared_step",
						       g->cleared_step < 0
							   ? json_null()
							   : json_integer(g->cleared_step)))) {
			json_decref(a);
			return -ENOMEM;
		}
	}
	if (json_object_set_new(root, "stragglers", a))
		return -ENOMEM;
	return json_object_set_new(root, "stragglers_more",
				   json_integer((json_int_t)s->stragglers_more))
		   ? -ENOMEM
		   : 0;
}
