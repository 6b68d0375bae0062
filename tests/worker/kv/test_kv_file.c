/*
 * test_kv_file.c - the file:// store: set/get/add/check/wait semantics, a
 * deadline on missing keys, atomic adds from several processes at once
 * (fcntl locks), a torn record at the end (a writer killed mid-append)
 * ignored, the records' byte layout, and the file removed by its last
 * user.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "kv.h"

static char path[256];

static int setup(void **state)
{
	snprintf(path, sizeof(path), "/tmp/ddp-kvfile-%d-%ld", (int)getpid(), (long)time(NULL));
	unlink(path);
	return 0;
}

static void test_semantics(void **state)
{
	struct kv *kv;
	char err[256];
	void *val;
	size_t len;
	int64_t n;
	const char *keys[2] = {"a", "b"};

	assert_int_equal(kv_file_new(path, &kv, err, sizeof(err)), 0);
	assert_int_equal(kv_set(kv, "a", "one", 3), 0);
	assert_int_equal(kv_set(kv, "a", "two", 3), 0); /* last write wins */
	assert_int_equal(kv_get(kv, "a", 100, &val, &len), 0);
	assert_int_equal(len, 3);
	assert_string_equal(val, "two");
	free(val);
	assert_int_equal(kv_check(kv, keys, 2), 0);
	assert_int_equal(kv_add(kv, "b", 5, &n), 0);
	assert_int_equal(kv_add(kv, "b", -2, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(kv_check(kv, keys, 2), 1);
	assert_int_equal(kv_wait(kv, keys, 2, 100), 0);
	/* A key nobody sets: the deadline holds. */
	uint64_t t0 = (uint64_t)time(NULL);
	assert_int_equal(kv_get(kv, "never", 300, &val, &len), -ETIMEDOUT);
	assert_true((uint64_t)time(NULL) - t0 < 5);
	assert_non_null(strstr(kv_error(kv), "'never'"));
	kv_free(kv);
	/* The last user removed the file. */
	assert_int_equal(access(path, F_OK), -1);
}

static void test_concurrent_adds(void **state)
{
	struct kv *kv;
	char err[256];
	pid_t kids[4];
	int64_t n;

	assert_int_equal(kv_file_new(path, &kv, err, sizeof(err)), 0);
	for (int k = 0; k < 4; k++) {
		kids[k] = fork();
		if (kids[k] == 0) {
			struct kv *mine;

			if (kv_file_new(path, &mine, err, sizeof(err)) < 0)
				_exit(2);
			for (int i = 0; i < 100; i++)
				if (kv_add(mine, "counter", 1, NULL) < 0)
					_exit(3);
			kv_set(mine, k % 2 ? "odd" : "even", "x", 1);
			kv_free(mine);
			_exit(0);
		}
	}
	for (int k = 0; k < 4; k++) {
		int st;

		assert_int_equal(waitpid(kids[k], &st, 0), kids[k]);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	assert_int_equal(kv_add(kv, "counter", 0, &n), 0);
	assert_int_equal(n, 400);
	/* The children left; this user keeps the file alive. */
	assert_int_equal(access(path, F_OK), 0);
	kv_free(kv);
	assert_int_equal(access(path, F_OK), -1);
}

static void test_torn_tail(void **state)
{
	struct kv *kv;
	char err[256];
	void *val;
	size_t len;
	/* Lengths 5 and 1000: claims 1005 bytes that never came. */
	static const unsigned char torn[8] = {5, 0, 0, 0, 0xe8, 0x03, 0, 0};
	int fd;

	assert_int_equal(kv_file_new(path, &kv, err, sizeof(err)), 0);
	assert_int_equal(kv_set(kv, "k", "v", 1), 0);
	fd = open(path, O_WRONLY | O_APPEND);
	assert_int_equal(write(fd, torn, sizeof(torn)), (ssize_t)sizeof(torn));
	assert_int_equal(write(fd, "kk", 2), 2);
	close(fd);
	assert_int_equal(kv_get(kv, "k", 100, &val, &len), 0);
	assert_string_equal(val, "v");
	free(val);
	/* Later writes cut the torn record off instead of feeding it. */
	for (int i = 0; i < 200; i++)
		assert_int_equal(kv_set(kv, "filler", "0123456789", 10), 0);
	assert_int_equal(kv_set(kv, "k2", "w", 1), 0);
	assert_int_equal(kv_get(kv, "k2", 100, &val, &len), 0);
	assert_string_equal(val, "w");
	free(val);
	kv_free(kv);
	assert_int_equal(access(path, F_OK), -1);
}

/* The log's bytes: little-endian lengths, then key and value (the users
 * counter's record first), whatever the host's byte order. */
static void test_byte_order(void **state)
{
	static const char users[] = "__ddp_file_store_users__";
	unsigned char want[64], got[64];
	size_t n = 0, ul = sizeof(users) - 1;
	struct kv *kv;
	char err[256];
	int fd;

	assert_int_equal(kv_file_new(path, &kv, err, sizeof(err)), 0);
	assert_int_equal(kv_set(kv, "k", "vv", 2), 0);
	memcpy(want, (unsigned char[8]){(unsigned char)ul, 0, 0, 0, 1, 0, 0, 0}, 8);
	memcpy(want + 8, users, ul);
	want[8 + ul] = '1';
	n = 9 + ul;
	memcpy(want + n, (unsigned char[8]){1, 0, 0, 0, 2, 0, 0, 0}, 8);
	memcpy(want + n + 8, "kvv", 3);
	n += 11;
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(read(fd, got, sizeof(got)), (ssize_t)n);
	close(fd);
	assert_memory_equal(got, want, n);
	kv_free(kv);
}

static void test_bad_path(void **state)
{
	struct kv *kv;
	char err[256];

	assert_int_equal(kv_file_new("/nonexistent-dir/x/store", &kv, err, sizeof(err)), -ENOENT);
	assert_null(kv);
	assert_non_null(strstr(err, "/nonexistent-dir/x/store"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup(test_semantics, setup),
	    cmocka_unit_test_setup(test_concurrent_adds, setup),
	    cmocka_unit_test_setup(test_torn_tail, setup),
	    cmocka_unit_test_setup(test_byte_order, setup),
	    cmocka_unit_test(test_bad_path),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
