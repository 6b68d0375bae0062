/*
 * mn_worker - a worker for the multi-node tests: prints one line with what
 * the launcher gave it, then does what it is told.
 *
 *   mn_worker run SECONDS          sleep, exit 0
 *   mn_worker forever              wait for a signal (SIGTERM ends it, 0)
 *   mn_worker fail RANK CODE SECS  global rank RANK exits CODE after SECS,
 *                                  the others wait like `forever`
 *   mn_worker fail-early N CODE [S]  exit CODE at once while the job's
 *                                  restart count (TORCHELASTIC_RESTART_COUNT)
 *                                  is below N on global rank 0; then like
 *                                  `run S` (0.2)
 *   mn_worker steps MS             until SIGTERM, a "step" every MS ms: its
 *                                  progress page (common/progress.h, when
 *                                  DDP_PROGRESS_FILE is set) says the step
 *                                  committed (step_ns MS, half of it in an
 *                                  allreduce, wait_ns) and that allreduce
 *
 * The line: "MNW rank=R local=L world=W group=G groups=N master=A:P
 * restarts=C local_addr=X run=ID pid=PID" (flushed at once). It never talks
 * to the other workers.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

#include "progress.h"

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	stop = 1;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void nap(double secs);

/* `steps`: one committed step every `secs`, on the progress page. */
static int steps(double secs)
{
	const char *path = getenv(DDP_PROGRESS_ENV);
	struct ddp_progress *p = NULL;
	uint64_t step_ns = (uint64_t)(secs * 1e9);
	int fd = path ? open(path, O_RDWR) : -1;

	if (fd >= 0) {
		p = mmap(NULL, DDP_PROGRESS_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		close(fd);
		if (p == MAP_FAILED)
			p = NULL;
	}
	for (uint64_t step = 1; !stop; step++) {
		uint64_t t0 = mono_ns();

		nap(secs);
		if (!p)
			continue;
		ddp_progress_write_begin(p);
		p->pid = (int32_t)getpid();
		p->round = -1; /* no communicator of its own */
		p->rank = atoi(getenv("RANK") ? getenv("RANK") : "-1");
		p->world = atoi(getenv("WORLD_SIZE") ? getenv("WORLD_SIZE") : "-1");
		p->phase = DDP_PHASE_COMPUTE;
		p->op = DDP_OP_ALLREDUCE;
		p->seq = step;
		p->bucket = -1;
		p->waiting_on = -1;
		p->entered_ns = t0 + step_ns / 2;
		p->left_ns = t0 + step_ns;
		p->step = step;
		p->step_ns = step_ns;
		p->wait_ns = step_ns / 2;
		p->compute_ns = step_ns - step_ns / 2;
		p->steps_total = step; /* this process's steps, from 1 */
		p->step_ns_sum = step * step_ns;
		p->written_ns = mono_ns();
		p->magic = DDP_PROGRESS_MAGIC;
		p->version = DDP_PROGRESS_VERSION;
		ddp_progress_write_end(p);
	}
	return 0;
}

static const char *env(const char *name)
{
	const char *v = getenv(name);

	return v ? v : "-";
}

static void nap(double secs)
{
	struct timespec ts = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};

	while (nanosleep(&ts, &ts) != 0 && !stop)
		;
}

static int wait_for_signal(void)
{
	sigset_t none;

	sigemptyset(&none);
	while (!stop)
		sigsuspend(&none);
	return 0;
}

int main(int argc, char **argv)
{
	struct sigaction sa = {.sa_handler = on_term};
	sigset_t block;
	int rank = atoi(env("RANK"));

	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigprocmask(SIG_BLOCK, &block, NULL);
	sigaction(SIGTERM, &sa, NULL);
	printf("MNW rank=%s local=%s world=%s group=%s groups=%s master=%s:%s restarts=%s "
	       "local_addr=%s run=%s pid=%d\n",
	       env("RANK"), env("LOCAL_RANK"), env("WORLD_SIZE"), env("GROUP_RANK"),
	       env("GROUP_WORLD_SIZE"), env("MASTER_ADDR"), env("MASTER_PORT"),
	       env("TORCHELASTIC_RESTART_COUNT"), env("DDP_LOCAL_ADDR"), env("TORCHELASTIC_RUN_ID"),
	       (int)getpid());
	fflush(stdout);
	if (argc >= 3 && !strcmp(argv[1], "run")) {
		sigprocmask(SIG_UNBLOCK, &block, NULL);
		nap(atof(argv[2]));
		return 0;
	}
	if (argc >= 2 && !strcmp(argv[1], "forever"))
		return wait_for_signal();
	if (argc >= 3 && !strcmp(argv[1], "steps")) {
		sigprocmask(SIG_UNBLOCK, &block, NULL);
		return steps(atof(argv[2]) / 1000.0);
	}
	if (argc >= 5 && !strcmp(argv[1], "fail")) {
		if (rank != atoi(argv[2]))
			return wait_for_signal();
		sigprocmask(SIG_UNBLOCK, &block, NULL);
		nap(atof(argv[4]));
		return atoi(argv[3]);
	}
	if (argc >= 4 && !strcmp(argv[1], "fail-early")) {
		if (rank == 0 && atoi(env("TORCHELASTIC_RESTART_COUNT")) < atoi(argv[2]))
			return atoi(argv[3]);
		sigprocmask(SIG_UNBLOCK, &block, NULL);
		nap(argc >= 5 ? atof(argv[4]) : 0.2);
		return 0;
	}
	fprintf(stderr, "usage: mn_worker run S | forever | fail RANK CODE S | fail-early N CODE "
			"[S] | steps MS\n");
	return 2;
}
