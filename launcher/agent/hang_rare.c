/* A worker in a phase too rare to learn a deadline (see hang_rare.h). */
#include "hang_rare.h"

#include <stdio.h>

enum hang_rare_why hang_rare_judge(const struct hang_rare_facts *f, uint64_t floor_ns)
{
	if (f->phase == DDP_PHASE_COMPUTE || f->phase == DDP_PHASE_COLLECTIVE ||
	    f->age_ns <= floor_ns)
		return HANG_RARE_NONE;
	if (f->ps == HANG_PS_STOPPED)
		return HANG_RARE_STOPPED;
	/* Shutdown follows the committed last step and the saved model: a
	 * peer's teardown that ended long ago says this one's is stuck, be
	 * it spinning or asleep in a wait that never ends; one that writes,
	 * wakes, or waits on the disk is doing the script's own work. */
	if (f->phase == DDP_PHASE_SHUTDOWN && f->peer_done_ns > floor_ns &&
	    f->still_ns > floor_ns && !f->disk_wait)
		return HANG_RARE_PEER_DONE;
	/* The final save, and shutdown alike: running on a CPU without one
	 * sleep and without one byte written is no save, however slow (a
	 * save writes; a wait sleeps). Inside the save's collective the
	 * others wait on rank 0's write, which may be long: judged only
	 * once a rank of its node got past it. */
	if ((f->phase == DDP_PHASE_FINAL || f->phase == DDP_PHASE_SHUTDOWN) &&
	    f->ps == HANG_PS_RUNNING && f->still_ns > floor_ns && (!f->inside || f->peer_left))
		return HANG_RARE_SPINNING;
	return HANG_RARE_NONE;
}

int hang_rare_words(enum hang_rare_why why, const struct hang_rare_facts *f, char *buf, size_t len)
{
	switch (why) {
	case HANG_RARE_PEER_DONE:
		return snprintf(buf, len,
				"rank %d of this node finished its shutdown %.1f s ago; this one "
				"has not written or woken for %.1f s",
				f->peer_rank, (double)f->peer_done_ns / 1e9,
				(double)f->still_ns / 1e9);
	case HANG_RARE_SPINNING:
		return snprintf(buf, len, "it wrote nothing and never slept for %.1f s",
				(double)f->still_ns / 1e9);
	default:
		if (len)
			buf[0] = '\0';
		return 0;
	}
}
