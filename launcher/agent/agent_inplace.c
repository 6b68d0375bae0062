/*
 * agent_inplace.c - workers that are resized in place (agent_int.h): when
 * every local worker said "resizable" on its agent channel, a round that is
 * over does not stop them. The agent joins the next round while they run
 * and hands it to them; a worker that dies alone is replaced by one new
 * process in a new round of the same nodes (rdzv_renew), the others
 * staying. A worker handed a round that exits before it said "took R" is
 * one that does not re-form: this node's workers start again in that
 * round, as before, and nothing is charged.
 */
#include "agent_int.h"
#include "linebuf.h"
#include "rdzv.h"
#include "worker_proc.h"

#include <errno.h>
#include <log.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <timeutil.h>

/* The console prefix of worker w for its rank now. */
static void agent_worker_reprefix(struct agent_worker *w)
{
	char prefix[WORKER_PROC_PREFIX_LEN] = "";

	if (w->ag->o->no_prefix)
		return;
	linebuf_prefix(w->ag->o->prefix, w->rank, w->local_rank, prefix, sizeof(prefix));
	worker_proc_set_prefix(&w->proc, prefix);
}

/* Starts the new process of a worker replaced alone, in the round now
 * joined; its log files go on where the dead one's stopped. */
static void agent_respawn(struct agent *ag, struct agent_worker *w)
{
	int rc;

	w->respawn = false;
	w->exit_seq = 0;
	w->stopped = false;
	ag->nrunning++;
	rc = agent_worker_start(w, true);
	if (rc == 0) {
		log_info("rank %d (local rank %d): its replacement starts and joins in place",
			 w->rank, w->local_rank);
		return;
	}
	w->exit_code = AGENT_START_FAILED;
	w->term_signal = 0;
	w->exit_time_ms = (int64_t)time(NULL) * 1000;
	agent_worker_exited(ag, w);
}

/* Hands every local worker the new round on its agent channel: they stay
 * and re-form in place (libddp's ddp_next_round); a worker replaced alone
 * starts again in it. */
static void agent_resize_in_place(struct agent *ag, const struct rdzv_round *r)
{
	struct agent_wire_round wr;
	int failed = 0, replaced = 0;

	ag->reform.world_before = ag->round.world_size;
	ag->round = *r;
	for (int i = 0; i < ag->nproc; i++) {
		struct agent_worker *w = &ag->w[i];

		w->rank = r->rank_base + i;
		if (w->replacing) {
			w->replacing = false;
			w->respawn = true;
			replaced++;
			continue;
		}
		agent_worker_reprefix(w);
		if (!w->proc.running)
			continue; /* finished (a failure would have stopped the group) */
		wr = (struct agent_wire_round){.round = r->round,
					       .rank = w->rank,
					       .world_size = r->world_size,
					       .local_rank = i,
					       .local_world_size = ag->nproc,
					       .master_port = r->master_port,
					       .group_rank = r->group_rank,
					       .group_world_size = r->group_world_size};
		if (agent_wire_round_set_addr(&wr, r->master_addr) < 0 ||
		    worker_proc_send_round(&w->proc, &wr) < 0)
			failed++;
	}
	ag->nreplacing = 0;
	ag->nreform++;
	ag->reform.round = r->round;
	ag->reform.world_after = r->world_size;
	ag->reform.nodes_after = r->group_world_size;
	ag->reform.replaced = replaced;
	ag->reform.waited_s = ((int64_t)time_now_ns() - ag->inplace_since_ns) / 1e9;
	if (summary_add_reform(&ag->summary, &ag->reform))
		log_error("out of memory while recording re-formation %d", ag->nreform);
	log_info("round %d: %d worker(s) of this node re-form in place as ranks %d-%d of %d "
		 "(%d of them replaced alone; waited %.3f s; no restart, re-formation %d)",
		 r->round, ag->nproc, r->rank_base, r->rank_base + ag->nproc - 1, r->world_size,
		 replaced, ag->reform.waited_s, ag->nreform);
	for (int i = 0; i < ag->nproc; i++)
		if (ag->w[i].respawn && !worker_proc_busy(&ag->w[i].proc))
			agent_respawn(ag, &ag->w[i]);
	if (failed) {
		log_warn("%d worker(s) could not be told the new round; stopping the workers",
			 failed);
		ag->failed = true;
		agent_stop_group(ag, SIGTERM);
	}
}

/* Keeps round r, joined while the group stops, for the next group. */
static void agent_keep_round(struct agent *ag, const struct rdzv_round *r)
{
	ag->kept = *r;
	snprintf(ag->kept_master, sizeof(ag->kept_master), "%s", r->master_addr);
	ag->kept.master_addr = ag->kept_master;
	if (r->local_addr) {
		snprintf(ag->kept_local, sizeof(ag->kept_local), "%s", r->local_addr);
		ag->kept.local_addr = ag->kept_local;
	}
	ag->have_kept = true;
}

/* Whether the running workers can go on in round r: not after a restart
 * (workers failed elsewhere and resume from their checkpoint). New workers
 * (a node joined, a worker replaced) start beside them and take the
 * training state from them (ddp-train; see worker/README.md). */
static bool agent_round_in_place(const struct agent *ag, const struct rdzv_round *r)
{
	return r->restart_count == ag->round.restart_count;
}

void agent_inplace_joined(struct agent *ag, int status, const struct rdzv_round *r)
{
	ag->inplace_join = false;
	if (status) {
		log_error("cannot join rendezvous round %d: %s; stopping the workers",
			  ag->round.round + 1, strerror(-status));
		ag->end = RDZV_OUT_FAILED;
		ag->fail_status = 1;
	}
	if (ag->group_end_pending) {
		/* The group ended meanwhile: workers that left instead of
		 * re-forming start again in this round; a group that finished
		 * or failed ends in it. */
		ag->group_end_pending = false;
		if (!status && ag->round_over)
			agent_keep_round(ag, r);
		else if (!status)
			ag->round = *r;
		agent_group_ended(ag);
		return;
	}
	if (status) {
		if (ag->state == AGENT_RUNNING)
			agent_stop_group(ag, SIGTERM);
		return;
	}
	if (ag->state == AGENT_RUNNING && agent_round_in_place(ag, r)) {
		agent_resize_in_place(ag, r);
		return;
	}
	if (ag->state == AGENT_RUNNING) {
		log_warn("round %d follows a restart (workers failed elsewhere): stopping this "
			 "node's workers to start them again in it (no restart is counted for it)",
			 r->round);
		ag->round_over = true;
		agent_stop_group(ag, SIGTERM);
	}
	/* Stopping: the group's end starts the next group in this round. */
	agent_keep_round(ag, r);
}

/* Whether every local worker runs (or waits to be replaced) and said it
 * can be resized in place. */
static bool agent_all_resizable(const struct agent *ag)
{
	for (int i = 0; i < ag->nproc; i++) {
		const struct agent_worker *w = &ag->w[i];

		if (!w->replacing && (!w->proc.running || !w->proc.resizable))
			return false;
	}
	return true;
}

bool agent_inplace_round_over(struct agent *ag, const char *why)
{
	int rc;

	if (!agent_all_resizable(ag))
		return false;
	log_warn("%s; this node's workers stay and re-form in place", why);
	if (ag->nreplacing == 0) {
		ag->inplace_since_ns = (int64_t)time_now_ns();
		ag->reform.time_ms = (int64_t)time(NULL) * 1000;
		snprintf(ag->reform.why, sizeof(ag->reform.why), "%s", why);
	}
	ag->inplace_join = true;
	rc = rdzv_join(ag->rdzv, agent_on_joined, ag);
	if (rc == 0 || rc == -ECANCELED)
		return true;
	ag->inplace_join = false;
	log_error("cannot join the next rendezvous round: %s", strerror(-rc));
	return false;
}

/* Worker w was handed a round and left before it took it (or the round was
 * being joined): a program that does not re-form in place. */
static bool agent_worker_skipped_round(const struct agent *ag, const struct agent_worker *w)
{
	return w->proc.resizable && (ag->inplace_join || w->proc.sent_round > w->proc.took_round);
}

/* Whether dead worker w can be replaced alone: it and every other local
 * worker re-form in place, its failure is not one that repeats (exit 78,
 * policy.h), the node's replacements (--max_restarts) are not spent, and
 * the rendezvous opens a new round of the same nodes. */
static bool agent_can_replace(struct agent *ag, const struct agent_worker *dead)
{
	if (!dead->proc.resizable || ag->inplace_join || ag->failed || ag->permanent ||
	    ag->nreplaced >= ag->o->max_restarts)
		return false;
	for (int i = 0; i < ag->nproc; i++) {
		const struct agent_worker *w = &ag->w[i];

		if (w != dead && !w->replacing && (!w->proc.running || !w->proc.resizable))
			return false;
	}
	return rdzv_renew(ag->rdzv) == 0;
}

bool agent_inplace_worker_failed(struct agent *ag, struct agent_worker *w, const char *how)
{
	if (ag->state != AGENT_RUNNING)
		return false;
	if (agent_worker_skipped_round(ag, w)) {
		log_warn("rank %d (local rank %d) %s instead of re-forming in place; stopping "
			 "this node's workers to start them again in the next round (no restart "
			 "is counted for it)",
			 w->rank, w->local_rank, how);
		w->stopped = true;
		ag->round_over = true;
		if (!ag->inplace_join)
			agent_keep_round(ag, &ag->round);
		agent_stop_group(ag, SIGTERM);
		return true;
	}
	if (!agent_can_replace(ag, w))
		return false;
	ag->nreplaced++;
	w->replacing = true;
	worker_proc_kill_group(&w->proc); /* what it left behind */
	if (ag->nreplacing++ == 0) {
		ag->inplace_since_ns = (int64_t)time_now_ns();
		ag->reform.time_ms = (int64_t)time(NULL) * 1000;
		snprintf(ag->reform.why, sizeof(ag->reform.why),
			 "rank %d (pid %d) %s; replaced alone", w->rank,
			 w->proc.pid > 0 ? w->proc.pid : w->proc.shim_pid, how);
	}
	log_warn("rank %d (local rank %d) %s; replacing it alone: the other workers stay and "
		 "re-form in place with the new process (replacement %d of %d on this node, "
		 "--max_restarts)",
		 w->rank, w->local_rank, how, ag->nreplaced, ag->o->max_restarts);
	return true;
}

void agent_inplace_closed(struct agent *ag, struct agent_worker *w)
{
	if (w->respawn && ag->state == AGENT_RUNNING)
		agent_respawn(ag, w);
}

bool agent_inplace_pending(const struct agent *ag)
{
	for (int i = 0; i < ag->nproc; i++)
		if (ag->w[i].replacing || ag->w[i].respawn)
			return true;
	return false;
}

void agent_inplace_drop(struct agent *ag)
{
	for (int i = 0; i < ag->nproc; i++)
		ag->w[i].replacing = ag->w[i].respawn = false;
	ag->nreplacing = 0;
}
