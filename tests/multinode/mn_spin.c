/*
 * mn_spin.c - a fault for the hang tests, from outside the program (no
 * ptrace, nothing in ddp-train): preloaded (LD_PRELOAD) into every process
 * of a test's job, it gives ddp-train's processes a SIGUSR2 handler that
 * spins on the CPU forever. A test sends SIGUSR2 to one worker's main
 * thread (tgkill): that thread stops making progress while it runs on a
 * CPU, as a rank caught in a busy loop before its next collective. Other
 * programs (ddplaunch, ddp-exec) are left as they are. MN_SPIN_COMM names
 * the programs to arm instead (a prefix of /proc/self/comm: "python" for
 * ddplaunch.torch's workers; Python leaves SIGUSR2 alone).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void spin(int sig)
{
	(void)sig;
	for (;;)
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
	const char *want = getenv("MN_SPIN_COMM");

	if (!want || !*want)
		want = "ddp-train";
	if (strncmp(comm, want, strlen(want)))
		return;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = spin;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR2, &sa, NULL);
}
