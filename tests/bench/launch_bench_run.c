/*
 * launch_bench_run.c - fork/exec/wait for the launcher benchmark. The wait
 * uses a pidfd, so a run that ends is reaped at once (no polling interval
 * in the measured time) and a run that hangs is ended at its deadline.
 */
#include "launch_bench_run.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void child_exec(char *const argv[], const char *bench_dir, const char *log_path)
{
	int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

	if (fd >= 0) {
		dup2(fd, 1);
		dup2(fd, 2);
	}
	if (bench_dir) {
		char pid[16];

		snprintf(pid, sizeof(pid), "%d", (int)getpid());
		setenv("LAUNCH_BENCH_DIR", bench_dir, 1);
		setenv("LAUNCH_BENCH_LAUNCHER_PID", pid, 1);
	}
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	execv(argv[0], argv);
	dprintf(2, "launch_bench: cannot run %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

/* Waits for pid's exit until timeout_ms; 0 when it has exited. */
static int wait_exit(int pidfd, uint64_t timeout_ms)
{
	struct pollfd pfd = {.fd = pidfd, .events = POLLIN};
	int r;

	do {
		r = poll(&pfd, 1, (int)timeout_ms);
	} while (r < 0 && errno == EINTR);
	return r > 0 ? 0 : -ETIMEDOUT;
}

int lb_run_cmd(char *const argv[], const char *bench_dir, const char *log_path, uint64_t timeout_ms,
	       struct lb_run *out)
{
	struct rusage ru = {0};
	double t0 = mono_s();
	int status = 0, pidfd, timed_out = 0;
	pid_t pid = fork();

	memset(out, 0, sizeof(*out));
	if (pid < 0)
		return -errno;
	if (pid == 0)
		child_exec(argv, bench_dir, log_path);
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pidfd >= 0 && wait_exit(pidfd, timeout_ms) < 0) {
		timed_out = 1;
		kill(pid, SIGTERM);
		if (wait_exit(pidfd, 5000) < 0)
			kill(pid, SIGKILL);
	}
	if (wait4(pid, &status, 0, &ru) < 0)
		status = -1;
	out->seconds = mono_s() - t0;
	if (pidfd >= 0)
		close(pidfd);
	out->maxrss_kib = ru.ru_maxrss;
	out->cpu_s = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
		     (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
	if (timed_out)
		out->status = -1;
	else if (WIFEXITED(status))
		out->status = WEXITSTATUS(status);
	else
		out->status = 128 + WTERMSIG(status);
	return 0;
}

int lb_read_u64(const char *dir, const char *name, uint64_t *out)
{
	char path[4096];
	unsigned long long v;
	FILE *f;
	int ok;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "r");
	if (!f)
		return -errno;
	ok = fscanf(f, "%llu", &v) == 1;
	fclose(f);
	if (!ok)
		return -EPROTO;
	*out = v;
	return 0;
}

void lb_remove_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			unlinkat(dirfd(d), e->d_name, 0);
	}
	closedir(d);
	rmdir(dir);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double lb_median(double *v, int n)
{
	if (n == 0)
		return 0;
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
