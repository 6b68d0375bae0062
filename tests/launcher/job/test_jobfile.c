/* Unit tests: INI job files (jobfile.c), through fmemopen. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

/* A job file line of `len` characters ("arg = bbb...") in [program]. */
static int load_arg_line(struct launch_opts *o, size_t len)
{
	char text[600];

	strcpy(text, "[program]\nprogram = x\narg = ");
	memset(text + 28, 'b', len - 6);
	strcpy(text + 22 + len, "\narg = after\n");
	return load(o, text);
}

static void test_line_limit_is_exact(void **state)
{
	struct launch_opts o;

	/* 198 characters is the documented limit: 198 is a line, 199, 200
	 * (what inih's 200-byte buffer seems to promise) and 400 are not. */
	assert_int_equal(JOBFILE_MAX_LINE, 198);
	assert_int_equal(opts_init(&o), 0);
	assert_int_equal(load_arg_line(&o, 198), 0);
	assert_int_equal(o.args.n, 2);
	assert_int_equal(strlen(o.args.v[0]), 192);
	assert_string_equal(o.args.v[1], "after");
	opts_release(&o);
	for (size_t len = 199; len <= 400; len += len < 200 ? 1 : 200) {
		assert_int_equal(opts_init(&o), 0);
		assert_int_equal(load_arg_line(&o, len), -EINVAL);
		assert_string_equal(err, "job.ini:3: line longer than 198 characters (inih limit); "
					 "put long argument lists on several 'arg =' lines");
		assert_int_equal(o.args.n, 0);
		opts_release(&o);
	}
}

static void test_nul_byte_says_so(void **state)
{
	static const char text[] = "[program]\nprogram = x\narg = a\0b\narg = c\n";
	FILE *f = fmemopen((void *)text, sizeof(text) - 1, "r");
	struct launch_opts o;

	assert_non_null(f);
	assert_int_equal(opts_init(&o), 0);
	assert_int_equal(jobfile_load_stream(&o, f, "job.ini", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "job.ini:3: a NUL byte in this line (is it a text file?)");
	fclose(f);
	opts_release(&o);
}

static void test_unknown_key_suggests(void **state)
{
	struct launch_opts o;

	assert_int_equal(opts_init(&o), 0);
	assert_int_equal(load(&o, "[launch]\n\nmaster_prot = 1\n"), -EINVAL);
	assert_string_equal(err, "job.ini:3: unknown key 'master_prot' in [launch]; did you mean "
				 "'master_port'?");
	assert_int_equal(load(&o, "[launch]\nmax-restart = 1\n"), -EINVAL);
	assert_non_null(strstr(err, "did you mean 'max_restarts'?"));
	assert_int_equal(load(&o, "[launch]\nbogus = 1\n"), -EINVAL);
	assert_string_equal(err, "job.ini:2: unknown key 'bogus' in [launch] (see --help)");
	opts_release(&o);
}

static void test_not_a_regular_file(void **state)
{
	struct launch_opts o;

	assert_int_equal(opts_init(&o), 0);
	assert_int_equal(jobfile_load(&o, "/", err, sizeof(err)), -EISDIR);
	assert_string_equal(err, "job file '/' is a directory (give an INI file)");
	assert_int_equal(jobfile_load(&o, "/dev/zero", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "job file '/dev/zero' is a device (give an INI file)");
	opts_release(&o);
}

/* The lists a job file fills grow geometrically: 100,000 pushes move the
 * array a few dozen times at most (one realloc per entry moved it on
 * almost every push, quadratic in bytes copied). */
static void test_lists_grow_geometrically(void **state)
{
	struct opts_strv v = {0};
	char **last = NULL;
	size_t moves = 0;

	for (int i = 0; i < 100000; i++) {
		assert_int_equal(opts_strv_push(&v, "x"), 0);
		if (v.v != last)
			moves++;
		last = v.v;
	}
	assert_int_equal(v.n, 100000);
	assert_null(v.v[v.n]);
	assert_in_range(moves, 1, 40);
	assert_true(v.cap > v.n && v.cap <= 2 * (v.n + 1));
	opts_strv_clear(&v);
	assert_true(v.v == NULL && v.n == 0 && v.cap == 0);
}

/* 100,000 argument lines and 100,000 environment lines: linear work, so a
 * generous CPU-time bound (the quadratic version took seconds) holds even
 * under a sanitizer on a loaded machine. */
static void test_large_job_file(void **state)
{
	const int n = 100000;
	char *text = NULL;
	size_t len = 0;
	FILE *w = open_memstream(&text, &len);
	struct launch_opts o;
	clock_t t0;
	double cpu_s;

	assert_non_null(w);
	fputs("[program]\nprogram = train.py\n", w);
	for (int i = 0; i < n; i++)
		fprintf(w, "arg = --a%d\n", i);
	fputs("[env]\n", w);
	for (int i = 0; i < n; i++)
		fprintf(w, "V%d = %d\n", i, i);
	fclose(w);
	assert_int_equal(opts_init(&o), 0);
	t0 = clock();
	assert_int_equal(load(&o, text), 0);
	cpu_s = (double)(clock() - t0) / CLOCKS_PER_SEC;
	assert_int_equal(o.args.n, n);
	assert_string_equal(o.args.v[n - 1], "--a99999");
	assert_int_equal(o.env.n, n);
	assert_string_equal(o.env.v[n - 1], "V99999=99999");
	if (cpu_s > 5.0)
		fail_msg("%d-line job file took %.2f s of CPU", 2 * n, cpu_s);
	opts_release(&o);
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sections),
	    cmocka_unit_test(test_cli_wins),
	    cmocka_unit_test(test_errors_name_line_and_key),
	    cmocka_unit_test(test_long_line_at_limit),
	    cmocka_unit_test(test_missing_file),
	    cmocka_unit_test(test_line_limit_is_exact),
	    cmocka_unit_test(test_nul_byte_says_so),
	    cmocka_unit_test(test_unknown_key_suggests),
	    cmocka_unit_test(test_not_a_regular_file),
	    cmocka_unit_test(test_lists_grow_geometrically),
	    cmocka_unit_test(test_large_job_file),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
