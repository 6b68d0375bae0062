/* Unit tests: options from torchrun's PET_* variables
 * (launcher/job/opts_pet.c), their precedence against the command line, the
 * job file and a Slurm step (opts_slurm.c), and the messages that name them. */
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
#include "opts_pet.h"
#include "opts_rdzv.h"
#include "opts_slurm.h"

static char err[1024];

/* Where option `name` got its value. */
static enum opts_source src(const struct launch_opts *o, const char *name)
{
	int i = settings_find(&opts_settings, name);

	assert_true(i >= 0);
	return opts_source_of(o, (size_t)i);
}

/* opts_init, then the words as a command line (NULL-terminated; "ddplaunch"
 * and a program added), then the environment. */
static int apply(struct launch_opts *o, const char *const *words, char *const *envp)
{
	char *argv[16] = {"ddplaunch"};
	int argc = 1;

	assert_int_equal(opts_init(o), 0);
	for (; words && *words; words++)
		argv[argc++] = (char *)*words;
	argv[argc++] = "train.py";
	assert_int_equal(args_parse(o, argc, argv, err, sizeof(err)), ARGS_OK);
	err[0] = '\0';
	return opts_pet_apply(o, envp, err, sizeof(err));
}

static void test_opts_set_precedence(void **state)
{
	struct launch_opts o;

	(void)state;
	assert_int_equal(opts_init(&o), 0);
	assert_int_equal(src(&o, "nnodes"), OPTS_SRC_DEFAULT);
	assert_int_equal(opts_set(&o, "nnodes", "2", OPTS_SRC_SLURM, err, sizeof(err)), 0);
	assert_int_equal(src(&o, "nnodes"), OPTS_SRC_SLURM);
	assert_int_equal(opts_set(&o, "nnodes", "3", OPTS_SRC_PET, err, sizeof(err)), 0);
	assert_int_equal(src(&o, "nnodes"), OPTS_SRC_PET);
	assert_int_equal(opts_set(&o, "nnodes", "4", OPTS_SRC_SLURM, err, sizeof(err)), 0);
	assert_int_equal(o.nnodes_max, 3); /* Slurm is below PET_* */
	assert_int_equal(opts_set(&o, "nnodes", "5", OPTS_SRC_FILE, err, sizeof(err)), 0);
	assert_int_equal(opts_set(&o, "nnodes", "6", OPTS_SRC_PET, err, sizeof(err)), 0);
	assert_int_equal(o.nnodes_max, 5); /* PET_* is below the job file */
	assert_int_equal(opts_set(&o, "nnodes", "7", OPTS_SRC_CLI, err, sizeof(err)), 0);
	assert_int_equal(opts_set(&o, "nnodes", "8", OPTS_SRC_FILE, err, sizeof(err)), 0);
	assert_int_equal(o.nnodes_max, 7);
	assert_int_equal(src(&o, "nnodes"), OPTS_SRC_CLI);
	opts_release(&o);
}

static void test_no_pet(void **state)
{
	char *envp[] = {"PATH=/bin", "PETS=1", "XPET_NNODES=2", NULL};
	struct launch_opts o;

	(void)state;
	assert_int_equal(apply(&o, NULL, envp), 0);
	assert_string_equal(o.pet_used, "");
	assert_int_equal(o.nnodes_max, 1);
	assert_int_equal(o.set_by[OPTS_SRC_PET], 0);
	opts_release(&o);
}

/* What Kubeflow's PyTorchJob operator sets for torchrun, static. */
static void test_kubeflow_static(void **state)
{
	char *envp[] = {"PET_NNODES=2",
			"PET_NPROC_PER_NODE=2",
			"PET_NODE_RANK=1",
			"PET_MASTER_ADDR=job-master-0",
			"PET_MASTER_PORT=23456",
			"MASTER_ADDR=x",
			"WORLD_SIZE=2",
			"RANK=1",
			NULL};
	struct launch_opts o;

	(void)state;
	assert_int_equal(apply(&o, NULL, envp), 0);
	assert_int_equal(o.nnodes_min, 2);
	assert_int_equal(o.nnodes_max, 2);
	assert_string_equal(o.nproc_spec, "2");
	assert_int_equal(o.node_rank, 1);
	assert_string_equal(o.master_addr, "job-master-0");
	assert_int_equal(o.master_port, 23456);
	assert_int_equal(src(&o, "master_port"), OPTS_SRC_PET);
	assert_int_equal(src(&o, "rdzv_backend"), OPTS_SRC_DEFAULT);
	assert_string_equal(
	    o.pet_used, "took nproc_per_node, nnodes, node_rank, master_addr, master_port from "
			"PET_* (Kubeflow/torchrun environment); flags and the job file override "
			"them");
	assert_int_equal(opts_check(&o, err, sizeof(err)), 0);
	opts_release(&o);
}

/* ... and elastic: the rendezvous on c10d. */
static void test_kubeflow_elastic(void **state)
{
	char *envp[] = {"PET_RDZV_BACKEND=c10d",
			"PET_RDZV_ENDPOINT=job-worker-0:29400",
			"PET_RDZV_ID=job",
			"PET_NNODES=1:3",
			"PET_NPROC_PER_NODE=4",
			"PET_MAX_RESTARTS=3",
			"PET_RDZV_CONF=join_timeout=5,last_call_timeout=1",
			NULL};
	struct launch_opts o;
	struct opts_rdzv r;

	(void)state;
	assert_int_equal(apply(&o, NULL, envp), 0);
	assert_int_equal(o.nnodes_min, 1);
	assert_int_equal(o.nnodes_max, 3);
	assert_int_equal(o.max_restarts, 3);
	assert_string_equal(o.rdzv_id, "job");
	assert_int_equal(opts_rdzv_resolve(&o, NULL, &r, err, sizeof(err)), 0);
	assert_int_equal(r.mode, OPTS_RDZV_C10D);
	assert_string_equal(r.host, "job-worker-0");
	assert_int_equal(r.port, 29400);
	assert_int_equal(r.min_nodes, 1);
	assert_int_equal(r.max_nodes, 3);
	assert_true(r.conf.join_timeout == 5.0);
	opts_release(&o);
}

/* The command line and the job file win, value by value; the line names the
 * variables they overrode. */
static void test_flags_and_job_file_win(void **state)
{
	char *envp[] = {"PET_NNODES=2", "PET_NODE_RANK=1", "PET_MASTER_PORT=23456", NULL};
	static char ini[] = "[launch]\nnode_rank = 3\n";
	struct launch_opts o;
	char *argv[] = {"ddplaunch", "--nnodes=4", "train.py"};
	FILE *f = fmemopen(ini, strlen(ini), "r");

	(void)state;
	assert_int_equal(opts_init(&o), 0);
	assert_int_equal(args_parse(&o, 3, argv, err, sizeof(err)), ARGS_OK);
	assert_int_equal(jobfile_load_stream(&o, f, "job.ini", err, sizeof(err)), 0);
	fclose(f);
	assert_int_equal(opts_pet_apply(&o, envp, err, sizeof(err)), 0);
	assert_int_equal(o.nnodes_max, 4);
	assert_int_equal(o.node_rank, 3);
	assert_int_equal(o.master_port, 23456);
	assert_int_equal(src(&o, "nnodes"), OPTS_SRC_CLI);
	assert_int_equal(src(&o, "node_rank"), OPTS_SRC_FILE);
	assert_int_equal(src(&o, "master_port"), OPTS_SRC_PET);
	assert_string_equal(
	    o.pet_used, "took master_port from PET_* (Kubeflow/torchrun environment); flags and "
			"the job file override them; given as flags or in the job file, so not "
			"taken: PET_NNODES, PET_NODE_RANK");
	opts_release(&o);
}

/* torchrun's rule for flags: bool(int(value)). */
static void test_booleans(void **state)
{
	static const char *const yes[] = {"1", "2", "-1", "true", "yes", "ON"};
	static const char *const no[] = {"0", "false", "no", "00"};
	char var[64], *envp[3] = {var, "PET_NO_PYTHON=1", NULL};
	struct launch_opts o;

	(void)state;
	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		snprintf(var, sizeof(var), "PET_STANDALONE=%s", yes[i]);
		assert_int_equal(apply(&o, NULL, envp), 0);
		assert_true(o.standalone);
		assert_true(o.no_python);
		opts_release(&o);
	}
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
		snprintf(var, sizeof(var), "PET_STANDALONE=%s", no[i]);
		assert_int_equal(apply(&o, NULL, envp), 0);
		assert_false(o.standalone);
		assert_int_equal(src(&o, "standalone"), OPTS_SRC_PET);
		opts_release(&o);
	}
	/* the flag wins over PET_STANDALONE=0 */
	snprintf(var, sizeof(var), "PET_STANDALONE=0");
	assert_int_equal(apply(&o, (const char *[]){"--standalone", NULL}, envp), 0);
	assert_true(o.standalone);
	opts_release(&o);
	snprintf(var, sizeof(var), "PET_MODULE=maybe");
	assert_int_equal(apply(&o, NULL, envp), -EINVAL);
	assert_string_equal(err, "bad value 'maybe' in the environment variable PET_MODULE "
				 "(expected an integer, 0 for false and non-zero for true, as "
				 "torchrun reads it); fix or unset PET_MODULE, or give --module, "
				 "which wins over it");
	opts_release(&o);
}

/* A bad value names the variable, the value, what is expected and the fix. */
static void test_bad_values(void **state)
{
	static const char *const bad[][2] = {
	    {"PET_MASTER_PORT=99999", "'99999' in the environment variable PET_MASTER_PORT "
				      "(expected an integer from 0 to 65535)"},
	    {"PET_NNODES=2:x", "'2:x' in the environment variable PET_NNODES (expected N or "
			       "MIN:MAX)"},
	    {"PET_NPROC_PER_NODE=many", "PET_NPROC_PER_NODE (expected a positive number, gpu, "
					"cpu or auto); fix or unset PET_NPROC_PER_NODE, or give "
					"--nproc_per_node"},
	    {"PET_MONITOR_INTERVAL=-1", "PET_MONITOR_INTERVAL"},
	};
	struct launch_opts o;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *envp[] = {(char *)bad[i][0], NULL};

		assert_int_equal(apply(&o, NULL, envp), -EINVAL);
		if (!strstr(err, bad[i][1]))
			fail_msg("%s: '%s' lacks '%s'", bad[i][0], err, bad[i][1]);
		opts_release(&o);
	}
	/* a bad value that a flag overrides is never read */
	{
		char *envp[] = {"PET_MASTER_PORT=99999", NULL};

		assert_int_equal(apply(&o, (const char *[]){"--master_port=1", NULL}, envp), 0);
		assert_int_equal(o.master_port, 1);
		opts_release(&o);
	}
}

/* Empty is absent; aliases; names never read; unknown names listed. */
static void test_names(void **state)
{
	char *envp[] = {"PET_NNODES=",
			"PET_RUN_ID=viaalias",
			"PET_SHUTDOWN_TIMEOUT=5",
			"PET_SIGNALS_TO_HANDLE=SIGTERM,SIGINT",
			"PET_CONFIG=/nonexistent.ini",
			"PET_DRY_RUN=1",
			"PET_RDZV_TOKEN=secret",
			"PET_M=1",
			"PET_RUN_PATH=1",
			"PET_LOG_DIR=/tmp/logs",
			"PET_STRICT_PORT=1",
			NULL};
	char *both[] = {"PET_RUN_ID=viaalias", "PET_RDZV_ID=canonical", NULL};
	struct launch_opts o;
	char var[64];
	int i = settings_find(&opts_settings, "rdzv_id");

	(void)state;
	assert_int_equal(apply(&o, NULL, envp), 0);
	assert_int_equal(o.nnodes_max, 1);
	assert_int_equal(src(&o, "nnodes"), OPTS_SRC_DEFAULT);
	assert_string_equal(o.rdzv_id, "viaalias");
	opts_pet_name(&o, (size_t)i, var, sizeof(var));
	assert_string_equal(var, "PET_RUN_ID");
	assert_true(o.grace_period == 5.0);
	assert_int_equal(o.nsignals, 2);
	assert_null(o.config);
	assert_false(o.dry_run);
	assert_null(o.rdzv_token);
	assert_false(o.module);
	assert_string_equal(o.log_dir, "/tmp/logs");
	assert_true(o.strict_port);
	assert_string_equal(
	    o.pet_used, "took run_id, log_dir, strict_port, shutdown_timeout, "
			"signals_to_handle from PET_* (Kubeflow/torchrun environment); flags and "
			"the job file override them; ignored, no ddplaunch option reads them: "
			"PET_CONFIG, PET_DRY_RUN, PET_RDZV_TOKEN, PET_M, PET_RUN_PATH");
	opts_release(&o);
	assert_int_equal(apply(&o, NULL, both), 0);
	assert_string_equal(o.rdzv_id, "canonical");
	opts_pet_name(&o, (size_t)i, var, sizeof(var));
	assert_string_equal(var, "PET_RDZV_ID");
	opts_release(&o);
}

/* A fake resolver for the Slurm step: n1 is 10.0.0.1. */
static int resolve(const char *host, char *addr, size_t addrlen, char *note, size_t notelen)
{
	note[0] = '\0';
	snprintf(addr, addrlen, "10.0.0.%s", host + 1);
	return 0;
}

/* flags > job file > PET_* > Slurm > defaults, value by value. */
static void test_order_against_slurm(void **state)
{
	char *envp[] = {"SLURM_JOB_ID=42",	 "SLURM_STEP_ID=0",
			"SLURM_NNODES=2",	 "SLURM_STEP_NUM_NODES=2",
			"SLURM_NODEID=1",	 "SLURM_PROCID=1",
			"SLURM_LOCALID=0",	 "SLURM_STEP_NODELIST=n[1-2]",
			"SLURMD_NODENAME=n2",	 "SLURM_STEP_TASKS_PER_NODE=1(x2)",
			"PET_MASTER_PORT=31000", "PET_RDZV_ID=kf",
			"PET_MAX_RESTARTS=2",	 NULL};
	struct launch_opts o;

	(void)state;
	assert_int_equal(apply(&o, (const char *[]){"--max_restarts=1", NULL}, envp), 0);
	assert_int_equal(opts_slurm_apply_with(&o, envp, resolve, err, sizeof(err)), 0);
	assert_int_equal(o.nnodes_max, 2);
	assert_int_equal(o.node_rank, 1);
	assert_string_equal(o.master_addr, "10.0.0.1");
	assert_int_equal(o.master_port, 31000);
	assert_string_equal(o.rdzv_id, "kf");
	assert_int_equal(o.max_restarts, 1);
	assert_int_equal(src(&o, "nnodes"), OPTS_SRC_SLURM);
	assert_int_equal(src(&o, "master_addr"), OPTS_SRC_SLURM);
	assert_int_equal(src(&o, "master_port"), OPTS_SRC_PET);
	assert_int_equal(src(&o, "max_restarts"), OPTS_SRC_CLI);
	assert_int_equal(src(&o, "role"), OPTS_SRC_DEFAULT);
	if (!strstr(o.slurm_used, "; kept as given: PET_MASTER_PORT, PET_RDZV_ID"))
		fail_msg("%s", o.slurm_used);
	opts_release(&o);
}

/* A later refusal that names a flag set from PET_* names the variable too. */
static void test_explain(void **state)
{
	char *envp[] = {"PET_NNODES=2", "PET_NODE_RANK=3", "PET_MAX_RESTARTS=1", NULL};
	struct launch_opts o;

	(void)state;
	assert_int_equal(apply(&o, NULL, envp), 0);
	assert_int_equal(opts_check(&o, err, sizeof(err)), -EINVAL);
	opts_pet_explain(&o, envp, err, sizeof(err));
	assert_string_equal(err,
			    "--node_rank=3 is not below --nnodes=2; from the environment: "
			    "PET_NNODES=2 (--nnodes), PET_NODE_RANK=3 (--node_rank); fix or unset "
			    "them, or give the flags");
	snprintf(err, sizeof(err), "--nnodes_x and --max_restarts_y are unrelated");
	opts_pet_explain(&o, envp, err, sizeof(err));
	assert_string_equal(err, "--nnodes_x and --max_restarts_y are unrelated");
	opts_release(&o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_opts_set_precedence),
	    cmocka_unit_test(test_no_pet),
	    cmocka_unit_test(test_kubeflow_static),
	    cmocka_unit_test(test_kubeflow_elastic),
	    cmocka_unit_test(test_flags_and_job_file_win),
	    cmocka_unit_test(test_booleans),
	    cmocka_unit_test(test_bad_values),
	    cmocka_unit_test(test_names),
	    cmocka_unit_test(test_order_against_slurm),
	    cmocka_unit_test(test_explain),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
