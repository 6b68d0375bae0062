/*
 * fileutil.c - opening regular files only (see fileutil.h).
 */
#include "fileutil.h"

#include <errno.h>
#include <fcntl.h>
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
