/*
 * agent_multi.c - what the agent does differently across nodes: it hears
 * the rendezvous (a round over, the job ended), hands its group's end to
 * the rendezvous instead of its own restart policy (the job's budget is
 * counted by the rendezvous, for all nodes), and leaves the job on a stop
 * signal so that the others re-form at once.
 */
#include <log.h>
#include <signal.h>
#include <stdio.h>

#include "agent_int.h"
#include "exit_status.h"
#include "policy.h"
#include "signames.h"

static void agent_multi_finish(struct agent *ag)
{
	switch (ag->rdzv_end) {
	case RDZV_OUT_FINISHED:
		ag->exit_status = 0;
		break;
	case RDZV_OUT_LEFT:
		ag->exit_status =
		    ag->stop_signal > 0 ? policy_exit_status(ag->stop_signal, false, 0, 0) : 0;
		if (ag->stop_signal <= 0 && ag->permanent)
			ag->exit_status = DDP_EXIT_PERMANENT;
		break;
	case RDZV_OUT_REFUSED:
		ag->exit_status = 2; /* a usage error: the wrong job for that store */
		break;
	default:
		/* This node's own failure gives its code; another's gives 1. */
		ag->exit_status = ag->fail_status ? ag->fail_status : 1;
		if (ag->stop_signal > 0)
			ag->exit_status = policy_exit_status(ag->stop_signal, false, 0, 0);
		break;
	}
	if (ag->rdzv_end == RDZV_OUT_FAILED && ag->nexited)
		summary_print(&ag->summary, ag->attempt, ag->o->max_restarts);
	agent_finish(ag);
}

static void on_round_over(void *arg, const char *why)
{
	struct agent *ag = arg;

	if (ag->state != AGENT_RUNNING) {
		log_info("%s", why);
		return;
	}
	log_warn("%s; stopping this node's workers for the next round (no restart is "
		 "counted for it)",
		 why);
	ag->round_over = true;
	agent_stop_group(ag, SIGTERM);
}

static void on_ended(void *arg, enum rdzv_outcome how, const char *msg)
{
	struct agent *ag = arg;

	if (ag->state == AGENT_DONE)
		return;
	ag->rdzv_end = (int)how;
	if (how == RDZV_OUT_FAILED || how == RDZV_OUT_REFUSED)
		log_error("%s", msg);
	else
		log_info("%s", msg);
	/* Workers of this node still run: they stop, and the group's end
	 * finishes the agent. */
	if (ag->state == AGENT_RUNNING) {
		agent_stop_group(ag, SIGTERM);
		return;
	}
	if (ag->state == AGENT_STOPPING)
		return;
	agent_multi_finish(ag);
}

const struct rdzv_events agent_rdzv_events = {
    .round_over = on_round_over,
    .ended = on_ended,
};

void agent_multi_group_ended(struct agent *ag)
{
	bool stopped_for_round = ag->round_over;

	if (ag->rdzv_end >= 0) {
		agent_multi_finish(ag);
		return;
	}
	ag->round_over = false;
	if (!stopped_for_round && ag->stop_signal <= 0) {
		const struct summary_rec *first = summary_first_failure(&ag->summary, ag->attempt);

		ag->fail_status =
		    ag->failed && first
			? policy_exit_status(0, true, first->exit_code, first->term_signal)
			: 0;
	}
	/* Waiting for the rendezvous from now on: an end it reports at once
	 * (the job finished, the budget is spent) finishes the agent. */
	ag->state = AGENT_JOINING;
	if (ag->stop_signal > 0)
		return; /* rdzv_leave was called; LEFT follows */
	if (ag->permanent && !stopped_for_round) {
		/* This node would fail the same way in every round: it leaves,
		 * and the others go on without it if the job allows. */
		summary_print(&ag->summary, ag->attempt, ag->o->max_restarts);
		log_error("leaving the job: the failure above will repeat at every restart "
			  "(exit status %d: fix the cause, then run again)",
			  DDP_EXIT_PERMANENT);
		rdzv_leave(ag->rdzv);
		return; /* LEFT follows */
	}
	if (!stopped_for_round)
		rdzv_group_exited(ag->rdzv, !ag->failed);
	if (ag->state == AGENT_DONE)
		return;
	ag->attempt++;
	agent_start_attempt(ag);
}

void agent_multi_signal(struct agent *ag, int sig)
{
	bool again = ag->stop_signal > 0;

	if (!again)
		ag->stop_signal = sig;
	log_warn("got %s; %s", signame_name(sig),
		 again ? "killing the workers now" : "leaving the job and stopping the workers");
	if (!again)
		rdzv_leave(ag->rdzv);
	if (ag->state == AGENT_DONE)
		return;
	if (ag->state == AGENT_JOINING || ag->state == AGENT_BACKOFF) {
		if (again) {
			ag->rdzv_end = RDZV_OUT_LEFT;
			agent_multi_finish(ag);
		}
		return;
	}
	if (again)
		agent_kill_all(ag);
	else
		agent_stop_group(ag, sig);
}
