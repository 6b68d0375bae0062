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

/* Per attempt: makes attempt_N in the run directory. Returns 0 or -errno
 * (reported). */
int rundir_attempt(const struct rundir *rd, int attempt);

/* Per attempt and rank: makes attempt_N/RANK (`dir`) and names its error
 * file (`error_file`, dir/error.json, not created). Returns 0, or
 * -ENAMETOOLONG (a run directory too long for them) or another -errno,
 * reported. */
int rundir_rank(const struct rundir *rd, int attempt, int rank, char dir[PATH_MAX],
		char error_file[PATH_MAX]);

/* Creates dir/stdout.log and dir/stderr.log (emptied unless keep,
 * appended to) into fd[0] and fd[1]. Returns 0, or -errno after reporting
 * which file (the files not opened are -1; close the others with
 * rundir_close_logs). */
int rundir_open_logs(const char *dir, int fd[2], bool keep);

/* Closes the log files of rank `rank` in `dir` (-1 stays -1; each is -1
 * afterwards). Returns 0, or the -errno of a close that failed (a full disk
 * may only show then), reported. */
int rundir_close_logs(const char *dir, int rank, int fd[2]);

/* At the end: removes a temporary run directory, or what ddplaunch put in
 * it (files a worker added there stay, with the directories holding
 * them), and releases the lock. */
void rundir_close(struct rundir *rd);

#endif
