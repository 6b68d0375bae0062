/* leftovers.c's shared-memory sweep: only the job's own names go. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "leftovers.h"

static void make_shm(const char *name)
{
	int fd = shm_open(name, O_CREAT | O_RDWR, 0600);

	assert_true(fd >= 0);
	close(fd);
}

static bool shm_exists(const char *name)
{
	int fd = shm_open(name, O_RDONLY, 0);

	if (fd < 0)
		return false;
	close(fd);
	return true;
}

static void removes_only_the_jobs_names(void **state)
{
	char tag[32], other[32], mine1[64], mine2[64], theirs[64], prefix_only[64];

	(void)state;
	snprintf(tag, sizeof(tag), "t%ld", (long)getpid());
	snprintf(other, sizeof(other), "t%ldx", (long)getpid());
	snprintf(mine1, sizeof(mine1), "/ddp-%s-ring", tag);
	snprintf(mine2, sizeof(mine2), "/ddp-%s-bar-0", tag);
	snprintf(theirs, sizeof(theirs), "/ddp-%s-ring", other); /* a tag that starts alike */
	snprintf(prefix_only, sizeof(prefix_only), "/ddp-%s", tag);
	make_shm(mine1);
	make_shm(mine2);
	make_shm(theirs);
	make_shm(prefix_only);
	assert_int_equal(job_shm_remove(tag), 2);
	assert_false(shm_exists(mine1));
	assert_false(shm_exists(mine2));
	assert_true(shm_exists(theirs));
	assert_true(shm_exists(prefix_only));
	assert_int_equal(job_shm_remove(tag), 0);
	shm_unlink(theirs);
	shm_unlink(prefix_only);
}

static void refuses_tags_that_name_nothing_safely(void **state)
{
	(void)state;
	assert_int_equal(job_shm_remove(NULL), 0);
	assert_int_equal(job_shm_remove(""), 0);
	assert_int_equal(job_shm_remove("../x"), 0);
}

static void a_missing_cgroup_is_empty_and_gone(void **state)
{
	(void)state;
	assert_false(cgroup_populated("/nonexistent/ddplaunch-test"));
	assert_true(cgroup_wait_empty("/nonexistent/ddplaunch-test", 10));
	assert_int_equal(cgroup_remove("/nonexistent/ddplaunch-test", 10), -ENOENT);
	assert_int_equal(cgroup_write("/nonexistent/ddplaunch-test", "cgroup.kill", "1"), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(removes_only_the_jobs_names),
	    cmocka_unit_test(refuses_tags_that_name_nothing_safely),
	    cmocka_unit_test(a_missing_cgroup_is_empty_and_gone),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
