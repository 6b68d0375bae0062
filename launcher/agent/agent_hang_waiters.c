/* Who waits on whom, said by every node (agent_hang.h). */
#include "agent_hang.h"

#include "hang_waiters.h"
#include "rdzv.h"
#include "summary.h"
#include "timeutil.h"
#include "worker_proc.h"

#include <errno.h>
#include <inttypes.h>
#include <log.h>
#include <stdio.h>
#include <string.h>

/* Whether (ref, node)'s line was printed here; marks it so. */
static bool said(struct agent_hang *h, const struct hang_ref *ref, int node)
{
	struct agent_hang_waiters *s = &h->waiters;
	int k = s->n % AGENT_HANG_WAITERS_SEEN;

	for (int i = 0; i < s->n && i < AGENT_HANG_WAITERS_SEEN; i++)
		if (s->seen[i].round == ref->round && s->seen[i].rank == ref->rank &&
		    s->seen[i].seq == ref->seq && s->seen[i].node == node)
			return true;
	s->seen[k].round = ref->round;
	s->seen[k].rank = ref->rank;
	s->seen[k].seq = ref->seq;
	s->seen[k].node = node;
	s->n++;
	return false;
}

/* Prints node's waiters of ref and adds them to the hang's record. */
static void say(struct agent_hang *h, const struct hang_ref *ref, int node,
		const struct hang_waiter *w, int n)
{
	struct summary_waiter sw[HANG_WAITERS_MAX];
	char line[RDZV_POST_MAX + 512];
	int rc;

	if (said(h, ref, node))
		return;
	hang_waiters_line(ref, node, w, n, line, sizeof(line));
	log_error("%s", line);
	for (int i = 0; i < n; i++) {
		sw[i] = (struct summary_waiter){
		    .node = node,
		    .rank = w[i].rank,
		    .waits_on = w[i].waits_on,
		    .seq = w[i].seq,
		    .for_s = w[i].for_ms / 1e3,
		};
		snprintf(sw[i].state, sizeof(sw[i].state), "%s",
			 hang_waiter_state_name(w[i].state));
		snprintf(sw[i].op, sizeof(sw[i].op), "%s", hang_op_name(w[i].op));
		snprintf(sw[i].phase, sizeof(sw[i].phase), "%s", hang_phase_name(w[i].phase));
	}
	rc = summary_add_waiters(h->host.summary, ref->round, ref->rank, ref->seq, node, sw,
				 (size_t)n);
	if (rc == -ENOMEM)
		log_error("out of memory while recording a hang's waiters");
	else if (rc)
		log_debug("waiters of hang %d.%d.%" PRIu64 ": no such hang recorded here",
			  ref->round, ref->rank, ref->seq);
	else
		h->host.recorded(h->host.arg);
}

void agent_hang_waiters_tell(struct agent_hang *h, const struct summary_hang *sh)
{
	struct hang_waiter w[HANG_WAITERS_MAX];
	struct hang_ref ref = {.round = sh->round, .rank = sh->rank, .seq = sh->seq};
	char notice[RDZV_POST_MAX + 1];
	int node = h->host.round->group_rank, n = 0;
	uint64_t now = time_now_ns();
	/* The pages as the watch last read them (within a tick: the workers'
	 * state when the hang was named, before the cut moved them); read now
	 * when that read is old (this agent was stopped, or never read them). */
	bool stale =
	    !h->last_tick_ns || now - h->last_tick_ns > 2ull * AGENT_HANG_TICK_MS * 1000000u;

	for (int i = 0; h->t && i < h->host.nproc && n < HANG_WAITERS_MAX; i++) {
		const struct agent_hang_track *t = &h->t[i];
		struct agent_hang_worker aw = agent_hang_worker_of(h, i);
		struct ddp_progress fresh;
		const struct ddp_progress *cur = t->have ? &t->page : NULL;

		if ((node == sh->node && aw.rank == sh->rank) || (!aw.proc->running && !t->have))
			continue; /* the culprit; a slot with no process */
		if (stale && aw.proc->running && worker_proc_progress(aw.proc, &fresh) == 0)
			cur = &fresh;
		w[n++] = hang_waiter_of(aw.rank, cur, t->inside_ns ? &t->inside : NULL,
					t->inside_ns, sh->round, sh->seq, now);
	}
	if (!n)
		return;
	say(h, &ref, node, w, n);
	if (hang_waiters_encode(&ref, node, w, n, notice, sizeof(notice)) >= 0)
		rdzv_post(h->host.rdzv, notice); /* one node: no one else to tell */
}

bool agent_hang_waiters_heard(struct agent_hang *h, const char *text)
{
	struct hang_waiter w[HANG_WAITERS_MAX];
	struct hang_ref ref;
	int node, n = hang_waiters_decode(text, &ref, &node, w, HANG_WAITERS_MAX);

	if (n == -ENOENT)
		return false;
	if (n < 0)
		log_debug("a waiters notice this agent cannot read: %s", text);
	else
		say(h, &ref, node, w, n);
	return true;
}

static double secs_since(uint64_t now, uint64_t then)
{
	return then && now > then ? (now - then) / 1e9 : 0;
}

void agent_hang_waiters_append(struct agent_hang *h, uint64_t now, int except, char *line,
			       size_t len)
{
	size_t n = strlen(line);

	for (int i = 0; i < h->host.nproc && n < len; i++) {
		const struct agent_hang_track *t = &h->t[i];
		int k;

		if (i == except || !t->have || t->page.phase != DDP_PHASE_COLLECTIVE)
			continue;
		if (t->page.waiting_on >= 0)
			k = snprintf(line + n, len - n,
				     "; rank %d waits on rank %d in %s #%" PRIu64 " for %.2f s",
				     agent_hang_worker_of(h, i).rank, t->page.waiting_on,
				     hang_op_name(t->page.op), t->page.seq,
				     secs_since(now, t->page.entered_ns));
		else
			k = snprintf(line + n, len - n,
				     "; rank %d waits in %s #%" PRIu64 " for %.2f s",
				     agent_hang_worker_of(h, i).rank, hang_op_name(t->page.op),
				     t->page.seq, secs_since(now, t->page.entered_ns));
		if (k < 0)
			break;
		n += (size_t)k;
	}
}
