/* Unit tests: line assembly and prefixes (linebuf.c). Every input is fed
 * whole, byte by byte, and split at every offset. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "linebuf.h"

struct sink {
	char out[8192];
	size_t len;
	int lines;
};

/* Each emitted piece is written as its new bytes, then "|" when it ends
 * the line or "~" when it was shown early, so boundaries are visible. */
static void emit(void *arg, const char *line, size_t len, size_t shown, bool ends)
{
	struct sink *s = arg;

	assert_true(shown <= len);
	assert_true(s->len + len - shown + 1 < sizeof(s->out));
	memcpy(s->out + s->len, line + shown, len - shown);
	s->len += len - shown;
	s->out[s->len++] = ends ? '|' : '~';
	s->out[s->len] = '\0';
	s->lines += ends;
}

static void run_split(const char *in, size_t max_line, size_t chunk, size_t split,
		      const char *expect)
{
	struct linebuf lb;
	struct sink s = {.len = 0};
	size_t n = strlen(in), pos = 0;

	linebuf_init(&lb, max_line);
	if (split) {
		assert_int_equal(linebuf_feed(&lb, in, split, emit, &s), 0);
		assert_int_equal(linebuf_feed(&lb, in + split, n - split, emit, &s), 0);
	} else {
		while (pos < n) {
			size_t k = n - pos < chunk ? n - pos : chunk;

			assert_int_equal(linebuf_feed(&lb, in + pos, k, emit, &s), 0);
			pos += k;
		}
	}
	linebuf_flush(&lb, emit, &s);
	if (strcmp(s.out, expect))
		fail_msg("chunk %zu split %zu: got '%s' expected '%s'", chunk, split, s.out,
			 expect);
	linebuf_release(&lb);
}

static void check_all_ways(const char *in, size_t max_line, const char *expect)
{
	size_t n = strlen(in);

	run_split(in, max_line, n ? n : 1, 0, expect);
	run_split(in, max_line, 1, 0, expect);
	run_split(in, max_line, 3, 0, expect);
	for (size_t split = 1; split < n; split++)
		run_split(in, max_line, 0, split, expect);
}

static void test_lines(void **state)
{
	check_all_ways("", 100, "");
	check_all_ways("a\n", 100, "a|");
	check_all_ways("a\nbb\n\nccc", 100, "a|bb||ccc|");
	check_all_ways("hello world\nsecond line\n", 100, "hello world|second line|");
}

static void test_long_lines(void **state)
{
	/* Pieces of max_line; a '\n' right after a full piece ends it. */
	check_all_ways("abcdefghij\n", 4, "abcd|efgh|ij|");
	check_all_ways("abcdefgh\nxy\n", 4, "abcd|efgh|xy|");
	check_all_ways("abcd", 4, "abcd|");
}

/* Shown early: only the bytes after the last piece come with the line's
 * end; each emit still sees the line from its start; a '\r' at the end of
 * a partial line waits for what follows it. */
static void test_show_partial(void **state)
{
	struct linebuf lb;
	struct sink s = {.len = 0};
	linebuf_init(&lb, 100);
	linebuf_show(&lb, emit, &s); /* nothing pending: nothing shown */
	assert_int_equal(s.len, 0);
	assert_int_equal(linebuf_feed(&lb, "name? ", 6, emit, &s), 0);
	assert_int_equal(linebuf_unshown(&lb), 6);
	linebuf_show(&lb, emit, &s);
	assert_int_equal(linebuf_unshown(&lb), 0);
	linebuf_show(&lb, emit, &s); /* shown already: no empty piece */
	assert_int_equal(linebuf_feed(&lb, "bob\n 10%\r", 9, emit, &s), 0);
	assert_int_equal(linebuf_unshown(&lb), 4); /* " 10%", not the '\r' */
	linebuf_show(&lb, emit, &s);
	assert_int_equal(linebuf_feed(&lb, " 20%\r", 5, emit, &s), 0);
	linebuf_show(&lb, emit, &s);
	assert_int_equal(linebuf_feed(&lb, "\n", 1, emit, &s), 0);
	assert_string_equal(s.out, "name? ~bob| 10%~\r 20%~\r|");
	assert_int_equal(s.lines, 2);
	linebuf_release(&lb);
}

/* A line shown early and then ended by the stream's end, or cut at
 * max_line, still ends once. */
static void test_show_then_end(void **state)
{
	struct linebuf lb;
	struct sink s = {.len = 0};

	linebuf_init(&lb, 4);
	assert_int_equal(linebuf_feed(&lb, "ab", 2, emit, &s), 0);
	linebuf_show(&lb, emit, &s);
	assert_int_equal(linebuf_feed(&lb, "cdef", 4, emit, &s), 0);
	linebuf_show(&lb, emit, &s);
	linebuf_flush(&lb, emit, &s);
	linebuf_flush(&lb, emit, &s);
	assert_string_equal(s.out, "ab~cd|ef~|");
	linebuf_release(&lb);
}

static void test_prefix(void **state)
{
	char buf[64];

	assert_int_equal(linebuf_prefix("[rank %r]: ", 3, 1, buf, sizeof(buf)), 10);
	assert_string_equal(buf, "[rank 3]: ");
	linebuf_prefix("%l/%r %% %x", 12, 2, buf, sizeof(buf));
	assert_string_equal(buf, "2/12 % %x");
	linebuf_prefix("[rank %r]: ", 123456, 0, buf, 8);
	assert_true(strlen(buf) < 8);
	linebuf_prefix("", 1, 1, buf, sizeof(buf));
	assert_string_equal(buf, "");
	assert_int_equal(linebuf_prefix_max("[rank %r]: "), 19);
	assert_int_equal(linebuf_prefix_max("%l/%r %% %x"), 26);
	assert_int_equal(linebuf_prefix_max(""), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_lines),	 cmocka_unit_test(test_long_lines),
	    cmocka_unit_test(test_show_partial), cmocka_unit_test(test_show_then_end),
	    cmocka_unit_test(test_prefix),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
