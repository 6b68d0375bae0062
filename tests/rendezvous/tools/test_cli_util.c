/*
 * test_cli_util.c - unit tests of the command-line helpers shared by
 * ddp-rdzvd and ddp-store (sizes, ports, addresses, the atomic port file).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cli_util.h"

static void test_sizes(void **state)
{
	size_t v = 0;
	assert_int_equal(cli_parse_size("123", &v), 0);
	assert_int_equal(v, 123);
	assert_int_equal(cli_parse_size("64K", &v), 0);
	assert_int_equal(v, 65536);
	assert_int_equal(cli_parse_size("8m", &v), 0);
	assert_int_equal(v, 8u << 20);
	assert_int_equal(cli_parse_size("1G", &v), 0);
	assert_int_equal(v, 1u << 30);
	const char *bad[] = {"", "-1", "12X", "K", "1KB", "99999999999999999999", "1 K"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(cli_parse_size(bad[i], &v), -EINVAL);
}

static void test_ports_and_addresses(void **state)
{
	int port = -1;
	char host[64];
	assert_int_equal(cli_parse_port("0", &port), 0);
	assert_int_equal(port, 0);
	assert_int_equal(cli_parse_port("65535", &port), 0);
	assert_int_equal(cli_parse_port("65536", &port), -EINVAL);
	assert_int_equal(cli_parse_port("-1", &port), -EINVAL);
	assert_int_equal(cli_parse_port("80x", &port), -EINVAL);
	assert_int_equal(cli_parse_addr("127.0.0.1:29500", host, sizeof(host), &port), 0);
	assert_string_equal(host, "127.0.0.1");
	assert_int_equal(port, 29500);
	assert_int_equal(cli_parse_addr("node0:1", host, sizeof(host), &port), 0);
	assert_string_equal(host, "node0");
	assert_int_equal(cli_parse_addr("[::1]:443", host, sizeof(host), &port), 0);
	assert_string_equal(host, "::1");
	assert_int_equal(port, 443);
	const char *bad[] = {"nocolon", ":80", "host:", "host:99999", "[]:80"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(cli_parse_addr(bad[i], host, sizeof(host), &port), -EINVAL);
	char tiny[4];
	assert_int_equal(cli_parse_addr("longhost:80", tiny, sizeof(tiny), &port), -EINVAL);
}

static void test_port_file(void **state)
{
	char dir[] = "/tmp/cli-util-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char path[64];
	snprintf(path, sizeof(path), "%s/port", dir);
	assert_int_equal(cli_write_file_atomic(path, 41234), 0);
	assert_int_equal(cli_write_file_atomic(path, 41235), 0); /* replaces */
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	char line[32] = "";
	assert_non_null(fgets(line, sizeof(line), f));
	fclose(f);
	assert_string_equal(line, "41235\n");
	unlink(path);
	/* A path in a missing folder fails and leaves nothing behind. */
	char missing[80];
	snprintf(missing, sizeof(missing), "%s/no/such/dir/port", dir);
	assert_int_equal(cli_write_file_atomic(missing, 1), -1);
	assert_int_equal(rmdir(dir), 0); /* empty */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sizes),
	    cmocka_unit_test(test_ports_and_addresses),
	    cmocka_unit_test(test_port_file),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
