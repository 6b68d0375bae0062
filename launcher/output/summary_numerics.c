/*
 * summary_numerics.c - summary.json's "numerics": what became of the job's
 * promise of a 1-rank run's bits, as this node's workers said it on the
 * agent channel (ddp-train's numeric identity: worker/train/numerics.h).
 */
#include "summary.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>

void summary_note_numerics(struct summary *s, int rank, enum summary_promise promise,
			   const char *text)
{
	struct summary_numerics *n = &s->numerics;

	/* The worst one heard: refused over dropped over kept. */
	if (promise <= n->promise)
		return;
	n->promise = promise;
	n->rank = rank;
	snprintf(n->text, sizeof(n->text), "%s", text ? text : "");
}

int summary_numerics_json(const struct summary *s, json_t *root)
{
	static const char *const words[] = {NULL, "kept", "dropped", "refused"};
	const struct summary_numerics *n = &s->numerics;
	json_t *v;

	if (n->promise == SUMMARY_PROMISE_NONE)
		v = json_null();
	else
		v = json_pack("{s:s, s:i, s:s}", "promise", words[n->promise], "rank", n->rank,
			      n->promise == SUMMARY_PROMISE_KEPT ? "identity" : "why", n->text);
	if (!v)
		return -ENOMEM;
	return json_object_set_new(root, "numerics", v) ? -ENOMEM : 0;
}
