/* Unit tests: the options a Slurm step gives (launcher/job/opts_slurm.c),
 * with a resolver of names made up here (no DNS). */
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
#include "opts_slurm.h"

static char err[512];

/* n1 and n2 are 10.0.0.1 and 10.0.0.2, v6 is fd00::1, two has two addresses
 * (a note), lo is loopback (a note); anything else does not resolve. */
static int fake_resolve(const char *host, char *addr, size_t addrlen, char *note, size_t notelen)
{
	note[0] = '\0';
	if (!strcmp(host, "n1") || !strcmp(host, "n2")) {
		snprintf(addr, addrlen, "10.0.0.%c", host[1]);
		return 0;
	}
	if (!strcmp(host, "v6")) {
		snprintf(addr, addrlen, "fd00::1");
		return 0;
	}
	if (!strcmp(host, "two")) {
		snprintf(addr, addrlen, "10.0.0.9");
		snprintf(note, notelen, "two has 2 addresses (10.0.0.9, fd00::9); using 10.0.0.9");
		return 0;
	}
	if (!strcmp(host, "lo")) {
		snprintf(addr, addrlen, "127.0.1.1");
		snprintf(
		    note, notelen,
		    "lo resolves to 127.0.1.1, a loopback address: other hosts cannot reach it");
		return 0;
	}
	snprintf(note, notelen, "%s: name or service not known", host);
	return -ENOENT;
}

/* The environment of node `rank` of an srun step 0 of job 42 over `list`
 * (nnodes names), one task per node, plus `extra` (NULL-terminated). */
struct step_env {
	char buf[12][128];
	char *envp[24];
};

static char *const *step(struct step_env *e, const char *list, int nnodes, int rank,
			 const char *node, const char *const *extra)
{
	int n = 0, k = 0;

	snprintf(e->buf[n++], 128, "SLURM_JOB_ID=42");
	snprintf(e->buf[n++], 128, "SLURM_STEP_ID=0");
	snprintf(e->buf[n++], 128, "SLURM_NNODES=%d", nnodes);
	snprintf(e->buf[n++], 128, "SLURM_STEP_NUM_NODES=%d", nnodes);
	snprintf(e->buf[n++], 128, "SLURM_NODEID=%d", rank);
	snprintf(e->buf[n++], 128, "SLURM_PROCID=%d", rank);
	snprintf(e->buf[n++], 128, "SLURM_LOCALID=0");
	snprintf(e->buf[n++], 128, "SLURM_STEP_NODELIST=%s", list);
	snprintf(e->buf[n++], 128, "SLURMD_NODENAME=%s", node);
	snprintf(e->buf[n++], 128, "SLURM_STEP_TASKS_PER_NODE=1(x%d)", nnodes);
	for (int i = 0; i < n; i++)
		e->envp[k++] = e->buf[i];
	for (; extra && *extra; extra++)
		e->envp[k++] = (char *)*extra;
	e->envp[k] = NULL;
	return e->envp;
}

/* Parses the words (NULL-terminated; "ddplaunch" and a program added) into
 * o and applies envp; returns opts_slurm_apply_with's code. */
static int apply(struct launch_opts *o, char *const *envp, ...)
{
	char *argv[32] = {"ddplaunch"};
	int argc = 1;
	va_list ap;
	const char *w;

	va_start(ap, envp);
	while ((w = va_arg(ap, const char *)) && argc < 30)
		argv[argc++] = (char *)w;
	va_end(ap);
	argv[argc++] = "prog";
	err[0] = '\0';
	assert_int_equal(opts_init(o), 0);
	assert_int_equal(args_parse(o, argc, argv, err, sizeof(err)), ARGS_OK);
	return opts_slurm_apply_with(o, envp, fake_resolve, err, sizeof(err));
}

static void test_not_in_slurm(void **state)
{
	char *envp[] = {"PATH=/usr/bin", "SLURM_CONF=/etc/slurm.conf", NULL};
	struct launch_opts o;

	assert_int_equal(apply(&o, envp, NULL), 0);
	assert_string_equal(o.slurm_used, "");
	assert_true(o.nnodes_max == 1 && o.node_rank == -1 && o.master_port == -1);
	assert_string_equal(o.master_addr, "127.0.0.1");
	assert_string_equal(o.rdzv_id, "none");
	opts_release(&o);
	assert_int_equal(apply(&o, NULL, NULL), 0);
	opts_release(&o);
}

static void test_two_nodes(void **state)
{
	struct step_env e;
	struct launch_opts o;
	struct opts_rdzv r;
	char *const *envp = step(&e, "n[1-2]", 2, 1, "n2", NULL);

	assert_int_equal(apply(&o, envp, "--nproc_per_node=2", NULL), 0);
	assert_true(o.nnodes_min == 2 && o.nnodes_max == 2 && o.node_rank == 1);
	assert_string_equal(o.master_addr, "10.0.0.1");
	assert_int_equal(o.master_port, 29500 + (4 * 42) % 500);
	assert_string_equal(o.rdzv_id, "slurm-42.0");
	assert_string_equal(o.slurm_used,
			    "from slurm job 42 step 0 (2 nodes: n[1-2]): --nnodes=2 --node_rank=1 "
			    "(n2) --master_addr=10.0.0.1 (n1) --master_port=29668 "
			    "--rdzv_id=slurm-42.0");
	/* and the values make a static rendezvous at node 0 */
	assert_int_equal(opts_check(&o, err, sizeof(err)), 0);
	assert_int_equal(opts_rdzv_resolve(&o, NULL, &r, err, sizeof(err)), 0);
	assert_int_equal(r.mode, OPTS_RDZV_STATIC);
	assert_string_equal(r.host, "10.0.0.1");
	assert_int_equal(r.port, 29668);
	assert_int_equal(r.node_rank, 1);
	assert_string_equal(r.run_id, "slurm-42.0");
	assert_true(r.lost_nodes_final); /* a Slurm task never comes back */
	opts_release(&o);
	/* without Slurm a lost node may come back (static: at its rank) */
	assert_int_equal(apply(&o, envp, "--no_slurm", "--nnodes=2", NULL), 0);
	assert_int_equal(opts_rdzv_resolve(&o, NULL, &r, err, sizeof(err)), 0);
	assert_false(r.lost_nodes_final);
	opts_release(&o);
}

static void test_node_zero_and_rank_from_list(void **state)
{
	struct step_env e;
	struct launch_opts o;

	assert_int_equal(apply(&o, step(&e, "n[1-2]", 2, 0, "n1", NULL), NULL), 0);
	assert_int_equal(o.node_rank, 0);
	opts_release(&o);
	/* n2 is first in the list but SLURM_NODEID says 0 for n1: the list's
	 * place wins (rank 0 is the master), and the line says so. */
	assert_int_equal(apply(&o, step(&e, "n2,n1", 2, 0, "n1", NULL), NULL), 0);
	assert_int_equal(o.node_rank, 1);
	assert_string_equal(o.master_addr, "10.0.0.2");
	assert_non_null(strstr(o.slurm_used, "--node_rank=1 (n1, its place in "
					     "SLURM_STEP_NODELIST; SLURM_NODEID is 0)"));
	opts_release(&o);
}

static void test_flags_override_each_value(void **state)
{
	static const char ini[] = "[launch]\nrdzv_id = mine\n";
	struct step_env e;
	struct launch_opts o;
	char *const *envp = step(&e, "n[1-2]", 2, 1, "n2", NULL);
	FILE *f;

	/* --master_port on the command line, rdzv_id from a job file */
	assert_int_equal(opts_init(&o), 0);
	assert_int_equal(opts_set(&o, "master_port", "1234", OPTS_SRC_CLI, err, sizeof(err)), 0);
	f = fmemopen((void *)ini, sizeof(ini) - 1, "r");
	assert_int_equal(jobfile_load_stream(&o, f, "job.ini", err, sizeof(err)), 0);
	fclose(f);
	assert_int_equal(opts_slurm_apply_with(&o, envp, fake_resolve, err, sizeof(err)), 0);
	assert_int_equal(o.master_port, 1234);
	assert_string_equal(o.rdzv_id, "mine");
	assert_string_equal(o.master_addr, "10.0.0.1");
	assert_int_equal(o.node_rank, 1);
	assert_string_equal(o.slurm_used,
			    "from slurm job 42 step 0 (2 nodes: n[1-2]): --nnodes=2 --node_rank=1 "
			    "(n2) --master_addr=10.0.0.1 (n1); kept as given: --master_port, "
			    "--rdzv_id");
	opts_release(&o);

	assert_int_equal(apply(&o, envp, "--master_addr=h0", "--node_rank=0", "--nnodes=2", NULL),
			 0);
	assert_string_equal(o.master_addr, "h0");
	assert_int_equal(o.node_rank, 0);
	assert_int_equal(o.master_port, 29668);
	assert_string_equal(o.slurm_used,
			    "from slurm job 42 step 0 (2 nodes: n[1-2]): --master_port=29668 "
			    "--rdzv_id=slurm-42.0; kept as given: --nnodes, --node_rank, "
			    "--master_addr");
	opts_release(&o);

	/* everything given: nothing taken, and no name resolved (h0 would not) */
	assert_int_equal(apply(&o, envp, "--master_addr=h0", "--node_rank=0", "--nnodes=2",
			       "--master_port=7", "--run_id=x", NULL),
			 0);
	assert_string_equal(o.slurm_used, "from slurm job 42 step 0 (2 nodes: n[1-2]): nothing; "
					  "kept as given: --nnodes, --node_rank, --master_addr, "
					  "--master_port, --rdzv_id");
	opts_release(&o);
}

static void test_off(void **state)
{
	const char *off[] = {"DDPLAUNCH_SLURM=0", NULL}, *on[] = {"DDPLAUNCH_SLURM=yes", NULL};
	const char *bad[] = {"DDPLAUNCH_SLURM=maybe", NULL};
	struct step_env e;
	struct launch_opts o;

	assert_int_equal(apply(&o, step(&e, "n[1-2]", 2, 1, "n2", NULL), "--no_slurm", NULL), 0);
	assert_string_equal(o.slurm_used, "");
	assert_true(o.nnodes_max == 1 && o.node_rank == -1);
	opts_release(&o);
	assert_int_equal(apply(&o, step(&e, "n[1-2]", 2, 1, "n2", off), NULL), 0);
	assert_string_equal(o.slurm_used, "");
	assert_int_equal(o.nnodes_max, 1);
	opts_release(&o);
	assert_int_equal(apply(&o, step(&e, "n[1-2]", 2, 1, "n2", NULL), "--standalone", NULL), 0);
	assert_string_equal(o.slurm_used, "");
	opts_release(&o);
	assert_int_equal(apply(&o, step(&e, "n[1-2]", 2, 1, "n2", on), NULL), 0);
	assert_int_equal(o.nnodes_max, 2);
	opts_release(&o);
	assert_int_equal(apply(&o, step(&e, "n[1-2]", 2, 1, "n2", bad), NULL), -EINVAL);
	assert_string_equal(err, "DDPLAUNCH_SLURM=\"maybe\" is not a boolean (use 0 to leave "
				 "slurm out, 1 to use it)");
	opts_release(&o);
}

static void test_tasks_per_node_refused(void **state)
{
	const char *two[] = {"SLURM_STEP_TASKS_PER_NODE=2(x2)", NULL};
	struct step_env e;
	struct launch_opts o;

	/* the first SLURM_STEP_TASKS_PER_NODE in envp wins: put it first */
	char *const *envp = step(&e, "n[1-2]", 2, 1, "n2", NULL);
	char *const envp2[] = {(char *)two[0], envp[0], envp[1], envp[2], envp[3], envp[4],
			       envp[5],	       envp[6], envp[7], envp[8], NULL};

	assert_int_equal(apply(&o, envp2, NULL), -ENOTSUP);
	assert_non_null(strstr(err, "slurm started 2 tasks on a node"));
	assert_non_null(strstr(err, "srun --nodes=2 --ntasks=2 --ntasks-per-node=1 ddplaunch"));
	assert_non_null(strstr(err, " (--no_slurm or DDPLAUNCH_SLURM=0 leaves slurm out)"));
	assert_int_equal(o.nnodes_max, 1);
	opts_release(&o);
}

static void test_one_node(void **state)
{
	struct step_env e;
	struct launch_opts o;
	struct opts_rdzv r;

	/* the store stays on loopback; the port and the run id are Slurm's */
	assert_int_equal(apply(&o, step(&e, "n2", 1, 0, "n2", NULL), NULL), 0);
	assert_string_equal(o.master_addr, "127.0.0.1");
	assert_int_equal(o.master_port, 29668);
	assert_string_equal(o.slurm_used, "from slurm job 42 step 0 (1 node: n2): --nnodes=1 "
					  "--master_port=29668 --rdzv_id=slurm-42.0");
	assert_int_equal(opts_rdzv_resolve(&o, NULL, &r, err, sizeof(err)), 0);
	assert_int_equal(r.mode, OPTS_RDZV_LOCAL);
	opts_release(&o);
	/* --nnodes=1 in a two-node step: every node alone, no rank needed */
	assert_int_equal(apply(&o, step(&e, "n[1-2]", 2, 1, "n2", NULL), "--nnodes=1", NULL), 0);
	assert_int_equal(o.node_rank, -1);
	assert_string_equal(o.master_addr, "127.0.0.1");
	assert_int_equal(opts_check(&o, err, sizeof(err)), 0);
	opts_release(&o);
}

static void test_batch_script(void **state)
{
	char *envp[] = {"SLURM_JOB_ID=7",	  "SLURM_NNODES=1",	   "SLURM_JOB_NODELIST=n1",
			"SLURM_NODELIST=n1",	  "SLURMD_NODENAME=n1",	   "SLURM_NODEID=0",
			"SLURM_TASKS_PER_NODE=1", "SLURM_JOB_NUM_NODES=1", NULL};
	struct launch_opts o;

	assert_int_equal(apply(&o, envp, NULL), 0);
	assert_string_equal(o.rdzv_id, "slurm-7.batch");
	assert_string_equal(o.slurm_used, "from slurm job 7's batch script (1 node: n1): "
					  "--nnodes=1 --master_port=29528 --rdzv_id=slurm-7.batch");
	opts_release(&o);
}

static void test_nnodes_below_step(void **state)
{
	struct step_env e;
	struct launch_opts o;

	assert_int_equal(apply(&o, step(&e, "n[1-4]", 4, 3, "n4", NULL), "--nnodes=2", NULL),
			 -EINVAL);
	assert_string_equal(err, "--nnodes=2 is below the 4 nodes of slurm's step, so this node "
				 "(n4, node 3) has no rank; give --nnodes=4, or run the step on 2 "
				 "nodes (srun --nodes=2)");
	opts_release(&o);
	/* an elastic range that holds the node count takes the rank */
	assert_int_equal(apply(&o, step(&e, "n[1-4]", 4, 3, "n4", NULL), "--nnodes=2:4",
			       "--rdzv_backend=c10d", "--rdzv_endpoint=h:5", NULL),
			 0);
	assert_int_equal(o.node_rank, 3);
	assert_string_equal(o.rdzv_endpoint, "h:5");
	assert_non_null(strstr(o.slurm_used, "kept as given: --nnodes, --rdzv_endpoint"));
	assert_false(o.slurm_endpoint); /* the rule decides who hosts h */
	opts_release(&o);
}

static void test_c10d_endpoint(void **state)
{
	struct step_env e;
	struct launch_opts o;
	struct opts_rdzv r;

	assert_int_equal(
	    apply(&o, step(&e, "n[1-2]", 2, 1, "n2", NULL), "--rdzv_backend=c10d", NULL), 0);
	assert_string_equal(o.rdzv_endpoint, "10.0.0.1:29668");
	assert_string_equal(o.master_addr, "127.0.0.1");
	assert_non_null(strstr(o.slurm_used, " --rdzv_endpoint=10.0.0.1:29668 (n1) "));
	/* the endpoint is node 0's: node 0 hosts, the others never do */
	assert_true(o.slurm_endpoint);
	assert_int_equal(opts_check(&o, err, sizeof(err)), 0);
	assert_int_equal(opts_rdzv_resolve(&o, NULL, &r, err, sizeof(err)), 0);
	assert_int_equal(r.mode, OPTS_RDZV_C10D);
	assert_true(r.host_is_node0);
	assert_int_equal(r.node_rank, 1);
	opts_release(&o);
	assert_int_equal(
	    apply(&o, step(&e, "v6,n2", 2, 1, "n2", NULL), "--rdzv_backend=c10d", NULL), 0);
	assert_string_equal(o.rdzv_endpoint, "[fd00::1]:29668");
	opts_release(&o);
}

static void test_resolver(void **state)
{
	struct step_env e;
	struct launch_opts o;

	assert_int_equal(apply(&o, step(&e, "nosuch,n2", 2, 1, "n2", NULL), NULL), -ENOENT);
	assert_string_equal(err, "cannot resolve slurm's master host 'nosuch' (the first of "
				 "SLURM_STEP_NODELIST=nosuch,n2): nosuch: name or service not "
				 "known; give --master_addr=ADDR (an address of nosuch the other "
				 "nodes reach)");
	opts_release(&o);
	/* given --master_addr: nothing to resolve */
	assert_int_equal(
	    apply(&o, step(&e, "nosuch,n2", 2, 1, "n2", NULL), "--master_addr=a", NULL), 0);
	opts_release(&o);
	assert_int_equal(apply(&o, step(&e, "two,n2", 2, 1, "n2", NULL), NULL), 0);
	assert_string_equal(o.master_addr, "10.0.0.9");
	assert_non_null(strstr(o.slurm_used, "--rdzv_id=slurm-42.0; two has 2 addresses "
					     "(10.0.0.9, fd00::9); using 10.0.0.9 (give "
					     "--master_addr to choose another)"));
	opts_release(&o);
	assert_int_equal(apply(&o, step(&e, "lo,n2", 2, 0, "lo", NULL), NULL), 0);
	assert_non_null(strstr(o.slurm_used, "; lo resolves to 127.0.1.1, a loopback address: "
					     "other hosts cannot reach it (give --master_addr "
					     "to choose another)"));
	opts_release(&o);
}

static void test_port_range(void **state)
{
	static const char ini[] = "[launch]\nslurm_port_range = 40000-40009\nno_slurm = false\n";
	struct step_env e;
	struct launch_opts o;
	FILE *f;

	assert_int_equal(
	    apply(&o, step(&e, "n[1-2]", 2, 1, "n2", NULL), "--slurm_port_range=40000-40009", NULL),
	    0);
	assert_int_equal(o.master_port, 40000 + (4 * 42) % 10);
	opts_release(&o);
	assert_int_equal(
	    apply(&o, step(&e, "n[1-2]", 2, 1, "n2", NULL), "--slurm-port-range", "31000", NULL),
	    0);
	assert_int_equal(o.master_port, 31000);
	opts_release(&o);
	assert_int_equal(opts_init(&o), 0);
	f = fmemopen((void *)ini, sizeof(ini) - 1, "r");
	assert_int_equal(jobfile_load_stream(&o, f, "job.ini", err, sizeof(err)), 0);
	fclose(f);
	assert_true(o.slurm_port_range[0] == 40000 && o.slurm_port_range[1] == 40009);
	for (const char *const *bad = (const char *const[]){"0-5", "5-4", "1-70000", "a", "", NULL};
	     *bad; bad++) {
		assert_int_equal(
		    opts_set(&o, "slurm_port_range", *bad, OPTS_SRC_CLI, err, sizeof(err)),
		    -EINVAL);
		assert_non_null(strstr(err, "LO-HI or PORT with 1 <= LO <= HI <= 65535"));
	}
	assert_true(o.slurm_port_range[0] == 40000 && o.slurm_port_range[1] == 40009);
	opts_release(&o);
}

static void test_print(void **state)
{
	char *envp[] = {"DDPLAUNCH_SLURM=off", NULL}, *none[] = {NULL};
	struct step_env e;
	struct launch_opts o;
	char out[2048];
	FILE *mem;

	assert_int_equal(apply(&o, step(&e, "n[1-2]", 2, 1, "n2", NULL), NULL), 0);
	mem = fmemopen(out, sizeof(out), "w");
	opts_slurm_print(&o, e.envp, mem);
	fclose(mem);
	assert_non_null(strstr(out, "slurm = from slurm job 42 step 0 (2 nodes: n[1-2]): "));
	assert_non_null(strstr(out, "\nslurm_port_range = 29500-29999\n"));
	opts_release(&o);
	assert_int_equal(apply(&o, envp, NULL), 0);
	mem = fmemopen(out, sizeof(out), "w");
	opts_slurm_print(&o, envp, mem);
	opts_slurm_print(&o, none, mem);
	o.no_slurm = true;
	opts_slurm_print(&o, none, mem);
	fclose(mem);
	assert_string_equal(out, "slurm = off (DDPLAUNCH_SLURM=off)\n"
				 "slurm_port_range = 29500-29999\n"
				 "slurm = not in a slurm job\n"
				 "slurm_port_range = 29500-29999\n"
				 "slurm = off (--no_slurm)\n"
				 "slurm_port_range = 29500-29999\n");
	opts_release(&o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_not_in_slurm),
	    cmocka_unit_test(test_two_nodes),
	    cmocka_unit_test(test_node_zero_and_rank_from_list),
	    cmocka_unit_test(test_flags_override_each_value),
	    cmocka_unit_test(test_off),
	    cmocka_unit_test(test_tasks_per_node_refused),
	    cmocka_unit_test(test_one_node),
	    cmocka_unit_test(test_batch_script),
	    cmocka_unit_test(test_nnodes_below_step),
	    cmocka_unit_test(test_c10d_endpoint),
	    cmocka_unit_test(test_resolver),
	    cmocka_unit_test(test_port_range),
	    cmocka_unit_test(test_print),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
