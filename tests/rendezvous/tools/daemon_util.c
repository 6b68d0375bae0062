/*
 * daemon_util.c - run ddp-rdzvd for tests; raw loopback sockets.
 */
#include "daemon_util.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static void pause_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* The port ddp-rdzvd announces on its standard output once it listens (one
 * line), read from the pipe `fd` within `ms`: a blocking wait, no polling.
 * -1 when the daemon exits (end of file) or the deadline passes first. */
static int read_announced_port(int fd, int ms)
{
	char line[32];
	size_t n = 0;
	long deadline = now_ms() + ms;

	while (n + 1 < sizeof(line)) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		long left = deadline - now_ms();
		ssize_t got;

		if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
			return -1;
		got = read(fd, line + n, 1);
		if (got <= 0)
			return -1;
		if (line[n] == '\n') {
			line[n] = '\0';
			return atoi(line);
		}
		n++;
	}
	return -1;
}

int daemon_start(struct daemon *d, const char *const *args)
{
	const char *bin = getenv("DDP_RDZVD");
	if (!bin)
		return -1;
	memset(d, 0, sizeof(*d));
	snprintf(d->dir, sizeof(d->dir), "%s/rdzvd-test-XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(d->dir))
		return -1;
	snprintf(d->port_file, sizeof(d->port_file), "%s/port", d->dir);
	snprintf(d->log_file, sizeof(d->log_file), "%s/log", d->dir);
	const char *argv[64] = {bin, "--port", "0", "--port-file", d->port_file};
	int n = 5;
	for (; args && *args && n < 62; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	int out[2];
	if (pipe2(out, O_CLOEXEC) < 0)
		return -1;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 2, d->log_file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	posix_spawn_file_actions_adddup2(&fa, out[1], 1);
	int rc = posix_spawn(&d->pid, bin, &fa, NULL, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(out[1]);
	if (rc != 0) {
		close(out[0]);
		return -1;
	}
	d->port = read_announced_port(out[0], 10000);
	/* Nothing else comes on stdout; a write after this close would get
	 * EPIPE, which the daemon ignores. */
	close(out[0]);
	if (d->port > 0)
		return 0;
	if (waitpid(d->pid, NULL, WNOHANG) == d->pid)
		d->pid = 0;
	return -1;
}

int daemon_wait(struct daemon *d, int timeout_ms)
{
	long deadline = now_ms() + timeout_ms;
	int ws = 0;
	pid_t r;
	while ((r = waitpid(d->pid, &ws, WNOHANG)) == 0 && now_ms() < deadline)
		pause_ms(5);
	if (r != d->pid)
		return -1;
	d->pid = 0;
	return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

int daemon_stop(struct daemon *d)
{
	int status = -1;
	if (d->pid > 0) {
		kill(d->pid, SIGTERM);
		long deadline = now_ms() + 10000;
		int ws = 0;
		pid_t r = 0;
		while ((r = waitpid(d->pid, &ws, WNOHANG)) == 0 && now_ms() < deadline)
			pause_ms(5);
		if (r == 0) {
			kill(d->pid, SIGKILL);
			waitpid(d->pid, &ws, 0);
		} else if (r == d->pid && WIFEXITED(ws)) {
			status = WEXITSTATUS(ws);
		}
		d->pid = 0;
	}
	unlink(d->port_file);
	unlink(d->log_file);
	rmdir(d->dir);
	return status;
}

/* A "Name: N kB" line of /proc/PID/status, or -1. */
static long status_kib(const struct daemon *d, const char *format)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)d->pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	long kib = -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, format, &kib) == 1)
			break;
	fclose(f);
	return kib;
}

long daemon_rss_kib(const struct daemon *d)
{
	return status_kib(d, "VmRSS: %ld kB");
}

long daemon_hwm_kib(const struct daemon *d)
{
	return status_kib(d, "VmHWM: %ld kB");
}

/* Lines of the daemon's log that contain needle. */
static int log_lines(const struct daemon *d, const char *needle)
{
	FILE *f = fopen(d->log_file, "r");
	if (!f)
		return 0;
	char line[1024];
	int n = 0;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

int daemon_log_count(const struct daemon *d, const char *needle, int count, int timeout_ms)
{
	long deadline = now_ms() + timeout_ms;
	do {
		if (log_lines(d, needle) >= count)
			return 1;
		pause_ms(5);
	} while (now_ms() < deadline);
	return 0;
}

int daemon_log_contains(const struct daemon *d, const char *needle, int timeout_ms)
{
	return daemon_log_count(d, needle, 1, timeout_ms);
}

int raw_connect(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(fd);
		return -1;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

int raw_send(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int raw_recv(int fd, void *buf, size_t len, int timeout_ms)
{
	char *p = buf;
	long deadline = now_ms() + timeout_ms;
	while (len > 0) {
		long left = deadline - now_ms();
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
			return -1;
		ssize_t n = recv(fd, p, len, 0);
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int raw_closed(int fd, int timeout_ms)
{
	long deadline = now_ms() + timeout_ms;
	char buf[4096];
	for (;;) {
		long left = deadline - now_ms();
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
			return 0;
		ssize_t n = recv(fd, buf, sizeof(buf), 0);
		if (n == 0 || (n < 0 && errno == ECONNRESET))
			return 1;
		if (n < 0)
			return 0;
	}
}

int raw_silent(int fd, int ms)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	return poll(&pfd, 1, ms) == 0;
}

int raw_handshake_v2(int fd)
{
	const uint8_t hs[] = {0x00, 0xCE, 0xF7, 0x85, 0x3C, 0x0D, 0x78, 0x56, 0x34, 0x12};
	uint8_t echo[4];
	if (raw_send(fd, hs, sizeof(hs)) < 0 || raw_recv(fd, echo, 4, 10000) < 0)
		return -1;
	return memcmp(echo, hs + 6, 4) == 0 ? 0 : -1;
}
