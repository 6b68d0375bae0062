/*
 * store_bench_proc.c - starting and stopping the two servers under test, and
 * reading their CPU time and memory from /proc.
 *
 * Children get PR_SET_PDEATHSIG(SIGKILL), so a generator that dies (even by
 * SIGKILL) leaves no server behind; normally sb_server_stop() ends them.
 */
#include "store_bench.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "timeutil.h"

/* torch's own server on an ephemeral port; prints the port and the torch
 * version, then lives until stdin reaches EOF (the generator closes it, or
 * dies). */
static const char torch_server_py[] =
    "import os, re, sys, datetime\n"
    "os.environ.setdefault('TORCH_CPP_LOG_LEVEL', 'ERROR')  # no warning per reset client\n"
    "import torch, torch.distributed as dist\n"
    "s = dist.TCPStore('127.0.0.1', 0, is_master=True, wait_for_workers=False,\n"
    "                  timeout=datetime.timedelta(seconds=900))\n"
    "print(s.port, re.match(r'[0-9.]*', torch.__version__).group(0), flush=True)\n"
    "sys.stdin.read()\n";

/* stdout_fd: -1 keeps ours; quiet: stdout and stderr go to /dev/null. */
static pid_t spawn(char *const argv[], int stdin_fd, int stdout_fd, int quiet)
{
	pid_t parent = getpid(), pid = fork();

	if (pid != 0)
		return pid < 0 ? -errno : pid;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(127);
	if (stdin_fd >= 0)
		dup2(stdin_fd, 0);
	if (stdout_fd >= 0)
		dup2(stdout_fd, 1);
	if (quiet) {
		int null = open("/dev/null", O_WRONLY);

		dup2(null, 1);
		dup2(null, 2);
	}
	execv(argv[0], argv);
	fprintf(stderr, "store_bench: cannot run %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

/* Reads a decimal port from a file, polling until it is complete. */
static int read_port_file(const char *path, pid_t pid, uint64_t timeout_ms)
{
	uint64_t deadline = time_now_ms() + timeout_ms;

	do {
		FILE *f = fopen(path, "r");
		int port = 0;

		if (f) {
			int ok = fscanf(f, "%d", &port) == 1;

			fclose(f);
			if (ok && port > 0)
				return port;
		}
		if (waitpid(pid, NULL, WNOHANG) == pid)
			return -ECHILD;
		usleep(2000);
	} while (time_left_ms(deadline) > 0);
	return -ETIMEDOUT;
}

int sb_server_start_rdzvd(const char *rdzvd, const char *const *extra_args, struct sb_server *out)
{
	char dir[] = "/tmp/store_bench.XXXXXX", path[64];
	char *argv[32] = {(char *)rdzvd, "--host", "127.0.0.1", "--port", "0", "--port-file", path};
	int argc = 7, rc;

	memset(out, 0, sizeof(*out));
	out->name = "ddp-rdzvd";
	out->stdin_fd = -1;
	if (!mkdtemp(dir))
		return -errno;
	snprintf(path, sizeof(path), "%s/port", dir);
	for (; extra_args && *extra_args && argc < 31; extra_args++)
		argv[argc++] = (char *)*extra_args;
	argv[argc] = NULL;
	out->pid = spawn(argv, -1, -1, 1);
	if (out->pid < 0) {
		rc = out->pid;
		goto out;
	}
	rc = read_port_file(path, out->pid, 10000);
	if (rc > 0)
		out->port = rc;
out:
	unlink(path);
	rmdir(dir);
	if (rc < 0 && out->pid > 0)
		sb_server_stop(out);
	return rc < 0 ? rc : 0;
}

/* Reads "PORT VERSION\n" into *port and version (version_len bytes). */
static int read_line_port(int fd, uint64_t timeout_ms, int *port, char *version, size_t version_len)
{
	uint64_t deadline = time_now_ms() + timeout_ms;
	char line[64];
	size_t used = 0;

	while (used < sizeof(line) - 1) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int r = poll(&pfd, 1, (int)time_left_ms(deadline));
		ssize_t n;

		if (r == 0)
			return -ETIMEDOUT;
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r < 0)
			continue;
		n = read(fd, line + used, sizeof(line) - 1 - used);
		if (n <= 0)
			return -EPIPE;
		used += (size_t)n;
		line[used] = '\0';
		if (strchr(line, '\n')) {
			char *sp = strchr(line, ' ');
			*port = atoi(line);
			if (*port <= 0 || !sp)
				return -EPROTO;
			snprintf(version, version_len, "%.*s", (int)strcspn(sp + 1, "\n"), sp + 1);
			return 0;
		}
	}
	return -EPROTO;
}

int sb_server_start_torch(const char *python, struct sb_server *out)
{
	char *argv[] = {(char *)python, "-c", (char *)torch_server_py, NULL};
	int in[2] = {-1, -1}, outp[2] = {-1, -1}, rc;

	char version[24] = "";
	int port = 0;

	memset(out, 0, sizeof(*out));
	out->name = "torch";
	out->stdin_fd = -1;
	if (pipe2(in, O_CLOEXEC) < 0 || pipe2(outp, O_CLOEXEC) < 0) {
		rc = -errno;
		goto out;
	}
	out->pid = spawn(argv, in[0], outp[1], 0);
	if (out->pid < 0) {
		rc = out->pid;
		goto out;
	}
	out->stdin_fd = in[1];
	in[1] = -1;
	rc = read_line_port(outp[0], 60000, &port, version, sizeof(version));
	if (rc == 0) {
		out->port = port;
		snprintf(out->label, sizeof(out->label), "torch-%s", version);
		out->name = out->label;
		out->gen = version[0] == '1' && version[1] == '.' ? PROTO_GEN_V1 : PROTO_GEN_V2;
	}
out:
	for (int i = 0; i < 2; i++) {
		if (in[i] >= 0)
			close(in[i]);
		if (outp[i] >= 0)
			close(outp[i]);
	}
	if (rc < 0 && out->pid > 0)
		sb_server_stop(out);
	return rc < 0 ? rc : 0;
}

static int reap_within(pid_t pid, uint64_t timeout_ms)
{
	uint64_t deadline = time_now_ms() + timeout_ms;

	do {
		pid_t r = waitpid(pid, NULL, WNOHANG);

		if (r == pid || (r < 0 && errno == ECHILD))
			return 0;
		usleep(2000);
	} while (time_left_ms(deadline) > 0);
	return -ETIMEDOUT;
}

void sb_server_stop(struct sb_server *server)
{
	if (server->stdin_fd >= 0) {
		close(server->stdin_fd);
		server->stdin_fd = -1;
	}
	if (server->pid <= 0)
		return;
	kill(server->pid, SIGTERM);
	if (reap_within(server->pid, 5000) < 0) {
		kill(server->pid, SIGKILL);
		waitpid(server->pid, NULL, 0);
	}
	server->pid = 0;
}

int64_t sb_proc_cpu_ns(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long utime, stime;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -errno;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* the command name may hold spaces: fields count from the last ')' */
	p = strrchr(buf, ')');
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
			 &stime) != 2)
		return -EPROTO;
	return (int64_t)((utime + stime) *
			 (1000000000ull / (unsigned long long)sysconf(_SC_CLK_TCK)));
}

int64_t sb_proc_status_kib(pid_t pid, const char *field)
{
	char path[64], line[256];
	size_t flen = strlen(field);
	int64_t kib = -ENOENT;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, field, flen) == 0 && line[flen] == ':') {
			kib = strtoll(line + flen + 1, NULL, 10);
			break;
		}
	}
	fclose(f);
	return kib;
}

long sb_raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return -errno;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		return -errno;
	return (long)rl.rlim_cur;
}
