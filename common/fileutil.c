/*
 * fileutil.c - opening regular files only (see fileutil.h).
 */
#include "fileutil.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

const char *file_kind(mode_t mode)
{
	if (S_ISREG(mode))
		return "a regular file";
	if (S_ISDIR(mode))
		return "a directory";
	if (S_ISFIFO(mode))
		return "a FIFO";
	if (S_ISCHR(mode) || S_ISBLK(mode))
		return "a device";
	if (S_ISSOCK(mode))
		return "a socket";
	return "not a regular file";
}

int file_open_regular(const char *path, mode_t *mode)
{
	struct stat sb;
	/* O_NONBLOCK: opening a FIFO for reading would wait for a writer. */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC), rc;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &sb) < 0) {
		rc = -errno;
		goto fail;
	}
	if (mode)
		*mode = sb.st_mode;
	if (!S_ISREG(sb.st_mode)) {
		rc = S_ISDIR(sb.st_mode) ? -EISDIR : -EINVAL;
		goto fail;
	}
	if (fcntl(fd, F_SETFL, 0) < 0) {
		rc = -errno;
		goto fail;
	}
	return fd;
fail:
	close(fd);
	return rc;
}

unsigned long long file_raise_nofile(void)
{
	struct rlimit rl;
	rlim_t was;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return 0;
	if (rl.rlim_cur >= rl.rlim_max)
		return (unsigned long long)rl.rlim_cur;
	was = rl.rlim_cur;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
		log_warn("cannot raise the limit on open files from %llu to %llu: %s",
			 (unsigned long long)was, (unsigned long long)rl.rlim_max, strerror(errno));
		return (unsigned long long)was;
	}
	log_debug("raised the limit on open files (ulimit -n) from %llu to the hard limit %llu",
		  (unsigned long long)was, (unsigned long long)rl.rlim_max);
	return (unsigned long long)rl.rlim_cur;
}
