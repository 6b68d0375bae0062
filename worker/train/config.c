/*
 * config.c - ddp-train's settings table, INI [train] section and flags.
 */
#include "config.h"

#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef DDP_DATA_DIR
#define DDP_DATA_DIR "data"
#endif

enum config_type { CFG_INT, CFG_REAL, CFG_BOOL, CFG_STR, CFG_PATH };

struct config_opt {
	const char *name;
	enum config_type type;
	size_t offset;
	size_t size; /* string buffer size */
	const char *help;
};

#define OPT(n, t, h)                                                                               \
	{                                                                                          \
#n, t, offsetof(struct train_config, n), sizeof(((struct train_config *)0)->n), h  \
	}

static const struct config_opt config_opts[] = {
    OPT(data, CFG_STR, "data set: digits or synthetic"),
    OPT(data_path, CFG_PATH, "digits CSV file (gzip or plain)"),
    OPT(held_out, CFG_REAL, "fraction of the data held out for evaluation"),
    OPT(split_seed, CFG_INT, "seed of the train / held-out split"),
    OPT(synthetic_samples, CFG_INT, "synthetic data: number of samples"),
    OPT(synthetic_features, CFG_INT, "synthetic data: input features"),
    OPT(synthetic_classes, CFG_INT, "synthetic data: classes"),
    OPT(hidden, CFG_STR, "hidden layer widths, comma-separated"),
    OPT(batchnorm, CFG_BOOL, "BatchNorm after each hidden Linear"),
    OPT(sync_bn, CFG_BOOL, "SyncBatchNorm: batch statistics over all ranks"),
    OPT(epochs, CFG_INT, "epochs to train"),
    OPT(max_steps, CFG_INT, "stop after this many steps (0: epochs decide)"),
    OPT(batch_size, CFG_INT, "samples per step per rank"),
    OPT(lr, CFG_REAL, "base learning rate (weights)"),
    OPT(momentum, CFG_REAL, "SGD momentum"),
    OPT(weight_decay, CFG_REAL, "weight decay of the weights"),
    OPT(bias_lr_mult, CFG_REAL, "lr multiplier of biases and BatchNorm parameters"),
    OPT(bias_weight_decay, CFG_REAL, "weight decay of biases and BatchNorm parameters"),
    OPT(schedule, CFG_STR, "learning-rate schedule: constant, poly or cosine"),
    OPT(poly_power, CFG_REAL, "poly schedule power"),
    OPT(min_lr, CFG_REAL, "cosine schedule floor"),
    OPT(warmup_steps, CFG_INT, "linear warm-up steps"),
    OPT(clip_norm, CFG_REAL, "clip gradients to this global norm (0: off)"),
    OPT(seed, CFG_INT, "seed of the initial weights and the data order"),
    OPT(checkpoint_dir, CFG_PATH, "directory for checkpoints (empty: none)"),
    OPT(checkpoint_every, CFG_INT, "steps between checkpoints (0: final only)"),
    OPT(resume, CFG_PATH, "checkpoint to start from"),
    OPT(strict, CFG_BOOL, "refuse checkpoints with missing or extra tensors"),
    OPT(log_every, CFG_INT, "steps between progress lines (0: per epoch)"),
    OPT(metrics, CFG_PATH, "JSON-lines metrics file (empty: none)"),
    OPT(eval_every_epoch, CFG_BOOL, "evaluate on the held-out set each epoch"),
    OPT(device, CFG_STR, "cpu, cuda or auto"),
    OPT(bucket_cap_mb, CFG_REAL, "gradient bucket size cap in MiB"),
    OPT(threads, CFG_INT, "OpenBLAS threads per rank (0: its own choice)"),
    OPT(progress_bar, CFG_BOOL, "progress bar when stdout is a terminal"),
    OPT(fault_kill_step, CFG_INT, "tests: SIGKILL before this step on attempt 0 (0: off)"),
    OPT(fault_rank, CFG_INT, "tests: the rank that fault_kill_step kills"),
};

#define CONFIG_NOPTS (sizeof(config_opts) / sizeof(config_opts[0]))

void config_defaults(struct train_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	strcpy(cfg->data, "digits");
	snprintf(cfg->data_path, sizeof(cfg->data_path), "%s/digits.csv.gz", DDP_DATA_DIR);
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
}

static const struct config_opt *config_find(const char *key)
{
	for (size_t i = 0; i < CONFIG_NOPTS; i++)
		if (strcmp(config_opts[i].name, key) == 0)
			return &config_opts[i];
	return NULL;
}

static int config_parse_bool(const char *v, bool *out)
{
	static const char *const yes[] = {"1", "true", "yes", "on"};
	static const char *const no[] = {"0", "false", "no", "off"};

	for (int i = 0; i < 4; i++) {
		if (strcasecmp(v, yes[i]) == 0) {
			*out = true;
			return 0;
		}
		if (strcasecmp(v, no[i]) == 0) {
			*out = false;
			return 0;
		}
	}
	return -EINVAL;
}

static int config_store(const struct config_opt *o, void *field, const char *value)
{
	char *end;

	switch (o->type) {
	case CFG_INT: {
		long long v;

		errno = 0;
		v = strtoll(value, &end, 10);
		if (errno || end == value || *end || v < 0)
			return -EINVAL;
		*(int64_t *)field = v;
		return 0;
	}
	case CFG_REAL: {
		double v = strtod(value, &end);

		if (end == value || *end || !isfinite(v) || v < 0)
			return -EINVAL;
		*(double *)field = v;
		return 0;
	}
	case CFG_BOOL:
		return config_parse_bool(value, field);
	default:
		if (strlen(value) >= o->size)
			return -ENAMETOOLONG;
		strcpy(field, value);
		return 0;
	}
}

static const char *config_type_hint(enum config_type t)
{
	switch (t) {
	case CFG_INT:
		return "a non-negative integer";
	case CFG_REAL:
		return "a non-negative number";
	case CFG_BOOL:
		return "true or false";
	default:
		return "a shorter string";
	}
}

int config_set(struct train_config *cfg, const char *key, const char *value, char *err,
	       size_t errlen)
{
	const struct config_opt *o = config_find(key);
	int ret;

	if (!o) {
		snprintf(err, errlen, "unknown setting '%s' (ddp-train --help lists them)", key);
		return -EINVAL;
	}
	ret = config_store(o, (char *)cfg + o->offset, value);
	if (ret < 0) {
		snprintf(err, errlen, "bad value '%s' for '%s': expected %s", value, key,
			 config_type_hint(o->type));
		return -EINVAL;
	}
	return 0;
}

struct config_ini_state {
	struct train_config *cfg;
	char dir[CONFIG_STR_MAX];
	char *err;
	size_t errlen;
	int failed;
};

/* inih handler: [train] keys only; relative paths against the file's dir. */
static int config_ini_handler(void *user, const char *section, const char *name, const char *value)
{
	struct config_ini_state *st = user;
	const struct config_opt *o;
	char joined[2 * CONFIG_STR_MAX + 2];

	if (strcmp(section, "train") != 0 || st->failed)
		return 1;
	o = config_find(name);
	if (o && o->type == CFG_PATH && value[0] && value[0] != '/') {
		snprintf(joined, sizeof(joined), "%s/%s", st->dir, value);
		value = joined;
	}
	if (config_set(st->cfg, name, value, st->err, st->errlen) < 0) {
		st->failed = 1;
		return 0;
	}
	return 1;
}

int config_load_ini(struct train_config *cfg, const char *path, char *err, size_t errlen)
{
	struct config_ini_state st = {.cfg = cfg, .err = err, .errlen = errlen};
	const char *slash = strrchr(path, '/');
	int line;

	if (slash)
		snprintf(st.dir, sizeof(st.dir), "%.*s", (int)(slash - path), path);
	else
		strcpy(st.dir, ".");
	snprintf(cfg->config, sizeof(cfg->config), "%s", path);
	line = ini_parse(path, config_ini_handler, &st);
	if (line == -1) {
		snprintf(err, errlen, "cannot open job file '%s'", path);
		return -ENOENT;
	}
	if (st.failed) {
		size_t n = strlen(err);

		snprintf(err + n, errlen - n, " in '%s' line %d", path, line);
		return -EINVAL;
	}
	if (line != 0) {
		snprintf(err, errlen,
			 "cannot parse '%s' line %d (lines are limited to 200 characters)", path,
			 line);
		return -EINVAL;
	}
	return 0;
}

/* Applies "--key value" / "--key=value" / "--flag" / "--no-flag" at argv[*i]. */
static int config_apply_flag(struct train_config *cfg, int argc, char **argv, int *i, char *err,
			     size_t errlen)
{
	const char *arg = argv[*i] + 2, *eq = strchr(arg, '='), *value;
	char key[64];
	const struct config_opt *o;

	snprintf(key, sizeof(key), "%.*s", eq ? (int)(eq - arg) : (int)strlen(arg), arg);
	for (char *p = key; *p; p++)
		if (*p == '-')
			*p = '_';
	o = config_find(key);
	if (!o && strncmp(key, "no_", 3) == 0 && !eq) {
		o = config_find(key + 3);
		if (o && o->type == CFG_BOOL)
			return config_set(cfg, key + 3, "false", err, errlen);
	}
	if (eq)
		value = eq + 1;
	else if (o && o->type == CFG_BOOL && (*i + 1 >= argc || argv[*i + 1][0] == '-'))
		value = "true";
	else if (*i + 1 < argc)
		value = argv[++*i];
	else {
		snprintf(err, errlen, "flag '--%s' needs a value", key);
		return -EINVAL;
	}
	return config_set(cfg, key, value, err, errlen);
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
		    strncmp(argv[i], "--local_rank", 12) == 0)
			continue; /* legacy launchers pass --local_rank=N */
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
	for (size_t i = 0; i < CONFIG_NOPTS; i++) {
		const struct config_opt *o = &config_opts[i];
		const void *v = (const char *)&d + o->offset;
		char def[64];

		if (o->type == CFG_INT)
			snprintf(def, sizeof(def), "%lld", (long long)*(const int64_t *)v);
		else if (o->type == CFG_REAL)
			snprintf(def, sizeof(def), "%g", *(const double *)v);
		else if (o->type == CFG_BOOL)
			snprintf(def, sizeof(def), "%s", *(const bool *)v ? "true" : "false");
		else
			snprintf(def, sizeof(def), "%.60s", (const char *)v);
		fprintf(f, "  --%-20s %s (default: %s)\n", o->name, o->help, def);
	}
}
