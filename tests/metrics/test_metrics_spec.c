/* metrics/metrics_spec.c: [ADDR:]PORT, the grammar of ddplaunch's
 * --metrics_port and ddp-rdzvd's --metrics-port, and what it refuses. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "metrics_spec.h"

static void test_forms(void **state)
{
	char addr[METRICS_ADDR_MAX], err[256];
	int port = -1;

	(void)state;
	assert_int_equal(metrics_spec_parse("9100", addr, sizeof(addr), &port, err, sizeof(err)),
			 0);
	assert_string_equal(addr, "");
	assert_int_equal(port, 9100);
	assert_int_equal(metrics_spec_parse("0", addr, sizeof(addr), &port, err, sizeof(err)), 0);
	assert_int_equal(port, 0);
	assert_int_equal(
	    metrics_spec_parse("127.0.0.3:9400", addr, sizeof(addr), &port, err, sizeof(err)), 0);
	assert_string_equal(addr, "127.0.0.3");
	assert_int_equal(port, 9400);
	assert_int_equal(
	    metrics_spec_parse("[::1]:65535", addr, sizeof(addr), &port, err, sizeof(err)), 0);
	assert_string_equal(addr, "::1");
	assert_int_equal(port, 65535);
}

static void test_refused(void **state)
{
	static const struct {
		const char *spec, *says;
	} bad[] = {
	    {"", "is not [ADDR:]PORT"},
	    {"65536", "is not a port"},
	    {"-1", "is not a port"},
	    {"+5", "is not a port"},
	    {"a", "is not a port"},
	    {":9400", "ADDR empty"},
	    {"1.2.3.4:", "is not a port"},
	    {"::1:9400", "write an IPv6 address in brackets, as in [::1]:9100"},
	    {"[::1]9400", "a port after the bracket"},
	    {"localhost:9100", "'localhost' is not a literal IPv4 address: give the address to "
			       "listen on as numbers (127.0.0.1, or [::1] in brackets; no host "
			       "names)"},
	    {"[node1]:9100", "'node1' is not a literal IPv6 address"},
	    {"[1.2.3.4]:9100", "'1.2.3.4' is not a literal IPv6 address"},
	};
	char addr[METRICS_ADDR_MAX] = "unchanged", err[256];
	int port = 7;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		assert_int_equal(
		    metrics_spec_parse(bad[i].spec, addr, sizeof(addr), &port, err, sizeof(err)),
		    -EINVAL);
		if (!strstr(err, bad[i].says))
			fail_msg("'%s': said '%s', not '%s'", bad[i].spec, err, bad[i].says);
		assert_string_equal(addr, "unchanged");
		assert_int_equal(port, 7);
	}
	/* no err buffer: still refused */
	assert_int_equal(metrics_spec_parse("localhost:1", addr, sizeof(addr), &port, NULL, 0),
			 -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_forms),
	    cmocka_unit_test(test_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
