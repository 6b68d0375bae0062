/* Unit tests: INI job files (jobfile.c), through fmemopen. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "jobfile.h"
#include "opts.h"

static char err[OPTS_ERR_LEN];

static int load(struct launch_opts *o, const char *text)
{
	FILE *f = fmemopen((void *)text, strlen(text), "r");
	int rc;

	assert_non_null(f);
	err[0] = '\0';
	rc = jobfile_load_stream(o, f, "job.ini", err, sizeof(err));
	fclose(f);
	return rc;
}

static void test_sections(void **state)
{
	const char *text = "; a job\n"
			   "[launch]\n"
			   "nproc_per_node = 2\n"
			   "max-restarts = 3\n"
			   "strict_port = true\n"
			   "signals = TERM,USR1\n"
			   "[program]\n"
			   "program = train.py\n"
			   "arg = --epochs\n"
			   "arg = 3\n"
			   "args = --lr 0.1   --name  x\n"
			   "arg = two words\n"
			   "[env]\n"
			   "MY_VAR = hello world\n"
			   "[train]\n"
			   "anything = goes here\n"
			   "model = 784,64,10\n";
	struct launch_opts o;

	assert_int_equal(opts_init(&o), 0);
	assert_int_equal(load(&o, text), 0);
	assert_string_equal(o.nproc_spec, "2");
	assert_int_equal(o.max_restarts, 3);
	assert_true(o.strict_port);
	assert_int_equal(o.nsignals, 2);
	assert_string_equal(o.program, "train.py");
	assert_int_equal(o.args.n, 7);
	assert_string_equal(o.args.v[0], "--epochs");
	assert_string_equal(o.args.v[1], "3");
	assert_string_equal(o.args.v[2], "--lr");
	assert_string_equal(o.args.v[5], "x");
	assert_string_equal(o.args.v[6], "two words");
	assert_int_equal(o.env.n, 1);
	assert_string_equal(o.env.v[0], "MY_VAR=hello world");
	opts_release(&o);
}

static void test_cli_wins(void **state)
{
	char *argv[] = {"ddplaunch", "--nproc_per_node=4", "--config", "job.ini", "other.py", "a"};
	const char *text = "[launch]\nnproc_per_node = 2\nmaster_port = 1234\n"
			   "[program]\nprogram = train.py\narg = --x\n";
	struct launch_opts o;

	assert_int_equal(opts_init(&o), 0);
	assert_int_equal(args_parse(&o, 6, argv, err, sizeof(err)), ARGS_OK);
	assert_string_equal(o.config, "job.ini");
	assert_int_equal(load(&o, text), 0);
	assert_string_equal(o.nproc_spec, "4");
	assert_int_equal(o.master_port, 1234);
	assert_string_equal(o.program, "other.py");
	assert_int_equal(o.args.n, 1);
	assert_string_equal(o.args.v[0], "a");
	opts_release(&o);
}

static void test_errors_name_line_and_key(void **state)
{
	static char long_line[400];
	struct {
		const char *text;
		const char *needle;
	} cases[] = {
	    {"[launch]\nnproc_per_node = 2\nbogus = 1\n", "job.ini:3: unknown key 'bogus'"},
	    {"[launch]\n\nmax_restarts = many\n", "job.ini:3: bad value 'many' for 'max_restarts'"},
	    {"nproc_per_node = 2\n", "job.ini:1: key 'nproc_per_node' outside any section"},
	    {"[launch]\n[weird]\nx = 1\n", "job.ini:3: unknown section [weird]"},
	    {"[program]\nprogram = a\nscript = b\n", "job.ini:3: unknown key 'script'"},
	    {"[env]\nBAD-NAME = 1\n", "job.ini:2: bad environment variable name 'BAD-NAME'"},
	    {"[launch]\nthis line has no equals sign\n", "job.ini:2: cannot parse this line"},
	    {"[launch]\nconfig = other.ini\n", "job.ini:2: 'config' cannot be set"},
	    {long_line, "job.ini:3: line longer than 198"},
	};

	memset(long_line, 0, sizeof(long_line));
	strcpy(long_line, "[program]\nprogram = x\nargs = ");
	memset(long_line + strlen(long_line), 'a', 250);
	strcat(long_line, "\narg = after\n");
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct launch_opts o;

		assert_int_equal(opts_init(&o), 0);
		if (load(&o, cases[i].text) != -EINVAL)
			fail_msg("case %zu accepted", i);
		if (!strstr(err, cases[i].needle))
			fail_msg("case %zu: '%s' lacks '%s'", i, err, cases[i].needle);
		opts_release(&o);
	}
}

static void test_long_line_at_limit(void **state)
{
	char text[400];
	struct launch_opts o;
	size_t n;

	/* Exactly JOBFILE_MAX_LINE characters before the newline is fine. */
	strcpy(text, "[program]\nprogram = x\narg = ");
	n = strlen(text);
	memset(text + n, 'b', JOBFILE_MAX_LINE - 6);
	strcpy(text + n + JOBFILE_MAX_LINE - 6, "\n");
	assert_int_equal(opts_init(&o), 0);
	assert_int_equal(load(&o, text), 0);
	assert_int_equal(strlen(o.args.v[0]), JOBFILE_MAX_LINE - 6);
	opts_release(&o);
}

static void test_missing_file(void **state)
{
	struct launch_opts o;

	assert_int_equal(opts_init(&o), 0);
	assert_int_equal(jobfile_load(&o, "/nonexistent/job.ini", err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "/nonexistent/job.ini"));
	opts_release(&o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sections),
	    cmocka_unit_test(test_cli_wins),
	    cmocka_unit_test(test_errors_name_line_and_key),
	    cmocka_unit_test(test_long_line_at_limit),
	    cmocka_unit_test(test_missing_file),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
