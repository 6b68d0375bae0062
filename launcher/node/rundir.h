/*
 * rundir.h - the directory of one run: attempt_N/RANK/ with each worker's
 * error file (TORCHELASTIC_ERROR_FILE) and, when the run keeps them, its
 * stdout.log and stderr.log; summary.json at the end of a --log_dir run.
 *
 *   --log_dir DIR    DIR/RUNID_XXXXXX, a new one per run (RUNID is --rdzv_id,
 *                    XXXXXX random), and DIR/latest, a symbolic link to the
 *                    newest, so runs never mix and the last one is easy to
 *                    find (as torchrun's DIR/RUNID_XXXXXX)
 *   otherwise        $TMPDIR/ddplaunch_XXXXXX (TMPDIR, else /tmp), removed
 *                    at the end unless it holds log files (-r/-t)
 *
 * A temporary run directory holds ddplaunch.lock, flock()ed for the run's
 * whole life: a launcher killed with -9 leaves the directory, and the next
 * ddplaunch (with the same TMPDIR) finds the lock free and removes it. A
 * directory whose lock is held, or that has no lock (kept logs, a run of
 * someone else), is never touched.
 */
#ifndef DDP_LAUNCHER_RUNDIR_H
#define DDP_LAUNCHER_RUNDIR_H

#include <limits.h>
#include <stdbool.h>

#define RUNDIR_LOCK "ddplaunch.lock"

struct rundir {
	char path[PATH_MAX];
	bool is_tmp; /* removed by rundir_close */
	int lock_fd; /* the held lock of a temporary one, else -1 */
};

/* First removes what dead runs left in `tmpdir` (NULL or "": /tmp), then
 * makes the run's directory (see above): under `log_dir` when given (made
 * if missing), else under `tmpdir`. `keep` (log files in it) makes a directory
 * under tmpdir stay at the end. Returns 0 or -errno, with the reason
 * reported. */
int rundir_open(struct rundir *rd, const char *log_dir, const char *run_id, const char *tmpdir,
		bool keep);

/* At the end: removes a temporary run directory, or what ddplaunch put in
 * it (files a worker added there stay, with the directories holding
 * them), and releases the lock. */
void rundir_close(struct rundir *rd);

#endif
