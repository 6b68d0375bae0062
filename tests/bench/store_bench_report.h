/*
 * store_bench_report.h - runs every store measurement in order and prints
 * the figures, the ours/theirs ratios and the targets.
 */
#ifndef DDP_TESTS_BENCH_STORE_BENCH_REPORT_H
#define DDP_TESTS_BENCH_STORE_BENCH_REPORT_H

#include "store_bench.h"

#define SBR_MAX_ARGS 8

struct sbr_config {
	const char *rdzvd;
	const char *python; /* NULL: no torch server */
	const char *rdzvd_args[SBR_MAX_ARGS + 1];
	double seconds; /* per throughput run */
	int rounds;	/* runs per setting; medians are reported */
	int conns[16], nconns;
	int storms[16], nstorms;
	int idle;
	uint64_t storm_timeout_ms;
	int strict;
};

/* `torch` may be NULL. Returns the exit status: 0, or 1 when a measurement
 * failed (or, with cfg->strict, a target was missed). */
int sbr_run_all(const struct sbr_config *cfg, const struct sb_server *ours,
		const struct sb_server *torch);

#endif
