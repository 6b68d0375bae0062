/*
 * test_timeout.c - DDP_TIMEOUT_MS's values (ddp_parse_timeout): plain
 * milliseconds, the units ms, s, min and h, and every value that used to be
 * reinterpreted silently ("1s" read as 1 ms, "-5" as 30 days, "abc" as the
 * default) refused instead.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>

#include "ctx.h"

static void expect_ms(const char *s, uint64_t want)
{
	uint64_t ms = 0;

	if (ddp_parse_timeout(s, &ms) != 0 || ms != want)
		fail_msg("'%s': got %llu, want %llu", s, (unsigned long long)ms,
			 (unsigned long long)want);
}

static void expect_refused(const char *s)
{
	uint64_t ms = 4242;

	if (ddp_parse_timeout(s, &ms) != -EINVAL || ms != 4242)
		fail_msg("'%s' was accepted (%llu)", s, (unsigned long long)ms);
}

static void test_units(void **state)
{
	expect_ms("60000", 60000);
	expect_ms("1", 1);
	expect_ms("250ms", 250);
	expect_ms("1s", 1000);
	expect_ms("90s", 90000);
	expect_ms("5min", 300000);
	expect_ms("2h", 7200000);
	expect_ms("720h", DDP_MAX_TIMEOUT_MS);
	expect_ms("2592000000", DDP_MAX_TIMEOUT_MS);
}

static void test_refused(void **state)
{
	const char *bad[] = {"",
			     "abc",
			     "-5",
			     "+5",
			     " 5",
			     "5 ",
			     "5 s",
			     "1.5s",
			     "0",
			     "0s",
			     "5m",
			     "5sec",
			     "5S",
			     "1e3",
			     "721h",
			     "2592000001",
			     "99999999999999999999999",
			     "ms",
			     "0x10",
			     "5min5",
			     "1h30min"};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		expect_refused(bad[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_units),
	    cmocka_unit_test(test_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
