/*
 * policy.h - what to do when a worker group has ended, and how long to wait
 * before the next attempt. Pure module.
 */
#ifndef DDP_LAUNCHER_POLICY_H
#define DDP_LAUNCHER_POLICY_H

#include <stdbool.h>
#include <stdint.h>

struct policy {
	int max_restarts;
	double backoff_initial; /* seconds before the first restart */
	double backoff_max;	/* cap of the doubling */
};

enum policy_decision {
	POLICY_SUCCEEDED, /* every worker exited 0 */
	POLICY_RESTART,	  /* a worker failed and restarts remain */
	POLICY_FAILED,	  /* a worker failed, no restart left (or none would help) */
	POLICY_STOPPED,	  /* ddplaunch was told to stop (a signal) */
};

/* `restarts_done`: restarts already made (TORCHELASTIC_RESTART_COUNT of the
 * group that ended). `permanent`: the failure will repeat (a worker exited
 * DDP_EXIT_PERMANENT, or one could not be started for a reason that
 * policy_start_error_permanent accepts): no restart is made for it. */
enum policy_decision policy_decide(const struct policy *p, int restarts_done, bool group_failed,
				   bool permanent, bool stop_requested);

/* Whether a worker that could not be started (a negative errno from the
 * spawn, libuv's codes being -errno) would fail the same way at every
 * restart: no space for its logs (ENOSPC, EDQUOT). A shortage of file
 * descriptors (EMFILE, ENFILE) is not: whoever holds them (a flood of
 * clients, another program) may let go, so the group fails as any failure
 * does and the restart, after its backoff, tries again. */
bool policy_start_error_permanent(int err);

/* Whether a worker's exit code says "permanent: do not restart"
 * (DDP_EXIT_PERMANENT, common/exit_status.h). */
bool policy_exit_permanent(int exit_code, int term_signal);

/* Milliseconds to wait before restart number `restart` (1 = the first):
 * initial * 2^(restart-1), capped at max; 0 when initial is 0. */
uint64_t policy_backoff_ms(const struct policy *p, int restart);

/* The launcher's exit status: 128+stop_signal when stopped by a signal,
 * else the failing worker's (exit code, or 128+signal), else 0. A failure
 * that will repeat gives DDP_EXIT_PERMANENT instead (the caller passes
 * that as exit_code). */
int policy_exit_status(int stop_signal, bool failed, int exit_code, int term_signal);

#endif
