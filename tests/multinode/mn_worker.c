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
 *
 * The line: "MNW rank=R local=L world=W group=G groups=N master=A:P
 * restarts=C local_addr=X run=ID pid=PID" (flushed at once). It never talks
 * to the other workers.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	stop = 1;
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
			"[S]\n");
	return 2;
}
