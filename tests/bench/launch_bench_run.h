/*
 * launch_bench_run.h - running one launcher command with a deadline and
 * reading what the benchmark worker left behind.
 */
#ifndef DDP_TESTS_BENCH_LAUNCH_BENCH_RUN_H
#define DDP_TESTS_BENCH_LAUNCH_BENCH_RUN_H

#include <stdint.h>

struct lb_run {
	int status;	 /* exit code, 128+signal, or -1 (timed out) */
	double seconds;	 /* fork to reaped, CLOCK_MONOTONIC */
	double cpu_s;	 /* user + system CPU of the launcher and its reaped children */
	long maxrss_kib; /* wait4's ru_maxrss: the launcher or its largest child */
};

/* Runs argv (argv[0] is a path) with stdout+stderr appended to `log_path`
 * and, if `bench_dir` is not NULL, LAUNCH_BENCH_DIR=bench_dir and
 * LAUNCH_BENCH_LAUNCHER_PID=its pid in its environment. After timeout_ms: SIGTERM, 5 s, SIGKILL.
 * Returns 0 when it was reaped (see out->status) or a negative errno. */
int lb_run_cmd(char *const argv[], const char *bench_dir, const char *log_path, uint64_t timeout_ms,
	       struct lb_run *out);

/* Reads the first unsigned integer of dir/name; -ENOENT if absent. */
int lb_read_u64(const char *dir, const char *name, uint64_t *out);

/* Removes dir's files (not recursive) and dir itself. */
void lb_remove_dir(const char *dir);

/* Median of n values (sorts them in place); 0 when n == 0. */
double lb_median(double *v, int n);

#endif
