/*
 * footprint.h - what one job leaves on its node besides its processes, and
 * how the launcher takes it away again:
 *
 *   - a cgroup (v2) that holds every worker's whole tree, where this
 *     process may make one and move processes into it (root, or a
 *     delegated subtree): <own cgroup>/ddplaunch-PID-STARTTIME. ddp-exec
 *     moves itself in before it forks the worker, so nothing the worker
 *     starts can leave it; cgroup.kill then ends everything at once.
 *     Elsewhere the guards' child subreaper (ddp_exec.c) holds the trees.
 *   - the names of the job's shared-memory objects: libddp puts the job's
 *     tag (DDP_JOB_TAG) in them, /dev/shm/ddp-TAG-*, and unlinks them once
 *     every rank has mapped them; a rank that dies before that leaves them,
 *     and footprint_sweep removes them.
 *
 * The PID-STARTTIME pair names the launcher that made a cgroup (a pid alone
 * may have been reused); the launcher holds an flock on
 * /dev/shm/ddplaunch-cgroup-PID-STARTTIME.lock for the cgroup's life, and
 * the next launcher removes only the cgroups whose lock is free (a pid
 * that looks gone may belong to a launcher in another PID namespace). The
 * lock file holds the cgroup's directory and the job's tag, a line each: a
 * launcher that finds a lock free removes the cgroup it names, wherever it
 * is (a launcher started from another cgroup made it), then the job's
 * /dev/shm names (their guards, killed with the cgroup, may not have removed
 * them yet), and the lock file only once that cgroup is gone, so an
 * abandoned cgroup always keeps the lock that leads to it.
 */
#ifndef DDP_LAUNCHER_FOOTPRINT_H
#define DDP_LAUNCHER_FOOTPRINT_H

#include <limits.h>
#include <stdbool.h>

#define FOOTPRINT_TAG_LEN 17 /* 16 hex digits and the NUL */

struct footprint {
	char tag[FOOTPRINT_TAG_LEN]; /* DDP_JOB_TAG */
	char cgroup[PATH_MAX];	     /* the job's cgroup directory, or "" for none */
	int lock_fd;		     /* holds /dev/shm/ddplaunch-cgroup-ID.lock, or -1 */
};

/* Picks a fresh tag and, when `use_cgroup`, removes the cgroups left by
 * launchers that are gone and makes this job's. Never fails: without a
 * cgroup (none allowed, none wanted) f->cgroup is "" and the subreapers
 * alone hold the trees. Says which at debug level. */
void footprint_open(struct footprint *f, bool use_cgroup);

/* A group ended (every guard exited): kills what is left in the cgroup
 * (processes that escaped a guard killed from outside) and removes the
 * job's /dev/shm names. */
void footprint_sweep(const struct footprint *f);

/* At the end of the job: footprint_sweep, then waits (at most a second)
 * for the cgroup to empty and removes it. */
void footprint_close(struct footprint *f);

#endif
