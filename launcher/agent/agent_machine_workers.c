/* The agent's machine, its workers' half (agent.c has the attempts and
 * rounds): the workers' processes start, exit, close and say they can
 * re-form; the group stops (grace, drain) and, every process gone, ends
 * (agent_group_ended). With agent.c, the only file that changes ag->state. */
#include "agent_decide.h"
#include "agent_int.h"
#include "policy.h"
#include "rdzv.h"
#include "worker_proc.h"

#include <log.h>
#include <string.h>
#include <time.h>
#include <timeutil.h>

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
void agent_stop_group(struct agent *ag, int sig)
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
void agent_respawn(struct agent *ag, struct agent_worker *w)
{
	w->replacement = true;
	if (agent_start_worker(ag, w, true, AGENT_W_RUNNING) == 0)
		log_info("rank %d (local rank %d): its replacement starts and joins in place",
			 w->rank, w->local_rank);
}

/* A worker replaced early whose dead process' handles closed: its new
 * process starts now, outside the rounds, while the others re-form
 * without it; it waits for its round on the agent channel. */
void agent_start_outside(struct agent *ag, struct agent_worker *w)
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
/* Whether this node's workers are past the job's last step: one of them
 * finished (exited 0), or its progress page says it is in the final save
 * or shutdown. A round asked then would meet workers that take no more
 * rounds (they would be stopped and started afresh, into a job the other
 * nodes are leaving). */
static bool agent_workers_finishing(const struct agent *ag)
{
	for (int i = 0; i < ag->nproc; i++) {
		const struct agent_worker *w = &ag->w[i];
		struct ddp_progress p;

		if (w->state == AGENT_W_EXITED && w->exit_code == 0 && w->term_signal <= 0 &&
		    !w->stopped)
			return true;
		if (w->state == AGENT_W_RUNNING && w->proc.running &&
		    worker_proc_progress(&w->proc, &p) == 0 &&
		    (p.phase == DDP_PHASE_FINAL || p.phase == DDP_PHASE_SHUTDOWN))
			return true;
	}
	return false;
}

void agent_grow(struct agent *ag)
{
	if (ag->state != AGENT_RUNNING || ag->next != AGENT_NEXT_NONE || !agent_inplace_ready(ag))
		return;
	if (agent_workers_finishing(ag)) {
		log_info("a replacement is ready to re-form, but this node's workers are past the "
			 "job's last step: no round is asked for it");
		agent_inplace_release(ag);
		return;
	}
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
void agent_spawn_all(struct agent *ag)
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
