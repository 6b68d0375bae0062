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

int summary_add_replica(struct summary *s, const struct summary_replica *r)
{
	struct summary_replica *v;

	for (size_t i = 0; i < s->nreplicas; i++)
		if (s->replicas[i].step == r->step && s->replicas[i].rank == r->rank &&
		    s->replicas[i].healed == r->healed)
			return 0;
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

int summary_replicas_json(const struct summary *s, void *root)
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
	return json_object_set_new(root, "replicas", a) ? -ENOMEM : 0;
}
