/*
 * train_progress.c - ddp-train's reports on the progress page
 * (train_progress.h).
 */
#include "train_progress.h"

#include "timeutil.h"
#include "trainer.h"

void train_progress_phase(const struct trainer *t, enum ddp_progress_phase phase)
{
	ddp_progress_phase(t->ddp, phase);
}

void train_step_clock_start(const struct trainer *t, struct train_step_clock *c)
{
	c->t0_ns = time_now_ns();
	c->comm0_s = t->comm_wait_s;
}

void train_progress_step(const struct trainer *t, const struct train_step_clock *c)
{
	uint64_t step_ns = time_now_ns() - c->t0_ns;
	double wait_s = t->comm_wait_s - c->comm0_s;
	uint64_t wait_ns = wait_s > 0 ? (uint64_t)(wait_s * 1e9) : 0;

	if (wait_ns > step_ns)
		wait_ns = step_ns;
	ddp_progress_step(t->ddp, t->step, step_ns, step_ns - wait_ns, wait_ns,
			  (uint32_t)trainer_shards_count(t));
}
