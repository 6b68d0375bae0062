/* The hang watch's learning from the pages it reads (agent_hang.h). */
#include "agent_hang.h"

#include "timeutil.h"

static bool phase_is_long(uint32_t phase)
{
	return phase != DDP_PHASE_NONE && phase != DDP_PHASE_COMPUTE &&
	       phase != DDP_PHASE_COLLECTIVE && phase < DDP_PHASE_COUNT;
}

/* Where a page says its worker is: no sample is taken of a place judged
 * late, and a hang is named once per place. */
uint64_t agent_hang_place(const struct ddp_progress *p)
{
	return ((uint64_t)(uint32_t)p->round << 48) ^ (p->seq << 4) ^ p->phase;
}

/* ---- learning from the pages ---- */

static void learn_step(struct hang_deadline *dl, struct agent_hang_track *t,
		       const struct ddp_progress *p)
{
	if (p->step <= t->step)
		return;
	/* The first step seen carries the start-up's costs, and a step after a
	 * hang its wait: neither is a sample. */
	if (t->step && !t->skip_step && p->step_ns) {
		hang_deadline_add(dl, DDP_PHASE_COMPUTE, DDP_OP_NONE, p->compute_ns);
		hang_deadline_add(dl, DDP_PHASE_COLLECTIVE, DDP_OP_NONE, p->wait_ns);
	}
	t->skip_step = false;
	t->step = p->step;
}

/* Collectives from the pages as read every tick (a collective lasts a few
 * ms, a tick 100: most are never seen, some are seen inside):
 *   - the one seen inside at an earlier read has finished since: its
 *     duration when it alone finished (exact), else the mean of the span
 *     from its entry to the last one's exit over the collectives in it;
 *   - the one it is in now: the gap before it (its entry minus its
 *     predecessor's exit, which the page still holds), exact;
 *   - the one seen finished, outside any: its duration, exact.
 * Places judged late are no samples; collectives outside COMPUTE (a
 * checkpoint's barrier) neither. */
static void learn_collective(struct hang_deadline *dl, struct agent_hang_track *t,
			     const struct ddp_progress *p)
{
	bool inside = p->seq && p->left_ns < p->entered_ns;
	bool late = agent_hang_place(p) == t->late_key;

	if (t->in_seq && p->seq >= t->in_seq && !(inside && p->seq == t->in_seq)) {
		uint64_t done = inside ? p->seq - 1 : p->seq;

		if (done >= t->in_seq && p->left_ns >= t->in_entered && !t->in_late)
			hang_deadline_add(dl, DDP_PHASE_COLLECTIVE, (enum ddp_progress_op)t->in_op,
					  (p->left_ns - t->in_entered) / (done - t->in_seq + 1));
		t->in_seq = 0;
		t->done_seq = done;
	}
	/* Seen outside after collective out_seq (it had left it at out_left):
	 * the time from there to the entry of the one on the page now, per
	 * collective between (exact when it is the next one). */
	if (t->out_seq && p->seq > t->out_seq && p->seq != t->gap_seq &&
	    p->entered_ns > t->out_left && !late) {
		hang_deadline_add(dl, DDP_PHASE_COMPUTE, DDP_OP_NONE,
				  (p->entered_ns - t->out_left) / (p->seq - t->out_seq));
		t->gap_seq = p->seq;
	}
	t->out_seq = !inside && p->seq && p->phase == DDP_PHASE_COMPUTE ? p->seq : 0;
	t->out_left = p->left_ns;
	/* Seen finished, outside: its duration is on the page. */
	if (!inside && p->seq && p->seq != t->done_seq && !late &&
	    (p->phase == DDP_PHASE_COMPUTE || p->phase == DDP_PHASE_COLLECTIVE)) {
		hang_deadline_add(dl, DDP_PHASE_COLLECTIVE, (enum ddp_progress_op)p->op,
				  p->left_ns - p->entered_ns);
		t->done_seq = p->seq;
	}
	if (!inside || p->phase != DDP_PHASE_COLLECTIVE)
		return;
	if (p->seq != t->gap_seq) {
		if (p->seq > 1 && p->left_ns && p->entered_ns > p->left_ns && !late)
			hang_deadline_add(dl, DDP_PHASE_COMPUTE, DDP_OP_NONE,
					  p->entered_ns - p->left_ns);
		t->gap_seq = p->seq;
	}
	if (p->seq != t->in_seq) {
		t->in_seq = p->seq;
		t->in_entered = p->entered_ns;
		t->in_op = p->op;
		t->in_late = false;
	}
	if (late)
		t->in_late = true;
}

static void learn_phase(struct hang_deadline *dl, struct agent_hang_track *t,
			const struct ddp_progress *p)
{
	if (p->phase == t->phase)
		return;
	if (phase_is_long(t->phase) && p->phase_ns > t->phase_ns && t->phase_ns)
		hang_deadline_add(dl, (enum ddp_progress_phase)t->phase, DDP_OP_NONE,
				  p->phase_ns - t->phase_ns);
	t->phase = p->phase;
	t->phase_ns = p->phase_ns;
}

void agent_hang_learn(struct agent_hang *h, struct agent_hang_track *t,
		      const struct ddp_progress *p)
{
	if (t->have && p->round != t->page.round) {
		/* A new round: its collectives count from 1 again. */
		t->in_seq = t->gap_seq = t->done_seq = t->out_seq = 0;
		t->skip_step = true;
	}
	if (!t->have) {
		t->phase = p->phase;
		t->phase_ns = p->phase_ns;
	}
	learn_step(&h->dl, t, p);
	learn_collective(&h->dl, t, p);
	learn_phase(&h->dl, t, p);
	t->page = *p;
	t->have = true;
	if (p->seq && p->left_ns < p->entered_ns) {
		t->inside = *p;
		t->inside_ns = time_now_ns();
	}
}
