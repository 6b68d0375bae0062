/*
 * agent_inplace.c - the bookkeeping of workers resized in place
 * (agent_int.h): the re-formation being made, the workers replaced alone,
 * the round handed out, the round kept. What happens when, and why, is the
 * machine's (agent.c) and its decisions' (agent_decide.h); this file calls
 * only the workers' mechanics (agent_workers.c).
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

void agent_inplace_replace(struct agent *ag, struct agent_worker *w, const char *how)
{
	char why[sizeof(ag->reform.why)];

	ag->nreplaced++;
	w->state = AGENT_W_REPLACING;
	worker_proc_kill_group(&w->proc); /* what it left behind */
	snprintf(why, sizeof(why), "rank %d (pid %d) %s; replaced alone", w->rank,
		 w->proc.pid > 0 ? w->proc.pid : w->proc.shim_pid, how);
	agent_inplace_begin(ag, why);
	log_warn("rank %d (local rank %d) %s; replacing it alone: the other workers stay and "
		 "re-form in place with the new process (replacement %d of %d on this node, "
		 "--max_restarts)",
		 w->rank, w->local_rank, how, ag->nreplaced, ag->o->max_restarts);
}

/* Records the re-formation into round r, of which `replaced` workers were
 * replaced alone. */
static void agent_inplace_record(struct agent *ag, const struct rdzv_round *r, int replaced)
{
	ag->nreform++;
	ag->reform.round = r->round;
	ag->reform.world_after = r->world_size;
	ag->reform.nodes_after = r->group_world_size;
	ag->reform.replaced = replaced;
	ag->reform.waited_s = ((int64_t)time_now_ns() - ag->inplace_since_ns) / 1e9;
	ag->inplace_since_ns = 0;
	if (summary_add_reform(&ag->summary, &ag->reform))
		log_error("out of memory while recording re-formation %d", ag->nreform);
	log_info("round %d: %d worker(s) of this node re-form in place as ranks %d-%d of %d "
		 "(%d of them replaced alone; waited %.3f s; no restart, re-formation %d)",
		 r->round, ag->nproc, r->rank_base, r->rank_base + ag->nproc - 1, r->world_size,
		 replaced, ag->reform.waited_s, ag->nreform);
}

int agent_inplace_hand_out(struct agent *ag, const struct rdzv_round *r)
{
	int failed = 0, replaced = 0;

	ag->reform.world_before = ag->round.world_size;
	ag->round = *r;
	for (int i = 0; i < ag->nproc; i++) {
		struct agent_worker *w = &ag->w[i];

		w->rank = r->rank_base + i;
		if (w->state == AGENT_W_REPLACING) {
			w->state = AGENT_W_RESPAWN;
			replaced++;
			continue;
		}
		agent_worker_reprefix(w);
		if (!w->proc.running)
			continue; /* finished (a failure would have stopped the group) */
		if (agent_worker_send_round(w, r) < 0)
			failed++;
	}
	agent_inplace_record(ag, r, replaced);
	return failed;
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
	for (int i = 0; i < ag->nproc; i++)
		if (ag->w[i].state == AGENT_W_REPLACING || ag->w[i].state == AGENT_W_RESPAWN)
			ag->w[i].state = AGENT_W_EXITED;
	ag->inplace_since_ns = 0;
}
