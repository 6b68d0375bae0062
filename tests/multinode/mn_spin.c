/*
 * mn_spin.c - a fault for the hang tests, from outside the program (no
 * ptrace, nothing in ddp-train): preloaded (LD_PRELOAD) into every process
 * of a test's job, it gives ddp-train's processes a SIGUSR2 handler that
 * spins on the CPU forever. A test sends SIGUSR2 to one worker's main
 * thread (tgkill): that thread stops making progress while it runs on a
 * CPU, as a rank caught in a busy loop before its next collective.
 * MN_SPIN_COMM names the programs to arm instead of ddp-train (a prefix
 * of /proc/self/comm: "python" for ddplaunch.torch's workers; Python
 * leaves SIGUSR2 alone).
 *
 * ddplaunch (an agent) gets the same on SIGRTMIN+7 (SIGUSR2 is one it
 * forwards): its main thread spins for MN_SPIN_HOLD_MS milliseconds (the
 * agent's environment; forever without it), then goes on, as an agent
 * caught in a long busy loop. ddp-exec is left as it is.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long hold_ms = -1;

static void spin(int sig)
{
	(void)sig;
	for (;;)
		__asm__ volatile("" ::: "memory");
}

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static void spin_for(int sig)
{
	long end = now_ms() + hold_ms;

	(void)sig;
	while (hold_ms < 0 || now_ms() < end)
		__asm__ volatile("" ::: "memory");
}

__attribute__((constructor)) static void mn_spin_install(void)
{
	char comm[32] = "";
	FILE *f = fopen("/proc/self/comm", "r");
	struct sigaction sa;

	if (!f)
		return;
	if (!fgets(comm, sizeof(comm), f))
		comm[0] = '\0';
	fclose(f);
	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	if (!strncmp(comm, "ddplaunch", 9)) {
		const char *h = getenv("MN_SPIN_HOLD_MS");

		hold_ms = h && *h ? atol(h) : -1;
		sa.sa_handler = spin_for;
		sigaction(SIGRTMIN + 7, &sa, NULL);
		return;
	}
	const char *want = getenv("MN_SPIN_COMM");

	if (!want || !*want)
		want = "ddp-train";
	if (strncmp(comm, want, strlen(want)))
		return;
	sa.sa_handler = spin;
	sigaction(SIGUSR2, &sa, NULL);
}
