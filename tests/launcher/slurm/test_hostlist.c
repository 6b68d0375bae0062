/* Unit tests: Slurm host list expansion (hostlist.c). The expected names of
 * the valid lists are what Slurm 22.05's `scontrol show hostnames` prints
 * for them (tests/slurm compares the two on a real installation). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostlist.h"

/* The names joined by spaces. */
static void join(const struct hostlist *hl, char *out, size_t outlen)
{
	size_t len = 0;

	out[0] = '\0';
	for (size_t i = 0; i < hl->count; i++)
		len +=
		    (size_t)snprintf(out + len, outlen - len, "%s%s", i ? " " : "", hl->hosts[i]);
	assert_true(len < outlen);
}

static void expect_hosts(const char *expr, const char *expect)
{
	struct hostlist hl;
	char err[256], got[4096];
	int rc = hostlist_expand(expr, HOSTLIST_MAX_HOSTS, &hl, err, sizeof(err));

	if (rc)
		fail_msg("\"%s\": rc %d (%s)", expr, rc, err);
	join(&hl, got, sizeof(got));
	if (strcmp(got, expect))
		fail_msg("\"%s\": got '%s' expected '%s'", expr, got, expect);
	assert_string_equal(err, "");
	hostlist_release(&hl);
	assert_null(hl.hosts);
	assert_int_equal(hl.count, 0);
}

static void expect_error(const char *expr, size_t max, int expect_rc, const char *expect_msg)
{
	struct hostlist hl = {.count = 99};
	char err[256];
	int rc = hostlist_expand(expr, max, &hl, err, sizeof(err));

	if (rc != expect_rc)
		fail_msg("\"%s\": rc %d, expected %d (%s)", expr, rc, expect_rc, err);
	if (!strstr(err, expect_msg))
		fail_msg("\"%s\": message '%s' lacks '%s'", expr, err, expect_msg);
	assert_null(hl.hosts);
	assert_int_equal(hl.count, 0);
	/* no buffer for the message: the same code, nothing written */
	assert_int_equal(hostlist_expand(expr, max, &hl, NULL, 0), expect_rc);
}

static void test_ranges(void **state)
{
	(void)state;
	expect_hosts("n[1-2,5]", "n1 n2 n5");
	expect_hosts("n[2,1]", "n2 n1");
	expect_hosts("n[1-2,3-4]", "n1 n2 n3 n4");
	expect_hosts("x[3]", "x3");
	expect_hosts("n01", "n01");
	expect_hosts("[1-2]", "1 2");
	expect_hosts("a-b[1-2]", "a-b1 a-b2");
	expect_hosts("127.0.0.[11-12]", "127.0.0.11 127.0.0.12");
	expect_hosts("n[12345678901]", "n12345678901");
	expect_hosts("n[0-0]", "n0");
}

static void test_padding(void **state)
{
	char expect[512];
	size_t len = 0;

	(void)state;
	for (int i = 1; i <= 16; i++)
		len += (size_t)snprintf(expect + len, sizeof(expect) - len, "%sgpu%03d",
					i > 1 ? " " : "", i);
	expect_hosts("gpu[001-016]", expect);
	expect_hosts("n[08-11]", "n08 n09 n10 n11");
	expect_hosts("n[9-10]", "n9 n10");
	expect_hosts("n[9-011]", "n9 n10 n11"); /* the low end's width pads */
	expect_hosts("n[01-2]", "n01 n02");
	expect_hosts("n[1-003]", "n1 n2 n3");
	expect_hosts("n[0001-3]", "n0001 n0002 n0003");
	expect_hosts("n[01,1]", "n01 n1");
	expect_hosts("n[98-101]", "n98 n99 n100 n101");
}

static void test_entries(void **state)
{
	(void)state;
	expect_hosts("n1,gpu[01-02],x[3]", "n1 gpu01 gpu02 x3");
	expect_hosts("n[1-2],n[1-2]", "n1 n2 n1 n2"); /* kept, as Slurm does */
	expect_hosts("a,b,c", "a b c");
	expect_hosts("n[1-2,5],m[7]", "n1 n2 n5 m7");
}

static void test_groups(void **state)
{
	(void)state;
	expect_hosts("r[1-2]n[1-2]", "r1n1 r1n2 r2n1 r2n2");
	expect_hosts("n[1-2][3-4]", "n13 n14 n23 n24");
	expect_hosts("n[1-2]x[1-2],y", "n1x1 n1x2 n2x1 n2x2 y");
	expect_hosts("n[1-2]ab[3]", "n1ab3 n2ab3");
	/* text after the last group: refused by Slurm 22.05, accepted here */
	expect_hosts("a[1-3]b", "a1b a2b a3b");
	expect_hosts("n[1-2]-ib", "n1-ib n2-ib");
	expect_hosts("rack[1-2]-node[01-02].ib", "rack1-node01.ib rack1-node02.ib "
						 "rack2-node01.ib rack2-node02.ib");
}

static void test_syntax_errors(void **state)
{
	(void)state;
	expect_error("", 10, -EINVAL, "the host list is empty (character 1 of \"\")");
	expect_error("n[1-3-5]", 10, -EINVAL, "more than one '-' (character 6 of \"n[1-3-5]\")");
	expect_error("n[3-1]", 10, -EINVAL, "range \"3-1\" counts down (character 3");
	expect_error("n[]", 10, -EINVAL, "empty range (character 3");
	expect_error("n[1,,2]", 10, -EINVAL, "empty range (character 5");
	expect_error("n[1", 10, -EINVAL, "'[' is never closed (character 2");
	expect_error("n[1-2", 10, -EINVAL, "'[' is never closed (character 2");
	expect_error("n[1,", 10, -EINVAL, "'[' is never closed (character 2");
	expect_error("n1]", 10, -EINVAL, "']' without '[' (character 3");
	expect_error("n[1-2]]", 10, -EINVAL, "']' without '[' (character 7");
	expect_error("n[[1]]", 10, -EINVAL, "'[' inside brackets (character 3");
	expect_error("n[a-b]", 10, -EINVAL, "'a' in a range: a range is N or LO-HI");
	expect_error("n[1x3]", 10, -EINVAL,
		     "'x' in a range: a range is N or LO-HI, in decimal (character 4");
	expect_error("n[-1]", 10, -EINVAL, "range \"-1\" has no low end (character 3");
	expect_error("n[1,-]", 10, -EINVAL, "range \"-\" has no low end (character 5");
	expect_error("n[1-]", 10, -EINVAL, "range \"1-\" has no high end");
	expect_error("n[1-,2]", 10, -EINVAL, "range \"1-\" has no high end");
	expect_error("n[ 1]", 10, -EINVAL, "' ' in a range");
	expect_error(",n1", 10, -EINVAL, "empty entry (character 1 of \",n1\")");
	expect_error("n1,,n2", 10, -EINVAL, "empty entry (character 4");
	expect_error("n1,", 10, -EINVAL, "empty entry (character 4");
	expect_error("n1 n2", 10, -EINVAL, "character 0x20 is not allowed in a host name");
	expect_error("n\xc3\xa9", 10, -EINVAL, "character 0xc3 is not allowed");
	expect_error("n\t1", 10, -EINVAL, "character 0x09");
	expect_error("n[1234567890123456789]", 10, -EINVAL,
		     "number \"123456789012345678...\" has more than 18 digits");
}

static void test_messages_quote_long_lists(void **state)
{
	char expr[200], err[256];
	struct hostlist hl;

	(void)state;
	memset(expr, 'a', sizeof(expr));
	memcpy(expr + 150, "[3-1]", 6);
	assert_int_equal(hostlist_expand(expr, 10, &hl, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "counts down (character 152 of \"aaaa"));
	assert_non_null(strstr(err, "aaa...\")"));
	/* a short buffer gets a cut, terminated message */
	assert_int_equal(hostlist_expand(expr, 10, &hl, err, 8), -EINVAL);
	assert_int_equal(strlen(err), 7);
}

static void test_bounds(void **state)
{
	struct hostlist hl;
	char err[256];

	(void)state;
	assert_int_equal(hostlist_expand("n[1-10]", 10, &hl, err, sizeof(err)), 0);
	assert_int_equal(hl.count, 10);
	hostlist_release(&hl);
	expect_error("n[1-10]", 9, -E2BIG, "the host list \"n[1-10]\" names more than 9 hosts");
	expect_error("n[1-5],m[1-5]", 9, -E2BIG, "more than 9 hosts");
	expect_error("n[1-5,6-10]", 9, -E2BIG, "more than 9 hosts");
	expect_error("n1", 0, -E2BIG, "more than 0 hosts");
	assert_int_equal(hostlist_expand("r[1-100]n[1-100]", 10000, &hl, err, sizeof(err)), 0);
	assert_int_equal(hl.count, 10000);
	assert_string_equal(hl.hosts[0], "r1n1");
	assert_string_equal(hl.hosts[9999], "r100n100");
	hostlist_release(&hl);
	expect_error("r[1-100]n[1-100]", 9999, -E2BIG, "more than 9999 hosts");
	/* huge counts are refused before any name is made, without overflow */
	expect_error("n[0-4294967296]", HOSTLIST_MAX_HOSTS, -E2BIG, "more than 65536 hosts");
	expect_error("n[0-999999999999999999]", HOSTLIST_MAX_HOSTS, -E2BIG, "more than");
	expect_error("r[0-99999]n[0-99999]", HOSTLIST_MAX_HOSTS, -E2BIG, "more than");
	expect_error("a[0-255][0-255][0-255][0-255]", HOSTLIST_MAX_HOSTS, -E2BIG, "more than");
}

static void test_name_length(void **state)
{
	char expr[300];
	struct hostlist hl;
	char err[256];

	(void)state;
	memset(expr, 'a', 255);
	expr[255] = '\0';
	assert_int_equal(hostlist_expand(expr, 10, &hl, err, sizeof(err)), 0);
	assert_int_equal(strlen(hl.hosts[0]), 255);
	hostlist_release(&hl);
	/* 253 + 3 digits of the widest value: 256 */
	memcpy(expr + 253, "[99-100]", 9);
	expect_error(expr, 10, -EINVAL, "names would be longer than 255 characters");
	memcpy(expr + 253, "[98-99]", 8);
	assert_int_equal(hostlist_expand(expr, 10, &hl, err, sizeof(err)), 0);
	hostlist_release(&hl);
}

/* Every prefix of a valid list, and every one-byte change of it, is either
 * a list or refused with a message: never a crash (the sanitizer build runs
 * this too) and never more names than the bound. */
static void test_prefixes_and_mutations(void **state)
{
	static const char *const lists[] = {"n[1-2,5],gpu[001-016],x[3]", "r[1-2]n[08-10]-ib",
					    "a,b[1],c[2-3]d[4]"};
	static const char alphabet[] = "n09[]-,x ";
	char buf[64], err[256];
	struct hostlist hl;

	(void)state;
	for (size_t l = 0; l < sizeof(lists) / sizeof(lists[0]); l++) {
		size_t n = strlen(lists[l]);

		for (size_t cut = 0; cut <= n; cut++) {
			memcpy(buf, lists[l], cut);
			buf[cut] = '\0';
			int rc = hostlist_expand(buf, 64, &hl, err, sizeof(err));

			assert_true(rc == 0 || (rc == -EINVAL && err[0]));
			hostlist_release(&hl);
		}
		for (size_t at = 0; at < n; at++) {
			for (size_t k = 0; k < sizeof(alphabet) - 1; k++) {
				snprintf(buf, sizeof(buf), "%s", lists[l]);
				buf[at] = alphabet[k];
				int rc = hostlist_expand(buf, 64, &hl, err, sizeof(err));

				assert_true(rc == 0 || rc == -EINVAL || rc == -E2BIG);
				assert_true(rc != 0 || (hl.count >= 1 && hl.count <= 64));
				assert_true(rc == 0 || err[0]);
				hostlist_release(&hl);
			}
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_ranges),
	    cmocka_unit_test(test_padding),
	    cmocka_unit_test(test_entries),
	    cmocka_unit_test(test_groups),
	    cmocka_unit_test(test_syntax_errors),
	    cmocka_unit_test(test_messages_quote_long_lists),
	    cmocka_unit_test(test_bounds),
	    cmocka_unit_test(test_name_length),
	    cmocka_unit_test(test_prefixes_and_mutations),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
