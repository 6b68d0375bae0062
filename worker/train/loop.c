/*
 * loop.c - ddp-train's training loop and held-out evaluation.
 */
#include "replica_check.h"
#include "trainer.h"

#include "log.h"
#include "timeutil.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* Wall-clock time, Unix seconds with the sub-second part. */
static double time_unix_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* This process's CPU time (every thread), seconds. */
static double time_cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One step's clock for the progress page (ddp.h, ddp_progress_step):
 * started before each try of a step, reported once it is committed. */
struct step_clock {
	uint64_t t0_ns;
	double comm0_s; /* t->comm_wait_s at the start */
};

static void step_clock_start(const struct trainer *t, struct step_clock *c)
{
	c->t0_ns = time_now_ns();
	c->comm0_s = t->comm_wait_s;
}

/* The step just committed: its duration since the clock started, the time
 * inside collectives (t->comm_wait_s's growth) and outside, the shards
 * this rank computed (0 outside shard mode). */
static void step_clock_report(const struct trainer *t, const struct step_clock *c)
{
	uint64_t step_ns = time_now_ns() - c->t0_ns;
	double wait_s = t->comm_wait_s - c->comm0_s;
	uint64_t wait_ns = wait_s > 0 ? (uint64_t)(wait_s * 1e9) : 0;

	if (wait_ns > step_ns)
		wait_ns = step_ns;
	ddp_progress_step(t->ddp, t->step, step_ns, step_ns - wait_ns, wait_ns,
			  (uint32_t)trainer_shards_count(t));
}

/* Interval accumulators for the progress line. */
struct loop_window {
	uint64_t t0_ns, steps, samples;
	double loss_sum, correct, comm_s0;
};

int trainer_load_batch(struct trainer *t, const struct dataset *ds, const size_t *idx, size_t rows)
{
	size_t f = (size_t)ds->features;
	int ret;

	for (size_t i = 0; i < rows; i++) {
		memcpy(t->hx + i * f, ds->x + idx[i] * f, f * sizeof(float));
		t->hy[i] = ds->y[idx[i]];
	}
	ret = t->ops->copy_h2d(t->kctx, t->dx, t->hx, rows * f * sizeof(float));
	if (ret == 0)
		ret = t->ops->copy_h2d(t->kctx, t->dy, t->hy, rows * sizeof(int32_t));
	return ret;
}

/* The batch of step t->step: derived from the step alone, so a resumed run
 * sees exactly the batches the interrupted one would have. */
static int loop_next_batch(struct trainer *t)
{
	uint64_t epoch = t->step / t->steps_per_epoch;
	size_t pos = (size_t)(t->step % t->steps_per_epoch) * (size_t)t->cfg.batch_size;
	size_t rows = (size_t)t->cfg.batch_size;
	int ret = ddp_sampler_seek(&t->sampler, epoch, pos);

	if (ret == 0 && ddp_sampler_next_batch(&t->sampler, t->idx, rows) != rows)
		ret = -EINVAL;
	return ret ? ret : trainer_load_batch(t, &t->train, t->idx, rows);
}

/* One synchronous data-parallel step; out = summed loss, correct. */
static int loop_step(struct trainer *t, float out[2])
{
	int rows = (int)t->cfg.batch_size;
	const float *logits;
	uint64_t t0;
	int ret = loop_next_batch(t);

	if (ret == 0 && t->reducer) {
		t0 = time_now_ns();
		ret = ddp_reducer_sync_buffers(t->reducer);
		if (ret == 0)
			ret = ddp_reducer_prepare(t->reducer, 1);
		t->comm_wait_s += (double)(time_now_ns() - t0) * 1e-9;
	}
	if (ret == 0)
		ret = model_forward(&t->model, t->dx, rows, true, &logits);
	if (ret == 0)
		ret = model_loss_backward(&t->model, t->dx, t->dy, rows, true, out);
	if (ret == 0 && t->reducer) {
		t0 = time_now_ns();
		ret = ddp_reducer_finish(t->reducer);
		t->comm_wait_s += (double)(time_now_ns() - t0) * 1e-9;
	}
	if (ret == 0)
		ret = optim_step(&t->optim, &t->model, t->step, t->total_steps);
	return ret;
}

/* Held-out loss and accuracy with the running statistics. */
static int trainer_evaluate(struct trainer *t, double *loss, double *accuracy)
{
	const struct dataset *ds = &t->held_out;
	double lsum = 0.0, correct = 0.0;
	const float *logits;
	float out[2];
	int ret = 0;

	for (size_t start = 0; ret == 0 && start < ds->n; start += (size_t)t->eval_rows) {
		size_t rows =
		    ds->n - start < (size_t)t->eval_rows ? ds->n - start : (size_t)t->eval_rows;

		for (size_t i = 0; i < rows; i++)
			t->idx[i] = start + i;
		ret = trainer_load_batch(t, ds, t->idx, rows);
		if (ret == 0)
			ret = model_forward(&t->model, t->dx, (int)rows, false, &logits);
		if (ret == 0)
			ret = model_loss_backward(&t->model, t->dx, t->dy, (int)rows, false, out);
		lsum += out[0];
		correct += out[1];
	}
	*loss = ds->n ? lsum / (double)ds->n : 0.0;
	*accuracy = ds->n ? correct / (double)ds->n : 0.0;
	return ret;
}

static void loop_window_start(struct trainer *t, struct loop_window *w)
{
	memset(w, 0, sizeof(*w));
	w->t0_ns = time_now_ns();
	w->comm_s0 = t->comm_wait_s;
}

/* The first lost output write is said at once; the run goes on and
 * trainer_run's end counts them all into its result. */
static void loop_output_lost(struct trainer *t, int err)
{
	const struct metrics *m = &t->metrics;

	if (err == 0 || m->lost_records + m->lost_lines != 1)
		return;
	if (m->lost_records)
		log_error("cannot write to the metrics file '%s': %s; records from step %llu on "
			  "are lost (training goes on; the run will fail at the end)",
			  t->cfg.metrics, strerror(-err), (unsigned long long)t->step);
	else
		log_error("cannot write the progress lines to stdout: %s (from step %llu; "
			  "training goes on; the run will fail at the end)",
			  strerror(-err), (unsigned long long)t->step);
}

/* Closes the outputs (rank 0); -errno when any write was lost, with a
 * message that counts them. */
static int loop_close_outputs(struct trainer *t)
{
	const struct metrics *m = &t->metrics;
	int ret = t->rank0_duties ? metrics_close(&t->metrics) : 0;

	if (ret < 0 && m->lost_records)
		log_error("metrics file '%s': %llu of %llu record(s) lost (%s): check the disk "
			  "and the path",
			  t->cfg.metrics, (unsigned long long)m->lost_records,
			  (unsigned long long)m->records, strerror(-m->err));
	if (ret < 0 && m->lost_lines)
		log_error("%llu progress line(s) could not be written to stdout (%s)",
			  (unsigned long long)m->lost_lines, strerror(-m->err));
	return ret;
}

/* Prints the interval's progress line (rank 0) and starts a new window. */
static void loop_report(struct trainer *t, struct loop_window *w)
{
	double dt = (double)(time_now_ns() - w->t0_ns) * 1e-9;
	struct metrics_train r = {
	    .epoch = (t->step - 1) / t->steps_per_epoch,
	    .epochs = t->epochs,
	    .step = t->step,
	    .total_steps = t->total_steps,
	    .lr = t->optim.last_lr,
	    .loss = w->samples ? w->loss_sum / (double)w->samples : 0.0,
	    .accuracy = w->samples ? w->correct / (double)w->samples : 0.0,
	    .samples_per_s = dt > 0 ? (double)(w->steps * t->global_batch) / dt : 0.0,
	    .allreduce_share = dt > 0 ? (t->comm_wait_s - w->comm_s0) / dt : 0.0,
	    .grad_norm = t->optim.last_norm,
	    .time = time_unix_s(),
	    .world = t->world,
	};

	if (t->rank == 0)
		loop_output_lost(t, metrics_log_train(&t->metrics, &r));
	loop_window_start(t, w);
}

static int loop_eval_report(struct trainer *t)
{
	struct metrics_eval r = {
	    .epoch = (t->step - 1) / t->steps_per_epoch,
	    .step = t->step,
	    .samples = t->held_out.n,
	};
	int ret;

	if (t->rank != 0 || t->held_out.n == 0)
		return 0;
	ddp_progress_phase(t->ddp, DDP_PHASE_EVAL);
	ret = trainer_evaluate(t, &r.loss, &r.accuracy);
	ddp_progress_phase(t->ddp, DDP_PHASE_COMPUTE);
	if (ret == 0)
		loop_output_lost(t, metrics_log_eval(&t->metrics, &r));
	return ret;
}

/* Whoever is rank 0 now writes: after a re-formation, maybe a process that
 * was not at the start (trainer_take_rank0). */
static int loop_checkpoint(struct trainer *t, const char *file)
{
	char path[CONFIG_STR_MAX + 32];
	int ret = trainer_take_rank0(t);

	snprintf(path, sizeof(path), "%s/%s", t->cfg.checkpoint_dir, file);
	return ret ? ret : trainer_ckpt_save(t, path);
}

/* latest.safetensors, keeping the one it replaces as previous.safetensors
 * (a restart falls back to it when latest fails its checks). Each rename
 * is atomic, so at every moment one of the two is a complete checkpoint;
 * a restart finding no latest (killed between the renames) takes previous. */
static int loop_checkpoint_latest(struct trainer *t)
{
	char latest[CONFIG_STR_MAX + 32], previous[CONFIG_STR_MAX + 32];
	int ret = trainer_take_rank0(t);

	if (ret < 0)
		return ret;
	snprintf(latest, sizeof(latest), "%s/latest.safetensors", t->cfg.checkpoint_dir);
	snprintf(previous, sizeof(previous), "%s/previous.safetensors", t->cfg.checkpoint_dir);
	if (t->rank == 0 && rename(latest, previous) < 0 && errno != ENOENT) {
		ret = -errno;
		log_error("cannot keep '%s' as '%s': %s", latest, previous, strerror(-ret));
		return ret;
	}
	return trainer_ckpt_save(t, latest);
}

/* Work after step t->step finished: output, evaluation, checkpoints. */
static int loop_after_step(struct trainer *t, struct loop_window *w)
{
	uint64_t every = t->cfg.log_every > 0 ? (uint64_t)t->cfg.log_every : t->steps_per_epoch;
	bool epoch_end = t->step % t->steps_per_epoch == 0 || t->step == t->total_steps;
	int ret = trainer_take_rank0(t);

	if (ret < 0)
		return ret;
	if (t->rank == 0)
		metrics_bar(&t->metrics, t->step, t->total_steps,
			    w->samples ? w->loss_sum / (double)w->samples : 0.0);
	if (t->step % every == 0 || t->step == t->total_steps)
		loop_report(t, w);
	if (epoch_end && (t->cfg.eval_every_epoch || t->step == t->total_steps))
		ret = loop_eval_report(t);
	if (ret == 0 && t->cfg.checkpoint_dir[0] && t->cfg.checkpoint_every > 0 &&
	    t->step % (uint64_t)t->cfg.checkpoint_every == 0 && t->step < t->total_steps) {
		ddp_progress_phase(t->ddp, DDP_PHASE_CHECKPOINT);
		ret = loop_checkpoint_latest(t);
		ddp_progress_phase(t->ddp, DDP_PHASE_COMPUTE);
	}
	return ret;
}

static void loop_fault(const struct trainer *t)
{
	/* The communicator's attempt, not the one at the start: a process
	 * that re-formed in place (a later round) and took the fault rank's
	 * number must not die again. */
	int attempt = t->ddp ? ddp_attempt(t->ddp) : t->attempt;

	if (attempt == 0 && t->cfg.fault_kill_step > 0 &&
	    t->step == (uint64_t)t->cfg.fault_kill_step && t->rank == t->cfg.fault_rank) {
		fprintf(stderr, "ddp-train: rank %d: fault_kill_step %llu: killing myself\n",
			t->rank, (unsigned long long)t->step);
		raise(SIGKILL);
	}
}

/* --step_sleep_ms: a step that lasts at least that long, on every rank. */
static void loop_pace(const struct trainer *t)
{
	struct timespec ts;

	if (t->cfg.step_sleep_ms <= 0)
		return;
	ts.tv_sec = t->cfg.step_sleep_ms / 1000;
	ts.tv_nsec = (t->cfg.step_sleep_ms % 1000) * 1000000L;
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static void loop_say_start(const struct trainer *t)
{
	if (t->shards)
		log_info("%d rank(s), global batch %lld in %lld virtual shards (ghost BatchNorm, "
			 "exact reduction), %llu steps (%llu per epoch), %zu train / %zu held-out "
			 "samples, kernels %s",
			 t->world, (long long)t->cfg.global_batch_size,
			 (long long)t->cfg.virtual_shards, (unsigned long long)t->total_steps,
			 (unsigned long long)t->steps_per_epoch, t->train.n, t->held_out.n,
			 t->ops->name);
	else
		log_info("%d rank(s) x batch %lld, %llu steps (%llu per epoch), %zu train / %zu "
			 "held-out samples, kernels %s%s",
			 t->world, (long long)t->cfg.batch_size, (unsigned long long)t->total_steps,
			 (unsigned long long)t->steps_per_epoch, t->train.n, t->held_out.n,
			 t->ops->name, t->cfg.sync_bn ? ", SyncBatchNorm" : "");
}

/* A step's error that a lost peer or the launcher's new round causes
 * (worker/README.md, "Failures"), as against the step's own: libddp's one
 * list, the one ddp_rejoin decides with. */
static bool loop_comm_failed(int ret)
{
	return ddp_rejoin_retryable(ret);
}

/* After a step's, an evaluation's or a checkpoint's error ret: re-forms in
 * place when the membership caused it (a --global_batch_size run that the
 * launcher resizes). Returns 0 once re-formed; the re-formation's own
 * error when it failed (-EPROTO, -ETIMEDOUT...: the reason the run ends,
 * not the collective's -ECONNRESET that led to it); else ret as it was
 * (not the membership's, or not resizable: -ENOTSUP). */
static int loop_reform(struct trainer *t, int ret)
{
	int rret;

	if (ret >= 0 || !t->shards || !loop_comm_failed(ret))
		return ret;
	replica_check_cancel(t); /* the re-formation may write the state */
	rret = trainer_shards_reform(t);
	return rret == -ENOTSUP ? ret : rret;
}

/* final.safetensors: a collective like any step. When the membership
 * changes during it (a node dies or joins), re-form and save again in the
 * new membership: the ranks that had not finished the last step take its
 * result in the re-formation (trainer_state_sync), so every rank holds it,
 * and rank 0 of the new round writes the same bits. */
static int loop_final_save(struct trainer *t)
{
	int ret;

	loop_fault(t);
	do {
		ddp_progress_phase(t->ddp, DDP_PHASE_FINAL);
		ret = loop_checkpoint(t, "final.safetensors");
	} while (ret < 0 && (ret = loop_reform(t, ret)) == 0);
	return ret;
}

/* The last step's replicas compared (no step follows to wait for the
 * digest): healed in place, or the run stops; a collective's failure
 * re-forms as for a step, and the re-formation hands the state over. */
static int loop_replica_last(struct trainer *t)
{
	int ret = replica_check_finish(t);

	if (ret == REPLICA_HEALED)
		return 0;
	return loop_reform(t, ret);
}

/* The steps to the end, the final save and the closing lines. */
static int loop_run(struct trainer *t)
{
	uint64_t t0 = time_now_ns(), first = t->step;
	double comm0 = t->comm_wait_s, cpu0 = time_cpu_s();
	struct step_clock clock;
	struct loop_window w;
	float out[2];
	int ret = 0, oret;

	if (t->rank == 0)
		loop_say_start(t);
	ddp_progress_phase(t->ddp, DDP_PHASE_COMPUTE);
	loop_window_start(t, &w);
	while (ret == 0 && t->step < t->total_steps) {
		step_clock_start(t, &clock);
		loop_fault(t);
		loop_pace(t);
		ret = t->shards ? trainer_shards_step(t, out) : loop_step(t, out);
		/* A replica that differed took the majority's state: the step
		 * again, on the healed state. */
		if (ret == REPLICA_HEALED) {
			ret = 0;
			continue;
		}
		/* A collective failed (a peer gone, the round over): in place,
		 * the same step again with the new membership. */
		if (ret < 0) {
			ret = loop_reform(t, ret);
			continue;
		}
		t->step++;
		step_clock_report(t, &clock);
		w.steps++;
		w.samples += t->step_samples;
		w.loss_sum += out[0];
		w.correct += out[1];
		ret = replica_check_after_step(t);
		ret = ret ? ret : loop_after_step(t, &w);
		/* The membership changed after the step was committed here (in
		 * an evaluation or a checkpoint's collective): re-form; the
		 * ranks that had not committed it take it from this one. */
		ret = loop_reform(t, ret);
	}
	if (ret == 0)
		ret = loop_replica_last(t);
	if (ret == 0 && t->cfg.checkpoint_dir[0])
		ret = loop_final_save(t);
	ddp_progress_phase(t->ddp, DDP_PHASE_SHUTDOWN);
	if (ret == 0 && t->rank == 0) {
		double dt = (double)(time_now_ns() - t0) * 1e-9, cpu = time_cpu_s() - cpu0;
		uint64_t steps = t->step - first;

		/* The CPU time per step is rank 0's own: on a shared machine it
		 * is steadier than the wall clock (which other load stretches). */
		log_info("done: %llu steps in %.2f s (%.0f samples/s, all-reduce wait %.1f%%, "
			 "cpu %.3f ms/step)",
			 (unsigned long long)steps, dt,
			 dt > 0 ? (double)(steps * t->global_batch) / dt : 0,
			 dt > 0 ? 100.0 * (t->comm_wait_s - comm0) / dt : 0.0,
			 steps ? 1e3 * cpu / (double)steps : 0.0);
		replica_check_report(t, steps ? dt / (double)steps : 0.0);
	}
	if (ret == 0) {
		trainer_numerics_report(t);
		trainer_balance_report(t);
		replica_check_report_skipped(t);
	}
	if (ret < 0 && t->ddp && ddp_error(t->ddp)[0])
		log_error("training stopped at step %llu: %s", (unsigned long long)t->step,
			  ddp_error(t->ddp));
	oret = loop_close_outputs(t);
	return ret < 0 ? ret : oret;
}

/* The replica check lives as long as the loop: here rather than in
 * trainer_init, so that trainer.c does not include replica_check.h (whose
 * parts include train_state.h and trainer.h: a module circle). */
int trainer_run(struct trainer *t)
{
	int ret = replica_check_init(t);

	if (ret == 0)
		ret = loop_run(t);
	/* Its helper thread reads the model's state. */
	replica_check_release(t);
	return ret;
}
