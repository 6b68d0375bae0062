/* The hangs of the summary (summary.h): recorded, printed, in the JSON. */
#include "summary.h"

#include <errno.h>
#include <jansson.h>
#include <log.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int summary_add_hang(struct summary *s, const struct summary_hang *h)
{
	struct summary_hang *v = realloc(s->hangs, (s->nhangs + 1) * sizeof(*v));

	if (!v)
		return -ENOMEM;
	s->hangs = v;
	v[s->nhangs] = *h;
	v[s->nhangs].waiters = NULL;
	v[s->nhangs++].nwaiters = 0;
	return 0;
}

/* The hang (round, rank, seq) last recorded, or NULL. */
static struct summary_hang *find_hang(struct summary *s, int round, int rank, uint64_t seq)
{
	for (size_t i = s->nhangs; i-- > 0;)
		if (s->hangs[i].round == round && s->hangs[i].rank == rank &&
		    s->hangs[i].seq == seq)
			return &s->hangs[i];
	return NULL;
}

int summary_add_waiters(struct summary *s, int round, int rank, uint64_t seq, int node,
			const struct summary_waiter *w, size_t n)
{
	struct summary_hang *h = find_hang(s, round, rank, seq);
	struct summary_waiter *v;
	size_t kept = 0;

	if (!h)
		return -ENOENT;
	for (size_t i = 0; i < h->nwaiters; i++) /* what node said before goes */
		if (h->waiters[i].node != node)
			h->waiters[kept++] = h->waiters[i];
	h->nwaiters = kept;
	if (!n)
		return 0;
	v = realloc(h->waiters, (kept + n) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	memcpy(v + kept, w, n * sizeof(*v));
	h->waiters = v;
	h->nwaiters = kept + n;
	return 0;
}

static bool waiting(const char *state)
{
	return !strcmp(state, "waits") || !strcmp(state, "waited") || !strcmp(state, "past") ||
	       !strcmp(state, "behind");
}

static int by_rank(const void *a, const void *b)
{
	const struct summary_waiter *x = *(const struct summary_waiter *const *)a;
	const struct summary_waiter *y = *(const struct summary_waiter *const *)b;

	return (x->rank > y->rank) - (x->rank < y->rank);
}

void summary_hang_waits(const struct summary_hang *h, size_t max, char *buf, size_t len)
{
	const struct summary_waiter **w = calloc(max ? max : 1, sizeof(*w));
	size_t n = 0, pos = 0;

	if (len)
		buf[0] = '\0';
	if (!w)
		return;
	for (size_t i = 0; i < h->nwaiters && n < max; i++)
		if (waiting(h->waiters[i].state))
			w[n++] = &h->waiters[i];
	qsort(w, n, sizeof(w[0]), by_rank);
	for (size_t i = 0; i < n && pos < len; i++) {
		int k = w[i]->waits_on >= 0
			    ? snprintf(buf + pos, len - pos, "%s%d>%d", i ? " " : "", w[i]->rank,
				       w[i]->waits_on)
			    : snprintf(buf + pos, len - pos, "%s%d>?", i ? " " : "", w[i]->rank);

		pos += k > 0 ? (size_t)k : 0;
	}
	free(w);
}

void summary_print_hangs(const struct summary *s)
{
	char waits[2048];

	if (s->nhangs)
		log_info("%zu hang(s) named:", s->nhangs);
	for (size_t i = 0; i < s->nhangs; i++) {
		log_info("  %s%s", s->hangs[i].line, s->hangs[i].cut ? " [cut out here]" : "");
		summary_hang_waits(&s->hangs[i], 256, waits, sizeof(waits));
		if (waits[0])
			log_info("    who waits on whom (rank>rank): %s", waits);
	}
}

static json_t *waiter_json(const struct summary_waiter *w)
{
	return json_pack("{s:i, s:i, s:s, s:o, s:s, s:I, s:f, s:s}", "node", w->node, "rank",
			 w->rank, "state", w->state, "waits_on",
			 w->waits_on >= 0 ? json_integer(w->waits_on) : json_null(), "op", w->op,
			 "seq", (json_int_t)w->seq, "for_s", w->for_s, "phase", w->phase);
}

static json_t *hang_json(const struct summary_hang *h)
{
	json_t *ws = json_array();

	for (size_t i = 0; ws && i < h->nwaiters; i++)
		if (json_array_append_new(ws, waiter_json(&h->waiters[i]))) {
			json_decref(ws);
			return NULL;
		}
	if (!ws)
		return NULL;
	return json_pack("{s:f, s:i, s:i, s:i, s:i, s:s, s:s, s:I, s:f, s:f, s:s, s:b, s:b, s:s, "
			 "s:o}",
			 "time", h->time_ms / 1000.0, "round", h->round, "node", h->node, "rank",
			 h->rank, "pid", h->pid, "phase", h->phase, "op", h->op, "seq",
			 (json_int_t)h->seq, "late_s", h->late_s, "deadline_s", h->deadline_s,
			 "state", h->state, "named_here", h->named_here, "cut", h->cut, "line",
			 h->line, "waiters", ws);
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
