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
	    {"join_timeout=0", "bad value '0' for 'join_timeout' (expected seconds, more than 0)"},
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
	assert_int_equal(resolve("", &o, &r, "--nnodes=2", NULL), 0);
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
	    {"--rdzv_backend=etcd", "--rdzv_endpoint=h1,,h2", "--rdzv_conf=is_host=0",
	     "bad --rdzv_endpoint entry ''"},
	    {"--rdzv_backend=etcd", "--rdzv_endpoint=h1:x", "--rdzv_conf=is_host=0",
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

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_conf_defaults_and_keys),
	    cmocka_unit_test(test_conf_errors),
	    cmocka_unit_test(test_endpoint),
	    cmocka_unit_test(test_local),
	    cmocka_unit_test(test_static),
	    cmocka_unit_test(test_c10d),
	    cmocka_unit_test(test_refusals),
	    cmocka_unit_test(test_etcd),
	    cmocka_unit_test(test_token_sources),
	    cmocka_unit_test(test_jobfile_token_not_printed),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
