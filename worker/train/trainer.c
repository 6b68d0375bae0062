/*
 * trainer.c - setting up and tearing down ddp-train's job.
 */
#include "trainer.h"

#include "fileutil.h"
#include "log.h"
#include "timeutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Rows per forward pass when evaluating. */
#define TRAINER_EVAL_ROWS 256

static int trainer_init_ddp(struct trainer *t)
{
	struct ddp_options opts;
	char err[1024] = "";
	int ret;

	t->rank = 0;
	t->world = 1;
	t->attempt = 0;
	if (!getenv("WORLD_SIZE") && !getenv("RANK"))
		return 0; /* run by hand: one process, no store */
	ddp_options_init(&opts);
	if (strcmp(t->cfg.device, "cpu") == 0)
		opts.backend = DDP_BACKEND_CPU;
	else if (strcmp(t->cfg.device, "cuda") == 0)
		opts.backend = DDP_BACKEND_NCCL;
	ret = ddp_init(&opts, &t->ddp, err, sizeof(err));
	if (ret < 0) {
		log_error("cannot join the training group: %s", err);
		return ret;
	}
	t->rank = ddp_rank(t->ddp);
	t->world = ddp_world_size(t->ddp);
	t->attempt = ddp_attempt(t->ddp);
	/* Only the fixed global batch redoes a step in place; otherwise a
	 * collective error ends the process and the launcher restarts it. */
	if (t->cfg.global_batch_size == 0)
		ddp_set_resizable(t->ddp, 0);
	return 0;
}

#ifdef DDP_TRAIN_CUDA
/* Tells libddp which stream the kernels run on, so that its all-reduces
 * start when the gradients they read are written (and its copies finish
 * before later kernels read them), without synchronising the device. */
static int trainer_share_stream(struct trainer *t)
{
	int ret = t->ddp ? ddp_set_compute_stream(t->ddp, t->ops->stream(t->kctx)) : 0;

	if (ret < 0)
		log_error("cannot share the CUDA stream with libddp: %s", ddp_error(t->ddp));
	return ret;
}
#endif

/* Picks the kernel table matching cfg.device and libddp's backend. */
static int trainer_init_kernels(struct trainer *t)
{
	int dev_mem = t->ddp ? ddp_device_memory(t->ddp) : -1;
	bool want_cuda = strcmp(t->cfg.device, "cuda") == 0 ||
			 (strcmp(t->cfg.device, "auto") == 0 && dev_mem != 0);
	int ret;

	t->ops = &kernel_ops_cpu;
#ifdef DDP_TRAIN_CUDA
	if (want_cuda) {
		const char *lr = getenv("LOCAL_RANK");
		int device = t->ddp ? ddp_device(t->ddp) : (lr ? atoi(lr) : 0);

		ret = kernel_ops_cuda.ctx_new(device < 0 ? 0 : device, &t->kctx);
		if (ret == 0) {
			t->ops = &kernel_ops_cuda;
			return trainer_share_stream(t);
		}
		if (strcmp(t->cfg.device, "cuda") == 0 || dev_mem == 1) {
			log_error("cannot use CUDA device %d (%d): use --device cpu", device, ret);
			return ret;
		}
	}
#else
	if (want_cuda && (strcmp(t->cfg.device, "cuda") == 0 || dev_mem == 1)) {
		log_error("this ddp-train was built without CUDA kernels: use --device cpu "
			  "(and DDP_BACKEND=cpu)");
		return -ENODEV;
	}
#endif
	if (dev_mem == 1) {
		log_error("libddp chose a GPU backend but the kernels run on the CPU: "
			  "set DDP_BACKEND=cpu or --device cuda");
		return -EINVAL;
	}
	kernel_cpu_set_threads(
	    numerics_blas_threads((long long)t->cfg.threads, (long long)t->cfg.global_batch_size));
	ret = kernel_ops_cpu.ctx_new(0, &t->kctx);
	return ret;
}

/* The digits CSV at data_path, with a message that says what is wrong. */
static int trainer_load_digits(struct trainer *t, struct dataset *all)
{
	const char *path = t->cfg.data_path;
	size_t bad_line = 0;
	mode_t mode = 0;
	int fd = file_open_regular(path, &mode), ret;

	if (fd == -EISDIR || fd == -EINVAL) {
		log_error("the digits data '%s' is %s, not a file: set data_path to the CSV file",
			  path, file_kind(mode));
		return fd;
	}
	if (fd < 0) {
		log_error("cannot open the digits data '%s': %s (set data_path)", path,
			  strerror(-fd));
		return fd;
	}
	ret = data_load_csv_fd(fd, 64, 1.0f / 16.0f, all, &bad_line);
	if (ret == -EINVAL && bad_line)
		log_error("'%s' line %zu is not 64 numbers and a label", path, bad_line);
	else if (ret == -ENODATA)
		log_error("the digits data '%s' holds no samples (an empty file?): set data_path "
			  "to the CSV file",
			  path);
	else if (ret < 0)
		log_error("cannot read the digits data '%s': %s (set data_path)", path,
			  strerror(-ret));
	return ret;
}

static int trainer_init_data(struct trainer *t)
{
	struct dataset all;
	int ret;

	if (strcmp(t->cfg.data, "digits") == 0) {
		ret = trainer_load_digits(t, &all);
	} else {
		ret = data_synthetic((size_t)t->cfg.synthetic_samples,
				     (int)t->cfg.synthetic_features, (int)t->cfg.synthetic_classes,
				     (uint64_t)t->cfg.seed + 1000003u, &all);
		if (ret < 0)
			log_error("cannot generate the synthetic data: %s", strerror(-ret));
	}
	if (ret < 0)
		return ret;
	ret =
	    data_split(&all, t->cfg.held_out, (uint64_t)t->cfg.split_seed, &t->train, &t->held_out);
	data_release(&all);
	if (ret == 0 && t->train.n < (size_t)t->world) {
		log_error("only %zu training samples for %d ranks: use more data", t->train.n,
			  t->world);
		ret = -EINVAL;
	}
	return ret;
}

/* --global_batch_size: one permutation per epoch whatever the rank count
 * (a sampler of one replica), G samples of it per step. */
static int trainer_init_global_schedule(struct trainer *t)
{
	int ret = ddp_sampler_init(&t->sampler, t->train.n, 1, 0, (uint64_t)t->cfg.seed, 1, 0);

	if (ret < 0)
		return ret;
	t->step_samples = t->global_batch = (uint64_t)t->cfg.global_batch_size;
	t->steps_per_epoch = t->sampler.num_samples / t->global_batch;
	if (t->steps_per_epoch == 0) {
		log_error("global_batch_size %lld is larger than the %zu training samples: "
			  "lower it",
			  (long long)t->cfg.global_batch_size, t->sampler.num_samples);
		return -EINVAL;
	}
	return 0;
}

static int trainer_init_rank_schedule(struct trainer *t)
{
	int ret = ddp_sampler_init(&t->sampler, t->train.n, (size_t)t->world, (size_t)t->rank,
				   (uint64_t)t->cfg.seed, 1, 0);

	if (ret < 0)
		return ret;
	t->step_samples = (uint64_t)t->cfg.batch_size;
	t->global_batch = t->step_samples * (uint64_t)t->world;
	t->steps_per_epoch = t->sampler.num_samples / (size_t)t->cfg.batch_size;
	if (t->steps_per_epoch == 0) {
		log_error("batch_size %lld is larger than a rank's %zu samples per epoch: "
			  "lower it",
			  (long long)t->cfg.batch_size, t->sampler.num_samples);
		return -EINVAL;
	}
	return 0;
}

static int trainer_init_schedule(struct trainer *t)
{
	int ret = t->cfg.global_batch_size > 0 ? trainer_init_global_schedule(t)
					       : trainer_init_rank_schedule(t);

	if (ret < 0)
		return ret;
	t->total_steps = t->cfg.max_steps > 0 ? (uint64_t)t->cfg.max_steps
					      : (uint64_t)t->cfg.epochs * t->steps_per_epoch;
	t->epochs = (t->total_steps + t->steps_per_epoch - 1) / t->steps_per_epoch;
	return 0;
}

static int trainer_allreduce_sum(void *arg, float *buf, size_t n)
{
	struct trainer *t = arg;
	uint64_t t0 = time_now_ns();
	int ret = ddp_allreduce(t->ddp, buf, n, DDP_FLOAT32, DDP_SUM);

	t->comm_wait_s += (double)(time_now_ns() - t0) * 1e-9;
	return ret;
}

static int trainer_grad_ready(void *arg, int index)
{
	struct trainer *t = arg;

	return ddp_reducer_grad_ready(t->reducer, (size_t)t->param_of_tensor[index]);
}

static int trainer_grads_alloc(void *arg, size_t bytes, void **out)
{
	struct trainer *t = arg;

	return ddp_mem_alloc(t->ddp, bytes, out);
}

static void trainer_grads_free(void *arg, void *ptr)
{
	struct trainer *t = arg;

	ddp_mem_free(t->ddp, ptr);
}

/* Says how much memory the model asks for and that it is too large. */
static void trainer_too_large(const struct trainer *t, const char *what)
{
	log_error("the model (hidden %s) needs %.1f GiB of %s memory for its parameters, "
		  "gradients, SGD momentum and activations, which %s: the model is too large; "
		  "use smaller --hidden widths",
		  t->cfg.hidden, (double)t->model_bytes / (1024.0 * 1024.0 * 1024.0),
		  t->ops == &kernel_ops_cpu ? "host" : "GPU", what);
}

/* The memory the model and its optimizer need; on the CPU, refused before
 * any allocation when it exceeds the machine's memory (allocating would
 * succeed on paper and the kernel would kill the process when the pages
 * are touched). */
static int trainer_check_size(struct trainer *t, const struct model_config *mc)
{
	size_t nparams, bytes = model_memory_bytes(mc, &nparams);
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	char have[64];

	t->model_bytes = bytes + nparams * sizeof(float); /* + momentum */
	if (t->ops != &kernel_ops_cpu || pages <= 0 || page <= 0)
		return 0;
	/* On the CPU, model_init also stages the initial values in host
	 * memory of their own while it copies them in. */
	t->model_bytes += nparams * sizeof(float);
	if (t->model_bytes / (size_t)page < (size_t)pages)
		return 0;
	snprintf(have, sizeof(have), "is more than this machine's %.1f GiB",
		 (double)pages * (double)page / (1024.0 * 1024.0 * 1024.0));
	trainer_too_large(t, have);
	return -ENOMEM;
}

static int trainer_init_model(struct trainer *t)
{
	struct model_config mc = {0};
	struct model_comm comm = {.arg = t, .world = t->world};
	int widths[MODEL_MAX_LAYERS], n = config_hidden_dims(&t->cfg, widths, MODEL_MAX_LAYERS - 1);
	bool shards = t->cfg.global_batch_size > 0;
	int64_t rows;
	int ret;

	if (n < 0)
		return -EINVAL;
	mc.ndims = n + 2;
	mc.dims[0] = t->train.features;
	for (int i = 0; i < n; i++)
		mc.dims[i + 1] = widths[i];
	mc.dims[n + 1] = t->train.classes;
	mc.batchnorm = t->cfg.batchnorm;
	mc.sync_bn = t->cfg.sync_bn;
	mc.bn_eps = 1e-5f;
	mc.bn_momentum = 0.1f;
	rows = shards ? t->cfg.global_batch_size / t->cfg.virtual_shards : t->cfg.batch_size;
	t->eval_rows = rows > TRAINER_EVAL_ROWS ? (int)rows : TRAINER_EVAL_ROWS;
	mc.max_batch = t->eval_rows;
	/* One rank has nothing to reduce: no reducer, no collectives. With
	 * virtual shards, loop_shards.c reduces after the shards' passes. */
	if (t->ddp && t->world > 1 && !shards) {
		comm.allreduce_sum = trainer_allreduce_sum;
		comm.grad_ready = trainer_grad_ready;
		/* The reducer's buckets are ranges of the flat gradient buffer,
		 * reduced in place. In host memory it comes from libddp's
		 * shared-memory arena, so that the node's ranks reduce it
		 * directly; on a GPU the kernels' own allocation does as well. */
		if (!ddp_device_memory(t->ddp)) {
			comm.grads_alloc = trainer_grads_alloc;
			comm.grads_free = trainer_grads_free;
		}
	}
	ret = trainer_check_size(t, &mc);
	if (ret < 0)
		return ret;
	ret = model_init(&t->model, t->ops, t->kctx, &mc, &comm, (uint64_t)t->cfg.seed);
	if (ret == -ENOMEM)
		trainer_too_large(t, "could not be allocated");
	return ret;
}

static int trainer_init_optim(struct trainer *t)
{
	struct optim_config oc = {
	    .lr = (float)t->cfg.lr,
	    .momentum = (float)t->cfg.momentum,
	    .weight_decay = (float)t->cfg.weight_decay,
	    .bias_lr_mult = (float)t->cfg.bias_lr_mult,
	    .bias_weight_decay = (float)t->cfg.bias_weight_decay,
	    .poly_power = (float)t->cfg.poly_power,
	    .min_lr = (float)t->cfg.min_lr,
	    .warmup_steps = (uint64_t)t->cfg.warmup_steps,
	    .clip_norm = (float)t->cfg.clip_norm,
	};

	int ret;

	if (optim_schedule_parse(t->cfg.schedule, &oc.schedule) < 0)
		return -EINVAL;
	ret = optim_init(&t->optim, &oc, &t->model);
	if (ret == -ENOMEM)
		trainer_too_large(t, "could not be allocated");
	return ret;
}

static void trainer_describe(const struct model *m, int i, struct ddp_param *p)
{
	const struct model_tensor *mt = &m->tensors[i];

	memset(p, 0, sizeof(*p));
	p->name = mt->name;
	p->dtype = DDP_FLOAT32;
	p->ndim = mt->ndim;
	for (int k = 0; k < mt->ndim; k++)
		p->shape[k] = mt->shape[k];
	p->data = model_tensor_data(m, i);
	p->grad = model_tensor_grad(m, i);
	p->requires_grad = !mt->is_buffer;
}

/* The reducer broadcasts rank 0's parameters and buffers, and averages the
 * gradients in buckets. */
static int trainer_init_reducer(struct trainer *t)
{
	const struct model *m = &t->model;
	struct ddp_param *params = calloc((size_t)m->ntensors, sizeof(*params));
	struct ddp_param *buffers = calloc((size_t)m->ntensors, sizeof(*buffers));
	struct ddp_reducer_options ro = {
	    .bucket_cap_bytes = (size_t)(t->cfg.bucket_cap_mb * 1048576.0),
	};
	size_t np = 0, nb = 0;
	int ret = -ENOMEM;

	t->param_of_tensor = calloc((size_t)m->ntensors, sizeof(int));
	if (!params || !buffers || !t->param_of_tensor)
		goto out;
	for (int i = 0; i < m->ntensors; i++) {
		t->param_of_tensor[i] = m->tensors[i].is_buffer ? -1 : (int)np;
		if (m->tensors[i].is_buffer)
			trainer_describe(m, i, &buffers[nb++]);
		else
			trainer_describe(m, i, &params[np++]);
	}
	ret = 0;
	if (t->ddp && t->world > 1 && t->cfg.global_batch_size == 0) {
		ret = ddp_reducer_new(t->ddp, params, np, buffers, nb, &ro, &t->reducer);
		if (ret < 0)
			log_error("cannot set up gradient reduction: %s", ddp_error(t->ddp));
	}
out:
	free(params);
	free(buffers);
	return ret;
}

static int trainer_init_batch(struct trainer *t)
{
	size_t rows = (size_t)t->eval_rows, f = (size_t)t->train.features;
	int ret;

	t->idx = calloc(rows, sizeof(*t->idx));
	t->hx = calloc(rows * f, sizeof(*t->hx));
	t->hy = calloc(rows, sizeof(*t->hy));
	if (!t->idx || !t->hx || !t->hy)
		return -ENOMEM;
	ret = t->ops->alloc(t->kctx, rows * f * sizeof(float), (void **)&t->dx);
	if (ret == 0)
		ret = t->ops->alloc(t->kctx, rows * sizeof(int32_t), (void **)&t->dy);
	return ret;
}

/* Loads path on every rank; all ranks agree on the outcome (any rank's
 * failure is everyone's), so they take the same next step. */
static int trainer_load_agreed(struct trainer *t, const char *path)
{
	float failed = trainer_ckpt_load(t, path) < 0 ? 1.0f : 0.0f;
	int ret = t->ddp ? ddp_allreduce(t->ddp, &failed, 1, DDP_FLOAT32, DDP_SUM) : 0;

	if (ret < 0) {
		log_error("cannot agree on the checkpoint to resume from: %s", ddp_error(t->ddp));
		return ret;
	}
	return failed != 0.0f ? -EINVAL : 0;
}

/* The checkpoints of checkpoint_dir a run may resume from; a plan that
 * refuses them all. */
#define RESUME_N      3
#define RESUME_REFUSE (-2.0f)
static const char *const resume_names[RESUME_N] = {"final", "latest", "previous"};

/* --fresh on the first attempt: rank 0 removes what the dir holds. */
static void trainer_remove_for_fresh(const struct trainer *t)
{
	char path[CONFIG_STR_MAX + 32];

	for (int i = 0; i < RESUME_N; i++) {
		snprintf(path, sizeof(path), "%s/%s.safetensors", t->cfg.checkpoint_dir,
			 resume_names[i]);
		if (unlink(path) == 0)
			log_warn("removed '%s' (--fresh: starting afresh)", path);
	}
}

/* Rank 0 looks at checkpoint_dir's checkpoints: plan[k] is the index of
 * the k-th to try, newest step first (-1: no more), or plan[0] is
 * RESUME_REFUSE when one is another job's or past this run's end (said
 * here: a run never replaces them with older steps). */
static void trainer_resume_plan(const struct trainer *t, float plan[RESUME_N])
{
	char path[CONFIG_STR_MAX + 32], why[512];
	uint64_t step[RESUME_N];
	int n = 0, nbad = 0, k;

	for (int i = 0; i < RESUME_N; i++) {
		int ret;

		plan[i] = -1;
		snprintf(path, sizeof(path), "%s/%s.safetensors", t->cfg.checkpoint_dir,
			 resume_names[i]);
		if (access(path, F_OK) != 0)
			continue;
		ret = trainer_ckpt_peek(t, path, &step[i], why, sizeof(why));
		if (ret == 0 || (ret == 1 && step[i] > t->total_steps)) {
			if (ret == 1)
				snprintf(why, sizeof(why),
					 "it is at step %llu, past this run's %llu",
					 (unsigned long long)step[i],
					 (unsigned long long)t->total_steps);
			log_error("checkpoint_dir '%s' holds '%s', not a checkpoint this run may "
				  "replace: %s; give another checkpoint_dir, or pass --fresh to "
				  "start from step 0 and replace it",
				  t->cfg.checkpoint_dir, path, why);
			plan[0] = RESUME_REFUSE;
			return;
		}
		if (ret < 0) {
			log_warn("cannot use '%s': %s; falling back to an older checkpoint", path,
				 why);
			nbad++;
			continue;
		}
		k = n++;
		for (; k > 0 && step[(int)plan[k - 1]] < step[i]; k--)
			plan[k] = plan[k - 1];
		plan[k] = (float)i;
	}
	if (n == 0 && nbad > 0) {
		log_error("no usable checkpoint in '%s' (see above): pass --fresh to start from "
			  "step 0 and replace them, or --resume with a good one",
			  t->cfg.checkpoint_dir);
		plan[0] = RESUME_REFUSE;
	}
}
/* Tries the planned checkpoints in turn, each load agreed by all ranks (a
 * damaged one falls back to the next). Returns 1 when one was loaded, 0
 * when there was none, -EEXIST when those there all failed (said here). */
static int trainer_resume_dir(struct trainer *t, const float plan[RESUME_N])
{
	char path[CONFIG_STR_MAX + 32], who[32] = "";
	int ret = 0, tried = 0;

	if (t->attempt > 0)
		snprintf(who, sizeof(who), "restart %d: ", t->attempt);
	for (int k = 0; k < RESUME_N && plan[k] >= 0; k++) {
		snprintf(path, sizeof(path), "%s/%s.safetensors", t->cfg.checkpoint_dir,
			 resume_names[(int)plan[k]]);
		if (tried && t->rank == 0)
			log_warn("%sfalling back to '%s', the next newest checkpoint", who, path);
		tried++;
		ret = trainer_load_agreed(t, path);
		if (ret == 0 && t->rank == 0)
			log_info("%sresumed from '%s' at step %llu%s", who, path,
				 (unsigned long long)t->step,
				 t->attempt ? "" : " (this job's, left by an earlier run)");
		if (ret == 0)
			return 1;
		if (ret != -EINVAL)
			return ret;
	}
	if (tried && t->rank == 0)
		log_error("%sno usable checkpoint in '%s' (see above): pass --fresh to start from "
			  "step 0 and replace them, or --resume with a good one",
			  who, t->cfg.checkpoint_dir);
	return tried ? -EEXIST : 0;
}

/* The starting point: the newest usable checkpoint of this job in
 * checkpoint_dir, whether ddplaunch restarted the group or the same command
 * line runs again (after a crash, a requeue); else --resume; else step 0.
 * Another job's checkpoints there are never replaced: -EEXIST, unless
 * --fresh (first attempt) removes them first. */
static int trainer_resume(struct trainer *t)
{
	float plan[RESUME_N] = {-1, -1, -1};
	int ret = 0;

	if (t->cfg.checkpoint_dir[0]) {
		if (t->rank == 0 && t->cfg.fresh && t->attempt == 0)
			trainer_remove_for_fresh(t);
		if (t->rank == 0)
			trainer_resume_plan(t, plan);
		if (t->ddp)
			ret = ddp_broadcast(t->ddp, plan, RESUME_N, DDP_FLOAT32, 0);
		if (ret < 0) {
			log_error("cannot agree on the checkpoint to resume from: %s",
				  ddp_error(t->ddp));
			return ret;
		}
		if (plan[0] == RESUME_REFUSE)
			return -EEXIST;
		ret = trainer_resume_dir(t, plan);
		if (ret != 0)
			return ret < 0 ? ret : 0;
	}
	if (t->cfg.resume[0])
		return trainer_load_agreed(t, t->cfg.resume);
	if (t->attempt > 0 && t->rank == 0)
		log_warn("restart %d: no checkpoint in '%s' yet, starting from step 0", t->attempt,
			 t->cfg.checkpoint_dir[0] ? t->cfg.checkpoint_dir : "(no checkpoint_dir)");
	return 0;
}

/* The starting state. A process that joins a running job (some rank holds
 * the state: --global_batch_size, under ddplaunch) takes it from a peer's
 * memory and reads no file, not even checkpoint_dir (a rank 0 only creates
 * it when missing, for its later checkpoints). Otherwise (every process
 * fresh: a job's start or a whole-job restart) rank 0 checks
 * checkpoint_dir before any training and every rank resumes from disk. */
static int trainer_start_state(struct trainer *t)
{
	int ret;

	ddp_progress_phase(t->ddp, t->shards ? DDP_PHASE_HANDOVER : DDP_PHASE_CHECKPOINT);
	ret = t->shards ? trainer_shards_join(t) : 0;
	if (ret < 0)
		return ret;
	if (ret == 1) {
		if (t->rank == 0 && t->cfg.checkpoint_dir[0])
			mkdir(t->cfg.checkpoint_dir, 0777);
		return 0;
	}
	ddp_progress_phase(t->ddp, DDP_PHASE_CHECKPOINT);
	if (t->rank == 0 && t->cfg.checkpoint_dir[0])
		ret = trainer_check_ckpt_dir(t->cfg.checkpoint_dir);
	ret = ret ? ret : trainer_resume(t);
	if (ret == 0)
		t->has_state = true;
	return ret;
}

int trainer_init(struct trainer *t, const struct train_config *cfg)
{
	int ret;

	memset(t, 0, sizeof(*t));
	t->cfg = *cfg;
	ret = trainer_init_ddp(t);
	/* libddp says COMPUTE once the communicator is built; the model's
	 * broadcast and the resume still belong to the start. */
	if (ret == 0)
		ddp_progress_phase(t->ddp, DDP_PHASE_STARTUP);
	ret = ret ? ret : trainer_init_outputs(t);
	ret = ret ? ret : trainer_init_kernels(t);
	/* With a fixed global batch the check is the hand-over's first step
	 * (trainer_shards_join), where a membership change re-forms. */
	if (ret == 0 && cfg->global_batch_size == 0)
		ret = trainer_numerics_check(t);
	ret = ret ? ret : trainer_init_data(t);
	if (ret == 0)
		t->job_hash = trainer_ckpt_job_hash(t);
	ret = ret ? ret : trainer_init_schedule(t);
	ret = ret ? ret : trainer_init_model(t);
	ret = ret ? ret : trainer_init_optim(t);
	ret = ret ? ret : trainer_init_reducer(t);
	ret = ret ? ret : trainer_init_batch(t);
	if (ret == 0 && cfg->global_batch_size > 0)
		ret = trainer_shards_init(t);
	if (ret == 0)
		rng_seed(&t->rng, (uint64_t)cfg->seed ^ 0x5eed5eed5eedull);
	ret = ret ? ret : trainer_start_state(t);
	return ret;
}

void trainer_release(struct trainer *t)
{
	if (t->rank0_duties)
		metrics_close(&t->metrics);
	/* First: its buckets are ranges of the model's gradients. */
	if (t->reducer)
		ddp_reducer_free(t->reducer);
	trainer_shards_release(t);
	if (t->ops) {
		t->ops->free(t->kctx, t->dx);
		t->ops->free(t->kctx, t->dy);
		optim_release(&t->optim, &t->model);
		model_release(&t->model);
		/* libddp forgets the stream before ctx_free destroys it. */
		if (t->ddp)
			ddp_set_compute_stream(t->ddp, NULL);
		t->ops->ctx_free(t->kctx);
	}
	ddp_sampler_release(&t->sampler);
	free(t->param_of_tensor);
	free(t->idx);
	free(t->hx);
	free(t->hy);
	data_release(&t->train);
	data_release(&t->held_out);
	ddp_free(t->ddp);
	memset(t, 0, sizeof(*t));
}
