/*
 * test_rdzv_host.c - whether the rendezvous endpoint's host is this machine
 * (rendezvous/driver/rdzv_host.h): torchrun's rule, with every loopback
 * address and every interface. Literals and this machine's own names only,
 * so no lookup leaves the machine.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "rdzv_host.h"

static char lit[64], err[256];

static bool self(const char *host)
{
	bool is = false;

	assert_int_equal(rdzv_host_is_self(host, &is, lit, sizeof(lit), err, sizeof(err)), 0);
	return is;
}

static void test_loopback_is_the_machine(void **state)
{
	/* the simulated nodes' endpoint: 127.0.0.1 is on lo, 127.0.0.77 is not
	 * listed there but Linux answers on all of 127.0.0.0/8 */
	assert_true(self("127.0.0.1"));
	assert_string_equal(lit, "127.0.0.1");
	assert_true(self("127.0.0.77"));
	assert_string_equal(lit, "127.0.0.77");
	assert_true(self("localhost"));
	assert_true(rdzv_host_is_loopback(lit));
}

static void test_other_addresses_are_not(void **state)
{
	/* TEST-NET-1 and -3: documentation addresses, on no interface */
	assert_false(self("192.0.2.1"));
	assert_string_equal(lit, "192.0.2.1");
	assert_false(self("203.0.113.9"));
	assert_false(self("2001:db8::1"));
	assert_string_equal(lit, "2001:db8::1");
}

static void test_every_interface_address_is(void **state)
{
	struct ifaddrs *ifs, *i;
	char text[INET6_ADDRSTRLEN];
	int seen = 0;

	assert_int_equal(getifaddrs(&ifs), 0);
	for (i = ifs; i; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
			continue;
		inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, text,
			  sizeof(text));
		assert_true(self(text));
		assert_string_equal(lit, text);
		seen++;
	}
	freeifaddrs(ifs);
	assert_true(seen > 0);
}

static void test_hostname_is(void **state)
{
	char me[256];
	struct addrinfo *ai;

	assert_int_equal(gethostname(me, sizeof(me)), 0);
	if (getaddrinfo(me, NULL, NULL, &ai) != 0)
		return; /* a hostname that does not resolve cannot be an endpoint */
	freeaddrinfo(ai);
	assert_true(self(me));
}

static void test_unresolved_is_an_error(void **state)
{
	bool is = true;

	/* an empty name resolves nowhere, and asks no server */
	assert_int_equal(rdzv_host_is_self("", &is, lit, sizeof(lit), err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "cannot resolve the rendezvous host ''"));
}

static void test_loopback_literals(void **state)
{
	assert_true(rdzv_host_is_loopback("127.1.2.3"));
	assert_true(rdzv_host_is_loopback("::1"));
	assert_false(rdzv_host_is_loopback("10.0.0.1"));
	assert_false(rdzv_host_is_loopback("::2"));
	assert_false(rdzv_host_is_loopback("localhost")); /* names are not literals */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_loopback_is_the_machine),
	    cmocka_unit_test(test_other_addresses_are_not),
	    cmocka_unit_test(test_every_interface_address_is),
	    cmocka_unit_test(test_hostname_is),
	    cmocka_unit_test(test_unresolved_is_an_error),
	    cmocka_unit_test(test_loopback_literals),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
