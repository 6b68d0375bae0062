#include "policy.h"

#include <errno.h>

#include "exit_status.h"

enum policy_decision policy_decide(const struct policy *p, int restarts_done, bool group_failed,
				   bool permanent, bool stop_requested)
{
	if (stop_requested)
		return POLICY_STOPPED;
	if (!group_failed)
		return POLICY_SUCCEEDED;
	if (permanent)
		return POLICY_FAILED;
	return restarts_done < p->max_restarts ? POLICY_RESTART : POLICY_FAILED;
}

bool policy_start_error_permanent(int err)
{
	return exit_status_permanent_errno(err);
}

bool policy_exit_permanent(int exit_code, int term_signal)
{
	return term_signal <= 0 && exit_code == DDP_EXIT_PERMANENT;
}

uint64_t policy_backoff_ms(const struct policy *p, int restart)
{
	double s = p->backoff_initial;

	if (s <= 0 || restart < 1)
		return 0;
	for (int i = 1; i < restart && s < p->backoff_max; i++)
		s *= 2;
	if (s > p->backoff_max)
		s = p->backoff_max;
	return (uint64_t)(s * 1000.0 + 0.5);
}

int policy_exit_status(int stop_signal, bool failed, int exit_code, int term_signal)
{
	if (stop_signal > 0)
		return 128 + stop_signal;
	if (!failed)
		return 0;
	if (term_signal > 0)
		return 128 + term_signal;
	return exit_code != 0 ? (exit_code & 0xff ? exit_code & 0xff : 1) : 1;
}
