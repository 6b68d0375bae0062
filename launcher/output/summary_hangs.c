/* The hangs of the summary (summary.h): recorded, printed, in the JSON. */
#include "summary.h"

#include <errno.h>
#include <jansson.h>
#include <log.h>
#include <stdlib.h>

int summary_add_hang(struct summary *s, const struct summary_hang *h)
{
	struct summary_hang *v = realloc(s->hangs, (s->nhangs + 1) * sizeof(*v));

	if (!v)
		return -ENOMEM;
	s->hangs = v;
	v[s->nhangs++] = *h;
	return 0;
}

void summary_print_hangs(const struct summary *s)
{
	if (s->nhangs)
		log_info("%zu hang(s) named:", s->nhangs);
	for (size_t i = 0; i < s->nhangs; i++)
		log_info("  %s%s", s->hangs[i].line, s->hangs[i].cut ? " [cut out here]" : "");
}

static json_t *hang_json(const struct summary_hang *h)
{
	return json_pack("{s:f, s:i, s:i, s:i, s:i, s:s, s:s, s:I, s:f, s:f, s:s, s:b, s:b, s:s}",
			 "time", h->time_ms / 1000.0, "round", h->round, "node", h->node, "rank",
			 h->rank, "pid", h->pid, "phase", h->phase, "op", h->op, "seq",
			 (json_int_t)h->seq, "late_s", h->late_s, "deadline_s", h->deadline_s,
			 "state", h->state, "named_here", h->named_here, "cut", h->cut, "line",
			 h->line);
}

int summary_hangs_json(const struct summary *s, json_t *root)
{
	json_t *a = json_array();

	if (!a)
		return -ENOMEM;
	for (size_t i = 0; i < s->nhangs; i++)
		if (json_array_append_new(a, hang_json(&s->hangs[i]))) {
			json_decref(a);
			return -ENOMEM;
		}
	return json_object_set_new(root, "hangs", a) ? -ENOMEM : 0;
}
