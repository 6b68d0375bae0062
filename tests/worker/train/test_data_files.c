/*
 * test_data_files.c - what data_load_csv does with paths that are not a
 * CSV file: a directory, a FIFO (refused without waiting for a writer) and
 * a device (/dev/zero, never read) are refused; an empty file or one of
 * blank lines only is "no data", not a malformed line.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[] = "/tmp/ddp-data-test-XXXXXX";

static const char *path_in(const char *name)
{
	static char path[256];

	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	return path;
}

static const char *write_file(const char *name, const char *text)
{
	const char *path = path_in(name);
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	return path;
}

static void test_not_a_file(void **state)
{
	struct dataset ds;
	size_t bad = 99;

	assert_int_equal(data_load_csv(tmpdir, 2, 1.0f, &ds, &bad), -EISDIR);
	assert_int_equal(bad, 0);
	assert_null(ds.x);
	assert_int_equal(mkfifo(path_in("fifo"), 0600), 0);
	assert_int_equal(data_load_csv(path_in("fifo"), 2, 1.0f, &ds, &bad), -EINVAL);
	assert_int_equal(bad, 0);
	assert_int_equal(data_load_csv("/dev/zero", 2, 1.0f, &ds, &bad), -EINVAL);
	assert_int_equal(bad, 0);
	assert_null(ds.x);
}

static void test_no_samples(void **state)
{
	struct dataset ds;
	size_t bad = 99;

	assert_int_equal(data_load_csv(write_file("empty.csv", ""), 2, 1.0f, &ds, &bad), -ENODATA);
	assert_int_equal(bad, 0);
	assert_int_equal(data_load_csv(write_file("blank.csv", "\n  \n\r\n"), 2, 1.0f, &ds, &bad),
			 -ENODATA);
	assert_null(ds.x);
}

/* data_load_csv_fd takes the descriptor over, also on failure. */
static void test_fd_is_closed(void **state)
{
	struct dataset ds;
	int fd = open(write_file("one.csv", "1,2,1\n"), O_RDONLY);

	assert_true(fd >= 0);
	assert_int_equal(data_load_csv_fd(fd, 2, 1.0f, &ds, NULL), 0);
	assert_int_equal(ds.n, 1);
	data_release(&ds);
	assert_int_equal(fcntl(fd, F_GETFD), -1);
	fd = open(path_in("empty.csv"), O_RDONLY);
	assert_int_equal(data_load_csv_fd(fd, 2, 1.0f, &ds, NULL), -ENODATA);
	assert_int_equal(fcntl(fd, F_GETFD), -1);
}

static int setup(void **state)
{
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
	const char *names[] = {"fifo", "empty.csv", "blank.csv", "one.csv"};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		unlink(path_in(names[i]));
	return rmdir(tmpdir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_not_a_file),
	    cmocka_unit_test(test_no_samples),
	    cmocka_unit_test(test_fd_is_closed),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
