/*
 * fileutil.h - opening a file that must be a regular file (a job file, a
 * data file, a checkpoint), so that a directory, a FIFO or a device given
 * by mistake is refused by name at once instead of read as an empty file,
 * waited on forever, or read without end (/dev/zero).
 */
#ifndef DDP_COMMON_FILEUTIL_H
#define DDP_COMMON_FILEUTIL_H

#include <sys/types.h>

/* Opens `path` read-only (O_CLOEXEC) if it is a regular file and returns
 * the descriptor, in blocking mode. The open itself does not block (a FIFO
 * without a writer is refused, not waited on). Returns -errno from open(2),
 * -EISDIR for a directory, or -EINVAL for anything else that is not a
 * regular file (FIFO, device, socket); *mode (if not NULL) receives the
 * file's st_mode whenever fstat(2) worked, for file_kind(). */
int file_open_regular(const char *path, mode_t *mode);

/* What a file of this st_mode is, for messages: "a regular file",
 * "a directory", "a FIFO", "a device", "a socket", or "not a regular
 * file". */
const char *file_kind(mode_t mode);

/* Raises the soft limit on open files (RLIMIT_NOFILE) to the hard limit, as
 * servers do, so that a flood of clients or a job with many workers is not
 * stopped at the common 1024; says so at debug level, and at warning level
 * when the raise fails. Returns the soft limit now (0 when unknown). */
unsigned long long file_raise_nofile(void);

#endif
