/* Who is hung, and who only waits on it (see hang_judge.h). */
#include "hang_judge.h"

#include <stdio.h>

struct hang_judgement hang_judge(const struct hang_view *v)
{
	struct hang_judgement j = {.verdict = HANG_FINE, .waits_on = -1};

	if (v->page.magic != DDP_PROGRESS_MAGIC || !v->deadline_ns || v->age_ns <= v->deadline_ns)
		return j;
	j.late_ns = v->age_ns - v->deadline_ns;
	/* Inside a collective: stopped; or running on a CPU, not waiting on a
	 * rank the transport names, while a rank of its node has left it (the
	 * op is done: gloo's threads finished it, its main thread spins). */
	if (v->page.phase != DDP_PHASE_COLLECTIVE || v->ps == HANG_PS_STOPPED ||
	    (v->behind && v->ps == HANG_PS_RUNNING && v->page.waiting_on < 0)) {
		j.verdict = HANG_CULPRIT;
		return j;
	}
	j.verdict = HANG_VICTIM;
	if (v->page.waiting_on >= 0 && v->page.waiting_on != v->rank)
		j.waits_on = v->page.waiting_on;
	return j;
}

const char *hang_op_name(uint32_t op)
{
	static const char *const names[DDP_OP_COUNT] = {
	    [DDP_OP_NONE] = "collective",     [DDP_OP_ALLREDUCE] = "allreduce",
	    [DDP_OP_BROADCAST] = "broadcast", [DDP_OP_BARRIER] = "barrier",
	    [DDP_OP_ALLGATHER] = "allgather", [DDP_OP_OTHER] = "collective",
	};

	return op < DDP_OP_COUNT ? names[op] : "collective";
}

const char *hang_phase_name(uint32_t phase)
{
	static const char *const names[DDP_PHASE_COUNT] = {
	    [DDP_PHASE_NONE] = "no phase",	   [DDP_PHASE_STARTUP] = "start-up",
	    [DDP_PHASE_REFORM] = "re-formation",   [DDP_PHASE_HANDOVER] = "hand-over",
	    [DDP_PHASE_COMPUTE] = "compute",	   [DDP_PHASE_COLLECTIVE] = "collective",
	    [DDP_PHASE_CHECKPOINT] = "checkpoint", [DDP_PHASE_EVAL] = "evaluation",
	    [DDP_PHASE_FINAL] = "final save",	   [DDP_PHASE_SHUTDOWN] = "shutdown",
	};

	return phase < DDP_PHASE_COUNT ? names[phase] : "unknown phase";
}

int hang_pstate_words(enum hang_pstate ps, const char *wchan, char *buf, size_t len)
{
	switch (ps) {
	case HANG_PS_STOPPED:
		return snprintf(buf, len, "stopped");
	case HANG_PS_RUNNING:
		return snprintf(buf, len, "running on a CPU (spinning)");
	case HANG_PS_BLOCKED:
		return snprintf(buf, len, "blocked in the kernel (%s)",
				wchan && *wchan ? wchan : "wait channel unknown");
	case HANG_PS_GONE:
		return snprintf(buf, len, "gone");
	default:
		return snprintf(buf, len, "unknown");
	}
}

int hang_what(const struct hang_view *v, uint32_t next_op, char *buf, size_t len)
{
	const struct ddp_progress *p = &v->page;

	if (p->phase == DDP_PHASE_COLLECTIVE)
		return snprintf(buf, len, "has not left %s #%llu", hang_op_name(p->op),
				(unsigned long long)p->seq);
	if (p->phase == DDP_PHASE_COMPUTE)
		return snprintf(buf, len, "has not entered %s #%llu",
				hang_op_name(next_op != DDP_OP_NONE ? next_op : p->op),
				(unsigned long long)p->seq + 1);
	return snprintf(buf, len, "is stuck in %s (last collective %s #%llu)",
			hang_phase_name(p->phase), hang_op_name(p->op), (unsigned long long)p->seq);
}

int hang_line(const struct hang_view *v, const struct hang_judgement *j, uint32_t next_op,
	      char *buf, size_t len)
{
	char what[96], state[96];

	hang_what(v, next_op, what, sizeof(what));
	hang_pstate_words(v->ps, v->wchan, state, sizeof(state));
	return snprintf(buf, len,
			"hang: node %d rank %d pid %d %s: %.2f s past its deadline of %.2f s "
			"(step %llu); its process is %s%s%s",
			v->node, v->rank, v->pid, what, (double)j->late_ns / 1e9,
			(double)v->deadline_ns / 1e9, (unsigned long long)v->page.step, state,
			v->why[0] ? "; " : "", v->why);
}
