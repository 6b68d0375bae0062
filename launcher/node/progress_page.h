/*
 * progress_page.h - the agent's side of a worker's progress page
 * (common/progress.h): the file is made fresh for each process the agent
 * starts, in the job's shared-memory names (/dev/shm/ddp-TAG-progress-N, so
 * that footprint_sweep removes it with the group and job_shm_remove what a
 * kill -9 of the launcher left), and mapped here read-only. The mapping
 * outlives the file's name and the worker: what a dead or killed worker
 * last wrote stays readable until the page is dropped.
 */
#ifndef DDP_LAUNCHER_PROGRESS_PAGE_H
#define DDP_LAUNCHER_PROGRESS_PAGE_H

#include <stddef.h>

#include "progress.h"

#define PROGRESS_PAGE_PATH_MAX 128

/* The page's path for local worker `local_rank` of the job tagged `tag`
 * (footprint.h): "/dev/shm/ddp-TAG-progress-N". Returns 0, or -EINVAL for
 * an empty tag or one holding '/', -ENAMETOOLONG when it does not fit len. */
int progress_page_path(const char *tag, int local_rank, char *buf, size_t len);

/* Makes `path` a new file of DDP_PROGRESS_SIZE zero bytes, mode 0600 (an
 * earlier file of that name is unlinked first: a worker of an earlier run
 * that still maps it writes to the old one, never to this), its blocks
 * allocated (a full /dev/shm is -ENOSPC here, never a SIGBUS later), and
 * maps it read-only into *map. Returns 0, or -errno (then *map is NULL and
 * no file is left). */
int progress_page_create(const char *path, const struct ddp_progress **map);

/* Unmaps a page of progress_page_create; NULL is ignored. The file's name
 * is not touched (the footprint's sweep removes it). */
void progress_page_unmap(const struct ddp_progress *map);

/* A consistent copy of the page into *out: 0, -ENOENT when the page is NULL
 * or nothing was written yet (no magic, or another version), -EAGAIN when
 * the writer kept it busy (odd or changing `gen`) during the tries. */
int progress_page_read(const struct ddp_progress *map, struct ddp_progress *out);

#endif
