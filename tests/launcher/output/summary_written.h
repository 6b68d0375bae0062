/*
 * summary_written.h - for the summary's unit tests (include after
 * cmocka.h and summary.h): summary.json of a summary as it is written,
 * read back with jansson.
 */
#ifndef DDP_TESTS_SUMMARY_WRITTEN_H
#define DDP_TESTS_SUMMARY_WRITTEN_H

#include <jansson.h>
#include <stdlib.h>
#include <unistd.h>

/* summary.json of s (exit status 0, attempt 1), read back; the caller
 * decrefs. Fails the test when it cannot be written or read. */
static inline json_t *summary_written(const struct summary *s)
{
	char path[] = "/tmp/ddplaunch_test_summaryXXXXXX";
	int fd = mkstemp(path);
	json_t *root;

	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(summary_write_json(s, path, 0, 1, 0), 0);
	root = json_load_file(path, 0, NULL);
	unlink(path);
	assert_non_null(root);
	return root;
}

#endif
