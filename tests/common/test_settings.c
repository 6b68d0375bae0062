/* Unit tests: the settings table (common/settings.c): lookup, typed values
 * and their messages, "did you mean", command-line words, usage text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "settings.h"

struct demo {
	char *host;
	char tag[8];
	int port;
	int64_t steps;
	double rate;
	bool verbose, quiet;
	int lo, hi;
};

/* "LO:HI" with LO <= HI. */
static int parse_range(void *obj, const struct settings_def *def, const char *value)
{
	struct demo *d = obj;
	int lo, hi, n = 0;

	if (sscanf(value, "%d:%d%n", &lo, &hi, &n) != 2 || value[n] || lo > hi)
		return -EINVAL;
	d->lo = lo;
	d->hi = hi;
	return 0;
}

static const struct settings_def demo_defs[] = {
    {.name = "master_host", .type = SETTINGS_STR, .offset = offsetof(struct demo, host)},
    {.name = "tag",
     .type = SETTINGS_BUF,
     .offset = offsetof(struct demo, tag),
     .size = sizeof(((struct demo *)0)->tag),
     .help = "a short tag"},
    {.name = "master_port",
     .type = SETTINGS_INT,
     .offset = offsetof(struct demo, port),
     .max = 65535,
     .help = "the port"},
    {.name = "max_steps",
     .type = SETTINGS_I64,
     .offset = offsetof(struct demo, steps),
     .max = INT64_MAX},
    {.name = "rate", .type = SETTINGS_REAL, .offset = offsetof(struct demo, rate)},
    {.name = "verbose",
     .alias = "v",
     .type = SETTINGS_BOOL,
     .offset = offsetof(struct demo, verbose),
     .help = "say more"},
    {.name = "quiet", .type = SETTINGS_BOOL, .offset = offsetof(struct demo, quiet)},
    {.name = "range",
     .alias = "r",
     .type = SETTINGS_CUSTOM,
     .offset = offsetof(struct demo, lo),
     .parse = parse_range,
     .expect = "LO:HI"},
};

static const struct settings_table demo = {demo_defs, sizeof(demo_defs) / sizeof(demo_defs[0])};

static char err[256];

static int set(struct demo *d, const char *name, const char *value)
{
	int i = settings_find(&demo, name);

	err[0] = '\0';
	if (i < 0)
		return i;
	return settings_apply(&demo, (size_t)i, d, value, err, sizeof(err));
}

static void test_find_both_spellings(void **state)
{
	assert_int_equal(settings_find(&demo, "master_port"), 2);
	assert_int_equal(settings_find(&demo, "master-port"), 2);
	assert_int_equal(settings_find(&demo, "max-steps"), 3);
	assert_int_equal(settings_find(&demo, "v"), 5);
	assert_int_equal(settings_find(&demo, "r"), 7);
	assert_int_equal(settings_find(&demo, "Master_port"), -ENOENT);
	assert_int_equal(settings_find(&demo, ""), -ENOENT);
	assert_int_equal(settings_find(&demo, "--master_port"), -ENOENT);
	{
		char longname[200];

		memset(longname, 'a', sizeof(longname) - 1);
		longname[sizeof(longname) - 1] = '\0';
		assert_int_equal(settings_find(&demo, longname), -ENOENT);
	}
}

static void test_values_of_every_type(void **state)
{
	struct demo d = {0};

	assert_int_equal(set(&d, "master_host", "node1"), 0);
	assert_string_equal(d.host, "node1");
	assert_int_equal(set(&d, "master_host", "node2"), 0); /* the old copy is freed */
	assert_string_equal(d.host, "node2");
	assert_int_equal(set(&d, "tag", "1234567"), 0);
	assert_string_equal(d.tag, "1234567");
	assert_int_equal(set(&d, "tag", ""), 0);
	assert_string_equal(d.tag, "");
	assert_int_equal(set(&d, "master_port", "65535"), 0);
	assert_int_equal(d.port, 65535);
	assert_int_equal(set(&d, "max_steps", "9000000000"), 0);
	assert_true(d.steps == 9000000000LL);
	assert_int_equal(set(&d, "rate", "0.25"), 0);
	assert_true(d.rate == 0.25);
	assert_int_equal(set(&d, "rate", "1e-400"), 0); /* rounds to 0 */
	for (const char *const *t = (const char *const[]){"1", "TRUE", "yes", "On", NULL}; *t;
	     t++) {
		d.verbose = false;
		assert_int_equal(set(&d, "verbose", *t), 0);
		assert_true(d.verbose);
	}
	for (const char *const *f = (const char *const[]){"0", "false", "NO", "off", NULL}; *f;
	     f++) {
		d.verbose = true;
		assert_int_equal(set(&d, "verbose", *f), 0);
		assert_false(d.verbose);
	}
	assert_int_equal(set(&d, "verbose", NULL), 0); /* a bare flag */
	assert_true(d.verbose);
	assert_int_equal(set(&d, "range", "2:5"), 0);
	assert_int_equal(d.lo, 2);
	assert_int_equal(d.hi, 5);
	free(d.host);
}

static void test_bad_values_name_setting_and_expectation(void **state)
{
	struct {
		const char *name, *value, *needle;
	} cases[] = {
	    {"master_host", "", "bad value '' for 'master_host' (expected a non-empty string)"},
	    {"tag", "12345678", "bad value '12345678' for 'tag' (expected at most 7 characters)"},
	    {"master_port", "70000",
	     "'70000' for 'master_port' (expected an integer from 0 to "
	     "65535)"},
	    {"master_port", "-1", "an integer from 0 to 65535"},
	    {"master_port", "80x", "'80x' for 'master_port'"},
	    {"master_port", "", "bad value '' for 'master_port'"},
	    {"max_steps", "-3", "'-3' for 'max_steps' (expected a non-negative integer)"},
	    {"max_steps", "99999999999999999999", "a non-negative integer"},
	    {"rate", "fast", "'fast' for 'rate' (expected a non-negative number)"},
	    {"rate", "-0.5", "a non-negative number"},
	    {"rate", "1e999", "a non-negative number"},
	    {"rate", "nan", "a non-negative number"},
	    {"verbose", "maybe", "'maybe' for 'verbose' (expected true or false)"},
	    {"range", "5:2", "bad value '5:2' for 'range' (expected LO:HI)"},
	    {"master_port", NULL, "'master_port' needs a value"},
	};
	struct demo d = {.port = 7, .steps = 8, .rate = 9, .lo = 1, .hi = 2};

	strcpy(d.tag, "keep");
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (set(&d, cases[i].name, cases[i].value) != -EINVAL)
			fail_msg("case %zu accepted", i);
		if (!strstr(err, cases[i].needle))
			fail_msg("case %zu: '%s' lacks '%s'", i, err, cases[i].needle);
	}
	/* A refused value leaves the field as it was. */
	assert_null(d.host);
	assert_string_equal(d.tag, "keep");
	assert_int_equal(d.port, 7);
	assert_true(d.steps == 8 && d.rate == 9 && d.lo == 1 && d.hi == 2);
	assert_false(d.verbose);
}

static void test_long_values_are_cut_in_messages(void **state)
{
	struct demo d = {0};
	char value[300];

	memset(value, '7', sizeof(value) - 1);
	value[sizeof(value) - 1] = '\0';
	assert_int_equal(set(&d, "master_port", value), -EINVAL);
	assert_non_null(strstr(err, "7777...' for 'master_port' (expected"));
	assert_true(strlen(err) < 160);
}

static void test_format(void **state)
{
	struct demo d = {.port = 80, .steps = 12, .rate = 0.5, .quiet = true};
	const char *want[] = {"", "ab", "80", "12", "0.5", "false", "true", ""};
	char buf[32];

	strcpy(d.tag, "ab");
	for (size_t i = 0; i < demo.n; i++) {
		settings_format(&demo, i, &d, buf, sizeof(buf));
		assert_string_equal(buf, want[i]);
	}
	d.host = "h";
	settings_format(&demo, 0, &d, buf, sizeof(buf));
	assert_string_equal(buf, "h");
}

static void test_did_you_mean(void **state)
{
	assert_string_equal(settings_suggest(&demo, "master_prot"), "master_port");
	assert_string_equal(settings_suggest(&demo, "master-prot"), "master_port");
	assert_string_equal(settings_suggest(&demo, "--max_step"), "max_steps");
	assert_string_equal(settings_suggest(&demo, "verbos"), "verbose");
	assert_string_equal(settings_suggest(&demo, "rage"), "rate");
	assert_null(settings_suggest(&demo, "bogus"));
	assert_null(settings_suggest(&demo, "x"));
	assert_null(settings_suggest(&demo, ""));
	settings_unknown(&demo, "key", "master_prot", " in [demo]", err, sizeof(err));
	assert_string_equal(err,
			    "unknown key 'master_prot' in [demo]; did you mean 'master_port'?");
	settings_unknown(&demo, "option", "--verbos", "", err, sizeof(err));
	assert_string_equal(err, "unknown option '--verbos'; did you mean '--verbose'?");
	settings_unknown(&demo, "option", "--bogus", "", err, sizeof(err));
	assert_string_equal(err, "unknown option '--bogus' (see --help)");
}

/* settings_cli_take over `argv` from index 0; returns its result. */
static int take(unsigned flags, int argc, char **argv, int *i, struct settings_flag *f)
{
	err[0] = '\0';
	return settings_cli_take(&demo, flags, argc, argv, i, f, err, sizeof(err));
}

static void test_cli_long_forms(void **state)
{
	char *argv[] = {"--master-port=80", "--rate",  "0.5", "--verbose",
			"--quiet=no",	    "--range", "-1:3"};
	struct settings_flag f;
	int i = 0;

	assert_int_equal(take(0, 7, argv, &i, &f), 0);
	assert_int_equal(f.index, 2);
	assert_string_equal(f.value, "80");
	i++;
	assert_int_equal(take(0, 7, argv, &i, &f), 0);
	assert_int_equal(i, 2); /* took the next word */
	assert_string_equal(f.value, "0.5");
	i++;
	assert_int_equal(take(0, 7, argv, &i, &f), 0);
	assert_int_equal(f.index, 5);
	assert_null(f.value); /* a bare boolean */
	i++;
	assert_int_equal(take(0, 7, argv, &i, &f), 0);
	assert_string_equal(f.value, "no");
	i++;
	assert_int_equal(take(0, 7, argv, &i, &f), 0);
	assert_string_equal(f.value, "-1:3"); /* a value may start with '-' */
	assert_int_equal(i, 6);
}

static void test_cli_bool_word_and_negate(void **state)
{
	char *argv[] = {"--verbose", "false", "--quiet", "--no-verbose", "--no_quiet", "x"};
	struct settings_flag f;
	int i = 0;

	/* Without BOOL_WORD a boolean never takes the next word. */
	assert_int_equal(take(0, 6, argv, &i, &f), 0);
	assert_null(f.value);
	assert_int_equal(i, 0);
	assert_int_equal(take(SETTINGS_CLI_BOOL_WORD, 6, argv, &i, &f), 0);
	assert_string_equal(f.value, "false");
	assert_int_equal(i, 1);
	i = 2; /* "--quiet" is followed by an option: bare */
	assert_int_equal(take(SETTINGS_CLI_BOOL_WORD, 6, argv, &i, &f), 0);
	assert_null(f.value);
	assert_int_equal(i, 2);
	i = 3;
	assert_int_equal(take(0, 6, argv, &i, &f), -ENOENT);
	assert_int_equal(take(SETTINGS_CLI_NEGATE, 6, argv, &i, &f), 0);
	assert_int_equal(f.index, 5);
	assert_string_equal(f.value, "false");
	i = 4;
	assert_int_equal(take(SETTINGS_CLI_NEGATE | SETTINGS_CLI_BOOL_WORD, 6, argv, &i, &f), 0);
	assert_int_equal(f.index, 6);
	assert_string_equal(f.value, "false");
	assert_int_equal(i, 4); /* a negation takes no value */
	{
		char *not_bool[] = {"--no-rate"};

		i = 0;
		assert_int_equal(take(SETTINGS_CLI_NEGATE, 1, not_bool, &i, &f), -ENOENT);
		assert_string_equal(err, "unknown option '--no-rate' (see --help)");
	}
}

static void test_cli_short_forms(void **state)
{
	char *argv[] = {"-r1:2", "-r", "3:4", "-v", "-vx", "-q"};
	struct settings_flag f;
	int i = 0;

	assert_int_equal(take(SETTINGS_CLI_SHORT, 6, argv, &i, &f), 0);
	assert_int_equal(f.index, 7);
	assert_string_equal(f.value, "1:2");
	i = 1;
	assert_int_equal(take(SETTINGS_CLI_SHORT, 6, argv, &i, &f), 0);
	assert_string_equal(f.value, "3:4");
	assert_int_equal(i, 2);
	i = 3;
	assert_int_equal(take(SETTINGS_CLI_SHORT, 6, argv, &i, &f), 0);
	assert_int_equal(f.index, 5);
	assert_null(f.value);
	i = 4; /* a short boolean takes no attached value */
	assert_int_equal(take(SETTINGS_CLI_SHORT, 6, argv, &i, &f), -ENOENT);
	assert_string_equal(err, "unknown option '-vx' (see --help)");
	i = 5;
	assert_int_equal(take(SETTINGS_CLI_SHORT, 6, argv, &i, &f), -ENOENT);
	i = 3; /* without SHORT, "-v" is not an option */
	assert_int_equal(take(0, 6, argv, &i, &f), -ENOENT);
}

static void test_cli_errors(void **state)
{
	struct {
		char *arg;
		int rc;
		const char *msg;
	} cases[] = {
	    {"--master_port", -EINVAL, "missing value after '--master_port' (see --help)"},
	    {"--bogus=3", -ENOENT, "unknown option '--bogus' (see --help)"},
	    {"--master_prot=3", -ENOENT,
	     "unknown option '--master_prot'; did you mean '--master_port'?"},
	    {"--", -ENOENT, "unknown option '--' (see --help)"},
	    {"--=3", -ENOENT, "unknown option '--' (see --help)"},
	    {"-", -ENOENT, "unknown option '-' (see --help)"},
	    {"word", -ENOENT, "unknown option 'word' (see --help)"},
	};
	char longarg[120] = "--";

	memset(longarg + 2, 'a', 100);
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		char *argv[] = {cases[k].arg};
		struct settings_flag f;
		int i = 0;

		if (take(SETTINGS_CLI_SHORT, 1, argv, &i, &f) != cases[k].rc)
			fail_msg("case %zu: wrong result", k);
		assert_string_equal(err, cases[k].msg);
	}
	{
		char *argv[] = {longarg};
		struct settings_flag f;
		int i = 0;

		assert_int_equal(take(0, 1, argv, &i, &f), -ENOENT);
		assert_non_null(strstr(err, "unknown option '--aaaa"));
	}
}

static void test_usage(void **state)
{
	struct demo d = {.port = 29500, .verbose = true};
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	assert_non_null(f);
	strcpy(d.tag, "x");
	settings_print_usage(&demo, &d, f);
	fclose(f);
	assert_string_equal(text, "  --tag                  a short tag (default: x)\n"
				  "  --master_port          the port (default: 29500)\n"
				  "  --verbose              say more (default: true)\n");
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_find_both_spellings),
	    cmocka_unit_test(test_values_of_every_type),
	    cmocka_unit_test(test_bad_values_name_setting_and_expectation),
	    cmocka_unit_test(test_long_values_are_cut_in_messages),
	    cmocka_unit_test(test_format),
	    cmocka_unit_test(test_did_you_mean),
	    cmocka_unit_test(test_cli_long_forms),
	    cmocka_unit_test(test_cli_bool_word_and_negate),
	    cmocka_unit_test(test_cli_short_forms),
	    cmocka_unit_test(test_cli_errors),
	    cmocka_unit_test(test_usage),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
