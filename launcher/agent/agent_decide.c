#include "agent_decide.h"

bool agent_group_runs(enum agent_state s)
{
	return s == AGENT_RUNNING || s == AGENT_REPLACING || s == AGENT_REFORMING;
}

enum agent_charge agent_charge_max(enum agent_charge a, enum agent_charge b)
{
	return a > b ? a : b;
}

enum agent_in_round agent_decide_in_round(const struct agent_worker_view *w)
{
	switch (w->state) {
	case AGENT_W_REPLACING:
	case AGENT_W_RESPAWN:
		return w->early ? AGENT_IN_ROUND_OUTSIDE : AGENT_IN_ROUND_STARTS;
	case AGENT_W_AWAITING:
		return w->resizable ? AGENT_IN_ROUND_HANDED : AGENT_IN_ROUND_OUTSIDE;
	case AGENT_W_RUNNING:
		if (w->resizable)
			return AGENT_IN_ROUND_HANDED;
		/* A replacement still in its start (a Python worker takes
		 * seconds to import) is the program its predecessor was: it
		 * is started again in the new round, not its siblings. */
		return w->replacement ? AGENT_IN_ROUND_STARTS : AGENT_IN_ROUND_BLOCKS;
	default:
		return AGENT_IN_ROUND_BLOCKS;
	}
}

enum agent_round_over agent_decide_round_over(enum agent_state s, enum agent_next next,
					      bool blocked)
{
	if ((s != AGENT_RUNNING && s != AGENT_REPLACING) || next != AGENT_NEXT_NONE)
		return AGENT_RO_LOG;
	return blocked ? AGENT_RO_STOP : AGENT_RO_JOIN;
}

enum agent_joined agent_decide_joined(enum agent_state s, int status, bool same_restarts,
				      bool blocked, enum agent_charge charge)
{
	if (status)
		return AGENT_JOINED_FAIL;
	if (agent_group_runs(s))
		return same_restarts && !blocked ? AGENT_JOINED_HAND_OUT : AGENT_JOINED_STOP_KEEP;
	/* Stopping, or stopped (AWAITING): only a group that stops to start
	 * again starts in this round; a failure's end is told in it. */
	return charge == AGENT_CHARGE_ROUND ? AGENT_JOINED_KEEP : AGENT_JOINED_ADOPT;
}

static struct agent_exit_decision decision(enum agent_exit_action a, enum agent_charge c)
{
	return (struct agent_exit_decision){.action = a, .charge = c};
}

/* Rules 5 and 7: replaced alone if it can be, else a failure. */
static struct agent_exit_decision replace_or_stop(const struct agent_exit_view *v)
{
	struct agent_exit_decision d;

	if (!v->started || !v->resizable || !v->others_in_place || !v->replacements_left)
		return decision(AGENT_EXIT_STOP, AGENT_CHARGE_FAILURE);
	d = decision(v->state == AGENT_RUNNING ? AGENT_EXIT_REPLACE_RENEW : AGENT_EXIT_REPLACE,
		     AGENT_CHARGE_NONE);
	d.replacement = true;
	return d;
}

struct agent_exit_decision agent_decide_exit(const struct agent_exit_view *v)
{
	enum agent_charge failure = v->permanent ? AGENT_CHARGE_PERMANENT : AGENT_CHARGE_FAILURE;

	if (v->started && v->exit_code == 0 && v->term_signal <= 0)
		return decision(AGENT_EXIT_NONE, AGENT_CHARGE_NONE); /* 1 */
	if (v->stopped)
		return decision(AGENT_EXIT_NONE, AGENT_CHARGE_NONE); /* 2 */
	if (v->charge >= AGENT_CHARGE_FAILURE || !agent_group_runs(v->state))
		return decision(AGENT_EXIT_NONE, failure); /* 3 */
	if (v->permanent)
		return decision(AGENT_EXIT_STOP, AGENT_CHARGE_PERMANENT); /* 4 */
	if (v->term_signal > 0)
		return replace_or_stop(v); /* 5 */
	if (v->started && v->resizable && !v->outside &&
	    (v->round_not_taken || v->state == AGENT_REFORMING))
		return decision(AGENT_EXIT_NEXT_ROUND, AGENT_CHARGE_ROUND); /* 6 */
	return replace_or_stop(v);					    /* 7 */
}
