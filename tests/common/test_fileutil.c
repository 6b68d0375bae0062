/* Unit tests: opening regular files only (common/fileutil.c): a regular
 * file opens in blocking mode; a directory, a FIFO without a writer (without
 * waiting for one), a device and a missing path are refused with their
 * kind. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileutil.h"

static char dir[64];

static int setup(void **state)
{
	snprintf(dir, sizeof(dir), "/tmp/ddp-fileutil-XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char path[128];

	snprintf(path, sizeof(path), "%s/file", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/fifo", dir);
	unlink(path);
	return rmdir(dir);
}

static void test_regular_file(void **state)
{
	char path[128], buf[8];
	mode_t mode = 0;
	FILE *f;
	int fd;

	snprintf(path, sizeof(path), "%s/file", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("abc", f);
	fclose(f);
	fd = file_open_regular(path, &mode);
	assert_true(fd >= 0);
	assert_true(S_ISREG(mode));
	assert_string_equal(file_kind(mode), "a regular file");
	assert_int_equal(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
	assert_true((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
	assert_int_equal(read(fd, buf, sizeof(buf)), 3);
	close(fd);
}

static void expect_refused(const char *path, int rc, const char *kind)
{
	mode_t mode = 0;

	assert_int_equal(file_open_regular(path, &mode), rc);
	assert_string_equal(file_kind(mode), kind);
}

static void test_not_regular(void **state)
{
	char fifo[128];

	expect_refused(dir, -EISDIR, "a directory");
	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	/* Nobody writes to it: refused at once, not waited on. */
	expect_refused(fifo, -EINVAL, "a FIFO");
	expect_refused("/dev/zero", -EINVAL, "a device");
	assert_int_equal(file_open_regular("/dev/null", NULL), -EINVAL);
	assert_int_equal(file_open_regular("/nonexistent/file", NULL), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_regular_file),
	    cmocka_unit_test(test_not_regular),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
