/* Unit tests: a Slurm step's shape from its environment (slurm_env.c), and
 * the master's address (slurm_resolve.c, over /etc/hosts' localhost and
 * numeric addresses only). The environments are those a real Slurm 22.05
 * gave its tasks (tests/slurm runs the same reader under srun). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slurm_env.h"
#include "slurm_resolve.h"

#define MAX_VARS 64

/* An environment: a base plus overrides ("NAME=value" replaces NAME,
 * "NAME" alone removes it). */
struct env {
	char *vars[MAX_VARS + 1];
	char buf[8192];
};

/* Task 1 of `srun -N2 --ntasks-per-node=1` (job 1, step 0) on n2. */
static const char *const step_n2[] = {"SLURMD_NODENAME=n2",
				      "SLURM_CLUSTER_NAME=ddptest",
				      "SLURM_CPUS_ON_NODE=1",
				      "SLURM_JOB_ID=1",
				      "SLURM_JOB_NODELIST=n[1-2]",
				      "SLURM_JOB_NUM_NODES=2",
				      "SLURM_LAUNCH_NODE_IPADDR=127.0.0.1",
				      "SLURM_LOCALID=0",
				      "SLURM_NNODES=2",
				      "SLURM_NODEID=1",
				      "SLURM_NODELIST=n[1-2]",
				      "SLURM_NTASKS=2",
				      "SLURM_NTASKS_PER_NODE=1",
				      "SLURM_PROCID=1",
				      "SLURM_STEP_ID=0",
				      "SLURM_STEP_NODELIST=n[1-2]",
				      "SLURM_STEP_NUM_NODES=2",
				      "SLURM_STEP_NUM_TASKS=2",
				      "SLURM_STEP_TASKS_PER_NODE=1(x2)",
				      "SLURM_TASKS_PER_NODE=1(x2)",
				      "PATH=/usr/bin",
				      NULL};

/* The batch script of `sbatch -N2 --ntasks-per-node=2` (job 1, on n1). */
static const char *const batch_n2[] = {"SLURMD_NODENAME=n1",
				       "SLURM_CPUS_ON_NODE=2",
				       "SLURM_JOB_CPUS_PER_NODE=2(x2)",
				       "SLURM_JOB_ID=1",
				       "SLURM_JOB_NODELIST=n[1-2]",
				       "SLURM_JOB_NUM_NODES=2",
				       "SLURM_LOCALID=0",
				       "SLURM_NNODES=2",
				       "SLURM_NODEID=0",
				       "SLURM_NODELIST=n[1-2]",
				       "SLURM_NTASKS=4",
				       "SLURM_NTASKS_PER_NODE=2",
				       "SLURM_PROCID=0",
				       "SLURM_TASKS_PER_NODE=2(x2)",
				       NULL};

/* The shell of `salloc -N2` (job 2, on the submit host). */
static const char *const salloc_n2[] = {"SLURM_JOB_CPUS_PER_NODE=1(x2)",
					"SLURM_JOB_ID=2",
					"SLURM_JOB_NODELIST=n[1-2]",
					"SLURM_JOB_NUM_NODES=2",
					"SLURM_NNODES=2",
					"SLURM_NODELIST=n[1-2]",
					"SLURM_TASKS_PER_NODE=1(x2)",
					NULL};

static void env_make(struct env *e, const char *const base[], const char *const over[])
{
	size_t n = 0, used = 0;

	for (size_t i = 0; base[i]; i++) {
		const char *eq = strchr(base[i], '=');
		size_t klen = eq ? (size_t)(eq - base[i]) : strlen(base[i]);
		int drop = 0;

		for (size_t j = 0; over && over[j]; j++)
			drop |= !strncmp(over[j], base[i], klen) &&
				(over[j][klen] == '=' || over[j][klen] == '\0');
		if (!drop)
			e->vars[n++] = (char *)base[i];
	}
	for (size_t j = 0; over && over[j]; j++) {
		if (!strchr(over[j], '='))
			continue;
		assert_true(used + strlen(over[j]) + 1 < sizeof(e->buf));
		e->vars[n++] = strcpy(e->buf + used, over[j]);
		used += strlen(over[j]) + 1;
	}
	assert_true(n <= MAX_VARS);
	e->vars[n] = NULL;
}

static void read_ok(struct slurm_step *s, struct env *e, const char *const base[],
		    const char *const over[])
{
	char err[512];
	int rc;

	env_make(e, base, over);
	rc = slurm_step_read(s, e->vars, SLURM_PORT_LO, SLURM_PORT_HI, err, sizeof(err));
	if (rc)
		fail_msg("rc %d: %s", rc, err);
	assert_string_equal(err, "");
}

static void read_fails(const char *const base[], const char *const over[], int expect_rc,
		       const char *expect_msg)
{
	struct slurm_step s;
	struct env e;
	char err[512];
	int rc;

	env_make(&e, base, over);
	rc = slurm_step_read(&s, e.vars, SLURM_PORT_LO, SLURM_PORT_HI, err, sizeof(err));
	if (rc != expect_rc)
		fail_msg("rc %d, expected %d (%s): %s", rc, expect_rc, expect_msg, err);
	if (!strstr(err, expect_msg))
		fail_msg("message '%s' lacks '%s'", err, expect_msg);
	assert_null(s.hosts.hosts);
	assert_null(s.nodelist);
	slurm_step_release(&s); /* harmless after a failure */
}

static void test_step(void **state)
{
	struct slurm_step s;
	struct env e;
	char line[512];

	(void)state;
	read_ok(&s, &e, step_n2, NULL);
	assert_int_equal(s.job_id, 1);
	assert_int_equal(s.step_id, 0);
	assert_int_equal(s.nnodes, 2);
	assert_int_equal(s.node_rank, 1);
	assert_int_equal(s.procid, 1);
	assert_int_equal(s.localid, 0);
	assert_false(s.rank_from_list);
	assert_string_equal(s.list_var, "SLURM_STEP_NODELIST");
	assert_string_equal(s.nodelist, "n[1-2]");
	assert_int_equal(s.hosts.count, 2);
	assert_string_equal(s.master, "n1");
	assert_string_equal(s.node_name, "n2");
	assert_string_equal(s.run_id, "slurm-1.0");
	assert_int_equal(s.port, 29504);
	slurm_step_describe(&s, "127.0.0.11", line, sizeof(line));
	assert_string_equal(line, "from slurm: job 1 step 0, 2 nodes (n[1-2]), this is node 1 "
				  "(n2), master n1 (127.0.0.11), port 29504");
	slurm_step_describe(&s, NULL, line, sizeof(line));
	assert_string_equal(line, "from slurm: job 1 step 0, 2 nodes (n[1-2]), this is node 1 "
				  "(n2), master n1, port 29504");
	slurm_step_release(&s);
	slurm_step_release(&s);
}

static void test_step_values(void **state)
{
	static const char *const over[] = {"SLURM_JOB_ID=42",
					   "SLURM_STEP_ID=3",
					   "SLURM_NNODES=4",
					   "SLURM_STEP_NUM_NODES=4",
					   "SLURM_STEP_NODELIST=gpu[001-003],login7",
					   "SLURM_STEP_TASKS_PER_NODE=1(x4)",
					   "SLURM_NODEID=3",
					   "SLURMD_NODENAME=login7",
					   NULL};
	struct slurm_step s;
	struct env e;
	char line[512];

	(void)state;
	read_ok(&s, &e, step_n2, over);
	assert_int_equal(s.nnodes, 4);
	assert_int_equal(s.node_rank, 3);
	assert_string_equal(s.master, "gpu001");
	assert_string_equal(s.run_id, "slurm-42.3");
	assert_int_equal(s.port, 29500 + (4 * 42 + 3) % 500);
	slurm_step_describe(&s, "10.1.2.3", line, sizeof(line));
	assert_string_equal(line, "from slurm: job 42 step 3, 4 nodes (gpu[001-003],login7), "
				  "this is node 3 (login7), master gpu001 (10.1.2.3), port 29671");
	/* a numeric master is not repeated */
	slurm_step_describe(&s, "gpu001", line, sizeof(line));
	assert_non_null(strstr(line, "master gpu001, port"));
	slurm_step_release(&s);
}

/* A step on fewer nodes than its job: the step's values count. */
static void test_step_inside_larger_job(void **state)
{
	static const char *const over[] = {"SLURM_JOB_NODELIST=n[1-3]",
					   "SLURM_NNODES=3",
					   "SLURM_JOB_NUM_NODES=3",
					   "SLURM_STEP_NUM_NODES=2",
					   "SLURM_NODEID=0",
					   "SLURMD_NODENAME=n1",
					   NULL};
	struct slurm_step s;
	struct env e;

	(void)state;
	read_ok(&s, &e, step_n2, over);
	assert_int_equal(s.nnodes, 2);
	assert_int_equal(s.node_rank, 0);
	assert_string_equal(s.list_var, "SLURM_STEP_NODELIST");
	slurm_step_release(&s);
}

static void test_list_fallbacks(void **state)
{
	static const char *const no_step_list[] = {"SLURM_STEP_NODELIST", NULL};
	static const char *const only_nodelist[] = {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
						    NULL};
	static const char *const none[] = {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
					   "SLURM_NODELIST", NULL};
	static const char *const no_step_nodes[] = {"SLURM_STEP_NUM_NODES", NULL};
	static const char *const no_nodes[] = {"SLURM_STEP_NUM_NODES", "SLURM_NNODES",
					       "SLURM_JOB_NUM_NODES", NULL};
	struct slurm_step s;
	struct env e;

	(void)state;
	read_ok(&s, &e, step_n2, no_step_list);
	assert_string_equal(s.list_var, "SLURM_JOB_NODELIST");
	slurm_step_release(&s);
	read_ok(&s, &e, step_n2, only_nodelist);
	assert_string_equal(s.list_var, "SLURM_NODELIST");
	assert_string_equal(s.master, "n1");
	slurm_step_release(&s);
	read_ok(&s, &e, step_n2, no_step_nodes);
	assert_int_equal(s.nnodes, 2);
	slurm_step_release(&s);
	read_fails(step_n2, none, -EINVAL,
		   "slurm job 1 gives no host list (SLURM_STEP_NODELIST is unset)");
	read_fails(step_n2, no_nodes, -EINVAL,
		   "slurm job 1 gives no node count (SLURM_NNODES is unset)");
}

static void test_not_slurm(void **state)
{
	static const char *const plain[] = {"PATH=/usr/bin", "SLURM_JOB_IDX=1", "XSLURM_JOB_ID=1",
					    "SLURM_JOB_ID", NULL};
	struct slurm_step s;
	char err[256];

	(void)state;
	read_fails(plain, NULL, -ENOENT, "not inside a slurm job (SLURM_JOB_ID is unset)");
	assert_int_equal(slurm_step_read(&s, NULL, SLURM_PORT_LO, SLURM_PORT_HI, err, sizeof(err)),
			 -ENOENT);
	assert_int_equal(slurm_step_read(&s, (char **)plain, SLURM_PORT_LO, SLURM_PORT_HI, NULL, 0),
			 -ENOENT);
}

static void test_tasks_per_node(void **state)
{
	static const char *const two_each[] = {"SLURM_STEP_TASKS_PER_NODE=2(x2)", "SLURM_NTASKS=4",
					       NULL};
	static const char *const uneven[] = {"SLURM_STEP_TASKS_PER_NODE=1,2", NULL};
	static const char *const mixed[] = {"SLURM_STEP_TASKS_PER_NODE=1(x3),4(x1),1", NULL};
	static const char *const by_count[] = {"SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_NUM_TASKS",
					       "SLURM_NTASKS=3", NULL};
	static const char *const by_step_count[] = {"SLURM_STEP_TASKS_PER_NODE",
						    "SLURM_STEP_NUM_TASKS=4", NULL};
	static const char *const by_localid[] = {"SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS",
						 "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID=1", NULL};
	static const char *const bad[] = {"SLURM_STEP_TASKS_PER_NODE=1(x", NULL};
	static const char *const bad2[] = {"SLURM_STEP_TASKS_PER_NODE=1(x0)", NULL};
	static const char *const bad3[] = {"SLURM_STEP_TASKS_PER_NODE=1,", NULL};
	static const char *const counts_unknown[] = {"SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS",
						     "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", NULL};
	struct slurm_step s;
	struct env e;

	(void)state;
	read_fails(step_n2, two_each, -ENOTSUP,
		   "slurm started 2 tasks on a node (SLURM_STEP_TASKS_PER_NODE=2(x2)): each would "
		   "run its own ddplaunch with its own workers; start one per node: srun "
		   "--nodes=2 --ntasks=2 --ntasks-per-node=1 ddplaunch ... (inside sbatch, srun "
		   "takes --ntasks from the job unless it is given)");
	read_fails(step_n2, uneven, -ENOTSUP, "slurm started 2 tasks on a node");
	read_fails(step_n2, mixed, -ENOTSUP, "slurm started 4 tasks on a node");
	read_fails(step_n2, by_count, -ENOTSUP,
		   "slurm started 3 tasks on 2 nodes (SLURM_NTASKS=3)");
	read_fails(step_n2, by_step_count, -ENOTSUP,
		   "slurm started 4 tasks on 2 nodes (SLURM_STEP_NUM_TASKS=4)");
	read_fails(step_n2, by_localid, -ENOTSUP, "this is task 1 on its node (SLURM_LOCALID=1)");
	read_fails(step_n2, bad, -EINVAL, "SLURM_STEP_TASKS_PER_NODE=\"1(x\" from slurm is not");
	read_fails(step_n2, bad2, -EINVAL, "is not a task count");
	read_fails(step_n2, bad3, -EINVAL, "is not a task count");
	read_ok(&s, &e, step_n2, counts_unknown);
	assert_int_equal(s.localid, -1);
	slurm_step_release(&s);
}

static void test_batch_and_salloc(void **state)
{
	static const char *const one_node[] = {"SLURM_JOB_ID=7",
					       "SLURM_JOB_NODELIST=n2",
					       "SLURM_NODELIST=n2",
					       "SLURM_NNODES=1",
					       "SLURM_JOB_NUM_NODES=1",
					       "SLURMD_NODENAME=n2",
					       NULL};
	static const char *const salloc_one[] = {"SLURM_JOB_NODELIST=n1", "SLURM_NODELIST=n1",
						 "SLURM_NNODES=1", "SLURM_JOB_NUM_NODES=1", NULL};
	struct slurm_step s;
	struct env e;
	char line[512];

	(void)state;
	read_fails(batch_n2, NULL, -ENOTSUP,
		   "this is the batch script or salloc shell of slurm job 1 on 2 nodes, not a "
		   "step: ddplaunch would run on one node only; start one per node: srun "
		   "--nodes=2 --ntasks=2 --ntasks-per-node=1 ddplaunch ...");
	read_fails(salloc_n2, NULL, -ENOTSUP, "salloc shell of slurm job 2 on 2 nodes");
	read_fails(salloc_n2, salloc_one, -ENOTSUP,
		   "this is the salloc shell of slurm job 2, on the submit host rather than on "
		   "the job's node; run ddplaunch there: srun --ntasks=1 ddplaunch ...");
	/* a one-node batch script runs ddplaunch itself: fine, with 4 tasks */
	read_ok(&s, &e, batch_n2, one_node);
	assert_int_equal(s.step_id, SLURM_STEP_BATCH);
	assert_int_equal(s.nnodes, 1);
	assert_int_equal(s.node_rank, 0);
	assert_string_equal(s.list_var, "SLURM_JOB_NODELIST");
	assert_string_equal(s.run_id, "slurm-7.batch");
	assert_int_equal(s.port, 29500 + 28);
	slurm_step_describe(&s, "127.0.0.12", line, sizeof(line));
	assert_string_equal(line, "from slurm: job 7 batch script, 1 node (n2), this is node 0 "
				  "(n2), master n2 (127.0.0.12), port 29528");
	slurm_step_release(&s);
}

static void test_rank(void **state)
{
	static const char *const swapped[] = {"SLURM_NODEID=0", NULL};
	static const char *const unknown_name[] = {"SLURMD_NODENAME=n7", "SLURM_NODEID=0", NULL};
	static const char *const no_name[] = {"SLURMD_NODENAME", NULL};
	static const char *const no_id[] = {"SLURM_NODEID", NULL};
	static const char *const neither[] = {"SLURM_NODEID", "SLURMD_NODENAME=n7", NULL};
	static const char *const too_big[] = {"SLURM_NODEID=2", NULL};
	static const char *const not_num[] = {"SLURM_NODEID=one", NULL};
	struct slurm_step s;
	struct env e;
	char line[512];

	(void)state;
	/* the place in the list wins, so that rank 0 is the master; said so */
	read_ok(&s, &e, step_n2, swapped);
	assert_int_equal(s.node_rank, 1);
	assert_true(s.rank_from_list);
	assert_int_equal(s.slurm_nodeid, 0);
	slurm_step_describe(&s, NULL, line, sizeof(line));
	assert_non_null(strstr(line, "this is node 1 (n2, by its place in SLURM_STEP_NODELIST; "
				     "SLURM_NODEID is 0), master n1"));
	slurm_step_release(&s);
	read_ok(&s, &e, step_n2, unknown_name);
	assert_int_equal(s.node_rank, 0);
	assert_false(s.rank_from_list);
	slurm_step_release(&s);
	read_ok(&s, &e, step_n2, no_name);
	assert_int_equal(s.node_rank, 1);
	assert_null(s.node_name);
	slurm_step_describe(&s, NULL, line, sizeof(line));
	assert_non_null(strstr(line, "this is node 1, master n1"));
	slurm_step_release(&s);
	read_ok(&s, &e, step_n2, no_id);
	assert_int_equal(s.node_rank, 1);
	slurm_step_release(&s);
	read_fails(step_n2, neither, -EINVAL,
		   "slurm gives no node rank: SLURM_NODEID is unset and SLURMD_NODENAME (n7) is "
		   "not in SLURM_STEP_NODELIST");
	read_fails(step_n2, too_big, -EINVAL,
		   "SLURM_NODEID=2 from slurm is not a node of the 2 in SLURM_STEP_NODELIST");
	read_fails(step_n2, not_num, -EINVAL, "SLURM_NODEID=one from slurm is not a node");
}

static void test_inconsistent(void **state)
{
	static const char *const more_hosts[] = {"SLURM_STEP_NODELIST=n[1-3]", NULL};
	static const char *const bad_list[] = {"SLURM_STEP_NODELIST=n[2-1]", NULL};
	static const char *const huge_list[] = {"SLURM_STEP_NODELIST=n[1-99999]", NULL};
	static const char *const bad_job[] = {"SLURM_JOB_ID=12a", NULL};
	static const char *const neg_job[] = {"SLURM_JOB_ID=-1", NULL};
	static const char *const big_job[] = {"SLURM_JOB_ID=4294967296", NULL};
	static const char *const empty_job[] = {"SLURM_JOB_ID=", NULL};
	static const char *const bad_step[] = {"SLURM_STEP_ID=batch", NULL};
	static const char *const zero_nodes[] = {"SLURM_STEP_NUM_NODES=0", NULL};
	static const char *const bad_procid[] = {"SLURM_PROCID=x", NULL};

	(void)state;
	read_fails(step_n2, more_hosts, -EINVAL,
		   "SLURM_STEP_NODELIST=n[1-3] from slurm names 3 hosts, but the job has 2 nodes");
	read_fails(step_n2, bad_list, -EINVAL,
		   "SLURM_STEP_NODELIST from slurm: range \"2-1\" counts down (character 3 of "
		   "\"n[2-1]\")");
	read_fails(step_n2, huge_list, -E2BIG, "names more than 65536 hosts");
	read_fails(step_n2, bad_job, -EINVAL,
		   "SLURM_JOB_ID=\"12a\" from slurm is not a number up to 4294967295");
	read_fails(step_n2, neg_job, -EINVAL, "SLURM_JOB_ID=\"-1\"");
	read_fails(step_n2, big_job, -EINVAL, "SLURM_JOB_ID=\"4294967296\"");
	read_fails(step_n2, empty_job, -EINVAL, "SLURM_JOB_ID=\"\"");
	read_fails(step_n2, bad_step, -EINVAL, "SLURM_STEP_ID=\"batch\"");
	read_fails(step_n2, zero_nodes, -EINVAL, "SLURM_STEP_NUM_NODES=0 from slurm");
	read_fails(step_n2, bad_procid, -EINVAL, "SLURM_PROCID=\"x\"");
}

static void test_ports(void **state)
{
	unsigned seen[500] = {0}, lo, hi;
	struct slurm_step s;
	struct env e;
	char err[256];

	(void)state;
	assert_int_equal(slurm_port(42, 0, 29500, 29999), 29668);
	assert_int_equal(slurm_port(42, 1, 29500, 29999), 29669);
	assert_int_equal(slurm_port(42, SLURM_STEP_BATCH, 29500, 29999), 29668);
	assert_int_equal(slurm_port(4294967295UL, 4294967295UL, 29500, 29999),
			 29500 + (unsigned)((4ULL * 4294967295ULL + 4294967295ULL) % 500));
	assert_int_equal(slurm_port(123, 4, 40000, 40000), 40000);
	assert_int_equal(slurm_port(5, 0, 1, 65535), 21);
	/* 125 consecutive jobs of 4 steps: 500 different ports */
	for (unsigned long job = 1000; job < 1125; job++)
		for (unsigned long step = 0; step < 4; step++)
			seen[slurm_port(job, step, 29500, 29999) - 29500]++;
	for (int i = 0; i < 500; i++)
		assert_int_equal(seen[i], 1);

	assert_int_equal(slurm_port_range_parse("29500-29999", &lo, &hi, err, sizeof(err)), 0);
	assert_int_equal(lo, 29500);
	assert_int_equal(hi, 29999);
	assert_int_equal(slurm_port_range_parse("4000", &lo, &hi, err, sizeof(err)), 0);
	assert_int_equal(lo, 4000);
	assert_int_equal(hi, 4000);
	assert_int_equal(slurm_port_range_parse("1-65535", &lo, &hi, err, sizeof(err)), 0);
	static const char *const bad[] = {
	    "",	  "0",	"0-10",	    "5-4", "1-65536",	    "65536",	 "a-b",
	    "-5", "5-", "10-20-30", " 10", "100000-200000", "12345678-1"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = slurm_port_range_parse(bad[i], &lo, &hi, err, sizeof(err));

		if (rc != -EINVAL)
			fail_msg("\"%s\": rc %d", bad[i], rc);
		assert_non_null(strstr(err, "is not LO-HI or PORT with 1 <= LO <= HI <= 65535"));
	}

	env_make(&e, step_n2, NULL);
	assert_int_equal(slurm_step_read(&s, e.vars, 4000, 4003, err, sizeof(err)), 0);
	assert_int_equal(s.port, 4000 + 4 % 4);
	slurm_step_release(&s);
	assert_int_equal(slurm_step_read(&s, e.vars, 5, 4, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "port range 5-4 is not inside 1-65535");
	assert_int_equal(slurm_step_read(&s, e.vars, 0, 4, err, sizeof(err)), -EINVAL);
	assert_int_equal(slurm_step_read(&s, e.vars, 1, 65536, err, sizeof(err)), -EINVAL);
}

static void test_describe_long_list(void **state)
{
	static const char *const over[] = {
	    "SLURM_STEP_NODELIST=node-with-a-long-name[01-02],another-long-prefix[1]",
	    "SLURM_STEP_NUM_NODES=3",
	    "SLURM_NNODES=3",
	    "SLURM_STEP_TASKS_PER_NODE=1(x3)",
	    "SLURMD_NODENAME=another-long-prefix1",
	    "SLURM_NODEID=2",
	    NULL};
	struct slurm_step s;
	struct env e;
	char line[512], small[20];
	int n;

	(void)state;
	read_ok(&s, &e, step_n2, over);
	n = slurm_step_describe(&s, NULL, line, sizeof(line));
	assert_int_equal(n, (int)strlen(line));
	assert_non_null(strstr(line,
			       "3 nodes (node-with-a-long-name[01-02],another-long-prefix...), "
			       "this is node 2 (another-long-prefix1), master "
			       "node-with-a-long-name01, port"));
	assert_int_equal(slurm_step_describe(&s, NULL, small, sizeof(small)), n);
	assert_int_equal(strlen(small), sizeof(small) - 1);
	slurm_step_release(&s);
}

static void test_resolve(void **state)
{
	char addr[SLURM_ADDR_MAX], note[256];

	(void)state;
	assert_int_equal(slurm_resolve_host("127.0.0.11", addr, sizeof(addr), note, sizeof(note)),
			 0);
	assert_string_equal(addr, "127.0.0.11");
	assert_string_equal(note, ""); /* a numeric address is taken as given */
	assert_int_equal(slurm_resolve_host("::1", addr, sizeof(addr), note, sizeof(note)), 0);
	assert_string_equal(addr, "::1");
	assert_int_equal(slurm_resolve_host("localhost", addr, sizeof(addr), note, sizeof(note)),
			 0);
	assert_string_equal(addr, "127.0.0.1"); /* IPv4 first */
	assert_string_equal(note, "localhost resolves to 127.0.0.1, a loopback address: other "
				  "hosts cannot reach it");
	assert_int_equal(slurm_resolve_host("localhost", addr, sizeof(addr), NULL, 0), 0);
	/* .invalid never resolves (RFC 2606); a resolver without DNS may say
	 * "try again" instead of "no such name" */
	int rc = slurm_resolve_host("no-such-host.invalid", addr, sizeof(addr), note, sizeof(note));

	assert_true(rc == -ENOENT || rc == -EAGAIN);
	assert_non_null(strstr(note, "cannot resolve \"no-such-host.invalid\": "));
	assert_int_equal(slurm_resolve_host("n[1-2]", addr, sizeof(addr), note, sizeof(note)) < 0,
			 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_step),
	    cmocka_unit_test(test_step_values),
	    cmocka_unit_test(test_step_inside_larger_job),
	    cmocka_unit_test(test_list_fallbacks),
	    cmocka_unit_test(test_not_slurm),
	    cmocka_unit_test(test_tasks_per_node),
	    cmocka_unit_test(test_batch_and_salloc),
	    cmocka_unit_test(test_rank),
	    cmocka_unit_test(test_inconsistent),
	    cmocka_unit_test(test_ports),
	    cmocka_unit_test(test_describe_long_list),
	    cmocka_unit_test(test_resolve),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
