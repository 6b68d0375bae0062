/* The agent's one machine (agent_decide.h has its states and decisions):
 * join -> spawn -> run (re-forming and replacing in place) -> the group
 * ends -> the rendezvous answers with the next round (join again) or the
 * end -> finish. Events come from the rendezvous, the workers' processes,
 * the timers and the signals; each asks agent_decide.h what to do, and only
 * this file and agent_machine_workers.c (the workers' processes' events)
 * change ag->state. */
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
#include <unistd.h>

static void agent_start_attempt(struct agent *ag);
static void agent_finish(struct agent *ag);
static void agent_on_joined(void *arg, int status, const struct rdzv_round *r);

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
void agent_group_ended(struct agent *ag)
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
