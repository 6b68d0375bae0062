/*
 * ddp-exec - the guard between ddplaunch and one worker.
 *
 *   ddp-exec [--cgroup DIR] LAUNCHER_PID PROGRAM [ARGS...]
 *
 * ddplaunch starts it as the leader of a new session and process group
 * (libuv's UV_PROCESS_DETACHED). It asks the kernel for a signal when its
 * parent dies (PR_SET_PDEATHSIG) and becomes a child subreaper
 * (PR_SET_CHILD_SUBREAPER), so that every process the worker starts stays
 * its descendant, even one that calls setsid() or whose parent exits. With
 * --cgroup it first moves itself into the job's cgroup DIR (when the kernel
 * lets it; else it goes on without). Then it forks the worker into the same
 * process group, reports the worker's pid on fd 3, and waits.
 *
 * When the worker ends, ddp-exec kills whatever the worker left running
 * (every descendant, found in /proc) and ends the same way (same exit code,
 * or same signal). If ddplaunch dies, even by SIGKILL, ddp-exec kills every
 * descendant, removes the job's shared-memory names (/dev/shm/ddp-TAG-*,
 * TAG from DDP_JOB_TAG) and, in a cgroup, kills what is left in the job's
 * cgroup and removes it, so nothing of the job survives its launcher. A
 * worker that ends because its launcher is dying (a write to the closed
 * output pipe: SIGPIPE; a lost socket) may end before the kernel signals the
 * launcher's death (it closes the launcher's files before it reparents its
 * children): ddp-exec then finds the launcher exiting (PF_EXITING in
 * /proc/PID/stat) and takes the job away the same way.
 *
 * Signals sent by ddplaunch go to the whole group and so reach the worker
 * directly; a signal sent to ddp-exec alone by someone else is passed on.
 *
 * With DDP_AGENT_FD set (the agent channel, worker_proc.h), the worker also
 * gets DDP_AGENT_PID=LAUNCHER_PID: the process that made the channel's
 * socket pair, which libddp and ddplaunch.torch check as the socket's peer
 * (SO_PEERCRED) before they take the fd for the agent's.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "leftovers.h"

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

/* Field `field` (4 or more: a number) of /proc/PID/stat ("pid (comm) state
 * ppid pgrp session tty_nr tpgid flags ..."; comm may hold spaces and
 * parentheses), or -1. */
static long long proc_stat_field(const char *pid, int field)
{
	char path[300], buf[512];
	const char *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%s/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	p = strrchr(buf, ')');
	if (!p || strlen(p) < 4)
		return -1;
	for (p += 4; field > 4; field--) { /* past ") S " */
		p = strchr(p, ' ');
		if (!p)
			return -1;
		p++;
	}
	return atoll(p);
}

/* The parent pid of process PID, or -1. */
static pid_t proc_ppid(const char *pid)
{
	return (pid_t)proc_stat_field(pid, 4);
}

/* The kernel's flag of a task in do_exit() (include/linux/sched.h), set
 * before it releases its memory and files and reparents its children. */
#define TASK_PF_EXITING 0x00000004

/* Whether the launcher is dead or dying: its children reparented already,
 * or its exit begun (its main thread's flags; a SIGKILL sets PF_EXITING in
 * every thread before the last one closes the process's files). The flags
 * are read first: while getppid() still answers the launcher afterwards,
 * that pid was the launcher's when they were read. */
static bool launcher_going(pid_t launcher, const char *launcher_pid)
{
	long long flags = proc_stat_field(launcher_pid, 9);

	return getppid() != launcher || (flags >= 0 && (flags & TASK_PF_EXITING));
}

struct proc_list {
	pid_t *pid, *ppid;
	size_t n, cap;
};

static int proc_list_add(struct proc_list *l, pid_t pid, pid_t ppid)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 256;
		pid_t *a = realloc(l->pid, cap * sizeof(*a));
		pid_t *b = a ? realloc(l->ppid, cap * sizeof(*b)) : NULL;

		if (a)
			l->pid = a;
		if (!b)
			return -ENOMEM;
		l->ppid = b;
		l->cap = cap;
	}
	l->pid[l->n] = pid;
	l->ppid[l->n] = ppid;
	l->n++;
	return 0;
}

/* SIGKILLs every descendant of this process that /proc shows now: the
 * children, then theirs (breadth first over a snapshot of /proc). */
static void kill_descendants(void)
{
	struct proc_list l = {0};
	DIR *d = opendir("/proc");
	struct dirent *e;
	pid_t *queue;
	size_t head = 0, tail = 0;

	if (!d)
		return;
	while ((e = readdir(d))) {
		pid_t ppid;

		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		ppid = proc_ppid(e->d_name);
		if (ppid > 0 && proc_list_add(&l, (pid_t)atol(e->d_name), ppid))
			break;
	}
	closedir(d);
	queue = malloc((l.n + 1) * sizeof(*queue));
	if (queue) {
		queue[tail++] = getpid();
		while (head < tail) {
			pid_t parent = queue[head++];

			for (size_t i = 0; i < l.n; i++)
				if (l.ppid[i] == parent && l.pid[i] != parent && tail <= l.n) {
					kill(l.pid[i], SIGKILL);
					queue[tail++] = l.pid[i];
				}
		}
	}
	free(queue);
	free(l.pid);
	free(l.ppid);
}

/* Kills the whole tree below ddp-exec and reaps it. As a subreaper,
 * ddp-exec inherits the orphans of each process killed, so the tree is
 * gone when no child is left. Sets *status if the worker is reaped here. */
static void end_tree(pid_t worker, int *status)
{
	for (;;) {
		siginfo_t si;
		pid_t c;
		int st;

		/* No child, no descendant: the usual end costs no /proc walk. */
		if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 && errno == ECHILD)
			return;
		kill_descendants();
		c = waitpid(-1, &st, 0);
		if (c < 0 && errno == EINTR)
			continue;
		if (c < 0)
			return; /* ECHILD: nothing left */
		do {
			if (c == worker)
				*status = st;
		} while ((c = waitpid(-1, &st, WNOHANG)) > 0);
	}
}

/* The job's cgroup, when ddplaunch can no longer remove it: ddp-exec
 * moves out of it (to its parent), kills what is left in it (the other
 * guards too; whichever is last removes it), waits a second at most for it
 * to empty (cgroup.events changes when it does) and removes it. */
static void cgroup_end(const char *dir)
{
	char parent[4096], pid[24];
	char *slash;

	snprintf(parent, sizeof(parent), "%s", dir);
	slash = strrchr(parent, '/');
	if (slash && slash != parent) {
		*slash = '\0';
		snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
		cgroup_write(parent, "cgroup.procs", pid);
	}
	cgroup_remove(dir, 1000);
}

/* What the launcher takes away at the job's end, when it cannot (it
 * died): the job's shared-memory names, and what escaped the tree (a guard
 * killed by someone), still in the job's cgroup. */
static void job_take_away(const char *cgroup)
{
	job_shm_remove(getenv("DDP_JOB_TAG"));
	if (cgroup)
		cgroup_end(cgroup);
}

/* ddplaunch died: nothing of the job may outlive it. */
static void launcher_died(pid_t worker, const char *cgroup)
{
	int status = 0;

	end_tree(worker, &status);
	job_take_away(cgroup);
	kill(0, SIGKILL);
	_exit(137);
}

int main(int argc, char **argv)
{
	const char *cgroup = NULL;
	pid_t launcher, child;
	sigset_t all;
	siginfo_t info;
	int status, a = 1;

	if (argc > 2 && !strcmp(argv[1], "--cgroup")) {
		cgroup = argv[2];
		a = 3;
	}
	if (argc - a < 2) {
		fprintf(stderr, "usage: ddp-exec [--cgroup DIR] LAUNCHER_PID PROGRAM [ARGS...] "
				"(started by ddplaunch)\n");
		return 2;
	}
	launcher = (pid_t)atol(argv[a]);
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, NULL);
	if (prctl(PR_SET_PDEATHSIG, SIGHUP) || getppid() != launcher)
		return 1; /* the launcher is already gone: start nothing */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	if (getenv("DDP_AGENT_FD"))
		setenv("DDP_AGENT_PID", argv[a], 1);
	/* Not allowed (a cgroup not delegated to us): the subreaper alone. */
	if (cgroup && cgroup_write(cgroup, "cgroup.procs", "0"))
		cgroup = NULL;
	child = fork();
	if (child < 0) {
		perror("ddplaunch: cannot fork the worker");
		return 127;
	}
	if (child == 0)
		run_worker(argv + a + 1);
	report_pid(child);
	for (;;) {
		pid_t c;

		if (sigwaitinfo(&all, &info) < 0)
			continue;
		if (info.si_signo == SIGCHLD) {
			/* The worker, or an orphan of its tree handed to us. */
			while ((c = waitpid(-1, &status, WNOHANG)) > 0)
				if (c == child) {
					end_tree(child, &status);
					/* Ended by its launcher's death, perhaps, before
					 * the SIGHUP that says so: no launcher sweeps. */
					if (launcher_going(launcher, argv[a]))
						job_take_away(cgroup);
					die_like(status);
				}
			continue;
		}
		if (getppid() != launcher)
			launcher_died(child, cgroup);
		if (info.si_code == SI_USER && info.si_pid != launcher && info.si_pid != getpid())
			kill(child, info.si_signo);
	}
}
