/*
 * summary_replicas.c - the replicas that differed (summary.h): each told by
 * every worker that saw it, kept once, said once, listed in summary.json.
 */
#include "summary.h"

#include "log.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* Whether k is among the last reports; if not, it is remembered. */
static bool replica_repeat(struct summary *s, const struct summary_replica_key *k)
{
	size_t n = s->nrecent < SUMMARY_REPLICAS_RECENT ? s->nrecent : SUMMARY_REPLICAS_RECENT;

	for (size_t i = 0; i < n; i++) {
		const struct summary_replica_key *o = &s->replicas_recent[i];

		if (o->step == k->step && o->rank == k->rank && o->healed == k->healed)
			return true;
	}
	s->replicas_recent[s->nrecent++ % SUMMARY_REPLICAS_RECENT] = *k;
	return false;
}

int summary_add_replica(struct summary *s, const struct summary_replica *r)
{
	struct summary_replica_key k = {.step = r->step, .rank = r->rank, .healed = r->healed};
	struct summary_replica *v;

	if (replica_repeat(s, &k))
		return 0;
	if (s->nreplicas >= SUMMARY_REPLICAS_MAX) {
		if (s->replicas_more++ == 0)
			log_warn(
			    "more replicas differed than the %d listed: the rest are counted in "
			    "summary.json's replicas_more (each is in rank 0's --metrics_file); "
			    "a replica that differs again and again points at that node's memory "
			    "or CPU",
			    SUMMARY_REPLICAS_MAX);
		return 1;
	}
	v = realloc(s->replicas, (s->nreplicas + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	s->replicas = v;
	v[s->nreplicas++] = *r;
	v[s->nreplicas - 1].tensor[sizeof(r->tensor) - 1] = '\0';
	if (r->healed)
		log_warn("rank %d's replica differed from the majority's after step %d (first in "
			 "'%s'): healed in place from the majority's memory",
			 r->rank, r->step, r->tensor);
	else
		log_error("rank %d's replica differed after step %d (first in '%s') and no "
			  "majority could tell the good one: the workers stopped",
			  r->rank, r->step, r->tensor);
	return 1;
}

int summary_replicas_json(const struct summary *s, json_t *root)
{
	json_t *a = json_array();

	if (!a)
		return -ENOMEM;
	for (size_t i = 0; i < s->nreplicas; i++) {
		const struct summary_replica *r = &s->replicas[i];

		if (json_array_append_new(a,
					  json_pack("{s:i, s:i, s:s, s:s}", "step", r->step, "rank",
						    r->rank, "tensor", r->tensor, "action",
						    r->healed ? "healed" : "stopped"))) {
			json_decref(a);
			return -ENOMEM;
		}
	}
	if (json_object_set_new(root, "replicas", a))
		return -ENOMEM;
	return json_object_set_new(root, "replicas_more",
				   json_integer((json_int_t)s->replicas_more))
		   ? -ENOMEM
		   : 0;
}
