/* Unit tests for common/envp.c: a variable of an envp array. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "envp.h"

static void test_found_and_missing(void **state)
{
	char *env[] = {"A=1", "AB=2", "EMPTY=", "EQ=x=y", "A=later", NULL};

	(void)state;
	assert_string_equal(envp_get(env, "A"), "1"); /* the first entry wins */
	assert_string_equal(envp_get(env, "AB"), "2");
	assert_string_equal(envp_get(env, "EMPTY"), "");
	assert_string_equal(envp_get(env, "EQ"), "x=y");
	assert_null(envp_get(env, "B"));
	assert_null(envp_get(env, "ABC"));
}

static void test_names_are_whole(void **state)
{
	/* a longer name, a prefix of the name, an entry with no '=' */
	char *env[] = {"PATHX=no", "PAT=no", "PATH", NULL};

	(void)state;
	assert_null(envp_get(env, "PATH"));
}

static void test_null_and_empty(void **state)
{
	char *none[] = {NULL};

	(void)state;
	assert_null(envp_get(NULL, "A"));
	assert_null(envp_get(none, "A"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_found_and_missing),
	    cmocka_unit_test(test_names_are_whole),
	    cmocka_unit_test(test_null_and_empty),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
