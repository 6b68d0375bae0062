/* The agent's one machine (agent_decide.h has its states and decisions):
 * join -> spawn -> run (re-forming and replacing in place) -> the group
 * ends -> the rendezvous answers with the next round (join again) or the
 * end -> finish. Events come from the rendezvous, the workers' processes,
 * the timers and the signals; each asks agent_decide.h what to do, and only
 * this file changes ag->state. */
#include "agent.h"
#include "agent_decide.h"
#include "agent_int.h"
#include "envp.h"
#include "policy.h"
#include "rdzv.h"
#include "signames.h"
#include "worker_env.h"
#include "worker_proc.h"

#include <errno.h>
#include <log.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <timeutil.h>
#include <unistd.h>

static void agent_start_attempt(struct agent *ag);
static void agent_finish(struct agent *ag);
static void agent_group_ended(struct agent *ag);
static void agent_on_joined(void *arg, int status, const struct rdzv_round *r);
static void on_proc_exit(struct worker_proc *p, void *arg);
static void on_proc_closed(struct worker_proc *p, void *arg);
static void on_proc_declare(struct worker_proc *p, void *arg);

static void on_grace(uv_timer_t *t)
{
	struct agent *ag = t->data;

	log_warn("workers still running after the %.3g s grace period; sending SIGKILL",
		 ag->o->grace_period);
	agent_kill_all(ag);
}

static void on_none_started(uv_timer_t *t)
{
	agent_group_ended(t->data);
}

/* -> STOPPING: `sig` to every running worker's process group, then the
 * grace period, then SIGKILL. SIGCONT follows `sig`: a stopped worker
 * (SIGSTOP, a debugger's ^Z) acts on it at once instead of costing the
 * grace. */
static void agent_stop_group(struct agent *ag, int sig)
{
	uint64_t grace_ms = (uint64_t)(ag->o->grace_period * 1000.0 + 0.5);
	bool replacing = agent_inplace_pending(ag);

	agent_inplace_drop(ag); /* the group ends: no worker is replaced */
	for (int i = 0; i < ag->nproc; i++) {
		struct agent_worker *w = &ag->w[i];

		if (w->proc.running) {
			w->stopped = true;
			worker_proc_signal(&w->proc, sig);
			worker_proc_signal(&w->proc, SIGCONT);
		}
	}
	if (ag->state == AGENT_STOPPING)
		return;
	ag->state = AGENT_STOPPING;
	if (ag->nrunning == 0) {
		/* Only a worker that waited to be replaced was left: the
		 * group's end comes from the loop. */
		if (replacing && agent_all_closed(ag))
			uv_timer_start(&ag->drain, on_none_started, 0, 0);
		return;
	}
	if (grace_ms == 0)
		agent_kill_all(ag);
	else
		uv_timer_start(&ag->grace, on_grace, grace_ms, 0);
}

static void on_drain(uv_timer_t *t)
{
	struct agent *ag = t->data;

	/* A process outside the worker's group still holds its output pipe. */
	log_debug("closing output pipes still open %d ms after the group ended", AGENT_DRAIN_MS);
	for (int i = 0; i < ag->nproc; i++)
		worker_proc_close_pipes(&ag->w[i].proc);
}

/* Every worker process of the attempt has exited. */
static void agent_group_exited(struct agent *ag)
{
	uv_timer_stop(&ag->grace);
	/* Grandchildren left in a worker's group go now, so its pipes end;
	 * what escaped a guard goes with the job's cgroup, and the names in
	 * /dev/shm that ranks which died left go too. */
	agent_kill_all(ag);
	footprint_sweep(&ag->fp);
	if (!agent_all_closed(ag))
		uv_timer_start(&ag->drain, on_drain, AGENT_DRAIN_MS, 0);
}

/* Starts worker w in ag->round, or outside the rounds (as
 * AGENT_W_AWAITING); keep_logs: a replacement's logs go on. Returns 0, or
 * a negative errno after its failed start was taken as its end
 * (agent_worker_exited). */
static int agent_start_worker(struct agent *ag, struct agent_worker *w, bool keep_logs,
			      enum agent_worker_state as);

/* Worker w's process ended on its own or could not be started: what
 * agent_decide_exit says (outside: it ran outside the rounds). Returns
 * false when the group goes on without it for now (it is replaced
 * alone). */
static bool agent_worker_ended(struct agent *ag, struct agent_worker *w, bool started,
			       bool permanent, bool outside)
{
	struct agent_exit_view v = {
	    .state = ag->state,
	    .charge = ag->charge,
	    .stopped = w->stopped,
	    .started = started,
	    .exit_code = w->exit_code,
	    .term_signal = w->term_signal,
	    .permanent = permanent,
	    .resizable = started && w->proc.resizable,
	    .round_not_taken = started && agent_worker_round_not_taken(w),
	    .outside = outside,
	    .others_in_place = !agent_workers_block(ag, w),
	    .replacements_left = ag->nreplaced < ag->o->max_restarts,
	};
	struct agent_exit_decision d = agent_decide_exit(&v);
	struct summary_rec r = {
	    .pid = w->proc.pid > 0 ? w->proc.pid : w->proc.shim_pid,
	    .exit_code = w->exit_code,
	    .term_signal = w->term_signal,
	};
	char how[64];

	if (!w->stopped && w->term_signal > 0)
		ag->stats.failures_signal++;
	else if (!w->stopped && w->exit_code != 0)
		ag->stats.failures_exit++;
	summary_describe(&r, how, sizeof(how));
	ag->charge = agent_charge_max(ag->charge, d.charge);
	if (outside && (d.action == AGENT_EXIT_REPLACE_RENEW || d.action == AGENT_EXIT_REPLACE)) {
		/* No round has it: no round is asked for; it starts outside
		 * again. */
		agent_inplace_replace(ag, w, how);
		w->early = true;
		return false;
	}
	switch (d.action) {
	case AGENT_EXIT_NONE:
		return true;
	case AGENT_EXIT_REPLACE_RENEW:
		if (rdzv_renew(ag->rdzv) != 0) {
			ag->charge = agent_charge_max(ag->charge, AGENT_CHARGE_FAILURE);
			break; /* the backend cannot: a failure as any */
		}
		ag->state = AGENT_REPLACING;
		/* fall through */
	case AGENT_EXIT_REPLACE:
		agent_inplace_replace(ag, w, how);
		return false;
	case AGENT_EXIT_NEXT_ROUND:
		log_warn("rank %d (local rank %d) %s instead of re-forming in place; stopping "
			 "this node's workers to start them again in the next round (no restart "
			 "is counted for it)",
			 w->rank, w->local_rank, how);
		w->stopped = true;
		if (ag->next == AGENT_NEXT_NONE)
			agent_keep_round(ag, &ag->round);
		agent_stop_group(ag, SIGTERM);
		return true;
	case AGENT_EXIT_STOP:
		break;
	}
	ag->last_fail_ns = (int64_t)time_now_ns();
	agent_metrics_lost(ag);
	log_warn("rank %d (local rank %d) %s; stopping the other workers", w->rank, w->local_rank,
		 how);
	agent_stop_group(ag, SIGTERM);
	return true;
}

/* Worker w exited, or could not be started (started false: exit code
 * AGENT_START_FAILED). */
static void agent_worker_exited(struct agent *ag, struct agent_worker *w, bool started,
				bool permanent)
{
	bool outside = w->state == AGENT_W_AWAITING;

	ag->nrunning--;
	w->exit_seq = ++ag->nexited;
	if (w->state == AGENT_W_REPLACING || w->state == AGENT_W_RESPAWN)
		return; /* killed to start again (agent_inplace_prepare), maybe in the
			 * round handed out since */
	w->state = AGENT_W_EXITED;
	if (!agent_worker_ended(ag, w, started, permanent, outside))
		return;
	/* It finished the job: no round will take a replacement in. */
	if (started && !w->stopped && w->exit_code == 0 && w->term_signal <= 0)
		agent_inplace_release(ag);
	if (ag->nrunning == 0)
		agent_group_exited(ag);
}

static void on_proc_exit(struct worker_proc *p, void *arg)
{
	struct agent_worker *w = arg;

	w->exit_code = p->exit_code;
	w->term_signal = p->term_signal;
	w->exit_time_ms = p->exit_time_ms;
	if (w->done_cut && !w->stopped) {
		log_info("rank %d (local rank %d) was cut out in shutdown after this node's others "
			 "finished the job: its training and final save were done, so it counts as "
			 "finished (exit 0); the hang stays in summary.json",
			 w->rank, w->local_rank);
		w->exit_code = 0;
		w->term_signal = 0;
	}
	w->done_cut = false;
	agent_worker_exited(w->ag, w, true, policy_exit_permanent(w->exit_code, w->term_signal));
}

static int agent_start_worker(struct agent *ag, struct agent_worker *w, bool keep_logs,
			      enum agent_worker_state as)
{
	int rc;

	ag->nrunning++;
	w->exit_seq = 0;
	w->stopped = false;
	w->done_cut = false;
	w->state = as;
	agent_hang_reset(&ag->hang, w->local_rank);
	rc = agent_worker_start(w, keep_logs, on_proc_exit, on_proc_closed, on_proc_declare);
	if (rc == 0)
		return 0;
	w->exit_code = AGENT_START_FAILED;
	w->term_signal = 0;
	w->exit_time_ms = (int64_t)time(NULL) * 1000;
	agent_worker_exited(ag, w, false, policy_start_error_permanent(rc));
	return rc;
}

/* A worker replaced alone whose round came: its new process starts in it,
 * once the dead one's handles closed; its logs go on. */
static void agent_respawn(struct agent *ag, struct agent_worker *w)
{
	w->replacement = true;
	if (agent_start_worker(ag, w, true, AGENT_W_RUNNING) == 0)
		log_info("rank %d (local rank %d): its replacement starts and joins in place",
			 w->rank, w->local_rank);
}

/* A worker replaced early whose dead process' handles closed: its new
 * process starts now, outside the rounds, while the others re-form
 * without it; it waits for its round on the agent channel. */
static void agent_start_outside(struct agent *ag, struct agent_worker *w)
{
	w->replacement = true;
	if (agent_start_worker(ag, w, true, AGENT_W_AWAITING) == 0)
		log_info("local rank %d: its replacement starts outside the rounds; it joins the "
			 "others in a later round once it says it can re-form",
			 w->local_rank);
}

/* RUNNING -> REPLACING: a replacement outside the rounds said it can
 * re-form: one more round of the same nodes is asked (rdzv_grow), in
 * which it is handed its rank with the others. Later, when a round is
 * being joined or asked already (agent_inplace_joined calls it again). */
static void agent_grow(struct agent *ag)
{
	if (ag->state != AGENT_RUNNING || ag->next != AGENT_NEXT_NONE || !agent_inplace_ready(ag))
		return;
	if (rdzv_grow(ag->rdzv) != 0) {
		log_warn("a replacement is ready to re-form but no new round can be asked now; it "
			 "joins the next one");
		return;
	}
	ag->state = AGENT_REPLACING;
	agent_inplace_begin(ag, "a replacement is ready and joins the others");
	log_info("a replacement on this node is ready to re-form; asking for a round that "
		 "takes it in");
}

static void on_proc_declare(struct worker_proc *p, void *arg)
{
	struct agent_worker *w = arg;

	(void)p;
	if (w->state == AGENT_W_AWAITING)
		agent_grow(w->ag);
}

/* Prints the attempt's summary of failures, once. */
static void agent_show_summary(void *arg)
{
	struct agent *ag = arg;

	if (ag->shown == ag->attempt)
		return;
	ag->shown = ag->attempt;
	summary_print(&ag->summary, ag->attempt, ag->o->max_restarts);
}

/* The job is over for this node: its exit status from the outcome. */
static void agent_end(struct agent *ag, enum rdzv_outcome how)
{
	if (how == RDZV_OUT_FAILED && ag->stop_signal <= 0 && agent_workers_finished(ag)) {
		log_info("this node's workers had finished the job (each exited 0 after its last "
			 "step) before the rendezvous store was lost: this node is done");
		how = RDZV_OUT_FINISHED;
	}
	if (how == RDZV_OUT_FAILED && ag->nexited)
		agent_show_summary(ag);
	ag->exit_status = rdzv_exit_status(how, ag->stop_signal,
					   ag->charge == AGENT_CHARGE_PERMANENT, ag->fail_status);
	agent_finish(ag);
}

/* This node's status if the job fails now: its last group's first failure,
 * or 0 when that group did not fail. */
static int agent_fail_status(const struct agent *ag)
{
	const struct summary_rec *first = summary_first_failure(&ag->summary, ag->attempt);

	if (ag->charge < AGENT_CHARGE_FAILURE || !first)
		return 0;
	return policy_exit_status(0, true, first->exit_code, first->term_signal);
}

/* A failure that will repeat, in words for the other nodes: its first
 * failed worker and how (rdzv_group_end's cause), or NULL. */
static const char *agent_permanent_cause(const struct agent *ag, char *buf, size_t len)
{
	const struct summary_rec *f = summary_first_failure(&ag->summary, ag->attempt);

	if (ag->charge != AGENT_CHARGE_PERMANENT || !f)
		return NULL;
	if (f->exit_code == AGENT_START_FAILED && f->term_signal <= 0)
		snprintf(buf, len, "worker rank %d could not be started", f->rank);
	else
		snprintf(buf, len, "worker rank %d exited with status %d%s%.200s", f->rank,
			 f->exit_code, f->error_message ? ": " : "",
			 f->error_message ? f->error_message : "");
	return buf;
}

/* A new attempt's group: nothing charged, nothing exited yet. */
static void agent_new_attempt(struct agent *ag)
{
	ag->state = AGENT_JOINING;
	ag->charge = AGENT_CHARGE_NONE;
	ag->nexited = 0;
}

/* Every handle of the attempt is closed (or the group's end waited for the
 * round joined in place: AWAITING): tell the rendezvous, which answers with
 * the next round or the end; or start again in the round kept. */
static void agent_group_ended(struct agent *ag)
{
	char cause[320];
	struct rdzv_group_end g = {
	    .attempt = ag->attempt,
	    .failed = ag->charge >= AGENT_CHARGE_FAILURE,
	    .permanent = ag->charge == AGENT_CHARGE_PERMANENT,
	    .round_over = ag->charge == AGENT_CHARGE_ROUND,
	    .stop_signal = ag->stop_signal,
	    .show_summary = agent_show_summary,
	    .arg = ag,
	};

	if (ag->next == AGENT_NEXT_JOINING && ag->stop_signal <= 0 && ag->end < 0) {
		/* A round is being joined in place: the group's end is that
		 * round's, once joined (agent_inplace_joined). */
		ag->state = AGENT_AWAITING;
		return;
	}
	uv_timer_stop(&ag->drain);
	agent_record_attempt(ag);
	if (ag->end >= 0) {
		agent_end(ag, ag->end); /* heard while the workers stopped */
		return;
	}
	if (ag->next == AGENT_NEXT_KEPT && ag->kept.local_procs != ag->nproc) {
		/* Kept from a join in place that counted fewer workers than a
		 * group has: a round that counts them all is asked instead. */
		ag->next = AGENT_NEXT_NONE;
		rdzv_set_nproc(ag->rdzv, ag->nproc);
		if (rdzv_renew(ag->rdzv) == 0) {
			ag->attempt++;
			agent_start_attempt(ag);
			return;
		}
		log_error("cannot ask for a round that counts this node's %d workers", ag->nproc);
		ag->fail_status = 1;
		agent_end(ag, RDZV_OUT_FAILED);
		return;
	}
	if (ag->next == AGENT_NEXT_KEPT) {
		/* Stopped for a round already joined: the next group starts in
		 * it, without asking the rendezvous again. */
		ag->next = AGENT_NEXT_NONE;
		ag->attempt++;
		agent_new_attempt(ag);
		agent_on_joined(ag, 0, &ag->kept);
		return;
	}
	/* A join in place still in flight (a stop signal) keeps ag->next: its
	 * late answer is not the next group's. */
	if (!g.round_over && ag->stop_signal <= 0)
		ag->fail_status = agent_fail_status(ag);
	g.cause = agent_permanent_cause(ag, cause, sizeof(cause));
	/* Waiting for the rendezvous from now on: an end it answers at once
	 * finishes the agent. */
	ag->state = AGENT_JOINING;
	if (!rdzv_group_ended(ag->rdzv, &g) || ag->state == AGENT_DONE)
		return;
	ag->attempt++;
	agent_start_attempt(ag);
}

/* Every handle of worker w's run has closed: its log files go; a worker
 * replaced alone whose round came starts; the last one ends the group. */
static void on_proc_closed(struct worker_proc *p, void *arg)
{
	struct agent_worker *w = arg;
	struct agent *ag = w->ag;
	static const char *const names[2] = {"stdout", "stderr"};

	for (int s = 0; s < 2; s++) {
		if (!p->log_lost[s])
			continue;
		log_error("rank %d: %llu bytes of its %s could not be written to '%s/%s.log' (%s); "
			  "that log is incomplete (free space under --log_dir)",
			  w->rank, (unsigned long long)p->log_lost[s], names[s], w->dir, names[s],
			  strerror(p->log_errno[s]));
		ag->lost_output = true;
	}
	if (agent_worker_close_logs(w))
		ag->lost_output = true;
	/* Not while the next round is asked or joined: it starts in that. */
	if (w->state == AGENT_W_RESPAWN && ag->state == AGENT_RUNNING)
		agent_respawn(ag, w);
	/* Replaced early: it starts now, outside the rounds. */
	else if (w->state == AGENT_W_REPLACING && w->early && agent_group_runs(ag->state))
		agent_start_outside(ag, w);
	if (ag->nrunning == 0 && agent_all_closed(ag) && !agent_inplace_pending(ag) &&
	    (agent_group_runs(ag->state) || ag->state == AGENT_STOPPING))
		agent_group_ended(ag);
}

/* JOINING -> RUNNING: every worker starts in ag->round. */
static void agent_spawn_all(struct agent *ag)
{
	ag->state = AGENT_RUNNING;
	/* Workers left unstarted below must carry nothing of the last attempt. */
	for (int i = 0; i < ag->nproc; i++) {
		worker_proc_drop_progress(&ag->w[i].proc);
		worker_proc_init(&ag->w[i].proc);
		ag->w[i].exit_seq = 0;
		ag->w[i].stopped = false;
		ag->w[i].replacement = false;
		ag->w[i].state = AGENT_W_IDLE;
	}
	agent_inplace_drop(ag);
	ag->round_local = ag->nproc;
	for (int i = 0; i < ag->nproc; i++)
		if (agent_start_worker(ag, &ag->w[i], false, AGENT_W_RUNNING) &&
		    ag->state == AGENT_STOPPING)
			break;
	agent_metrics_resumed(ag);
	if (ag->last_fail_ns && ag->attempt > 0)
		log_debug("restart took %.3f ms from the failure to the last spawn",
			  ((int64_t)time_now_ns() - ag->last_fail_ns) / 1e6);
	/* No worker got as far as a process: end the attempt from the loop, so
	 * that restarts of a group that never starts do not nest. */
	if (ag->nrunning == 0 && agent_all_closed(ag))
		uv_timer_start(&ag->drain, on_none_started, 0, 0);
}

/* The answer to a join made in place (ag->next was JOINING). */
static void agent_inplace_joined(struct agent *ag, int status, const struct rdzv_round *r)
{
	bool same = !status && r->restart_count == ag->round.restart_count;
	bool blocked = agent_workers_block(ag, NULL);
	int failed;

	ag->next = AGENT_NEXT_NONE;
	switch (agent_decide_joined(ag->state, status, same, blocked, ag->charge)) {
	case AGENT_JOINED_FAIL:
		log_error("cannot join rendezvous round %d: %s; stopping the workers",
			  ag->round.round + 1, strerror(-status));
		ag->end = RDZV_OUT_FAILED;
		ag->fail_status = 1;
		if (agent_group_runs(ag->state))
			agent_stop_group(ag, SIGTERM);
		break;
	case AGENT_JOINED_HAND_OUT:
		/* REFORMING -> RUNNING: the workers stay and re-form in r;
		 * those replaced alone start in it. */
		ag->state = AGENT_RUNNING;
		agent_metrics_round(ag, r, true);
		failed = agent_inplace_hand_out(ag, r);
		agent_metrics_resumed(ag);
		for (int i = 0; i < ag->nproc; i++)
			if (ag->w[i].state == AGENT_W_RESPAWN && !worker_proc_busy(&ag->w[i].proc))
				agent_respawn(ag, &ag->w[i]);
			else if (ag->w[i].state == AGENT_W_REPLACING && ag->w[i].early &&
				 !worker_proc_busy(&ag->w[i].proc))
				agent_start_outside(ag, &ag->w[i]);
		if (failed) {
			log_warn("%d worker(s) could not be told the new round; stopping the "
				 "workers",
				 failed);
			ag->charge = agent_charge_max(ag->charge, AGENT_CHARGE_FAILURE);
			agent_stop_group(ag, SIGTERM);
			return;
		}
		agent_grow(ag); /* a replacement got ready while the round was joined */
		return;
	case AGENT_JOINED_STOP_KEEP:
		if (!same)
			log_warn("round %d follows a restart (workers failed elsewhere): stopping "
				 "this node's workers to start them again in it (no restart is "
				 "counted for it)",
				 r->round);
		else
			log_warn(
			    "round %d: a worker of this node can no longer re-form in place "
			    "(it said \"fixed\" or ended while the round was joined): stopping "
			    "this node's workers to start them again in it (no restart is counted "
			    "for it)",
			    r->round);
		ag->charge = agent_charge_max(ag->charge, AGENT_CHARGE_ROUND);
		agent_stop_group(ag, SIGTERM);
		agent_keep_round(ag, r);
		return;
	case AGENT_JOINED_KEEP:
		agent_keep_round(ag, r);
		break;
	case AGENT_JOINED_ADOPT:
		ag->round = *r;
		break;
	}
	/* The group ended meanwhile: its end comes now. */
	if (ag->state == AGENT_AWAITING)
		agent_group_ended(ag);
}

/* A round joined (rdzv_joined_fn): the next group's, or (ag->next JOINING)
 * the running group's next round. */
static void agent_on_joined(void *arg, int status, const struct rdzv_round *r)
{
	struct agent *ag = arg;

	if (ag->state == AGENT_DONE)
		return;
	if (ag->next == AGENT_NEXT_JOINING) {
		agent_inplace_joined(ag, status, r);
		return;
	}
	if (ag->state != AGENT_JOINING)
		return; /* stopped by a signal while joining */
	if (status) {
		log_error("cannot join rendezvous round %d: %s", ag->attempt, strerror(-status));
		ag->exit_status = 1;
		agent_finish(ag);
		return;
	}
	ag->round = *r;
	ag->round_local = ag->nproc;
	agent_metrics_round(ag, r, false);
	for (int i = 0; i < ag->nproc; i++)
		ag->w[i].rank = r->rank_base + i;
	if (agent_prepare_attempt_dirs(ag)) {
		ag->exit_status = 1;
		agent_finish(ag);
		return;
	}
	agent_spawn_all(ag);
}

/* One attempt: join a rendezvous round, then spawn the group. */
static void agent_start_attempt(struct agent *ag)
{
	int rc;

	agent_new_attempt(ag);
	rc = rdzv_join(ag->rdzv, agent_on_joined, ag);
	if (rc == -ECANCELED)
		return; /* the rendezvous ended: its event finishes the agent */
	if (rc) {
		log_error("cannot join rendezvous round %d: %s", ag->attempt, strerror(-rc));
		ag->exit_status = 1;
		agent_finish(ag);
	}
}

static void on_signal(uv_signal_t *h, int sig)
{
	struct agent *ag = h->data;
	bool again = ag->stop_signal > 0;

	if (ag->state == AGENT_DONE)
		return;
	if (opts_forward_only(ag->o, sig)) {
		agent_forward(ag, sig);
		return;
	}
	if (again) {
		log_warn("got %s; killing the workers now", signame_name(sig));
		if (ag->state == AGENT_JOINING)
			agent_end(ag, RDZV_OUT_STOPPED); /* no longer waits to leave */
		else
			agent_kill_all(ag);
		return;
	}
	ag->stop_signal = sig;
	/* It says what follows; one node between rounds ends here. */
	rdzv_signal(ag->rdzv, sig);
	if (agent_group_runs(ag->state) || ag->state == AGENT_STOPPING)
		agent_stop_group(ag, sig);
	else if (ag->state == AGENT_AWAITING)
		agent_group_ended(ag); /* no longer waits for the round */
}

/* RUNNING, REPLACING -> REFORMING: the next round is joined while the
 * workers run. Returns false when the join could not be asked. */
static bool agent_join_in_place(struct agent *ag, const char *why)
{
	int rc;

	log_warn("%s; this node's workers stay and re-form in place", why);
	agent_inplace_begin(ag, why);
	agent_inplace_prepare(ag);
	agent_inplace_count(ag);
	ag->state = AGENT_REFORMING;
	ag->next = AGENT_NEXT_JOINING;
	rc = rdzv_join(ag->rdzv, agent_on_joined, ag);
	if (rc == 0 || rc == -ECANCELED)
		return true;
	ag->next = AGENT_NEXT_NONE;
	ag->state = AGENT_RUNNING;
	log_error("cannot join the next rendezvous round: %s", strerror(-rc));
	return false;
}

static void on_round_over(void *arg, const char *why)
{
	struct agent *ag = arg;

	/* A node that was stopped whole and cut out meanwhile: its workers'
	 * state is rounds old; they start again and take the others'. */
	bool stale = agent_hang_thawed(&ag->hang);

	if (stale)
		log_warn("this node was stopped and the others went on without it: its workers "
			 "start again in the next round and take the training state from the "
			 "others");
	switch (
	    agent_decide_round_over(ag->state, ag->next, agent_workers_block(ag, NULL) || stale)) {
	case AGENT_RO_LOG:
		log_info("%s", why);
		return;
	case AGENT_RO_JOIN:
		if (agent_join_in_place(ag, why))
			return;
		break;
	case AGENT_RO_STOP:
		break;
	}
	log_warn("%s; stopping this node's workers for the next round (no restart is "
		 "counted for it)",
		 why);
	agent_metrics_lost(ag);
	ag->charge = agent_charge_max(ag->charge, AGENT_CHARGE_ROUND);
	agent_stop_group(ag, SIGTERM);
}

static void on_ended(void *arg, enum rdzv_outcome how, const char *msg)
{
	struct agent *ag = arg;

	if (ag->state == AGENT_DONE)
		return;
	ag->end = (int)how;
	if (msg && how == RDZV_OUT_FAILED) {
		/* the job ends here: the line says in which phase */
		char where[512];

		agent_phase_words(ag, where, sizeof(where));
		log_error("%s; this node was in %s", msg, where);
	} else if (msg) {
		log_msg(how == RDZV_OUT_REFUSED || how == RDZV_OUT_PERMANENT ? LOG_ERROR : LOG_INFO,
			"%s", msg);
	}
	/* Workers of this node still run: they stop, and the group's end
	 * finishes the agent. */
	if (agent_group_runs(ag->state)) {
		agent_stop_group(ag, SIGTERM);
		return;
	}
	if (ag->state == AGENT_STOPPING)
		return;
	if (ag->state == AGENT_AWAITING) {
		agent_group_ended(ag); /* records the attempt, then ends */
		return;
	}
	agent_end(ag, how);
}

static void on_notice(void *arg, const char *text)
{
	struct agent *ag = arg;

	agent_hang_notice(&ag->hang, text);
}

static void on_where(void *arg, char *buf, size_t len)
{
	agent_phase_words(arg, buf, len);
}

static const struct rdzv_events agent_rdzv_events = {
    .round_over = on_round_over,
    .ended = on_ended,
    .notice = on_notice,
    .where = on_where,
};

static void agent_finish(struct agent *ag)
{
	ag->state = AGENT_DONE;
	agent_teardown(ag);
}

int agent_run(const struct launch_opts *o, char **environ_in)
{
	uv_loop_t loop;
	struct agent ag = {.loop = &loop,
			   .o = o,
			   .environ_in = environ_in,
			   .exit_status = 1,
			   .end = -1,
			   .shown = -1};
	int rc;

	summary_init(&ag.summary);
	ag.rd.lock_fd = -1;
	if (uv_loop_init(&loop)) {
		log_error("cannot create the event loop");
		return 1;
	}
	/* A taken --metrics_port is refused before anything starts. */
	rc = agent_metrics_start(&ag);
	if (rc == 0)
		rc = agent_setup(&ag, &agent_rdzv_events);
	if (rc == 0) {
		/* Names the Python in the summary if a worker lacks a module. */
		summary_set_interpreter(&ag.summary, ag.argv[0], envp_get(environ_in, "PATH"));
		agent_init_handles(&ag, on_signal);
		if (agent_metrics_init(&ag)) {
			ag.exit_status = 1;
			agent_finish(&ag);
		} else {
			agent_start_attempt(&ag);
		}
	} else {
		ag.exit_status = rc;
		agent_metrics_close(&ag);
		rdzv_shutdown(ag.rdzv, rc);
	}
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
	rdzv_free(ag.rdzv);
	summary_release(&ag.summary);
	free(ag.argv);
	free(ag.w);
	return ag.exit_status;
}
