/*
 * metrics.h - rank 0's output: a progress line per interval on stdout, a
 * progress bar while stdout is a terminal, and every record appended to a
 * JSON-lines metrics file (one object per line, "kind": "train" | "eval"; in
 * shard mode also "straggler" and "plan", loop_balance.c).
 */
#ifndef DDP_WORKER_TRAIN_METRICS_H
#define DDP_WORKER_TRAIN_METRICS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct metrics {
	FILE *out;  /* progress lines (stdout); NULL: not open */
	int jsonl;  /* metrics file descriptor, -1: no metrics file */
	bool fsync; /* the metrics file is a regular file: fsync it at close */
	bool bar;   /* draw a progress bar on out */
	bool bar_drawn;
	uint64_t bar_ns; /* when the bar was last drawn (redrawn <= 10 times/s) */
	/* Writes that did not land: records not (wholly) in the metrics file,
	 * progress lines stdout refused; err is the first one's -errno. */
	uint64_t records, lost_records, lost_lines;
	int err;
};

/* A training interval's summary. */
struct metrics_train {
	uint64_t epoch, epochs; /* epoch is 0-based, printed 1-based */
	uint64_t step, total_steps;
	double lr;
	double loss;		/* mean over the interval's samples */
	double accuracy;	/* fraction, over the interval's samples */
	double samples_per_s;	/* all ranks together */
	double allreduce_share; /* fraction of step time waiting on all-reduce */
	double grad_norm;
	double time; /* when the record was made: Unix seconds, sub-second */
	int world;   /* ranks that computed the interval's last step */
};

struct metrics_eval {
	uint64_t epoch, step;
	double loss, accuracy;
	uint64_t samples;
};

/* A replica whose state differed from the others' (replica_check.h). */
struct metrics_replica {
	uint64_t step;		   /* the committed step whose state was compared */
	int rank;		   /* the replica that differed */
	const char *tensor;	   /* the first tensor that differed */
	int world, majority, root; /* root: the majority's lowest rank, -1: none */
	const char *action;	   /* "healed" or "stopped" */
	double heal_s;
};

/* Opens (appends to, creating it) the metrics file if path is not NULL/"";
 * bar is drawn only if want_bar and `out` is a terminal. -errno if the
 * file cannot be opened. */
int metrics_open(struct metrics *m, FILE *out, const char *path, bool want_bar);
/* Closes the metrics file (fsync first when it is a regular file). Returns
 * 0, or the -errno of the first lost write when any record or progress
 * line was lost, now or before (the counters say how many). A second call,
 * or one on a zeroed struct, only returns that again. */
int metrics_close(struct metrics *m);

/* Print the line and append the record: 0, or -errno when either did not
 * land whole (counted in m; the run goes on). */
int metrics_log_train(struct metrics *m, const struct metrics_train *r);
int metrics_log_eval(struct metrics *m, const struct metrics_eval *r);
/* Prints line (when not NULL) and appends rec (one JSON object and its
 * '\n') to the metrics file: other kinds of records ("straggler", "plan").
 * 0 or -errno as metrics_log_train. */
int metrics_log_raw(struct metrics *m, const char *line, const char *rec);
/* Appends the record ("kind": "replica") only: the worker's log line says
 * it on every rank. 0 or -errno as above. */
int metrics_log_replica(struct metrics *m, const struct metrics_replica *r);
/* Redraws the bar for step `done` of `total` (no-op without a terminal; at
 * most every 100 ms, and at the last step). */
void metrics_bar(struct metrics *m, uint64_t done, uint64_t total, double loss);

#endif
