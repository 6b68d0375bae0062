/*
 * launch_bench_worker.c - the worker of the restart benchmark.
 *
 * Needs LAUNCH_BENCH_DIR (a directory) and the torchrun environment
 * (LOCAL_RANK, LOCAL_WORLD_SIZE, TORCHELASTIC_RESTART_COUNT). Times are
 * CLOCK_MONOTONIC nanoseconds, one clock for every process on the machine.
 *   attempt 0: each local rank writes up.<r>; local rank 0 waits until every
 *              rank is up, writes "fail" with the time, and exits 1; the
 *              others wait for the launcher's signal (default action: die).
 *   attempt 1+: each rank writes start.<r> with the time main() began; local
 *              rank 0 also writes "launcher" with the launcher's VmHWM and
 *              VmRSS in KiB (LAUNCH_BENCH_LAUNCHER_PID, set by launch_bench,
 *              else the parent) and "parent" with its parent's (a guard
 *              process between launcher and worker, if any); all exit 0.
 * Nothing waits unbounded: alarm(60) ends a stuck worker.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int env_int(const char *name, int fallback)
{
	const char *v = getenv(name);

	return v && *v ? atoi(v) : fallback;
}

/* Writes text to dir/name atomically (temporary file, then rename). */
static int write_file(const char *dir, const char *name, const char *text)
{
	char tmp[4096], path[4096];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, name);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(tmp, "w");
	if (!f)
		return -errno;
	fputs(text, f);
	if (fclose(f) != 0)
		return -errno;
	return rename(tmp, path) < 0 ? -errno : 0;
}

static long status_kib(int pid, const char *field)
{
	char path[64], line[256];
	size_t flen = strlen(field);
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, field, flen) == 0 && line[flen] == ':')
			kib = strtol(line + flen + 1, NULL, 10);
	fclose(f);
	return kib;
}

static int all_up(const char *dir, int nranks)
{
	char path[4096];

	for (int r = 0; r < nranks; r++) {
		snprintf(path, sizeof(path), "%s/up.%d", dir, r);
		if (access(path, F_OK) != 0)
			return 0;
	}
	return 1;
}

static int first_attempt(const char *dir, int rank, int nranks)
{
	char name[32], text[32];
	uint64_t deadline = now_ns() + 30000000000ull;

	snprintf(name, sizeof(name), "up.%d", rank);
	if (write_file(dir, name, "1\n") < 0)
		return 3;
	if (rank != 0) {
		for (;;)
			pause();
	}
	/* polls with a deadline: the other ranks' start is what we wait for */
	while (!all_up(dir, nranks)) {
		if (now_ns() > deadline)
			return 4;
		usleep(1000);
	}
	snprintf(text, sizeof(text), "%llu\n", (unsigned long long)now_ns());
	write_file(dir, "fail", text);
	return 1;
}

int main(void)
{
	uint64_t started = now_ns();
	const char *dir = getenv("LAUNCH_BENCH_DIR");
	int rank = env_int("LOCAL_RANK", -1), nranks = env_int("LOCAL_WORLD_SIZE", 0);
	int attempt = env_int("TORCHELASTIC_RESTART_COUNT", -1);
	char name[32], text[64];

	alarm(60);
	if (!dir || rank < 0 || nranks <= 0 || attempt < 0) {
		fprintf(stderr,
			"launch_bench_worker: set LAUNCH_BENCH_DIR and run me under a "
			"launcher (LOCAL_RANK, LOCAL_WORLD_SIZE, TORCHELASTIC_RESTART_COUNT)\n");
		return 2;
	}
	if (attempt == 0)
		return first_attempt(dir, rank, nranks);
	snprintf(name, sizeof(name), "start.%d", rank);
	snprintf(text, sizeof(text), "%llu\n", (unsigned long long)started);
	if (write_file(dir, name, text) < 0)
		return 3;
	if (rank == 0) {
		int launcher = env_int("LAUNCH_BENCH_LAUNCHER_PID", (int)getppid());

		snprintf(text, sizeof(text), "%ld %ld\n", status_kib(launcher, "VmHWM"),
			 status_kib(launcher, "VmRSS"));
		write_file(dir, "launcher", text);
		snprintf(text, sizeof(text), "%ld %ld\n", status_kib((int)getppid(), "VmHWM"),
			 status_kib((int)getppid(), "VmRSS"));
		write_file(dir, "parent", text);
	}
	return 0;
}
