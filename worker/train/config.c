/*
 * config.c - ddp-train's settings table (common/settings.h), the [train]
 * section of a job file and the flags.
 */
#include "config.h"
#include "settings.h"
#include "settings_ini.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef DDP_DATA_DIR
#define DDP_DATA_DIR "data"
#endif

#define OFF(n)	offsetof(struct train_config, n)
#define SIZE(n) sizeof(((struct train_config *)0)->n)
/* A non-negative 64-bit integer, a non-negative number, a boolean, a string
 * in its buffer, a path (relative ones in a job file are taken from the
 * file's folder). */
#define OPT_I64(n, h)                                                                              \
	{                                                                                          \
		.name = #n, .type = SETTINGS_I64, .offset = OFF(n), .max = INT64_MAX, .help = h    \
	}
#define OPT_REAL(n, h)                                                                             \
	{                                                                                          \
		.name = #n, .type = SETTINGS_REAL, .offset = OFF(n), .help = h                     \
	}
#define OPT_BOOL(n, h)                                                                             \
	{                                                                                          \
		.name = #n, .type = SETTINGS_BOOL, .offset = OFF(n), .help = h                     \
	}
#define OPT_STR(n, h)                                                                              \
	{                                                                                          \
		.name = #n, .type = SETTINGS_BUF, .offset = OFF(n), .size = SIZE(n), .help = h     \
	}
#define OPT_PATH(n, h)                                                                             \
	{                                                                                          \
		.name = #n, .type = SETTINGS_BUF, .offset = OFF(n), .size = SIZE(n), .help = h,    \
		.flags = SETTINGS_F_PATH                                                           \
	}

static const struct settings_def config_defs[] = {
    OPT_STR(data, "data set: digits or synthetic"),
    OPT_PATH(data_path, "digits CSV file (gzip or plain)"),
    OPT_REAL(held_out, "fraction of the data held out for evaluation"),
    OPT_I64(split_seed, "seed of the train / held-out split"),
    OPT_I64(synthetic_samples, "synthetic data: number of samples"),
    OPT_I64(synthetic_features, "synthetic data: input features"),
    OPT_I64(synthetic_classes, "synthetic data: classes"),
    OPT_STR(hidden, "hidden layer widths, comma-separated"),
    OPT_BOOL(batchnorm, "BatchNorm after each hidden Linear"),
    OPT_BOOL(sync_bn, "SyncBatchNorm: batch statistics over all ranks"),
    OPT_I64(epochs, "epochs to train"),
    OPT_I64(max_steps, "stop after this many steps (0: epochs decide)"),
    OPT_I64(batch_size, "samples per step per rank"),
    OPT_I64(global_batch_size, "samples per step over all ranks, the same bits at any rank "
			       "count; under ddplaunch a lost node costs one step, not a "
			       "restart (0: off; see virtual_shards)"),
    OPT_I64(virtual_shards, "shards of the global batch (G divisible by it), spread "
			    "over the ranks"),
    OPT_BOOL(rebalance, "shard mode: move shards from a straggler to the faster ranks "
			"(the same bits; --no-rebalance: only name it)"),
    OPT_REAL(straggler_ratio, "shard mode: name a rank this many times slower than the "
			      "others' median (per shard, or in its transfers)"),
    OPT_REAL(lr, "base learning rate (weights)"),
    OPT_REAL(momentum, "SGD momentum"),
    OPT_REAL(weight_decay, "weight decay of the weights"),
    OPT_REAL(bias_lr_mult, "lr multiplier of biases and BatchNorm parameters"),
    OPT_REAL(bias_weight_decay, "weight decay of biases and BatchNorm parameters"),
    OPT_STR(schedule, "learning-rate schedule: constant, poly or cosine"),
    OPT_REAL(poly_power, "poly schedule power"),
    OPT_REAL(min_lr, "cosine schedule floor"),
    OPT_I64(warmup_steps, "linear warm-up steps"),
    OPT_REAL(clip_norm, "clip gradients to this global norm (0: off)"),
    OPT_I64(seed, "seed of the initial weights and the data order"),
    OPT_PATH(checkpoint_dir, "directory for checkpoints (empty: none)"),
    OPT_I64(checkpoint_every, "steps between checkpoints (0: final only)"),
    OPT_PATH(resume, "checkpoint to start from"),
    OPT_BOOL(strict, "refuse checkpoints with missing or extra tensors"),
    OPT_BOOL(fresh, "start from step 0 (or --resume), replacing checkpoint_dir's"),
    OPT_I64(log_every, "steps between progress lines (0: per epoch)"),
    OPT_PATH(metrics, "JSON-lines metrics file (empty: none)"),
    OPT_BOOL(eval_every_epoch, "evaluate on the held-out set each epoch"),
    OPT_STR(device, "cpu, cuda or auto"),
    OPT_REAL(bucket_cap_mb, "gradient bucket size cap in MiB"),
    OPT_I64(threads, "OpenBLAS threads per rank (0: 1 with global_batch_size, else "
		     "OpenBLAS's choice)"),
    OPT_BOOL(allow_numeric_mismatch, "global_batch_size: accept ranks whose BLAS kernel, "
				     "threads, build or GPU stack differ, dropping the "
				     "promise of a 1-rank run's bits (else refused)"),
    OPT_BOOL(progress_bar, "progress bar when stdout is a terminal"),
    OPT_I64(fault_kill_step,
	    "tests: SIGKILL after this many steps on attempt 0 (all: at the final save; 0: off)"),
    OPT_I64(fault_rank, "tests: the rank that fault_kill_step kills"),
    OPT_I64(step_sleep_ms, "tests: sleep this long before each step (0: off)"),
    OPT_I64(replica_check_every, "with global_batch_size: compare every replica's state "
				 "(a digest) after every N steps, heal or stop on a mismatch "
				 "(0: off)"),
};

static const struct settings_table config_settings = {config_defs,
						      sizeof(config_defs) / sizeof(config_defs[0])};

const char *const config_job_settings[] = {
    "data",
    "held_out",
    "split_seed",
    "synthetic_samples",
    "synthetic_features",
    "synthetic_classes",
    "hidden",
    "batchnorm",
    "sync_bn",
    "lr",
    "momentum",
    "weight_decay",
    "bias_lr_mult",
    "bias_weight_decay",
    "schedule",
    "poly_power",
    "min_lr",
    "warmup_steps",
    "clip_norm",
    "seed",
    NULL,
};

int config_format(const struct train_config *cfg, const char *key, char *buf, size_t len)
{
	int i = settings_find(&config_settings, key);

	if (i < 0)
		return -ENOENT;
	settings_format(&config_settings, (size_t)i, cfg, buf, len);
	return 0;
}

/* DDP_DATA_DIR/digits.csv.gz; a DDP_DATA_DIR that starts with $ORIGIN (a
 * wheel, installed anywhere: worker/train/meson.build) is taken from the
 * folder of the running program. */
static void default_data_path(char *path, size_t len)
{
	static const char origin[] = "$ORIGIN";
	const char *dir = DDP_DATA_DIR;
	char self[PATH_MAX];
	ssize_t n;

	if (strncmp(dir, origin, sizeof(origin) - 1)) {
		snprintf(path, len, "%s/digits.csv.gz", dir);
		return;
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[n > 0 ? n : 0] = '\0';
	snprintf(path, len, "%s%s/digits.csv.gz", n > 0 ? dirname(self) : ".",
		 dir + sizeof(origin) - 1);
}

void config_defaults(struct train_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	strcpy(cfg->data, "digits");
	default_data_path(cfg->data_path, sizeof(cfg->data_path));
	cfg->held_out = 0.2;
	cfg->synthetic_samples = 65536;
	cfg->synthetic_features = 64;
	cfg->synthetic_classes = 10;
	strcpy(cfg->hidden, "256,256");
	cfg->batchnorm = true;
	cfg->epochs = 20;
	cfg->batch_size = 32;
	cfg->lr = 0.05;
	cfg->momentum = 0.9;
	cfg->weight_decay = 5e-4;
	cfg->bias_lr_mult = 2.0;
	strcpy(cfg->schedule, "cosine");
	cfg->poly_power = 0.9;
	cfg->strict = true;
	cfg->log_every = 0;
	cfg->eval_every_epoch = true;
	strcpy(cfg->device, "auto");
	cfg->bucket_cap_mb = 25.0;
	cfg->progress_bar = true;
	cfg->replica_check_every = 1;
	cfg->rebalance = true;
	cfg->straggler_ratio = 1.5;
}

int config_set(struct train_config *cfg, const char *key, const char *value, char *err,
	       size_t errlen)
{
	int i = settings_find(&config_settings, key);

	if (i < 0) {
		settings_unknown(&config_settings, "setting", key, "", err, errlen);
		return -EINVAL;
	}
	return settings_apply(&config_settings, (size_t)i, cfg, value, err, errlen);
}

/* [train] keys; relative paths against the file's folder. */
static int config_ini_key(void *user, const char *key, const char *value, char *msg, size_t msglen)
{
	struct train_config *cfg = user;
	const char *slash = strrchr(cfg->config, '/');
	int i = settings_find(&config_settings, key);
	char joined[2 * CONFIG_STR_MAX + 2];

	if (i < 0) {
		settings_unknown(&config_settings, "key", key, " in [train]", msg, msglen);
		return -EINVAL;
	}
	if ((config_defs[i].flags & SETTINGS_F_PATH) && value[0] && value[0] != '/') {
		if (slash)
			snprintf(joined, sizeof(joined), "%.*s/%s", (int)(slash - cfg->config),
				 cfg->config, value);
		else
			snprintf(joined, sizeof(joined), "./%s", value);
		value = joined;
	}
	return settings_apply(&config_settings, (size_t)i, cfg, value, msg, msglen);
}

int config_load_ini(struct train_config *cfg, const char *path, char *err, size_t errlen)
{
	static const struct settings_ini_section sections[] = {{"train", config_ini_key}};
	const struct settings_ini ini = {
	    .sections = sections, .nsections = 1, .skip_others = true, .user = cfg};
	char msg[512];
	int line, rc;

	snprintf(cfg->config, sizeof(cfg->config), "%s", path);
	rc = settings_ini_load(&ini, path, &line, msg, sizeof(msg));
	if (rc < 0 && line > 0)
		snprintf(err, errlen, "%s line %d: %s", path, line, msg);
	else if (rc < 0)
		snprintf(err, errlen, "%s", msg);
	return rc;
}

/* Every setting that follows the job file: "--key value", "--key=value",
 * a bare "--flag", "--no-flag"; -h, --config and the legacy --local_rank
 * are handled by the caller. */
static int config_apply_flag(struct train_config *cfg, int argc, char **argv, int *i, char *err,
			     size_t errlen)
{
	struct settings_flag f;

	if (settings_cli_take(&config_settings, SETTINGS_CLI_NEGATE | SETTINGS_CLI_BOOL_WORD, argc,
			      argv, i, &f, err, errlen))
		return -EINVAL;
	return settings_apply(&config_settings, f.index, cfg, f.value, err, errlen);
}

int config_parse_args(struct train_config *cfg, int argc, char **argv, bool *help, char *err,
		      size_t errlen)
{
	int ret;

	*help = false;
	/* The job file first, so flags override it wherever they appear. */
	for (int i = 0; i < argc; i++) {
		const char *path = NULL;

		if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
			path = argv[++i];
		else if (strncmp(argv[i], "--config=", 9) == 0)
			path = argv[i] + 9;
		if (path && (ret = config_load_ini(cfg, path, err, errlen)) < 0)
			return ret;
	}
	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			*help = true;
			return 0;
		}
		if (strcmp(argv[i], "--config") == 0) {
			i++;
			continue;
		}
		if (strncmp(argv[i], "--config=", 9) == 0 ||
		    strncmp(argv[i], "--local_rank", 12) == 0 ||
		    strncmp(argv[i], "--local-rank", 12) == 0)
			continue; /* legacy launchers pass --local_rank=N (torch 2: --local-rank) */
		if (strncmp(argv[i], "--", 2) != 0) {
			snprintf(err, errlen,
				 "unexpected argument '%s' (settings are --name value)", argv[i]);
			return -EINVAL;
		}
		ret = config_apply_flag(cfg, argc, argv, &i, err, errlen);
		if (ret < 0)
			return ret;
	}
	return 0;
}

int config_hidden_dims(const struct train_config *cfg, int *widths, int max)
{
	const char *p = cfg->hidden;
	int n = 0;

	while (*p == ' ')
		p++;
	while (*p) {
		char *end;
		long v = strtol(p, &end, 10);

		if (end == p || v <= 0 || v > INT_MAX / 64 || n >= max)
			return -EINVAL;
		widths[n++] = (int)v;
		p = end;
		while (*p == ' ')
			p++;
		if (*p == ',')
			p++;
		else if (*p)
			return -EINVAL;
		while (*p == ' ')
			p++;
	}
	return n;
}

/* --global_batch_size G --virtual_shards V: -EINVAL with a message when
 * they do not fit together or with the rest. */
static int config_validate_shards(const struct train_config *cfg, char *err, size_t errlen)
{
	int64_t g = cfg->global_batch_size, v = cfg->virtual_shards;

	if (g == 0 && v == 0)
		return 0;
	if (g == 0)
		snprintf(err, errlen,
			 "virtual_shards needs global_batch_size: set --global_batch_size to a "
			 "multiple of %lld",
			 (long long)v);
	else if (v == 0)
		snprintf(err, errlen,
			 "global_batch_size needs virtual_shards: set --virtual_shards to a "
			 "divisor of %lld, at least the largest rank count the job will run on",
			 (long long)g);
	else if (g > 1 << 24 || v > 1 << 16)
		snprintf(err, errlen,
			 "global_batch_size must be at most 16777216 and virtual_shards at most "
			 "65536");
	else if (g % v != 0)
		snprintf(err, errlen,
			 "global_batch_size %lld is not divisible by virtual_shards %lld: pick "
			 "shards that divide it",
			 (long long)g, (long long)v);
	else if (g / v > 1 << 20)
		snprintf(err, errlen,
			 "a virtual shard of %lld samples is too large (at most 1048576): raise "
			 "virtual_shards",
			 (long long)(g / v));
	else if (cfg->batchnorm && g / v < 2)
		snprintf(err, errlen,
			 "virtual shards of 1 sample cannot take BatchNorm statistics: make "
			 "global_batch_size / virtual_shards at least 2, or --no-batchnorm");
	else if (!(cfg->straggler_ratio > 1.0 && cfg->straggler_ratio <= 100.0))
		snprintf(err, errlen,
			 "straggler_ratio %g is out of range: pick a number above 1 and at most "
			 "100 (e.g. 1.5)",
			 cfg->straggler_ratio);
	else if (cfg->sync_bn)
		snprintf(err, errlen,
			 "sync_bn does not apply with global_batch_size: BatchNorm takes its "
			 "statistics per virtual shard (ghost batches); drop --sync_bn");
	else
		return 0;
	return -EINVAL;
}

int config_validate(const struct train_config *cfg, char *err, size_t errlen)
{
	int widths[32];

	if (strcmp(cfg->data, "digits") && strcmp(cfg->data, "synthetic"))
		snprintf(err, errlen, "data '%s' is unknown: use digits or synthetic", cfg->data);
	else if (strcmp(cfg->schedule, "constant") && strcmp(cfg->schedule, "poly") &&
		 strcmp(cfg->schedule, "cosine"))
		snprintf(err, errlen, "schedule '%s' is unknown: use constant, poly or cosine",
			 cfg->schedule);
	else if (strcmp(cfg->device, "cpu") && strcmp(cfg->device, "cuda") &&
		 strcmp(cfg->device, "auto"))
		snprintf(err, errlen, "device '%s' is unknown: use cpu, cuda or auto", cfg->device);
	else if (config_hidden_dims(cfg, widths, 15) < 0)
		snprintf(err, errlen, "hidden '%s' is not a list of up to 15 widths like 256,256",
			 cfg->hidden);
	else if (cfg->batch_size < 1 || cfg->batch_size > 1 << 20)
		snprintf(err, errlen, "batch_size must be between 1 and 1048576");
	else if (config_validate_shards(cfg, err, errlen) < 0)
		return -EINVAL;
	else if (cfg->held_out >= 1.0)
		snprintf(err, errlen, "held_out must be below 1");
	else if (cfg->epochs < 1 && cfg->max_steps < 1)
		snprintf(err, errlen, "set epochs or max_steps to at least 1");
	else if (cfg->synthetic_features < 1 || cfg->synthetic_classes < 2 ||
		 cfg->synthetic_features > 1 << 20 || cfg->synthetic_classes > 1 << 16)
		snprintf(err, errlen, "synthetic data needs >= 1 feature and >= 2 classes");
	else
		return 0;
	return -EINVAL;
}

void config_usage(const char *prog, FILE *f)
{
	struct train_config d;

	config_defaults(&d);
	fprintf(f, "usage: %s [--config JOB.ini] [--SETTING VALUE]...\n\n", prog);
	fprintf(f, "Settings come from the [train] section of the job file; flags override.\n\n");
	settings_print_usage(&config_settings, &d, f);
	fprintf(f,
		"\nThe same bits at any rank count: --global_batch_size G --virtual_shards V.\n"
		"Step s takes samples [s*G, (s+1)*G) of the epoch's permutation (seed and epoch\n"
		"only), cut into V shards of G/V; each rank computes a contiguous run of whole\n"
		"shards, one backward each (batch_size is not used). BatchNorm takes its\n"
		"statistics per shard (ghost batches; the running statistics take every shard's\n"
		"update in shard order); --sync_bn is refused. The shards' gradients are summed\n"
		"exactly: per tensor, fixed point scaled from the largest |gradient| of all\n"
		"shards, integer sums all-reduced, converted back once. The result is the exact\n"
		"mean within max|grad| x 2^ceil(log2 V) x 2^-51, then rounded to float; it does\n"
		"not depend on how the shards are spread, so final.safetensors has the same\n"
		"bytes with 1, 2, 3 or more ranks, and a checkpoint resumes into the same bits\n"
		"with another rank count. V below the rank count leaves ranks idle (a warning).\n"
		"The promise needs every rank to compute alike: the OpenBLAS kernel\n"
		"(OPENBLAS_CORETYPE), its threads (1 unless --threads), the library, this\n"
		"build and kernel path, on GPUs the device, driver, cuBLAS and NCCL. They are\n"
		"compared at the start and at every join; a rank that differs is refused (exit\n"
		"78, naming both sides and what to set) unless --allow_numeric_mismatch, which\n"
		"drops the promise and says so at the end.\n"
		"\n"
		"In place under ddplaunch (this mode only): when a node dies or\n"
		"joins, or one worker dies and is replaced alone, the other ranks keep their\n"
		"processes and memory, re-form for the new membership and redo the interrupted\n"
		"step with the same samples; a new process takes the model, the optimizer state\n"
		"and the step from a peer's memory, reading no file. The final model is the one\n"
		"an undisturbed run writes. Without --global_batch_size a failure stops the\n"
		"worker and ddplaunch restarts the group from the last checkpoint.\n");
	fprintf(
	    f, "\nReplicas checked (this mode, --replica_check_every N, default 1): after every N\n"
	       "committed steps each rank digests its parameters, BatchNorm buffers and momentum\n"
	       "(xxHash, on a helper thread while the next step computes) and the job compares\n"
	       "the digests in one all-gather of 8 bytes per rank. A replica that differs (a\n"
	       "flipped bit, a bad core) is named on every rank: rank, step, first tensor. With\n"
	       "3 or more ranks the minority takes the majority's state from memory and the\n"
	       "step after is redone; with 2 (no majority) the run stops with exit status 1,\n"
	       "so ddplaunch restarts the group from the last checkpoint (--max_restarts).\n"
	       "Tests only: DDP_TEST_FLIP=RANK:STEP in a worker's environment flips mantissa\n"
	       "bit 16 of the first float of the model's last parameter tensor on that rank right\n"
	       "after that step's update (restart attempt 0).\n");
}
