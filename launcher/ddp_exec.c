/*
 * ddp-exec - the guard between ddplaunch and one worker.
 *
 *   ddp-exec LAUNCHER_PID PROGRAM [ARGS...]
 *
 * ddplaunch starts it as the leader of a new session and process group
 * (libuv's UV_PROCESS_DETACHED). It asks the kernel for a signal when its
 * parent dies (PR_SET_PDEATHSIG), forks the worker into the same process
 * group, reports the worker's pid on fd 3, and waits. If ddplaunch dies,
 * even by SIGKILL, ddp-exec kills the whole process group, grandchildren
 * included, so nothing of the job survives its launcher. When the worker
 * ends, ddp-exec ends the same way (same exit code, or same signal).
 *
 * Signals sent by ddplaunch go to the whole group and so reach the worker
 * directly; a signal sent to ddp-exec alone by someone else is passed on.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define PID_FD 3

static void die_like(int status)
{
	struct rlimit none = {0, 0};
	sigset_t set;
	int sig;

	if (WIFEXITED(status))
		_exit(WEXITSTATUS(status));
	sig = WTERMSIG(status);
	/* The worker may have dumped core already; ddp-exec must not. */
	setrlimit(RLIMIT_CORE, &none);
	signal(sig, SIG_DFL);
	sigemptyset(&set);
	sigaddset(&set, sig);
	sigprocmask(SIG_UNBLOCK, &set, NULL);
	raise(sig);
	_exit(128 + sig);
}

static void run_worker(char **argv)
{
	sigset_t none;
	char msg[512];
	int n;

	close(PID_FD);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	execvp(argv[0], argv);
	n = snprintf(msg, sizeof(msg),
		     "ddplaunch: cannot run '%s': %s (check the path, or "
		     "use --no_python / a .py name)\n",
		     argv[0], strerror(errno));
	(void)!write(STDERR_FILENO, msg, n > 0 ? (size_t)n : 0);
	_exit(127);
}

static void report_pid(pid_t child)
{
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%d\n", (int)child);

	(void)!write(PID_FD, buf, (size_t)n);
	close(PID_FD);
}

int main(int argc, char **argv)
{
	pid_t launcher, child;
	sigset_t all;
	siginfo_t info;
	int status;

	if (argc < 3) {
		fprintf(stderr, "usage: ddp-exec LAUNCHER_PID PROGRAM [ARGS...] (started by "
				"ddplaunch)\n");
		return 2;
	}
	launcher = (pid_t)atol(argv[1]);
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, NULL);
	if (prctl(PR_SET_PDEATHSIG, SIGHUP) || getppid() != launcher)
		return 1; /* the launcher is already gone: start nothing */
	child = fork();
	if (child < 0) {
		perror("ddplaunch: cannot fork the worker");
		return 127;
	}
	if (child == 0)
		run_worker(argv + 2);
	report_pid(child);
	for (;;) {
		if (sigwaitinfo(&all, &info) < 0)
			continue;
		if (info.si_signo == SIGCHLD) {
			if (waitpid(child, &status, WNOHANG) == child)
				die_like(status);
			continue;
		}
		if (getppid() != launcher) {
			/* ddplaunch died: take the whole group down, ourselves included. */
			kill(0, SIGKILL);
			_exit(137);
		}
		if (info.si_code == SI_USER && info.si_pid != launcher && info.si_pid != getpid())
			kill(child, info.si_signo);
	}
}
