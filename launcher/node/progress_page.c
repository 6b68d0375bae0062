/* A worker's progress page, the agent's side (see progress_page.h). */
#include "progress_page.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "leftovers.h"

int progress_page_path(const char *tag, int local_rank, char *buf, size_t len)
{
	int n;

	if (!tag || !*tag || strchr(tag, '/') || local_rank < 0)
		return -EINVAL;
	n = snprintf(buf, len, "/dev/shm/" JOB_SHM_PREFIX "%s-progress-%d", tag, local_rank);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int progress_page_create(const char *path, const struct ddp_progress **map)
{
	void *m;
	int fd, rc = 0;

	*map = NULL;
	if (unlink(path) && errno != ENOENT)
		return -errno;
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	/* Its blocks are taken now: a page of a file with a hole on a full
	 * tmpfs would raise SIGBUS in whoever first touches it (the agent's
	 * read, the worker's write); here it is ENOSPC, and no page. */
	rc = -posix_fallocate(fd, 0, DDP_PROGRESS_SIZE);
	m = rc ? MAP_FAILED : mmap(NULL, DDP_PROGRESS_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	if (!rc && m == MAP_FAILED)
		rc = -errno;
	close(fd);
	if (rc) {
		unlink(path);
		return rc;
	}
	*map = m;
	return 0;
}

void progress_page_unmap(const struct ddp_progress *map)
{
	if (map)
		munmap((void *)map, DDP_PROGRESS_SIZE);
}

int progress_page_read(const struct ddp_progress *map, struct ddp_progress *out)
{
	if (!map || !__atomic_load_n(&map->magic, __ATOMIC_ACQUIRE))
		return -ENOENT;
	if (ddp_progress_read(map, out))
		return 0;
	/* Written, but of another layout: as good as nothing. */
	if (__atomic_load_n(&map->version, __ATOMIC_RELAXED) != DDP_PROGRESS_VERSION)
		return -ENOENT;
	return -EAGAIN;
}
