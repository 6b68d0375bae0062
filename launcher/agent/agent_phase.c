/* Where this node's workers were, in words (see agent_int.h). */
#include "agent_int.h"
#include "hang_judge.h"
#include "worker_proc.h"

#include <inttypes.h>
#include <stdio.h>

int agent_phase_words(const struct agent *ag, char *buf, size_t len)
{
	size_t n = 0;
	int pages = 0;

	if (len)
		buf[0] = '\0';
	for (int i = 0; ag->w && i < ag->nproc && n < len; i++) {
		struct ddp_progress p;
		int k;

		if (worker_proc_progress(&ag->w[i].proc, &p) < 0 || p.phase == DDP_PHASE_NONE)
			continue;
		if (p.phase == DDP_PHASE_COLLECTIVE)
			k = snprintf(buf + n, len - n,
				     "%scollective (%s #%" PRIu64 ") at step %" PRIu64 " (rank %d)",
				     pages ? ", " : "", hang_op_name(p.op), p.seq, p.step, p.rank);
		else
			k = snprintf(buf + n, len - n, "%s%s at step %" PRIu64 " (rank %d)",
				     pages ? ", " : "", hang_phase_name(p.phase), p.step, p.rank);
		if (k < 0)
			break;
		n += (size_t)k;
		pages++;
	}
	if (!pages)
		snprintf(buf, len, "the rendezvous (no worker of this node had started)");
	return pages;
}

bool agent_workers_finished(const struct agent *ag)
{
	if (!ag->w || ag->nproc <= 0)
		return false;
	for (int i = 0; i < ag->nproc; i++) {
		const struct agent_worker *w = &ag->w[i];
		struct ddp_progress p;

		if (w->proc.running || w->state != AGENT_W_EXITED || w->exit_code != 0 ||
		    w->term_signal > 0)
			return false;
		if (worker_proc_progress(&w->proc, &p) < 0 || p.phase != DDP_PHASE_SHUTDOWN)
			return false;
	}
	return true;
}
