/*
 * launch_helper - a tiny worker for the launcher's integration tests.
 *
 *   launch_helper [--only RANK [--others-wait]] ACTION [ARGS...]
 *
 * With --only, ranks other than RANK exit 0 at once, or with --others-wait
 * wait for a signal (and die by it). Actions:
 *   env DIR             write the environment and argv to DIR/env.RANK.ATTEMPT
 *   exit CODE           exit with CODE
 *   signal SIG          kill itself with signal number SIG
 *   ignore-term DIR     ignore SIGTERM, write DIR/ready.RANK, wait forever
 *   grandchild DIR      fork /bin/sleep 1000, write "PID SLEEPPID" to
 *                       DIR/pids.RANK, wait forever
 *   fail-once CODE      exit CODE on attempt 0, else 0
 *   burst LINES LEN     LINES stdout lines of LEN bytes, each split over
 *                       several writes
 *   catch DIR           wait for TERM/INT/HUP/USR1; write its number to
 *                       DIR/sig.RANK, exit 0; DIR/ready.RANK when waiting
 *   error-file MSG CODE write a PyTorch-style error file, 3 stderr lines,
 *                       exit CODE
 *   pid DIR CODE        write the pid to DIR/pid.RANK, exit CODE
 *   escape DIR M1 M2 CODE
 *                       start "sleep M1" in the worker's group and "sleep M2"
 *                       in a session of its own (setsid), both running
 *                       before "PID1 PID2" goes to DIR/escape.RANK.ATTEMPT;
 *                       then exit CODE, or wait forever if CODE is -1
 *   await FILE          wait until FILE exists (at most 60 s, then exit 97)
 *   checkpoint DIR      on each SIGUSR1 append a line to DIR/usr1.RANK and go
 *                       on; exit 0 once DIR/finish exists; a SIGTERM writes
 *                       DIR/term.RANK and exits 143; DIR/ready.RANK when
 *                       waiting
 *   stop-self DIR       write its pid to DIR/ready.RANK, then stop itself
 *                       (SIGSTOP); once continued, wait forever
 *   progress SEQ MODE   a tiny progress-page writer (common/progress.h):
 *                       map DDP_PROGRESS_FILE (exit 4 when unset, 5 when it
 *                       cannot be mapped, 3 when it is not DDP_PROGRESS_SIZE
 *                       zero bytes), write a record "inside allreduce SEQ"
 *                       and exit 0; MODE "odd" leaves the sequence lock odd
 *                       (a writer stopped inside a write)
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "progress.h"

extern char **environ;

static int env_int(const char *name)
{
	const char *v = getenv(name);

	return v ? atoi(v) : -1;
}

static void write_file(const char *dir, const char *name, const char *text)
{
	char path[4096], tmp[4200];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s.%d", dir, name, env_int("RANK"));
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f) {
		perror(tmp);
		exit(90);
	}
	fputs(text, f);
	fclose(f);
	rename(tmp, path); /* readers see the whole file or none */
}

static int do_env(const char *dir, int argc, char **argv)
{
	char path[4096], tmp[4200];
	FILE *f;

	snprintf(path, sizeof(path), "%s/env.%d.%d", dir, env_int("RANK"),
		 env_int("TORCHELASTIC_RESTART_COUNT"));
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f)
		return 91;
	for (char **e = environ; *e; e++)
		fprintf(f, "%s\n", *e);
	for (int i = 0; i < argc; i++)
		fprintf(f, "ARGV%d=%s\n", i, argv[i]);
	fclose(f);
	return rename(tmp, path) ? 93 : 0; /* readers see all of it or nothing */
}

static void wait_forever(void)
{
	for (;;)
		pause();
}

static int do_grandchild(const char *dir)
{
	char text[64];
	pid_t child = fork();

	if (child == 0) {
		execl("/bin/sleep", "sleep", "1000", (char *)NULL);
		_exit(127);
	}
	snprintf(text, sizeof(text), "%d %d\n", (int)getpid(), (int)child);
	write_file(dir, "pids", text);
	wait_forever();
	return 0;
}

/* Each line goes out in pieces, with no newline until the last piece. */
static int do_burst(int lines, int len)
{
	int rank = env_int("RANK");
	char *line = malloc((size_t)len + 1);

	for (int i = 0; i < len; i++)
		line[i] = (char)('a' + rank % 26);
	line[len] = '\n';
	for (int l = 0; l < lines; l++) {
		char head[32];
		int hn = snprintf(head, sizeof(head), "R%d:%d:", rank, l);
		int off = 0;

		(void)!write(STDOUT_FILENO, head, (size_t)hn);
		while (off < len + 1) {
			int piece = 1 + (l * 7 + off) % 97;

			if (off + piece > len + 1)
				piece = len + 1 - off;
			(void)!write(STDOUT_FILENO, line + off, (size_t)piece);
			off += piece;
		}
	}
	free(line);
	return 0;
}

static int do_catch(const char *dir)
{
	int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1};
	sigset_t set;
	int sig = 0;
	char text[16];

	sigemptyset(&set);
	for (int i = 0; i < 4; i++)
		sigaddset(&set, sigs[i]);
	sigprocmask(SIG_BLOCK, &set, NULL);
	write_file(dir, "ready", "ready\n");
	sigwait(&set, &sig);
	snprintf(text, sizeof(text), "%d\n", sig);
	write_file(dir, "sig", text);
	return 0;
}

static int do_error_file(const char *msg, int code)
{
	const char *path = getenv("TORCHELASTIC_ERROR_FILE");
	FILE *f = path ? fopen(path, "w") : NULL;

	if (f) {
		fprintf(f,
			"{\"message\": {\"message\": \"%s\", \"extraInfo\": "
			"{\"py_callstack\": \"x\", \"timestamp\": \"1\"}}}",
			msg);
		fclose(f);
	}
	fprintf(stderr, "stderr line one\nstderr line two\nfatal: %s\n", msg);
	return code;
}

/* Forks "sleep SECONDS" (after setsid() when `own_session`) and returns its
 * pid once it runs sleep: the pipe closes at the exec. */
static pid_t start_sleep(const char *seconds, int own_session)
{
	int fds[2];
	char c;
	pid_t pid;

	if (pipe2(fds, O_CLOEXEC))
		exit(95);
	pid = fork();
	if (pid == 0) {
		close(fds[0]);
		if (own_session && setsid() < 0)
			_exit(126);
		execl("/bin/sleep", "sleep", seconds, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	while (read(fds[0], &c, 1) > 0)
		;
	close(fds[0]);
	return pid;
}

static int do_escape(const char *dir, const char *m1, const char *m2, int code)
{
	char path[4096], tmp[4200];
	pid_t a = start_sleep(m1, 0), b = start_sleep(m2, 1);
	FILE *f;

	snprintf(path, sizeof(path), "%s/escape.%d.%d", dir, env_int("RANK"),
		 env_int("TORCHELASTIC_RESTART_COUNT"));
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f)
		return 90;
	fprintf(f, "%d %d\n", (int)a, (int)b);
	fclose(f);
	rename(tmp, path);
	if (code >= 0)
		return code;
	wait_forever();
	return 0;
}

/* Polls for a file: a test helper, bounded. */
static int do_await(const char *path)
{
	struct timespec ts = {0, 10 * 1000 * 1000};
	struct stat st;

	for (int i = 0; i < 6000; i++) {
		if (stat(path, &st) == 0)
			return 0;
		nanosleep(&ts, NULL);
	}
	return 97;
}

static int do_checkpoint(const char *dir)
{
	struct timespec tick = {0, 10 * 1000 * 1000};
	char path[4096];
	struct stat st;
	sigset_t set;
	int sig;

	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
	write_file(dir, "ready", "ready\n");
	snprintf(path, sizeof(path), "%s/finish", dir);
	for (;;) {
		if (stat(path, &st) == 0)
			return 0;
		sig = sigtimedwait(&set, NULL, &tick);
		if (sig == SIGTERM) {
			write_file(dir, "term", "term\n");
			return 143;
		}
		if (sig == SIGUSR1) {
			char usr1[4200];
			FILE *f;

			snprintf(usr1, sizeof(usr1), "%s/usr1.%d", dir, env_int("RANK"));
			f = fopen(usr1, "a");
			if (f) {
				fputs("checkpoint\n", f);
				fclose(f);
			}
		}
	}
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int do_progress(uint64_t seq, const char *mode)
{
	const char *path = getenv(DDP_PROGRESS_ENV);
	struct ddp_progress *p;
	struct stat st;
	int fd;

	if (!path)
		return 4;
	fd = open(path, O_RDWR);
	if (fd < 0 || fstat(fd, &st))
		return 5;
	p = mmap(NULL, DDP_PROGRESS_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return 5;
	if (st.st_size != DDP_PROGRESS_SIZE)
		return 3;
	for (size_t i = 0; i < DDP_PROGRESS_SIZE; i++)
		if (((const unsigned char *)p)[i])
			return 3;
	ddp_progress_write_begin(p);
	p->pid = (int32_t)getpid();
	p->round = 0;
	p->rank = env_int("RANK");
	p->world = env_int("WORLD_SIZE");
	p->phase = DDP_PHASE_COLLECTIVE;
	p->op = DDP_OP_ALLREDUCE;
	p->seq = seq;
	p->bytes = 4096;
	p->bucket = 2;
	p->waiting_on = 1;
	p->entered_ns = p->phase_ns = p->written_ns = mono_ns();
	p->step = 7;
	p->magic = DDP_PROGRESS_MAGIC;
	p->version = DDP_PROGRESS_VERSION;
	if (strcmp(mode, "odd"))
		ddp_progress_write_end(p);
	return 0;
}

static int act(int argc, char **argv, char **all, int nall)
{
	const char *a = argv[0];
	char text[32];

	if (!strcmp(a, "env") && argc >= 2)
		return do_env(argv[1], nall, all);
	if (!strcmp(a, "exit") && argc >= 2)
		return atoi(argv[1]);
	if (!strcmp(a, "signal") && argc >= 2) {
		signal(atoi(argv[1]), SIG_DFL);
		raise(atoi(argv[1]));
		return 92;
	}
	if (!strcmp(a, "ignore-term") && argc >= 2) {
		signal(SIGTERM, SIG_IGN);
		write_file(argv[1], "ready", "ready\n");
		wait_forever();
	}
	if (!strcmp(a, "grandchild") && argc >= 2)
		return do_grandchild(argv[1]);
	if (!strcmp(a, "fail-once") && argc >= 2)
		return env_int("TORCHELASTIC_RESTART_COUNT") == 0 ? atoi(argv[1]) : 0;
	if (!strcmp(a, "burst") && argc >= 3)
		return do_burst(atoi(argv[1]), atoi(argv[2]));
	if (!strcmp(a, "catch") && argc >= 2)
		return do_catch(argv[1]);
	if (!strcmp(a, "error-file") && argc >= 3)
		return do_error_file(argv[1], atoi(argv[2]));
	if (!strcmp(a, "escape") && argc >= 5)
		return do_escape(argv[1], argv[2], argv[3], atoi(argv[4]));
	if (!strcmp(a, "await") && argc >= 2)
		return do_await(argv[1]);
	if (!strcmp(a, "checkpoint") && argc >= 2)
		return do_checkpoint(argv[1]);
	if (!strcmp(a, "stop-self") && argc >= 2) {
		snprintf(text, sizeof(text), "%d\n", (int)getpid());
		write_file(argv[1], "ready", text);
		raise(SIGSTOP);
		wait_forever();
	}
	if (!strcmp(a, "pid") && argc >= 3) {
		snprintf(text, sizeof(text), "%d\n", (int)getpid());
		write_file(argv[1], "pid", text);
		return atoi(argv[2]);
	}
	if (!strcmp(a, "progress") && argc >= 3)
		return do_progress(strtoull(argv[1], NULL, 10), argv[2]);
	fprintf(stderr, "launch_helper: unknown action '%s'\n", a);
	return 99;
}

int main(int argc, char **argv)
{
	int i = 1, only = -1, others_wait = 0;

	if (i + 1 < argc && !strcmp(argv[i], "--only")) {
		only = atoi(argv[i + 1]);
		i += 2;
	}
	if (i < argc && !strcmp(argv[i], "--others-wait")) {
		others_wait = 1;
		i++;
	}
	if (i >= argc) {
		fprintf(stderr, "usage: launch_helper [--only RANK [--others-wait]] ACTION ...\n");
		return 98;
	}
	if (only >= 0 && env_int("RANK") != only) {
		if (others_wait)
			wait_forever();
		return 0;
	}
	return act(argc - i, argv + i, argv, argc);
}
