/*
 * exit_status.h - the exit status that says "permanent: do not restart".
 *
 * A worker that fails in a way that will fail again on every restart (a
 * full disk, a full /dev/shm, checkpoints of another job in its
 * checkpoint_dir) exits with DDP_EXIT_PERMANENT after naming the cause.
 * ddplaunch then restarts nothing and exits with the same status, and so
 * does it when it cannot start a worker for lack of space: a
 * scheduler (Slurm's RequeueExit, a Kubernetes podFailurePolicy) can tell
 * it apart from a failure worth another try. 78 is sysexits.h's EX_CONFIG:
 * something outside the program must be fixed before a run can succeed.
 * Any program run by ddplaunch may use it (sys.exit(78) in Python).
 */
#ifndef DDP_COMMON_EXIT_STATUS_H
#define DDP_COMMON_EXIT_STATUS_H

#include <errno.h>
#include <stdbool.h>

#define DDP_EXIT_PERMANENT 78

/* Whether a negative errno names a shortage that a restart does not cure:
 * no space (ENOSPC, EDQUOT). A lack of file descriptors (EMFILE, ENFILE)
 * is not one: a flood of connections or another program's burst passes,
 * and the restart after the backoff tries again. The one rule for the
 * launcher (policy_start_error_permanent) and the workers (ddp-train). */
static inline bool exit_status_permanent_errno(int err)
{
	return err == -ENOSPC || err == -EDQUOT;
}

#endif
