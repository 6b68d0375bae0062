/* Unit tests: the rendezvous options resolved (launcher/job/opts_rdzv.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "jobfile.h"
#include "opts.h"
#include "opts_rdzv.h"

static char err[OPTS_ERR_LEN];

/* Parses the words (NULL-terminated, "ddplaunch" and a program added) and
 * resolves with env_token; returns opts_rdzv_resolve's code. */
static int resolve(const char *env_token, struct launch_opts *o, struct opts_rdzv *r, ...)
{
	char *argv[32] = {"ddplaunch"};
	int argc = 1;
	va_list ap;
	const char *w;

	va_start(ap, r);
	while ((w = va_arg(ap, const char *)) && argc < 30)
		argv[argc++] = (char *)w;
	va_end(ap);
	argv[argc++] = "prog";
	err[0] = '\0';
	assert_int_equal(opts_init(o), 0);
	assert_int_equal(args_parse(o, argc, argv, err, sizeof(err)), ARGS_OK);
	assert_int_equal(opts_check(o, err, sizeof(err)), 0);
	return opts_rdzv_resolve(o, env_token, r, err, sizeof(err));
}

static void test_conf_defaults_and_keys(void **state)
{
	struct opts_rdzv_conf c;

	opts_rdzv_conf_defaults(&c);
	assert_true(c.join_timeout == 600 && c.last_call_timeout == 30 && c.close_timeout == 30);
	assert_true(c.keep_alive_interval == 5 && c.keep_alive_max_attempt == 3);
	assert_int_equal(c.is_host, -1);
	assert_int_equal(opts_rdzv_conf_parse("", &c, err, sizeof(err)), 0);
	assert_int_equal(opts_rdzv_conf_parse(NULL, &c, err, sizeof(err)), 0);
	assert_int_equal(opts_rdzv_conf_parse(" join_timeout = 5 ,last_call_timeout=0,"
					      "close-timeout=2.5,keep_alive_interval=0.25,"
					      "keep_alive_max_attempt=2,is_host=yes,,",
					      &c, err, sizeof(err)),
			 0);
	assert_true(c.join_timeout == 5 && c.last_call_timeout == 0 && c.close_timeout == 2.5);
	assert_true(c.keep_alive_interval == 0.25 && c.keep_alive_max_attempt == 2);
	assert_int_equal(c.is_host, 1);
	/* torchrun's older name and keys that mean nothing here */
	assert_int_equal(
	    opts_rdzv_conf_parse("timeout=7,read_timeout=60,use_libuv=1", &c, err, sizeof(err)), 0);
	assert_true(c.join_timeout == 7);
}

static void test_conf_errors(void **state)
{
	static const struct {
		const char *text, *needle;
	} cases[] = {
	    {"join_timout=5",
	     "unknown key 'join_timout' in --rdzv_conf; did you mean 'join_timeout'"},
	    {"bogus=1", "unknown key 'bogus' in --rdzv_conf"},
	    {"join_timeout", "'join_timeout' is not KEY=VALUE"},
	    {"=3", "'=3' is not KEY=VALUE"},
	    {"join_timeout=0",
	     "bad value '0' for 'join_timeout' (expected seconds, at least 0.001)"},
	    /* the rendezvous counts in milliseconds: these were 0 ms timers */
	    {"join_timeout=0.0001", "bad value '0.0001' for 'join_timeout'"},
	    {"close_timeout=0.0004", "bad value '0.0004' for 'close_timeout'"},
	    {"keep_alive_interval=1e-5", "bad value '1e-5' for 'keep_alive_interval'"},
	    {"join_timeout=2592001", "bad value '2592001' for 'join_timeout'"},
	    {"join_timeout=-1", "bad value '-1'"},
	    {"close_timeout=abc", "bad value 'abc' for 'close_timeout'"},
	    {"last_call_timeout=-0.5", "seconds, 0 or more"},
	    {"keep_alive_interval=", "bad value '' for 'keep_alive_interval'"},
	    {"keep_alive_max_attempt=0", "keep_alive_max_attempt"},
	    {"keep_alive_max_attempt=1.5", "keep_alive_max_attempt"},
	    {"is_host=maybe", "true or false"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct opts_rdzv_conf c;

		opts_rdzv_conf_defaults(&c);
		err[0] = '\0';
		if (opts_rdzv_conf_parse(cases[i].text, &c, err, sizeof(err)) != -EINVAL)
			fail_msg("case %zu '%s': accepted", i, cases[i].text);
		if (!strstr(err, cases[i].needle))
			fail_msg("case %zu: '%s' lacks '%s'", i, err, cases[i].needle);
	}
}

static void test_endpoint(void **state)
{
	char host[256];
	int port;

	assert_int_equal(
	    opts_endpoint_parse("node0:29401", 1, host, sizeof(host), &port, err, sizeof(err)), 0);
	assert_string_equal(host, "node0");
	assert_int_equal(port, 29401);
	assert_int_equal(
	    opts_endpoint_parse("10.0.0.1", 29400, host, sizeof(host), &port, err, sizeof(err)), 0);
	assert_string_equal(host, "10.0.0.1");
	assert_int_equal(port, 29400);
	assert_int_equal(
	    opts_endpoint_parse("[fe80::1]:5", 1, host, sizeof(host), &port, err, sizeof(err)), 0);
	assert_string_equal(host, "fe80::1");
	assert_int_equal(port, 5);
	assert_int_equal(
	    opts_endpoint_parse("[::1]", 7, host, sizeof(host), &port, err, sizeof(err)), 0);
	assert_string_equal(host, "::1");
	assert_int_equal(port, 7);
	assert_int_equal(opts_endpoint_parse("::1", 7, host, sizeof(host), &port, err, sizeof(err)),
			 0);
	assert_string_equal(host, "::1");
	assert_int_equal(opts_endpoint_parse("h:0", 7, host, sizeof(host), &port, err, sizeof(err)),
			 0);
	assert_int_equal(port, 0);
	static const char *const bad[] = {"",	  ":29400", "h:",     "h:70000", "h:-1",
					  "h:1x", "[::1",   "[::1]x", "[]:1",	 "a b:1"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (opts_endpoint_parse(bad[i], 1, host, sizeof(host), &port, err, sizeof(err)) !=
		    -EINVAL)
			fail_msg("'%s' accepted", bad[i]);
		assert_non_null(strstr(err, "bad --rdzv_endpoint"));
	}
	assert_int_equal(opts_endpoint_parse("abcdef:1", 1, host, 4, &port, err, sizeof(err)),
			 -EINVAL);
}

static void test_local(void **state)
{
	struct launch_opts o;
	struct opts_rdzv r;

	assert_int_equal(resolve(NULL, &o, &r, NULL), 0);
	assert_int_equal(r.mode, OPTS_RDZV_LOCAL);
	assert_int_equal(r.node_rank, -1);
	opts_release(&o);
	/* c10d without an endpoint on one node: no rendezvous needed */
	assert_int_equal(resolve(NULL, &o, &r, "--rdzv_backend=c10d", NULL), 0);
	assert_int_equal(r.mode, OPTS_RDZV_LOCAL);
	opts_release(&o);
	/* one node, c10d with an endpoint: a one-node rendezvous */
	assert_int_equal(resolve(NULL, &o, &r, "--rdzv_backend=c10d", "--rdzv_endpoint=h:1", NULL),
			 0);
	assert_int_equal(r.mode, OPTS_RDZV_C10D);
	opts_release(&o);
}

static void test_static(void **state)
{
	struct launch_opts o;
	struct opts_rdzv r;

	assert_int_equal(resolve(NULL, &o, &r, "--nnodes=4", "--master_addr=10.1.1.1", NULL), 0);
	assert_int_equal(r.mode, OPTS_RDZV_STATIC);
	assert_string_equal(r.host, "10.1.1.1");
	assert_int_equal(r.port, 29500);
	assert_int_equal(r.node_rank, 0);
	assert_int_equal(r.min_nodes, 4);
	assert_int_equal(r.max_nodes, 4);
	assert_null(r.token);
	opts_release(&o);
	assert_int_equal(resolve(NULL, &o, &r, "--nnodes=2", "--node_rank=1", "--master_port=23456",
				 "--master_addr=n0", NULL),
			 0);
	assert_string_equal(r.host, "n0");
	assert_int_equal(r.port, 23456);
	assert_int_equal(r.node_rank, 1);
	opts_release(&o);
	/* --rdzv_endpoint wins over --master_addr/--master_port */
	assert_int_equal(
	    resolve(NULL, &o, &r, "--nnodes=2", "--master_port=1", "--rdzv_endpoint=e:2", NULL), 0);
	assert_string_equal(r.host, "e");
	assert_int_equal(r.port, 2);
	opts_release(&o);
	assert_int_equal(resolve(NULL, &o, &r, "--nnodes=2:4", NULL), -EINVAL);
	assert_non_null(strstr(err, "--nnodes=2:4 needs --rdzv_backend=c10d"));
	opts_release(&o);
}

/* An IPv6 address with a zone (fe80::1%eth0, an interface name or number)
 * is an address wherever one is given (before, inet_pton refused the
 * zone); an empty zone or one with other characters is not. */
static void test_ipv6_zone(void **state)
{
	char host[256];
	int port;

	assert_int_equal(
	    opts_endpoint_parse("[fe80::1%eth0]:5", 1, host, sizeof(host), &port, err, sizeof(err)),
	    0);
	assert_string_equal(host, "fe80::1%eth0");
	assert_int_equal(port, 5);
	assert_int_equal(
	    opts_endpoint_parse("fe80::1%2", 7, host, sizeof(host), &port, err, sizeof(err)), 0);
	assert_string_equal(host, "fe80::1%2");
	assert_int_equal(port, 7);
	assert_int_equal(opts_endpoint_parse("[fe80::1%en_p0.1-a]", 7, host, sizeof(host), &port,
					     err, sizeof(err)),
			 0);
	static const char *const bad[] = {"[fe80::1%]:5",    "[fe80::1%e$0]:5", "[fe80::1%%e]:5",
					  "[1.2.3.4%e]:5",   "[%eth0]:5",	"fe80::1%e:x",
					  "[ff02::1%eth0]:5"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (opts_endpoint_parse(bad[i], 1, host, sizeof(host), &port, err, sizeof(err)) !=
		    -EINVAL)
			fail_msg("'%s' accepted", bad[i]);

	static const char *const good[][2] = {
	    {"--local_addr=fe80::1%eth0", NULL},
	    {"--master_addr=fe80::1%eth0", NULL},
	    {"--master_addr=fe80::1%3", "--local_addr=fe80::2%3"},
	    {"--rdzv_backend=c10d", "--rdzv_endpoint=[fe80::1%eth0]:29400"},
	};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		struct launch_opts o;
		struct opts_rdzv r;

		if (resolve(NULL, &o, &r, "--nnodes=2", good[i][0], good[i][1], NULL) != 0)
			fail_msg("case %zu refused: %s", i, err);
		opts_release(&o);
	}
	static const char *const refused[][2] = {
	    {"--local_addr=fe80::1%", "--local_addr 'fe80::1%' is not an address"},
	    {"--master_addr=fe80::1%e$0", "--master_addr 'fe80::1%e$0' is not"},
	    {"--master_addr=ff02::1%eth0", "is a multicast or broadcast address"},
	    {"--local_addr=ff02::1%eth0", "--local_addr 'ff02::1%eth0' is not"},
	};
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		struct launch_opts o;
		struct opts_rdzv r;

		if (resolve(NULL, &o, &r, "--nnodes=2", refused[i][0], NULL) >= 0)
			fail_msg("case %zu: accepted", i);
		if (!strstr(err, refused[i][1]))
			fail_msg("case %zu: '%s' lacks '%s'", i, err, refused[i][1]);
		opts_release(&o);
	}
}

static void test_c10d(void **state)
{
	struct launch_opts o;
	struct opts_rdzv r;

	assert_int_equal(resolve(NULL, &o, &r, "--nnodes=2:8", "--rdzv_backend=c10d",
				 "--rdzv_endpoint=[::1]", "--rdzv_id=job7",
				 "--rdzv_conf=join_timeout=9,is_host=0", "--local_addr=127.0.0.3",
				 NULL),
			 0);
	assert_int_equal(r.mode, OPTS_RDZV_C10D);
	assert_string_equal(r.host, "::1");
	assert_int_equal(r.port, 29400);
	assert_int_equal(r.node_rank, -1);
	assert_int_equal(r.min_nodes, 2);
	assert_int_equal(r.max_nodes, 8);
	assert_string_equal(r.run_id, "job7");
	assert_string_equal(r.local_addr, "127.0.0.3");
	assert_true(r.conf.join_timeout == 9);
	assert_int_equal(r.conf.is_host, 0);
	opts_release(&o);
	assert_int_equal(resolve(NULL, &o, &r, "--nnodes=2", "--rdzv_backend=c10d", NULL), -EINVAL);
	assert_non_null(strstr(err, "needs --rdzv_endpoint"));
	opts_release(&o);
}

static void test_refusals(void **state)
{
	static const char *const cases[][4] = {
	    {"--nnodes=2", "--rdzv_backend=etcd", "--rdzv_backend=etcd needs --rdzv_endpoint"},
	    {"--nnodes=2", "--rdzv_backend=zookeeper", "unknown --rdzv_backend 'zookeeper'"},
	    {"--nnodes=2", "--rdzv_id=a/b", "--rdzv_id 'a/b'"},
	    {"--nnodes=2", "--rdzv_id=a b", "--rdzv_id 'a b'"},
	    {"--nnodes=2", "--rdzv_conf=join_timeout=x", "bad value 'x' for 'join_timeout'"},
	    {"--nnodes=2", "--local_addr=a b", "--local_addr 'a b'"},
	    {"--nnodes=2", "--rdzv_endpoint=h:x", "bad --rdzv_endpoint 'h:x'"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct launch_opts o;
		struct opts_rdzv r;
		int rc = resolve(NULL, &o, &r, cases[i][0], cases[i][1], NULL);

		if (rc >= 0)
			fail_msg("case %zu: accepted", i);
		if (!strstr(err, cases[i][2]))
			fail_msg("case %zu: '%s' lacks '%s'", i, err, cases[i][2]);
		opts_release(&o);
	}
}

/* --dry_run accepted these, and the run refused them after connecting or
 * waited join_timeout on them (issue 19, section 5). */
static void test_refusals_of_the_run(void **state)
{
	static const char *const cases[][4] = {
	    {"--nnodes=100000", "--rdzv_id=j", NULL,
	     "--nnodes=100000:100000 is more than the 65536"},
	    {"--nnodes=2", "--local_addr=0.0.0.0", NULL,
	     "--local_addr '0.0.0.0' is not an address"},
	    {"--nnodes=2", "--local_addr=::", NULL, "--local_addr '::' is not an address"},
	    {"--nnodes=2", "--local_addr=239.1.2.3", NULL, "--local_addr '239.1.2.3' is not"},
	    {"--nnodes=2", "--local_addr=255.255.255.255", NULL, "or leave --local_addr out"},
	    {"--nnodes=2", "--master_addr=http://h", NULL, "--master_addr 'http://h' is a URL"},
	    {"--nnodes=2", "--master_addr=h1,h2", NULL, "--master_addr 'h1,h2' is a list"},
	    {"--nnodes=2", "--rdzv_endpoint=http://h:1", NULL, "is a URL: give HOST:PORT"},
	    {"--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=http://h:29400",
	     "--rdzv_endpoint 'http://h:29400' is a URL: give HOST:PORT (http:// and https:// are "
	     "for --rdzv_backend=etcd)"},
	    {"--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=h1:1,h2:2",
	     "--rdzv_endpoint 'h1:1,h2:2' is a list: give one HOST:PORT"},
	    {"--nnodes=2", "--node_rank=1", "--master_port=0",
	     "port 0 lets node 0 pick the store's port; node 1 must be given"},
	    {"--nnodes=2", "--rdzv_conf=keep_alive_interval=2000000,keep_alive_max_attempt=1000",
	     NULL, "keep_alive_interval x keep_alive_max_attempt is 2e+09 s"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct launch_opts o;
		struct opts_rdzv r;
		int rc = resolve(NULL, &o, &r, cases[i][0], cases[i][1], cases[i][2], NULL);

		if (rc >= 0)
			fail_msg("case %zu: accepted", i);
		if (!strstr(err, cases[i][3]))
			fail_msg("case %zu: '%s' lacks '%s'", i, err, cases[i][3]);
		opts_release(&o);
	}
	/* node 0 may let the kernel pick; so may a c10d node (its host is
	 * known only on the machine: rdzv_new) */
	{
		struct launch_opts o;
		struct opts_rdzv r;

		assert_int_equal(resolve(NULL, &o, &r, "--nnodes=2", "--master_port=0", NULL), 0);
		opts_release(&o);
	}
}

/* Sites export DDP_RDZV_TOKEN everywhere: with etcd, which does not use
 * the job's token, the environment's is ignored (the launcher warns in one
 * line; the dry run says so), whatever it holds (before: refused, exit 2).
 * One given for the job (--rdzv_token, the job file) is still refused. */
static void test_etcd_ignores_env_token(void **state)
{
	static const char *const envs[] = {"s3cret-0123456789", "short", ""};
	struct launch_opts o;
	struct opts_rdzv r;
	char buf[1024] = "";
	FILE *f;

	for (size_t i = 0; i < sizeof(envs) / sizeof(envs[0]); i++) {
		if (resolve(envs[i], &o, &r, "--nnodes=2", "--rdzv_backend=etcd",
			    "--rdzv_endpoint=h:2379", NULL) != 0)
			fail_msg("'%s' refused: %s", envs[i], err);
		assert_null(r.token);
		assert_true(r.token_env_ignored);
		if (i == 0) {
			f = fmemopen(buf, sizeof(buf), "w");
			assert_non_null(f);
			opts_rdzv_print(&r, f);
			fclose(f);
			assert_non_null(strstr(buf, "rdzv_token = none (DDP_RDZV_TOKEN ignored: "
						    "etcd does not use it)"));
		}
		opts_release(&o);
	}
	assert_int_equal(resolve("s3cret-0123456789", &o, &r, "--nnodes=2", "--rdzv_backend=etcd",
				 "--rdzv_endpoint=h:2379", "--rdzv_token=s3cret-0123456789", NULL),
			 -EINVAL);
	assert_non_null(strstr(err, "the token from --rdzv_token is for the c10d"));
	opts_release(&o);
	/* c10d: the environment's token is used; an empty one still refused */
	assert_int_equal(resolve("s3cret-0123456789", &o, &r, "--nnodes=2", "--rdzv_backend=c10d",
				 "--rdzv_endpoint=h:29400", NULL),
			 0);
	assert_non_null(r.token);
	assert_false(r.token_env_ignored);
	opts_release(&o);
	assert_int_equal(resolve("", &o, &r, "--nnodes=2", "--rdzv_backend=c10d",
				 "--rdzv_endpoint=h:29400", NULL),
			 -EINVAL);
	assert_non_null(strstr(err, "is set but empty"));
	opts_release(&o);
}

static void test_token_sources(void **state)
{
	struct launch_opts o;
	struct opts_rdzv r;
	char big[OPTS_RDZV_TOKEN_MAX + 2];

	assert_int_equal(resolve("from-env-0123456789", &o, &r, "--nnodes=2", NULL), 0);
	assert_string_equal(r.token, "from-env-0123456789");
	assert_string_equal(r.token_from, "DDP_RDZV_TOKEN");
	opts_release(&o);
	assert_int_equal(resolve("from-env-0123456789", &o, &r, "--nnodes=2",
				 "--rdzv_token=s3cret-0123456789", NULL),
			 0);
	assert_string_equal(r.token, "s3cret-0123456789");
	assert_string_equal(r.token_from, "--rdzv_token");
	opts_release(&o);
	/* An empty DDP_RDZV_TOKEN ran without a token and said nothing (issue
	 * 28): refused across nodes; a flag beside it, or one node, is fine. */
	assert_int_equal(resolve("", &o, &r, "--nnodes=2", NULL), -EINVAL);
	assert_non_null(strstr(err, "DDP_RDZV_TOKEN is set but empty"));
	assert_non_null(strstr(err, "unset it to run without one"));
	opts_release(&o);
	assert_int_equal(resolve("", &o, &r, "--nnodes=2", "--rdzv_token=s3cret-0123456789", NULL),
			 0);
	opts_release(&o);
	assert_int_equal(resolve("", &o, &r, "--nnodes=1", NULL), 0);
	assert_null(r.token);
	opts_release(&o);
	/* 15 bytes: refused, saying why and how to make a good one, from any
	 * source (the same check refuses it under --dry_run). */
	assert_int_equal(resolve("0123456789abcde", &o, &r, "--nnodes=2", NULL), -EINVAL);
	assert_non_null(
	    strstr(err, "the token from DDP_RDZV_TOKEN is 15 bytes; it must be at least 16"));
	assert_non_null(strstr(err, "guesses of a short token offline"));
	assert_null(strstr(err, "0123456789abcde"));
	opts_release(&o);
	assert_int_equal(resolve(NULL, &o, &r, "--nnodes=2", "--rdzv_token=short", NULL), -EINVAL);
	assert_non_null(strstr(err, "from --rdzv_token is 5 bytes"));
	opts_release(&o);
	assert_int_equal(resolve("0123456789abcdef", &o, &r, "--nnodes=2", NULL), 0);
	opts_release(&o);
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(resolve(big, &o, &r, "--nnodes=2", NULL), -EINVAL);
	assert_non_null(strstr(err, "longer than 4096"));
	assert_null(strstr(err, "aaaa"));
	opts_release(&o);
}

/* etcd: an endpoint list with default ports and schemes, TLS and
 * authentication keys (torchrun's names and its etcd-v2 aliases), the
 * password never printed, and what is refused. */
static void test_etcd(void **state)
{
	static const char *const bad[][4] = {
	    {"--rdzv_backend=etcd", "--rdzv_endpoint=h1,,h2", "--rdzv_conf=join_timeout=5",
	     "bad --rdzv_endpoint entry ''"},
	    {"--rdzv_backend=etcd", "--rdzv_endpoint=h1:x", "--rdzv_conf=join_timeout=5",
	     "bad --rdzv_endpoint 'h1:x'"},
	    {"--rdzv_backend=etcd", "--rdzv_endpoint=h1", "--rdzv_conf=protocol=ftp",
	     "expected http or https"},
	    {"--rdzv_backend=etcd", "--rdzv_endpoint=h1", "--rdzv_conf=protocol=http,cacert=/ca",
	     "protocol=http with cacert"},
	    {"--rdzv_backend=etcd", "--rdzv_endpoint=h1", "--rdzv_conf=cert=/c", "cert needs key"},
	    {"--rdzv_backend=etcd", "--rdzv_endpoint=h1", "--rdzv_conf=password=pw",
	     "password needs user"},
	    {"--rdzv_backend=c10d", "--rdzv_endpoint=h1", "--rdzv_conf=cacert=/ca",
	     "'cacert' is for --rdzv_backend=etcd"},
	};
	struct launch_opts o;
	struct opts_rdzv r;
	char out[4096] = "";
	FILE *mem;

	assert_int_equal(resolve(NULL, &o, &r, "--nnodes=2:4", "--rdzv_backend=etcd",
				 "--rdzv_endpoint=h1, h2:2400,https://h3,[::1]", "--rdzv_id=j",
				 NULL),
			 0);
	assert_int_equal(r.mode, OPTS_RDZV_ETCD);
	assert_string_equal(r.endpoints, "h1:2379,h2:2400,https://h3:2379,[::1]:2379");
	assert_string_equal(r.host, "h1");
	assert_int_equal(r.port, 2379);
	assert_int_equal(r.min_nodes, 2);
	assert_int_equal(r.max_nodes, 4);
	opts_release(&o);
	/* torchrun's keys, its etcd-v2 spellings, and our authentication */
	assert_int_equal(resolve(NULL, &o, &r, "--nnodes=2", "--rdzv_backend=etcd-v2",
				 "--rdzv_endpoint=h1,h2",
				 "--rdzv_conf=protocol=https,ca_cert=/ca.pem,ssl_cert=/c.pem,"
				 "ssl_cert_key=/k.pem,user=root,password=pw-secret,read_timeout=2",
				 NULL),
			 0);
	assert_string_equal(r.endpoints, "https://h1:2379,https://h2:2379");
	assert_string_equal(r.conf.cacert, "/ca.pem");
	assert_string_equal(r.conf.cert, "/c.pem");
	assert_string_equal(r.conf.key, "/k.pem");
	assert_string_equal(r.conf.user, "root");
	assert_string_equal(r.conf.password, "pw-secret");
	assert_true(r.conf.read_timeout == 2);
	mem = fmemopen(out, sizeof(out) - 1, "w");
	assert_non_null(mem);
	opts_rdzv_print(&r, mem);
	fclose(mem);
	assert_non_null(strstr(out, "rdzv = etcd\n"));
	assert_non_null(
	    strstr(out, "rdzv_store = etcd at https://h1:2379,https://h2:2379 (no agent hosts"));
	assert_non_null(strstr(out, "rdzv_etcd_timeout = 2 s per request\n"));
	assert_non_null(strstr(out, "rdzv_etcd_tls = https (ca: /ca.pem; client certificate: "
				    "/c.pem)\n"));
	assert_non_null(strstr(out, "rdzv_etcd_user = root (password from --rdzv_conf; not "
				    "shown)\n"));
	assert_null(strstr(out, "pw-secret"));
	opts_release(&o);
	/* one node with an endpoint meets through etcd too */
	assert_int_equal(resolve(NULL, &o, &r, "--rdzv_backend=etcd", "--rdzv_endpoint=h1", NULL),
			 0);
	assert_int_equal(r.mode, OPTS_RDZV_ETCD);
	opts_release(&o);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = resolve(NULL, &o, &r, "--nnodes=2", bad[i][0], bad[i][1], bad[i][2], NULL);

		if (rc >= 0)
			fail_msg("case %zu: accepted", i);
		if (!strstr(err, bad[i][3]))
			fail_msg("case %zu: '%s' lacks '%s'", i, err, bad[i][3]);
		opts_release(&o);
	}
}

/* Inputs --dry_run accepted that a run refuses or cannot use (issue 28):
 * each refused here, the one check of the run and of --dry_run, naming the
 * fix. */
static void test_refused_inputs(void **state)
{
	static const char *const bad[][5] = {
	    /* 1. a c10d endpoint with two ports */
	    {"--rdzv_backend=c10d", "--rdzv_endpoint=host:1:2", "--rdzv_id=j", "",
	     "bad --rdzv_endpoint 'host:1:2': a host has no ':' (give HOST:PORT; an IPv6 "
	     "address goes in brackets"},
	    /* 2. an IPv6 address and a port without brackets */
	    {"--rdzv_backend=c10d", "--rdzv_endpoint=fe80::1:29400", "--rdzv_id=j", "",
	     "an IPv6 address goes in brackets: [ADDRESS]:PORT"},
	    /* 3. --local_addr that is no address and no host name */
	    {"--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:5", "--local_addr=256.1.1.1", "",
	     "--local_addr '256.1.1.1' is not an address or host name (an IPv4 address is four "
	     "numbers from 0 to 255)"},
	    {"--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:5", "--local_addr=[::1]", "",
	     "(no brackets, no port)"},
	    /* 4. an etcd endpoint of another scheme */
	    {"--rdzv_backend=etcd", "--rdzv_endpoint=ftp://h:2379", "--rdzv_id=j", "",
	     "bad --rdzv_endpoint entry 'ftp://h:2379': etcd speaks http:// or https://"},
	    /* 5. (the empty DDP_RDZV_TOKEN: test_token_sources) hosts that
	     * cannot parse: an IPv4 address out of range, empty labels, '@',
	     * a path, a tab */
	    {"--rdzv_backend=c10d", "--rdzv_endpoint=256.1.1.1:5", "--rdzv_id=j", "",
	     "'256.1.1.1' is not a host name or address"},
	    {"--rdzv_backend=c10d", "--rdzv_endpoint=a..b:5", "--rdzv_id=j", "",
	     "'a..b' is not a host name or address (an empty label"},
	    {"--rdzv_backend=etcd", "--rdzv_endpoint=http://user@h:2379", "--rdzv_id=j", "",
	     "'user@h' is not a host name or address ('@' is not allowed"},
	    {"--rdzv_backend=etcd", "--rdzv_endpoint=http://h/v3", "--rdzv_id=j", "",
	     "'h/v3' is not a host name or address ('/' is not allowed"},
	    {"--rdzv_backend=c10d", "--rdzv_endpoint=a\tb:5", "--rdzv_id=j", "",
	     "is not a host name or address (a control character (0x09))"},
	    {"--node_rank=1", "--master_addr=node0:29500", "--master_port=5", "",
	     "--master_addr 'node0:29500' is not a host name or address"},
	    /* 6. a port with a sign */
	    {"--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:+5", "--rdzv_id=j", "",
	     "bad --rdzv_endpoint '127.0.0.1:+5' (expected HOST, HOST:PORT or [IPV6]:PORT)"},
	    /* 7. a multicast or broadcast store */
	    {"--rdzv_backend=c10d", "--rdzv_endpoint=224.0.0.1:5", "--rdzv_id=j", "",
	     "'224.0.0.1' is a multicast or broadcast address, where no store can be"},
	    {"--rdzv_backend=etcd", "--rdzv_endpoint=255.255.255.255", "--rdzv_id=j", "",
	     "'255.255.255.255' is a multicast or broadcast address"},
	    /* 8. is_host where nobody chooses the host */
	    {"--rdzv_backend=etcd", "--rdzv_endpoint=h:2379", "--rdzv_conf=is_host=true", "",
	     "--rdzv_conf: 'is_host' is for --rdzv_backend=c10d (etcd is the store"},
	    {"--node_rank=0", "--master_addr=127.0.0.1", "--rdzv_conf=is_host=false", "",
	     "'is_host' is for --rdzv_backend=c10d (the static rendezvous' store is node 0's)"},
	    /* 9. the job's token, which etcd does not use */
	    {"--rdzv_backend=etcd", "--rdzv_endpoint=h:2379", "--rdzv_token=s3cret-0123456789", "",
	     "the token from --rdzv_token is for the c10d and static stores; etcd does not "
	     "use it"},
	    /* 10. a protocol= that the endpoint's scheme contradicts */
	    {"--rdzv_backend=etcd", "--rdzv_endpoint=http://h:2379", "--rdzv_conf=protocol=https",
	     "",
	     "--rdzv_endpoint entry 'http://h:2379' says http but --rdzv_conf says "
	     "protocol=https: drop one of them"},
	    /* the other way round (before, a prefix match let it through) */
	    {"--rdzv_backend=etcd", "--rdzv_endpoint=h1:2379,https://h:2379",
	     "--rdzv_conf=protocol=http", "",
	     "--rdzv_endpoint entry 'https://h:2379' says https but --rdzv_conf says "
	     "protocol=http: drop one of them"},
	};
	static const char *const good[][3] = {
	    {"--rdzv_backend=c10d", "--rdzv_endpoint=node-0.example.com.:5", "--local_addr=a_b"},
	    {"--rdzv_backend=c10d", "--rdzv_endpoint=127.1:5", "--local_addr=::1"},
	    {"--rdzv_backend=c10d", "--rdzv_endpoint=::1", "--rdzv_conf=is_host=false"},
	    {"--rdzv_backend=etcd", "--rdzv_endpoint=https://[::1]:2379,h2",
	     "--rdzv_conf=protocol=https"},
	    {"--rdzv_backend=etcd", "--rdzv_endpoint=http://h1:2379,h2",
	     "--rdzv_conf=protocol=http"},
	};
	struct launch_opts o;
	struct opts_rdzv r;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = resolve(NULL, &o, &r, "--nnodes=2", bad[i][0], bad[i][1], bad[i][2],
				 bad[i][3][0] ? bad[i][3] : NULL, NULL);

		if (rc != -EINVAL)
			fail_msg("case %zu (%s %s %s): %d", i, bad[i][0], bad[i][1], bad[i][2], rc);
		if (!strstr(err, bad[i][4]))
			fail_msg("case %zu: '%s' lacks '%s'", i, err, bad[i][4]);
		opts_release(&o);
	}
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		if (resolve(NULL, &o, &r, "--nnodes=2", good[i][0], good[i][1], good[i][2], NULL))
			fail_msg("good case %zu refused: %s", i, err);
		opts_release(&o);
	}
}

/* The job file's key, and the token never printed by --dry_run's block. */
static void test_jobfile_token_not_printed(void **state)
{
	static const char ini[] = "[launch]\nnnodes = 2\nrdzv_token = hunter2-secret-0123\n"
				  "rdzv_conf = join_timeout=3\n";
	struct launch_opts o;
	struct opts_rdzv r;
	char out[4096] = "";
	FILE *f = fmemopen((void *)ini, sizeof(ini) - 1, "r");
	FILE *mem = fmemopen(out, sizeof(out) - 1, "w");

	assert_non_null(f);
	assert_non_null(mem);
	assert_int_equal(opts_init(&o), 0);
	assert_int_equal(jobfile_load_stream(&o, f, "job.ini", err, sizeof(err)), 0);
	fclose(f);
	assert_int_equal(opts_rdzv_resolve(&o, NULL, &r, err, sizeof(err)), 0);
	assert_string_equal(r.token, "hunter2-secret-0123");
	opts_rdzv_print(&r, mem);
	fclose(mem);
	assert_non_null(strstr(out, "rdzv = static\n"));
	assert_non_null(strstr(out, "rdzv_store = 127.0.0.1:29500 (hosted by node 0)\n"));
	assert_non_null(strstr(out, "rdzv_conf = join_timeout=3,"));
	assert_non_null(strstr(out, "rdzv_token = set (from --rdzv_token; not shown)\n"));
	assert_null(strstr(out, "hunter2"));
	opts_release(&o);
}

/* ddplaunch status: where a job's store is, in the agents' spellings. */
static void test_reader(void **state)
{
	struct opts_rdzv r;

	(void)state;
	assert_int_equal(opts_rdzv_resolve_reader(NULL, "h", NULL, &r, err, sizeof(err)), 0);
	assert_int_equal(r.mode, OPTS_RDZV_C10D);
	assert_string_equal(r.host, "h");
	assert_int_equal(r.port, OPTS_C10D_PORT);
	assert_int_equal(opts_rdzv_resolve_reader("static", "[::1]", "", &r, err, sizeof(err)), 0);
	assert_int_equal(r.mode, OPTS_RDZV_STATIC);
	assert_string_equal(r.host, "::1");
	assert_int_equal(r.port, OPTS_STATIC_PORT);
	assert_int_equal(opts_rdzv_resolve_reader("etcd-v2", "e1, http://e2:1,[::1]",
						  "read_timeout=2,user=u,join_timeout=9", &r, err,
						  sizeof(err)),
			 0);
	assert_int_equal(r.mode, OPTS_RDZV_ETCD);
	assert_string_equal(r.endpoints, "e1:2379,http://e2:1,[::1]:2379");
	assert_string_equal(r.conf.user, "u");
	assert_true(r.conf.read_timeout == 2.0);
	assert_int_equal(opts_rdzv_resolve_reader("etcd", "e1,e2:1",
						  "protocol=https,cacert=/ca,cert=/c,key=/k", &r,
						  err, sizeof(err)),
			 0);
	assert_string_equal(r.endpoints, "https://e1:2379,https://e2:1");
	assert_string_equal(r.conf.cacert, "/ca");
	/* refused as for the agents, in their words */
	assert_int_equal(opts_rdzv_resolve_reader("etcd3", "h", NULL, &r, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "unknown --rdzv_backend 'etcd3'"));
	assert_int_equal(opts_rdzv_resolve_reader("c10d", "a:1,b:2", NULL, &r, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "is for --rdzv_backend=etcd"));
	assert_int_equal(opts_rdzv_resolve_reader(NULL, "h", "user=u", &r, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "'user' is for --rdzv_backend=etcd"));
	assert_int_equal(opts_rdzv_resolve_reader("etcd", "ftp://h", NULL, &r, err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(opts_rdzv_resolve_reader("etcd", "h", "cert=/c", &r, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "cert needs key"));
	assert_int_equal(opts_rdzv_resolve_reader("etcd", NULL, NULL, &r, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "--rdzv_backend=etcd needs --rdzv_endpoint"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_conf_defaults_and_keys),
	    cmocka_unit_test(test_conf_errors),
	    cmocka_unit_test(test_endpoint),
	    cmocka_unit_test(test_local),
	    cmocka_unit_test(test_static),
	    cmocka_unit_test(test_ipv6_zone),
	    cmocka_unit_test(test_c10d),
	    cmocka_unit_test(test_refusals),
	    cmocka_unit_test(test_refusals_of_the_run),
	    cmocka_unit_test(test_etcd),
	    cmocka_unit_test(test_etcd_ignores_env_token),
	    cmocka_unit_test(test_token_sources),
	    cmocka_unit_test(test_refused_inputs),
	    cmocka_unit_test(test_jobfile_token_not_printed),
	    cmocka_unit_test(test_reader),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
