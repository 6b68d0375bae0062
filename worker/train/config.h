/*
 * config.h - ddp-train's settings: defaults, then the [train] section of an
 * INI job file (the same file ddplaunch reads; other sections are ignored),
 * then command-line flags, each later source overriding the earlier.
 * Every setting has the same name in the file and as a flag:
 * "batch_size = 64" in [train] or "--batch_size 64" / "--batch_size=64"
 * (dashes or underscores). The table, its parsers and the INI reader are the
 * settings module's (common/settings.h), shared with ddplaunch.
 * Pure parsing (plus reading the INI file); no other I/O.
 */
#ifndef DDP_WORKER_TRAIN_CONFIG_H
#define DDP_WORKER_TRAIN_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CONFIG_STR_MAX 512

struct train_config {
	char config[CONFIG_STR_MAX];	/* the INI file read, "" if none */
	char data[16];			/* "digits" or "synthetic" */
	char data_path[CONFIG_STR_MAX]; /* digits CSV(.gz) */
	double held_out;		/* fraction held out for evaluation */
	int64_t split_seed;
	int64_t synthetic_samples;
	int64_t synthetic_features;
	int64_t synthetic_classes;
	char hidden[128]; /* "256,256": hidden layer widths */
	bool batchnorm;
	bool sync_bn;
	int64_t epochs;
	int64_t max_steps;  /* > 0: stop after this many steps (overrides epochs) */
	int64_t batch_size; /* per rank */
	/* > 0: a fixed global batch of this many samples per step, split
	 * into virtual_shards shards spread over the ranks (batch_size is not
	 * used); the result does not depend on the number of ranks. */
	int64_t global_batch_size;
	int64_t virtual_shards;
	/* Stragglers (shard mode): a rank this much slower than the others
	 * (per shard, or in its transfers) is named; with rebalance its
	 * shards move to the faster ranks (the bits do not change). */
	bool rebalance;
	double straggler_ratio;
	double lr;
	double momentum;
	double weight_decay;
	double bias_lr_mult;
	double bias_weight_decay;
	char schedule[16]; /* constant, poly, cosine */
	double poly_power;
	double min_lr;
	int64_t warmup_steps;
	double clip_norm;
	int64_t seed;
	char checkpoint_dir[CONFIG_STR_MAX]; /* "" = no checkpoints */
	int64_t checkpoint_every;	     /* steps; 0 = only the final one */
	char resume[CONFIG_STR_MAX];	     /* a checkpoint to start from */
	bool strict;			     /* strict checkpoint loading */
	bool fresh;	   /* replace checkpoints found in checkpoint_dir, start afresh */
	int64_t log_every; /* steps between progress lines */
	char metrics[CONFIG_STR_MAX]; /* JSON-lines file, "" = none */
	bool eval_every_epoch;
	char device[8]; /* cpu, cuda, auto */
	double bucket_cap_mb;
	/* OpenBLAS threads per rank; 0 = 1 with global_batch_size (the same
	 * bits on any machine), else OpenBLAS's choice (numerics.h) */
	int64_t threads;
	/* global_batch_size: accept ranks whose numeric identity differs
	 * (numerics.h), dropping the promise of a 1-rank run's bits */
	bool allow_numeric_mismatch;
	bool progress_bar; /* draw a bar when stdout is a terminal */
	/* Fault injection for tests: on restart attempt 0 only, rank
	 * fault_rank kills itself with SIGKILL before step fault_kill_step. */
	int64_t fault_kill_step;
	int64_t fault_rank;
	/* Pacing for tests whose events must land between steps (the
	 * multinode Chaos test): each rank sleeps this long before each step. */
	int64_t step_sleep_ms;
	/* --global_batch_size mode: compare every replica's state after every
	 * this many committed steps (replica_check.h); 0: off. */
	int64_t replica_check_every;
};

/* Fills the defaults. */
void config_defaults(struct train_config *cfg);

/* Applies the [train] section of `path` (a regular file; other sections
 * are skipped). Unknown keys in [train] are an error naming them (and a
 * close name); a line longer than SETTINGS_INI_MAX_LINE (198) characters, a
 * NUL byte or any other parse error is an error naming the line, as
 * "PATH line N: message". Relative data_path, checkpoint_dir, resume and
 * metrics values in the file are taken relative to the file's directory.
 * Returns 0, -ENOENT (and the other open errors), -EISDIR, or -EINVAL with
 * a message in err. */
int config_load_ini(struct train_config *cfg, const char *path, char *err, size_t errlen);

/* Applies one setting by name ("lr", "0.05"); -EINVAL with a message naming
 * the setting and the accepted values. */
int config_set(struct train_config *cfg, const char *key, const char *value, char *err,
	       size_t errlen);

/* Parses argv (after the program name): "--config PATH" first (wherever it
 * appears), then every "--key value", "--key=value", or a bare "--flag" for a
 * boolean (true; "--no-flag" false; "--flag false" when the next word does
 * not start with '-'). "--local_rank=N" (or "--local-rank=N") from a legacy
 * launcher is ignored. "-h"/"--help" sets *help. */
int config_parse_args(struct train_config *cfg, int argc, char **argv, bool *help, char *err,
		      size_t errlen);

/* Parses cfg->hidden into widths[]; returns how many (0 allowed), or
 * -EINVAL. */
int config_hidden_dims(const struct train_config *cfg, int *widths, int max);

/* Checks values that only make sense together; -EINVAL with a message. */
int config_validate(const struct train_config *cfg, char *err, size_t errlen);

/* The settings that make a job what it is, whatever the number of ranks:
 * the data, the model, the optimizer, the seed (not the batch per rank,
 * the step count, the outputs or the device). Checkpoints carry them as
 * "job.NAME" metadata; ddp-train resumes only from its own job's.
 * NULL-terminated. */
extern const char *const config_job_settings[];

/* Writes setting `key` of cfg as text into buf; -ENOENT for an unknown
 * name. */
int config_format(const struct train_config *cfg, const char *key, char *buf, size_t len);

/* Writes a usage text listing every setting and its default. */
void config_usage(const char *prog, FILE *file);

#endif
