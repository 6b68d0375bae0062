/* A job's cgroup and shared-memory names, taken away (see leftovers.h). */
#include "leftovers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

int cgroup_write(const char *dir, const char *name, const char *text)
{
	char path[PATH_MAX + 32];
	int fd, rc = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, text, strlen(text)) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

bool cgroup_populated(const char *dir)
{
	char path[PATH_MAX + 32], buf[256];
	bool populated = false;
	FILE *f;

	snprintf(path, sizeof(path), "%s/cgroup.events", dir);
	f = fopen(path, "re");
	if (!f)
		return false;
	while (fgets(buf, sizeof(buf), f))
		if (!strcmp(buf, "populated 1\n"))
			populated = true;
	fclose(f);
	return populated;
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

bool cgroup_wait_empty(const char *dir, int ms)
{
	char path[PATH_MAX + 32], ev[4096];
	int64_t deadline = mono_ms() + ms;
	int fd;

	if (!cgroup_populated(dir))
		return true;
	fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	snprintf(path, sizeof(path), "%s/cgroup.events", dir);
	if (fd >= 0 && inotify_add_watch(fd, path, IN_MODIFY) < 0) {
		close(fd);
		fd = -1;
	}
	while (cgroup_populated(dir)) {
		int64_t left = deadline - mono_ms();
		struct pollfd pfd = {.fd = fd, .events = POLLIN};

		if (left <= 0 || fd < 0 || poll(&pfd, 1, (int)left) <= 0)
			break;
		while (read(fd, ev, sizeof(ev)) > 0)
			;
	}
	if (fd >= 0)
		close(fd);
	return !cgroup_populated(dir);
}

int cgroup_remove(const char *dir, int ms)
{
	if (cgroup_populated(dir)) {
		cgroup_write(dir, "cgroup.kill", "1");
		cgroup_wait_empty(dir, ms);
	}
	return rmdir(dir) ? -errno : 0;
}

int job_shm_remove(const char *tag)
{
	char prefix[NAME_MAX + 1], name[NAME_MAX + 2];
	struct dirent *e;
	int n, removed = 0;
	DIR *d;

	if (!tag || !*tag || strchr(tag, '/'))
		return 0;
	n = snprintf(prefix, sizeof(prefix), JOB_SHM_PREFIX "%s-", tag);
	if (n < 0 || (size_t)n >= sizeof(prefix) || !(d = opendir("/dev/shm")))
		return 0;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, prefix, (size_t)n))
			continue;
		snprintf(name, sizeof(name), "/%s", e->d_name);
		if (shm_unlink(name) == 0)
			removed++;
	}
	closedir(d);
	return removed;
}
