/*
 * agent_inplace.c - the bookkeeping of workers resized in place
 * (agent_int.h): the re-formation being made, the workers replaced alone,
 * the round handed out, the round kept. What happens when, and why, is the
 * machine's (agent.c, agent_machine_workers.c) and its decisions'
 * (agent_decide.h); this file calls only the workers' mechanics
 * (agent_workers.c).
 */
#include "agent_int.h"
#include "rdzv.h"
#include "worker_proc.h"

#include <log.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <timeutil.h>

void agent_inplace_begin(struct agent *ag, const char *why)
{
	agent_metrics_lost(ag);
	if (ag->inplace_since_ns)
		return; /* a worker replaced alone began it */
	ag->inplace_since_ns = (int64_t)time_now_ns();
	ag->reform.time_ms = (int64_t)time(NULL) * 1000;
	snprintf(ag->reform.why, sizeof(ag->reform.why), "%s", why);
}

void agent_inplace_prepare(struct agent *ag)
{
	for (int i = 0; i < ag->nproc; i++) {
		struct agent_worker *w = &ag->w[i];
		struct agent_worker_view v = agent_worker_view(w);

		if (w->state == AGENT_W_RESPAWN) {
			w->state = AGENT_W_REPLACING; /* starts in the round now joined */
			continue;
		}
		if (agent_decide_in_round(&v) != AGENT_IN_ROUND_STARTS ||
		    w->state != AGENT_W_RUNNING)
			continue;
		log_info("rank %d (local rank %d): its replacement has not said it re-forms yet; "
			 "it starts again in the next round (no restart is counted for it)",
			 w->rank, w->local_rank);
		w->state = AGENT_W_REPLACING;
		worker_proc_kill_group(&w->proc);
	}
}

/* Whether a local worker other than w re-forms in the next round: then
 * this node still has workers in it without w. */
static bool agent_inplace_others_stay(const struct agent *ag, const struct agent_worker *w)
{
	for (int i = 0; i < ag->nproc; i++) {
		struct agent_worker_view v = agent_worker_view(&ag->w[i]);

		if (&ag->w[i] != w && agent_decide_in_round(&v) == AGENT_IN_ROUND_HANDED)
			return true;
	}
	return false;
}

void agent_inplace_replace(struct agent *ag, struct agent_worker *w, const char *how)
{
	char why[sizeof(ag->reform.why)];

	ag->nreplaced++;
	w->state = AGENT_W_REPLACING;
	w->early = ag->can_shrink && agent_inplace_others_stay(ag, w);
	worker_proc_kill_group(&w->proc); /* what it left behind */
	snprintf(why, sizeof(why), "rank %d (pid %d) %s; replaced alone", w->rank,
		 w->proc.pid > 0 ? w->proc.pid : w->proc.shim_pid, how);
	agent_inplace_begin(ag, why);
	if (w->early)
		log_warn("rank %d (local rank %d) %s; replacing it alone: the other workers stay "
			 "and re-form in place without it now, and its new process joins a later "
			 "round once it is ready (replacement %d of %d on this node, "
			 "--max_restarts)",
			 w->rank, w->local_rank, how, ag->nreplaced, ag->o->max_restarts);
	else
		log_warn("rank %d (local rank %d) %s; replacing it alone: the other workers stay "
			 "and re-form in place with the new process (replacement %d of %d on this "
			 "node, --max_restarts)",
			 w->rank, w->local_rank, how, ag->nreplaced, ag->o->max_restarts);
}

/* Marks the workers the next round counts; their number. */
static int agent_inplace_mark(struct agent *ag)
{
	int n = 0;

	for (int i = 0; i < ag->nproc; i++) {
		struct agent_worker *w = &ag->w[i];
		struct agent_worker_view v = agent_worker_view(w);
		enum agent_in_round c = agent_decide_in_round(&v);

		w->counted = c == AGENT_IN_ROUND_HANDED || c == AGENT_IN_ROUND_STARTS;
		n += w->counted;
	}
	return n;
}

int agent_inplace_count(struct agent *ag)
{
	int n = agent_inplace_mark(ag);

	if (n == 0) {
		/* Nothing of this node would be in the round (its last re-forming
		 * worker died too): its replacements start in it, as on one
		 * node. */
		for (int i = 0; i < ag->nproc; i++) {
			struct agent_worker *w = &ag->w[i];

			w->early = false;
			if (w->state == AGENT_W_AWAITING) {
				w->state = AGENT_W_REPLACING; /* killed: starts in the round */
				worker_proc_kill_group(&w->proc);
			}
		}
		n = agent_inplace_mark(ag);
	}
	if (n > 0 && ag->can_shrink && rdzv_set_nproc(ag->rdzv, n) < 0)
		log_error("cannot count %d worker(s) of this node in the next round", n);
	return n;
}

bool agent_inplace_ready(const struct agent *ag)
{
	for (int i = 0; i < ag->nproc; i++) {
		const struct agent_worker *w = &ag->w[i];

		if (w->state == AGENT_W_AWAITING && w->proc.resizable && w->proc.running)
			return true;
	}
	return false;
}

/* Records the re-formation into round r, of which `replaced` workers were
 * replaced alone, `joined` came from outside the rounds, `outside` stay
 * out of it for now. */
static void agent_inplace_record(struct agent *ag, const struct rdzv_round *r, int replaced,
				 int joined, int outside)
{
	ag->nreform++;
	ag->reform.round = r->round;
	ag->reform.world_after = r->world_size;
	ag->reform.nodes_after = r->group_world_size;
	/* its replacements in the round: started in it, or joining it */
	ag->reform.replaced = replaced + joined;
	ag->reform.waited_s = ((int64_t)time_now_ns() - ag->inplace_since_ns) / 1e9;
	ag->inplace_since_ns = 0;
	if (summary_add_reform(&ag->summary, &ag->reform))
		log_error("out of memory while recording re-formation %d", ag->nreform);
	log_info("round %d: %d worker(s) of this node re-form in place as ranks %d-%d of %d "
		 "(%d of them replaced alone, %d joining from outside the rounds, %d outside "
		 "until ready; waited %.3f s; no restart, re-formation %d)",
		 r->round, ag->round_local, r->rank_base, r->rank_base + ag->round_local - 1,
		 r->world_size, replaced, joined, outside, ag->reform.waited_s, ag->nreform);
}

int agent_inplace_hand_out(struct agent *ag, const struct rdzv_round *r)
{
	int failed = 0, replaced = 0, joined = 0, outside = 0, pos = 0;

	ag->reform.world_before = ag->round.world_size;
	ag->round = *r;
	for (int i = 0; i < ag->nproc; i++)
		pos += ag->w[i].counted;
	if (r->local_procs && r->local_procs != pos)
		log_error("round %d counts %d worker(s) of this node, but %d were counted when it "
			  "was joined",
			  r->round, r->local_procs, pos);
	ag->round_local = pos;
	pos = 0;
	for (int i = 0; i < ag->nproc; i++) {
		struct agent_worker *w = &ag->w[i];

		if (!w->counted) {
			outside++; /* replaced early, or starting: a later round */
			continue;
		}
		/* Global ranks in local-rank order over the workers in the
		 * round; LOCAL_RANK stays the worker's (its device). */
		w->rank = r->rank_base + pos++;
		if (w->state == AGENT_W_REPLACING) {
			/* Counted, then died (or not early): it starts in r. */
			w->early = false;
			w->state = AGENT_W_RESPAWN;
			replaced++;
			continue;
		}
		if (w->state == AGENT_W_AWAITING) {
			w->state = AGENT_W_RUNNING; /* it joins the others in r */
			w->early = false;
			joined++;
		}
		agent_worker_reprefix(w);
		if (!w->proc.running)
			continue; /* finished (a failure would have stopped the group) */
		if (agent_worker_send_round(w, r) < 0)
			failed++;
	}
	agent_inplace_record(ag, r, replaced, joined, outside);
	return failed;
}

int agent_inplace_release(struct agent *ag)
{
	int n = 0;

	for (int i = 0; i < ag->nproc; i++) {
		struct agent_worker *w = &ag->w[i];

		if (w->state == AGENT_W_REPLACING && w->early) {
			w->state = AGENT_W_EXITED;
			w->early = false;
			n++;
		} else if (w->state == AGENT_W_AWAITING && w->proc.running) {
			w->stopped = true;
			worker_proc_kill_group(&w->proc);
			n++;
		}
	}
	if (n)
		log_info("this node's workers finished the job: %d replacement(s) waiting outside "
			 "the rounds are not needed and end",
			 n);
	return n;
}

void agent_keep_round(struct agent *ag, const struct rdzv_round *r)
{
	ag->kept = *r;
	snprintf(ag->kept_master, sizeof(ag->kept_master), "%s", r->master_addr);
	ag->kept.master_addr = ag->kept_master;
	if (r->local_addr) {
		snprintf(ag->kept_local, sizeof(ag->kept_local), "%s", r->local_addr);
		ag->kept.local_addr = ag->kept_local;
	}
	ag->next = AGENT_NEXT_KEPT;
}

bool agent_inplace_pending(const struct agent *ag)
{
	for (int i = 0; i < ag->nproc; i++)
		if (ag->w[i].state == AGENT_W_REPLACING || ag->w[i].state == AGENT_W_RESPAWN)
			return true;
	return false;
}

void agent_inplace_drop(struct agent *ag)
{
	for (int i = 0; i < ag->nproc; i++) {
		if (ag->w[i].state == AGENT_W_REPLACING || ag->w[i].state == AGENT_W_RESPAWN)
			ag->w[i].state = AGENT_W_EXITED;
		ag->w[i].early = ag->w[i].counted = false;
	}
	ag->inplace_since_ns = 0;
	/* The next group starts whole. */
	if (ag->can_shrink)
		rdzv_set_nproc(ag->rdzv, ag->nproc);
}
