/*
 * launch_bench.c - ddplaunch against torchrun (1.13 or 2.x: the torch of
 * --python), in the same run:
 * start-to-exit time of `--nproc_per_node=4 /bin/true`, restart latency
 * (a worker's failure to the first restarted worker running) and the
 * launcher's peak RSS.
 *
 *   launch_bench --ddplaunch PATH --worker PATH [--python /usr/bin/python3]
 *                [--trials 20] [--torch-trials 5] [--nproc 4] [--no-torch]
 *
 * Launchers' output goes to a log file named in the report. Exit status 0,
 * 1 when a run failed, 2 for bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launch_bench_run.h"

#define MAX_TRIALS     100
#define RUN_TIMEOUT_MS 120000

struct lb_cfg {
	const char *ddplaunch, *worker, *python;
	int trials, torch_trials, nproc;
	char nproc_arg[32];
	char log_path[128];
};

struct lb_stats {
	double median, min, max;
	double cpu_median; /* launch: CPU seconds of launcher + workers */
	long maxrss_kib;   /* launch: ru_maxrss; restart: the launcher's VmHWM */
	long parent_kib;   /* restart: VmHWM of the worker's parent */
	int ok;
};

/* argv for one launcher: ours (torch == 0) or torchrun; `prog` runs under it. */
static void build_argv(const struct lb_cfg *cfg, int torch, int restarts, const char *prog,
		       char **argv)
{
	int n = 0;

	if (!torch) {
		argv[n++] = (char *)cfg->ddplaunch;
	} else {
		char *pre[] = {(char *)cfg->python,
			       "-m",
			       "torch.distributed.run",
			       "-r",
			       "9:1",
			       "-t",
			       "9:1",
			       "--no_python",
			       "--monitor_interval=0.1",
			       "--master_port=0"};

		for (size_t i = 0; i < sizeof(pre) / sizeof(pre[0]); i++)
			argv[n++] = pre[i];
	}
	argv[n++] = (char *)cfg->nproc_arg;
	if (restarts)
		argv[n++] = "--max_restarts=1";
	argv[n++] = (char *)prog;
	argv[n] = NULL;
}

static void print_cmd(char **argv)
{
	printf("  $");
	for (; *argv; argv++)
		printf(" %s", *argv);
	printf("\n");
}

static int launch_trials(const struct lb_cfg *cfg, int torch, struct lb_stats *st)
{
	char *argv[24];
	double t[MAX_TRIALS], cpu[MAX_TRIALS];
	int n = torch ? cfg->torch_trials : cfg->trials;

	build_argv(cfg, torch, 0, "/bin/true", argv);
	print_cmd(argv);
	memset(st, 0, sizeof(*st));
	for (int i = 0; i < n; i++) {
		struct lb_run r;
		int rc = lb_run_cmd(argv, NULL, cfg->log_path, RUN_TIMEOUT_MS, &r);

		if (rc < 0 || r.status != 0) {
			printf("  error: trial %d ended with status %d (see %s)\n", i, r.status,
			       cfg->log_path);
			return -1;
		}
		t[i] = r.seconds;
		cpu[i] = r.cpu_s;
		if (r.maxrss_kib > st->maxrss_kib)
			st->maxrss_kib = r.maxrss_kib;
	}
	st->median = lb_median(t, n);
	st->min = t[0];
	st->max = t[n - 1];
	st->cpu_median = lb_median(cpu, n);
	st->ok = 1;
	printf(
	    "  %-10s %d trials: median %.4f s  min %.4f  max %.4f\n"
	    "             CPU (user+sys, launcher and workers) median %.4f s; ru_maxrss %ld KiB\n",
	    torch ? "torchrun" : "ddplaunch", n, st->median, st->min, st->max, st->cpu_median,
	    st->maxrss_kib);
	return 0;
}

/* One restart trial: latency in seconds and the launcher's VmHWM. */
static int restart_once(const struct lb_cfg *cfg, int torch, double *latency, long *hwm_kib,
			long *parent_kib)
{
	char dir[] = "/tmp/launch_bench.XXXXXX", *argv[24], name[32];
	uint64_t fail = 0, first = UINT64_MAX, v;
	struct lb_run r;
	int rc;

	if (!mkdtemp(dir))
		return -errno;
	build_argv(cfg, torch, 1, cfg->worker, argv);
	rc = lb_run_cmd(argv, dir, cfg->log_path, RUN_TIMEOUT_MS, &r);
	if (rc == 0 && r.status != 0)
		rc = -ECHILD;
	if (rc == 0)
		rc = lb_read_u64(dir, "fail", &fail);
	for (int i = 0; rc == 0 && i < cfg->nproc; i++) {
		snprintf(name, sizeof(name), "start.%d", i);
		if (lb_read_u64(dir, name, &v) == 0 && v < first)
			first = v;
	}
	if (rc == 0 && (first == UINT64_MAX || first < fail))
		rc = -EPROTO;
	if (rc == 0)
		*latency = (double)(first - fail) / 1e9;
	if (rc == 0 && lb_read_u64(dir, "launcher", &v) == 0)
		*hwm_kib = (long)v;
	if (rc == 0 && lb_read_u64(dir, "parent", &v) == 0)
		*parent_kib = (long)v;
	lb_remove_dir(dir);
	return rc;
}

static int restart_trials(const struct lb_cfg *cfg, int torch, struct lb_stats *st)
{
	char *argv[24];
	double t[MAX_TRIALS];
	int n = torch ? cfg->torch_trials : cfg->trials;

	build_argv(cfg, torch, 1, cfg->worker, argv);
	print_cmd(argv);
	memset(st, 0, sizeof(*st));
	for (int i = 0; i < n; i++) {
		long hwm = 0, parent = 0;
		int rc = restart_once(cfg, torch, &t[i], &hwm, &parent);

		if (rc < 0) {
			printf("  error: restart trial %d: %s (see %s)\n", i, strerror(-rc),
			       cfg->log_path);
			return -1;
		}
		if (hwm > st->maxrss_kib)
			st->maxrss_kib = hwm;
		if (parent > st->parent_kib)
			st->parent_kib = parent;
	}
	st->median = lb_median(t, n);
	st->min = t[0];
	st->max = t[n - 1];
	st->ok = 1;
	printf("  %-10s %d trials: median %.2f ms  min %.2f  max %.2f\n"
	       "             launcher VmHWM %ld KiB; worker's parent VmHWM %ld KiB\n",
	       torch ? "torchrun" : "ddplaunch", n, st->median * 1e3, st->min * 1e3, st->max * 1e3,
	       st->maxrss_kib, st->parent_kib);
	return 0;
}

static int target(const char *what, double got, const char *op, double want, int met)
{
	printf("  target %-44s %10.3f (want %s %g)  %s\n", what, got, op, want,
	       met ? "MET" : "MISSED");
	return !met;
}

static int parse_args(int argc, char **argv, struct lb_cfg *cfg)
{
	static const struct option opts[] = {
	    {"ddplaunch", required_argument, NULL, 'd'},
	    {"worker", required_argument, NULL, 'w'},
	    {"python", required_argument, NULL, 'p'},
	    {"trials", required_argument, NULL, 't'},
	    {"torch-trials", required_argument, NULL, 'T'},
	    {"nproc", required_argument, NULL, 'n'},
	    {"no-torch", no_argument, NULL, 'N'},
	    {NULL, 0, NULL, 0},
	};
	int c;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'd':
			cfg->ddplaunch = optarg;
			break;
		case 'w':
			cfg->worker = optarg;
			break;
		case 'p':
			cfg->python = optarg;
			break;
		case 't':
			cfg->trials = atoi(optarg);
			break;
		case 'T':
			cfg->torch_trials = atoi(optarg);
			break;
		case 'n':
			cfg->nproc = atoi(optarg);
			break;
		case 'N':
			cfg->python = NULL;
			break;
		default:
			return -EINVAL;
		}
	}
	if (!cfg->ddplaunch || !cfg->worker || optind != argc || cfg->trials < 1 ||
	    cfg->trials > MAX_TRIALS || cfg->torch_trials < 1 || cfg->torch_trials > MAX_TRIALS ||
	    cfg->nproc < 1 || cfg->nproc > 64)
		return -EINVAL;
	snprintf(cfg->nproc_arg, sizeof(cfg->nproc_arg), "--nproc_per_node=%d", cfg->nproc);
	return 0;
}

static int report_targets(const struct lb_stats *launch, const struct lb_stats *restart)
{
	int missed = 0;

	printf("\n== targets\n");
	if (launch[0].ok && launch[1].ok) {
		printf("  launch: torchrun/ddplaunch median ratio %.1fx (wall), %.1fx (CPU)\n",
		       launch[1].median / launch[0].median,
		       launch[1].cpu_median / launch[0].cpu_median);
		missed += target("launch at least 100x faster than torchrun",
				 launch[1].median / launch[0].median, ">=", 100,
				 launch[1].median >= 100 * launch[0].median);
	}
	if (restart[0].ok && restart[1].ok)
		printf("  restart: torchrun/ddplaunch median ratio %.1fx\n",
		       restart[1].median / restart[0].median);
	if (restart[0].ok) {
		missed += target("restart latency (ms) < 10", restart[0].median * 1e3, "<", 10,
				 restart[0].median < 0.010);
		missed +=
		    target("launcher peak RSS VmHWM (MiB) < 8", restart[0].maxrss_kib / 1024.0, "<",
			   8, restart[0].maxrss_kib < 8 * 1024);
	}
	if (restart[1].ok)
		printf("  torchrun launcher VmHWM: %.1f MiB\n", restart[1].maxrss_kib / 1024.0);
	return missed;
}

int main(int argc, char **argv)
{
	struct lb_cfg cfg = {
	    .python = "/usr/bin/python3", .trials = 20, .torch_trials = 5, .nproc = 4};
	struct lb_stats launch[2] = {{0}}, restart[2] = {{0}};
	int errors = 0, missed;

	if (parse_args(argc, argv, &cfg) < 0) {
		fprintf(stderr, "usage: launch_bench --ddplaunch PATH --worker PATH "
				"[--python PATH] [--trials N] [--torch-trials N] [--nproc N] "
				"[--no-torch]\n");
		return 2;
	}
	snprintf(cfg.log_path, sizeof(cfg.log_path), "/tmp/launch_bench.%d.log", (int)getpid());
	printf("launch_bench: launchers' output goes to %s\n", cfg.log_path);
	if (cfg.python)
		printf("launch_bench: torchrun is %s -m torch.distributed.run\n", cfg.python);
	printf("\n== launch: start to exit of %s /bin/true (wall time, fork to reaped)\n",
	       cfg.nproc_arg);
	errors += launch_trials(&cfg, 0, &launch[0]) < 0;
	if (cfg.python)
		errors += launch_trials(&cfg, 1, &launch[1]) < 0;
	printf("\n== restart: a worker's failure (local rank 0 exits 1 on attempt 0) to the\n"
	       "   first worker of attempt 1 running (CLOCK_MONOTONIC in the workers)\n");
	errors += restart_trials(&cfg, 0, &restart[0]) < 0;
	if (cfg.python)
		errors += restart_trials(&cfg, 1, &restart[1]) < 0;
	missed = report_targets(launch, restart);
	printf("\nlaunch_bench: %d error(s), %d target(s) missed\n", errors, missed);
	if (errors == 0)
		unlink(cfg.log_path);
	return errors ? 1 : 0;
}
