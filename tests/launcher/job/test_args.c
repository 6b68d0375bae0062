/* Unit tests: the command line (args.c) and the option table (opts.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "jobfile.h"
#include "opts.h"
#include "opts_pet.h"

static char err[OPTS_ERR_LEN];

static int parse(struct launch_opts *o, int argc, char **argv)
{
	err[0] = '\0';
	assert_int_equal(opts_init(o), 0);
	return args_parse(o, argc, argv, err, sizeof(err));
}

static void test_torchrun_line(void **state)
{
	char *argv[] = {"ddplaunch",
			"--nproc_per_node=4",
			"--master_port",
			"23455",
			"--max-restarts=3",
			"--nnodes",
			"1:2",
			"-r",
			"3",
			"-t1",
			"train.py",
			"--lr",
			"0.1",
			"--nproc_per_node=9"};
	struct launch_opts o;

	assert_int_equal(parse(&o, 14, argv), ARGS_OK);
	assert_string_equal(o.nproc_spec, "4");
	assert_int_equal(o.master_port, 23455);
	assert_int_equal(o.max_restarts, 3);
	assert_int_equal(o.nnodes_min, 1);
	assert_int_equal(o.nnodes_max, 2);
	assert_int_equal(opts_streams_mask(&o.redirects, 0), 3);
	assert_string_equal(o.program, "train.py");
	/* Everything after the program belongs to it, flags included. */
	assert_int_equal(o.args.n, 3);
	assert_string_equal(o.args.v[0], "--lr");
	assert_string_equal(o.args.v[2], "--nproc_per_node=9");
	assert_null(o.args.v[3]);
	assert_true(o.program_from_cli);
	opts_release(&o);
}

static void test_both_spellings_and_bools(void **state)
{
	char *argv[] = {"ddplaunch",	 "--nproc-per-node",  "gpu",	   "--no-python",
			"--standalone",	 "--run_id",	      "job7",	   "-m",
			"--strict_port", "--pass-local-rank", "--use_env", "--",
			"-weird-name"};
	struct launch_opts o;

	assert_int_equal(parse(&o, 13, argv), ARGS_OK);
	assert_string_equal(o.nproc_spec, "gpu");
	assert_true(o.no_python);
	assert_true(o.standalone);
	assert_true(o.module);
	assert_true(o.strict_port);
	assert_true(o.pass_local_rank);
	assert_true(o.use_env);
	assert_string_equal(o.rdzv_id, "job7");
	assert_string_equal(o.program, "-weird-name");
	opts_release(&o);
}

static void test_accepted_torchrun_flags(void **state)
{
	char *argv[] = {"ddplaunch",
			"--monitor-interval=0.1",
			"--start_method",
			"fork",
			"--local_addr=127.0.0.2",
			"--rdzv_endpoint=h:29400",
			"--rdzv-backend=c10d",
			"--rdzv_conf",
			"join_timeout=5,close_timeout=2",
			"--role=trainer",
			"--log-dir=/x",
			"--tee=0:3",
			"--node_rank=1",
			"--nnodes=2",
			"--max_restarts",
			"1",
			"p"};
	struct launch_opts o;

	assert_int_equal(parse(&o, 17, argv), ARGS_OK);
	assert_true(o.monitor_interval == 0.1);
	assert_string_equal(o.start_method, "fork");
	assert_string_equal(o.local_addr, "127.0.0.2");
	assert_string_equal(o.rdzv_endpoint, "h:29400");
	assert_string_equal(o.rdzv_backend, "c10d");
	assert_string_equal(o.rdzv_conf, "join_timeout=5,close_timeout=2");
	assert_string_equal(o.role, "trainer");
	assert_string_equal(o.log_dir, "/x");
	assert_int_equal(opts_streams_mask(&o.tee, 0), 3);
	assert_int_equal(opts_streams_mask(&o.tee, 1), 0);
	assert_int_equal(o.node_rank, 1);
	assert_int_equal(opts_check(&o, err, sizeof(err)), 0);
	opts_release(&o);
}

static void test_defaults(void **state)
{
	char *argv[] = {"ddplaunch", "./train"};
	struct launch_opts o;

	assert_int_equal(parse(&o, 2, argv), ARGS_OK);
	assert_string_equal(o.nproc_spec, "1");
	assert_int_equal(o.master_port, -1);
	assert_string_equal(o.master_addr, "127.0.0.1");
	assert_string_equal(o.rdzv_id, "none");
	assert_string_equal(o.role, "default");
	assert_true(o.grace_period == 30.0);
	assert_int_equal(o.nsignals, 6);
	assert_int_equal(o.signals[0], SIGTERM);
	assert_int_equal(o.max_restarts, 0);
	assert_int_equal(opts_check(&o, err, sizeof(err)), 0);
	opts_release(&o);
}

static void test_errors(void **state)
{
	struct {
		int argc;
		char *argv[4];
		const char *needle;
	} cases[] = {
	    {2, {"ddplaunch", "--bogus"}, "unknown option '--bogus'"},
	    {2, {"ddplaunch", "--master_port"}, "missing value after '--master_port'"},
	    {3, {"ddplaunch", "--master_port=70000", "x"}, "bad value '70000' for 'master_port'"},
	    {2, {"ddplaunch", "--nproc_per_node=0"}, "nproc_per_node"},
	    {2, {"ddplaunch", "--nnodes=3:2"}, "N or MIN:MAX"},
	    {2, {"ddplaunch", "--signals=TERM,KILL"}, "signal names"},
	    {2, {"ddplaunch", "--backoff=2:1"}, "INITIAL:MAX"},
	    {2, {"ddplaunch", "-r", "5"}, "missing value"},
	    {3, {"ddplaunch", "-r", "5", "x"}, "bad value '5' for 'redirects'"},
	    {2, {"ddplaunch", "-xyz"}, "unknown option '-xyz'"},
	    {2, {"ddplaunch", "--grace_period=-1"}, "non-negative"},
	    {2, {"ddplaunch", "--standalone=maybe"}, "true or false"},
	    {2, {"ddplaunch", "--local_ranks_filter=0,a"}, "local ranks"},
	    {2, {"ddplaunch", "--hang_timeout=0.4"}, "at least 0.5"},
	    {2, {"ddplaunch", "--hang-timeout=soon"}, "auto, off"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct launch_opts o;
		int rc = parse(&o, cases[i].argc, cases[i].argv);

		if (rc >= 0)
			fail_msg("case %zu: accepted", i);
		if (!strstr(err, cases[i].needle))
			fail_msg("case %zu: '%s' lacks '%s'", i, err, cases[i].needle);
		opts_release(&o);
	}
}

static void test_help_and_checks(void **state)
{
	char *help[] = {"ddplaunch", "--master_port=1", "--help", "prog"};
	char *none[] = {"ddplaunch", "--nproc_per_node=2"};
	char *both[] = {"ddplaunch", "-m", "--no_python", "mod"};
	char *multi[] = {"ddplaunch", "--standalone", "--nnodes=2", "x"};
	struct launch_opts o;

	assert_int_equal(parse(&o, 4, help), ARGS_HELP);
	assert_non_null(strstr(args_help_text(), "--nproc_per_node"));
	opts_release(&o);
	assert_int_equal(parse(&o, 2, none), ARGS_OK);
	assert_int_equal(opts_check(&o, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "no program"));
	opts_release(&o);
	assert_int_equal(parse(&o, 4, both), ARGS_OK);
	assert_int_equal(opts_check(&o, err, sizeof(err)), -EINVAL);
	opts_release(&o);
	assert_int_equal(parse(&o, 4, multi), ARGS_OK);
	assert_int_equal(opts_check(&o, err, sizeof(err)), -EINVAL);
	opts_release(&o);
}

static void test_streams_filter_signals_backoff(void **state)
{
	char *argv[] = {
	    "ddplaunch",      "--redirects=0:1,2:3", "--local_ranks_filter", "0,2",  "--signals",
	    "SIGTERM,usr1,2", "--backoff=0.5:4",     "--grace_period",	     "0.25", "x"};
	struct launch_opts o;

	assert_int_equal(parse(&o, 10, argv), ARGS_OK);
	assert_int_equal(opts_streams_mask(&o.redirects, 0), 1);
	assert_int_equal(opts_streams_mask(&o.redirects, 1), 0);
	assert_int_equal(opts_streams_mask(&o.redirects, 2), 3);
	assert_true(opts_rank_shown(&o, 0));
	assert_false(opts_rank_shown(&o, 1));
	assert_true(opts_rank_shown(&o, 2));
	assert_int_equal(o.nsignals, 3);
	assert_int_equal(o.signals[0], SIGTERM);
	assert_int_equal(o.signals[1], SIGUSR1);
	assert_int_equal(o.signals[2], SIGINT);
	assert_true(o.backoff_initial == 0.5 && o.backoff_max == 4.0);
	assert_true(o.grace_period == 0.25);
	opts_release(&o);
}

/* --hang_timeout: auto by default, off, or seconds; snake and kebab case,
 * the job file and PET_HANG_TIMEOUT (opts_pet's generic rule) alike. */
static void test_hang_timeout(void **state)
{
	char *snake[] = {"ddplaunch", "--hang_timeout=1.5", "x"};
	char *kebab[] = {"ddplaunch", "--hang-timeout", "off", "x"};
	char *none[] = {"ddplaunch", "x"};
	struct launch_opts o;

	assert_int_equal(parse(&o, 1 + 1, none), ARGS_OK);
	assert_true(o.hang_timeout == OPTS_HANG_AUTO);
	opts_release(&o);
	assert_int_equal(parse(&o, 3, snake), ARGS_OK);
	assert_true(o.hang_timeout == 1.5);
	opts_release(&o);
	assert_int_equal(parse(&o, 4, kebab), ARGS_OK);
	assert_true(o.hang_timeout == OPTS_HANG_OFF);
	opts_release(&o);
	assert_int_equal(opts_init(&o), 0);
	assert_int_equal(opts_set(&o, "hang_timeout", "2", OPTS_SRC_FILE, err, sizeof(err)), 0);
	assert_true(o.hang_timeout == 2.0);
	assert_int_equal(opts_set(&o, "hang_timeout", "auto", OPTS_SRC_CLI, err, sizeof(err)), 0);
	assert_true(o.hang_timeout == OPTS_HANG_AUTO);
	opts_release(&o);
	assert_non_null(strstr(args_help_text(), "--hang_timeout"));
}

static void test_nproc(void **state)
{
	struct launch_opts o;

	assert_int_equal(opts_init(&o), 0);
	assert_int_equal(opts_set(&o, "nproc_per_node", "cpu", OPTS_SRC_CLI, err, sizeof(err)), 0);
	assert_int_equal(opts_nproc(&o, 8, 0, err, sizeof(err)), 8);
	assert_int_equal(opts_set(&o, "nproc_per_node", "auto", OPTS_SRC_CLI, err, sizeof(err)), 0);
	assert_int_equal(opts_nproc(&o, 8, 2, err, sizeof(err)), 2);
	assert_int_equal(opts_nproc(&o, 8, 0, err, sizeof(err)), 8);
	assert_int_equal(opts_set(&o, "nproc_per_node", "gpu", OPTS_SRC_CLI, err, sizeof(err)), 0);
	assert_int_equal(opts_nproc(&o, 8, 0, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "no GPU"));
	assert_int_equal(opts_set(&o, "nproc_per_node", "3", OPTS_SRC_CLI, err, sizeof(err)), 0);
	assert_int_equal(opts_nproc(&o, 8, 2, err, sizeof(err)), 3);
	/* A file value never overrides the command line. */
	assert_int_equal(opts_set(&o, "nproc_per_node", "5", OPTS_SRC_FILE, err, sizeof(err)), 0);
	assert_string_equal(o.nproc_spec, "3");
	opts_release(&o);
}

static void test_visible_gpus(void **state)
{
	assert_int_equal(opts_visible_gpus(NULL, 8), 8);
	assert_int_equal(opts_visible_gpus("", 8), 0);
	assert_int_equal(opts_visible_gpus("-1", 8), 0);
	assert_int_equal(opts_visible_gpus("0,3", 8), 2);
	assert_int_equal(opts_visible_gpus("0,1,2", 2), 2);
	assert_int_equal(opts_visible_gpus("GPU-abc", 1), 1);
	assert_int_equal(opts_visible_gpus("0", 0), 0);
}

static void test_unknown_option_suggests(void **state)
{
	char *typo[] = {"ddplaunch", "--nproc-per-nod=2", "x"};
	char *far[] = {"ddplaunch", "--bogus=3", "x"};
	char *short_typo[] = {"ddplaunch", "-x", "x"};
	struct launch_opts o;

	assert_int_equal(parse(&o, 3, typo), -EINVAL);
	assert_string_equal(err,
			    "unknown option '--nproc-per-nod'; did you mean '--nproc_per_node'?");
	opts_release(&o);
	assert_int_equal(parse(&o, 3, far), -EINVAL);
	assert_string_equal(err, "unknown option '--bogus' (see --help)");
	opts_release(&o);
	assert_int_equal(parse(&o, 3, short_typo), -EINVAL);
	assert_string_equal(err, "unknown option '-x' (see --help)");
	opts_release(&o);
}

static void test_value_messages_say_what_is_expected(void **state)
{
	char *port[] = {"ddplaunch", "--master_port=65536", "x"};
	char *restarts[] = {"ddplaunch", "--max_restarts", "-1", "x"};
	struct launch_opts o;

	assert_int_equal(parse(&o, 3, port), -EINVAL);
	assert_string_equal(err, "bad value '65536' for 'master_port' (expected an integer from 0 "
				 "to 65535)");
	opts_release(&o);
	assert_int_equal(parse(&o, 4, restarts), -EINVAL);
	assert_non_null(strstr(err, "'-1' for 'max_restarts' (expected an integer from 0"));
	opts_release(&o);
}

/* --metrics_port [ADDR:]PORT in its four forms: both spellings, a job
 * file's key, PET_METRICS_PORT; off by default; what it refuses. */
static void test_metrics_port(void **state)
{
	char *snake[] = {"ddplaunch", "--metrics_port=0", "x"};
	char *kebab[] = {"ddplaunch", "--metrics-port", "127.0.0.3:9400", "x"};
	char *v6[] = {"ddplaunch", "--metrics-port=[::1]:9401", "x"};
	char *none[] = {"ddplaunch", "x"};
	const char *bad[] = {"65536",	  "-1",
			     "a",	  ":9400",
			     "1.2.3.4:",  "::1:9400",
			     "[::1]9400", "localhost:9400",
			     "[h]:9400",  "[1.2.3.4]:9400",
			     ""};
	char *envp[] = {"PET_METRICS_PORT=127.0.0.4:9402", NULL};
	struct launch_opts o;
	char ini[] = "[launch]\nmetrics_port = 9403\n";
	FILE *f;

	(void)state;
	assert_int_equal(parse(&o, 2, none), 0);
	assert_int_equal(o.metrics.port, -1);
	opts_release(&o);
	assert_int_equal(parse(&o, 3, snake), 0);
	assert_int_equal(o.metrics.port, 0);
	assert_string_equal(o.metrics.addr, "");
	opts_release(&o);
	assert_int_equal(parse(&o, 4, kebab), 0);
	assert_int_equal(o.metrics.port, 9400);
	assert_string_equal(o.metrics.addr, "127.0.0.3");
	opts_release(&o);
	assert_int_equal(parse(&o, 3, v6), 0);
	assert_int_equal(o.metrics.port, 9401);
	assert_string_equal(o.metrics.addr, "::1");
	opts_release(&o);
	assert_int_equal(parse(&o, 2, none), 0);
	assert_int_equal(opts_pet_apply(&o, envp, err, sizeof(err)), 0);
	assert_int_equal(o.metrics.port, 9402);
	assert_string_equal(o.metrics.addr, "127.0.0.4");
	opts_release(&o);
	assert_int_equal(parse(&o, 2, none), 0);
	f = fmemopen(ini, strlen(ini), "r");
	assert_int_equal(jobfile_load_stream(&o, f, "job.ini", err, sizeof(err)), 0);
	fclose(f);
	assert_int_equal(o.metrics.port, 9403);
	opts_release(&o);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char arg[64];
		char *argv[] = {"ddplaunch", arg, "x"};

		snprintf(arg, sizeof(arg), "--metrics_port=%s", bad[i]);
		assert_int_equal(parse(&o, 3, argv), bad[i][0] ? -EINVAL : 0);
		if (bad[i][0])
			assert_non_null(strstr(err, "(expected [ADDR:]PORT or none; PORT 0-65535, "
						    "ADDR a literal (127.0.0.1, [::1]), no host "
						    "name)"));
		else
			assert_int_equal(o.metrics.port, -1); /* "" is off */
		opts_release(&o);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_torchrun_line),
	    cmocka_unit_test(test_both_spellings_and_bools),
	    cmocka_unit_test(test_accepted_torchrun_flags),
	    cmocka_unit_test(test_defaults),
	    cmocka_unit_test(test_errors),
	    cmocka_unit_test(test_help_and_checks),
	    cmocka_unit_test(test_streams_filter_signals_backoff),
	    cmocka_unit_test(test_hang_timeout),
	    cmocka_unit_test(test_nproc),
	    cmocka_unit_test(test_visible_gpus),
	    cmocka_unit_test(test_unknown_option_suggests),
	    cmocka_unit_test(test_value_messages_say_what_is_expected),
	    cmocka_unit_test(test_metrics_port),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
