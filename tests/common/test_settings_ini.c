/* Unit tests: INI files by section (common/settings_ini.c): dispatch, the
 * line limit, NUL bytes, line numbers of every kind of error, files that
 * are not regular files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "settings_ini.h"

/* Every key seen, as "section.key=value;" */
struct seen {
	char text[4096];
	size_t keys;
	const char *refuse; /* a key whose callback fails */
};

static int on_key(struct seen *s, const char *sec, const char *key, const char *value, char *msg,
		  size_t len)
{
	size_t n = strlen(s->text);

	s->keys++;
	if (s->refuse && !strcmp(key, s->refuse)) {
		snprintf(msg, len, "'%s' refused", key);
		return -EINVAL;
	}
	if (n < sizeof(s->text))
		snprintf(s->text + n, sizeof(s->text) - n, "%s.%s=%s;", sec, key, value);
	return 0;
}

static int on_alpha(void *user, const char *key, const char *value, char *msg, size_t len)
{
	return on_key(user, "alpha", key, value, msg, len);
}

static int on_beta(void *user, const char *key, const char *value, char *msg, size_t len)
{
	return on_key(user, "beta", key, value, msg, len);
}

static const struct settings_ini_section sections[] = {
    {"alpha", on_alpha},
    {"beta", on_beta},
    {"other", NULL},
};

static struct seen seen;
static char err[256];
static int line;

static int parse_mem(const char *text, size_t len, bool skip_others, const char *hint)
{
	const struct settings_ini ini = {.sections = sections,
					 .nsections = 3,
					 .skip_others = skip_others,
					 .long_line_hint = hint,
					 .user = &seen};
	FILE *f = fmemopen((void *)text, len ? len : 1, "r");
	int rc;

	assert_non_null(f);
	if (!len)
		fgetc(f); /* fmemopen wants a size > 0: read the one byte away */
	err[0] = '\0';
	line = -1;
	rc = settings_ini_parse(&ini, f, &line, err, sizeof(err));
	fclose(f);
	return rc;
}

static int parse(const char *text, bool skip_others)
{
	return parse_mem(text, strlen(text), skip_others, NULL);
}

static void reset(const char *refuse)
{
	memset(&seen, 0, sizeof(seen));
	seen.refuse = refuse;
}

static void test_sections_in_order(void **state)
{
	reset(NULL);
	assert_int_equal(parse("; comment\n# another\n\n[alpha]\na = 1\nb=two words ; note\n"
			       "[other]\nignored = x\n[beta]\nc : 3\n[alpha]\nd = \n",
			       false),
			 0);
	assert_int_equal(line, 0);
	assert_string_equal(seen.text, "alpha.a=1;alpha.b=two words;beta.c=3;alpha.d=;");
	reset(NULL);
	assert_int_equal(parse("", false), 0);
	assert_int_equal(seen.keys, 0);
	/* The last line needs no newline; CRLF endings are taken off. */
	reset(NULL);
	assert_int_equal(parse("[alpha]\r\na = 1\r\nb = 2", false), 0);
	assert_string_equal(seen.text, "alpha.a=1;alpha.b=2;");
}

static void test_other_sections(void **state)
{
	reset(NULL);
	assert_int_equal(parse("x = 1\n[gamma]\ny = 2\n[alpha]\na = 1\n", true), 0);
	assert_string_equal(seen.text, "alpha.a=1;");
	reset(NULL);
	assert_int_equal(parse("[alpha]\na = 1\n[gamma]\ny = 2\n", false), -EINVAL);
	assert_int_equal(line, 4);
	assert_string_equal(err, "unknown section [gamma] for key 'y' (expected alpha, beta or "
				 "other)");
	reset(NULL);
	assert_int_equal(parse("\nx = 1\n", false), -EINVAL);
	assert_int_equal(line, 2);
	assert_string_equal(err, "key 'x' outside any section (put it under [alpha])");
}

static void test_first_error_stops_the_parse(void **state)
{
	reset("b");
	assert_int_equal(parse("[alpha]\na = 1\nb = 2\nc = 3\n", false), -EINVAL);
	assert_int_equal(line, 3);
	assert_string_equal(err, "'b' refused");
	assert_int_equal(seen.keys, 2); /* c was not read */
	/* inih's own error on an earlier line wins over ours on a later one. */
	reset("c");
	assert_int_equal(parse("[alpha]\na = 1\nno equals sign\nc = 3\n", false), -EINVAL);
	assert_int_equal(line, 3);
	assert_non_null(strstr(err, "cannot parse this line"));
	reset(NULL);
	assert_int_equal(parse("[alpha\n", false), -EINVAL);
	assert_int_equal(line, 1);
}

/* "[alpha]\nk = vvv...\n" with a second line of exactly `len` characters. */
static char *line_of(size_t len, const char *ending)
{
	char *text = malloc(len + 32);

	assert_non_null(text);
	strcpy(text, "[alpha]\nk = ");
	memset(text + 12, 'v', len - 4);
	strcpy(text + 8 + len, ending);
	strcat(text, "after = 1\n");
	return text;
}

static void test_line_limit(void **state)
{
	char *text;

	/* SETTINGS_INI_MAX_LINE characters, with either line ending, are a line. */
	for (int crlf = 0; crlf < 2; crlf++) {
		reset(NULL);
		text = line_of(SETTINGS_INI_MAX_LINE, crlf ? "\r\n" : "\n");
		assert_int_equal(parse(text, false), 0);
		assert_int_equal(seen.keys, 2);
		assert_int_equal(strlen(strchr(seen.text, '=') + 1),
				 SETTINGS_INI_MAX_LINE - 4 + strlen(";alpha.after=1;"));
		free(text);
	}
	/* One more, or two more (200, what inih holds with the terminator)
	 * or many more, is an error naming the line, never a cut line. */
	for (size_t extra = 1; extra <= 300; extra += extra < 2 ? 1 : 149) {
		reset(NULL);
		text = line_of(SETTINGS_INI_MAX_LINE + extra, "\n");
		assert_int_equal(parse_mem(text, strlen(text), false, "split it"), -EINVAL);
		assert_int_equal(line, 2);
		assert_string_equal(err, "line longer than 198 characters (inih limit); split it");
		assert_int_equal(seen.keys, 0);
		free(text);
	}
	reset(NULL);
	text = line_of(SETTINGS_INI_MAX_LINE + 1, "");
	assert_int_equal(parse(text, false), -EINVAL);
	assert_string_equal(err, "line longer than 198 characters (inih limit)");
	free(text);
}

static void test_nul_byte(void **state)
{
	static const char text[] = "[alpha]\na = 1\nb\0 = 2\nc = 3\n";

	reset(NULL);
	assert_int_equal(parse_mem(text, sizeof(text) - 1, false, "split it"), -EINVAL);
	assert_int_equal(line, 3);
	assert_string_equal(err, "a NUL byte in this line (is it a text file?)");
	assert_int_equal(seen.keys, 1);
}

static void test_many_lines(void **state)
{
	const size_t n = 100000;
	size_t len = 0;
	char *text = NULL;
	FILE *w = open_memstream(&text, &len);

	assert_non_null(w);
	fputs("[other]\n", w);
	for (size_t i = 0; i < n; i++)
		fprintf(w, "key%zu = value %zu\n", i, i);
	fputs("[alpha]\nlast = 1\n", w);
	fclose(w);
	reset(NULL);
	assert_int_equal(parse_mem(text, len, false, NULL), 0);
	assert_string_equal(seen.text, "alpha.last=1;");
	reset("last");
	assert_int_equal(parse_mem(text, len, false, NULL), -EINVAL);
	assert_int_equal(line, (int)n + 3);
	free(text);
}

static void test_load_refuses_what_is_not_a_file(void **state)
{
	const struct settings_ini ini = {.sections = sections, .nsections = 3, .user = &seen};
	char dir[] = "/tmp/settings-ini-test-XXXXXX", path[64];
	FILE *f;

	assert_non_null(mkdtemp(dir));
	err[0] = '\0';
	assert_int_equal(settings_ini_load(&ini, "/nonexistent/job.ini", &line, err, sizeof(err)),
			 -ENOENT);
	assert_int_equal(line, 0);
	assert_string_equal(
	    err, "cannot open job file '/nonexistent/job.ini': No such file or directory");
	assert_int_equal(settings_ini_load(&ini, dir, &line, err, sizeof(err)), -EISDIR);
	assert_non_null(strstr(err, "is a directory"));
	assert_int_equal(settings_ini_load(&ini, "/dev/null", &line, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "'/dev/null' is a device"));
	/* A FIFO with no writer would block a plain open: refused at once. */
	snprintf(path, sizeof(path), "%s/fifo", dir);
	assert_int_equal(mkfifo(path, 0600), 0);
	assert_int_equal(settings_ini_load(&ini, path, &line, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "is a FIFO"));
	unlink(path);
	snprintf(path, sizeof(path), "%s/job.ini", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("[beta]\nx = 1\n[alpha]\noops\n", f);
	fclose(f);
	reset(NULL);
	assert_int_equal(settings_ini_load(&ini, path, &line, err, sizeof(err)), -EINVAL);
	assert_int_equal(line, 4);
	assert_string_equal(seen.text, "beta.x=1;");
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sections_in_order),
	    cmocka_unit_test(test_other_sections),
	    cmocka_unit_test(test_first_error_stops_the_parse),
	    cmocka_unit_test(test_line_limit),
	    cmocka_unit_test(test_nul_byte),
	    cmocka_unit_test(test_many_lines),
	    cmocka_unit_test(test_load_refuses_what_is_not_a_file),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
