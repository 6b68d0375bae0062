/*
 * leftovers.h - taking away what a job leaves on its node besides its
 * processes: its cgroup (v2) and its shared-memory names. Written once for
 * the two that do it: the launcher (footprint.c: at the end of every
 * attempt and of the job, and for jobs whose launcher died) and each
 * worker's guard (ddp_exec.c: when its launcher died). Plain libc, no log
 * and no loop, so that ddp-exec, which runs before every worker, stays
 * small. Errors: negative errno.
 */
#ifndef DDP_LAUNCHER_LEFTOVERS_H
#define DDP_LAUNCHER_LEFTOVERS_H

#include <stdbool.h>

/* Writes `text` to the cgroup file DIR/NAME (cgroup.kill, cgroup.procs).
 * Returns 0 or -errno. */
int cgroup_write(const char *dir, const char *name, const char *text);

/* Whether the cgroup DIR holds a process (or a child cgroup that does);
 * false when it cannot be read (gone). */
bool cgroup_populated(const char *dir);

/* Waits until the cgroup DIR is empty or `ms` have passed: its
 * cgroup.events is modified when "populated" changes. An empty cgroup is
 * answered without inotify (closing an inotify descriptor that held a watch
 * waits for an SRCU grace period, 15-20 ms, which was most of a short
 * job's launch time). Returns whether it is empty. */
bool cgroup_wait_empty(const char *dir, int ms);

/* Kills what is in the cgroup DIR (cgroup.kill), waits up to `ms` for it to
 * empty and removes it. Returns 0, or -errno of rmdir (-ENOENT: it was gone
 * already; -EBUSY: something in it did not die in time). */
int cgroup_remove(const char *dir, int ms);

/* The prefix of a job's shared-memory names: libddp puts the job's tag
 * (DDP_JOB_TAG) in every name it makes, /dev/shm/ddp-TAG-*. */
#define JOB_SHM_PREFIX "ddp-"

/* Unlinks /dev/shm/ddp-TAG-*, the names a rank that died before every rank
 * had mapped them leaves behind. A tag that is empty or holds '/' removes
 * nothing. Returns how many it unlinked. */
int job_shm_remove(const char *tag);

#endif
