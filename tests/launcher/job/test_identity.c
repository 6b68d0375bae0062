/* Unit tests: a job's identity across nodes (launcher/job/identity.c) and
 * the default run id made of it (opts_rdzv_default_run_id). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "identity.h"
#include "opts.h"
#include "opts_rdzv.h"

struct ident {
	char job[IDENTITY_JOB_LEN + 1], cmd[IDENTITY_JOB_LEN + 1], text[IDENTITY_TEXT_MAX + 1];
	char run_id[160];
};

/* ddplaunch WORDS... (NULL-terminated) parsed, its identity and default run
 * id (the rendezvous flags are the caller's). */
static struct ident identify(const char *first, ...)
{
	char *argv[32] = {"ddplaunch"}, err[OPTS_ERR_LEN] = "";
	struct launch_opts o;
	struct opts_rdzv r;
	struct ident id;
	int argc = 1;
	va_list ap;

	va_start(ap, first);
	for (const char *w = first; w && argc < 31; w = va_arg(ap, const char *))
		argv[argc++] = (char *)w;
	va_end(ap);
	assert_int_equal(opts_init(&o), 0);
	assert_int_equal(args_parse(&o, argc, argv, err, sizeof(err)), ARGS_OK);
	assert_int_equal(opts_check(&o, err, sizeof(err)), 0);
	assert_int_equal(opts_rdzv_default_run_id(&o), 0);
	assert_int_equal(opts_rdzv_resolve(&o, NULL, &r, err, sizeof(err)), 0);
	identity_make(&o, opts_rdzv_mode_name(r.mode), id.job, id.cmd, id.text);
	assert_string_equal(id.job, r.job);
	assert_string_equal(id.cmd, r.cmd);
	snprintf(id.run_id, sizeof(id.run_id), "%s", o.rdzv_id);
	opts_release(&o);
	return id;
}

#define C10D "--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=h:29400"

/* Each node its own path in the arguments: one job, two command lines. */
static void test_own_arguments_one_job(void **state)
{
	struct ident a =
	    identify(C10D, "--rdzv_id=x", "train.py", "--checkpoint_dir=/ckpt/0", NULL);
	struct ident b =
	    identify(C10D, "--rdzv_id=x", "train.py", "--checkpoint_dir=/ckpt/1", NULL);

	assert_string_equal(a.job, b.job);
	assert_string_not_equal(a.cmd, b.cmd);
	assert_non_null(strstr(a.text, "train.py --checkpoint_dir=/ckpt/0"));
	assert_string_equal(a.run_id, "x");
}

/* The program's name is compared, not the directory it was named from. */
static void test_program_name_not_directory(void **state)
{
	struct ident a = identify(C10D, "--rdzv_id=x", "train.py", NULL);
	struct ident b = identify(C10D, "--rdzv_id=x", "/shared/proj/train.py", NULL);
	struct ident c = identify(C10D, "--rdzv_id=x", "./train.py", NULL);
	struct ident d = identify(C10D, "--rdzv_id=x", "eval.py", NULL);
	struct ident e = identify(C10D, "--rdzv_id=x", "/shared/proj/eval.py", NULL);

	assert_string_equal(a.job, b.job);
	assert_string_equal(a.job, c.job);
	assert_string_not_equal(a.cmd, b.cmd);
	assert_string_not_equal(a.job, d.job);
	assert_string_not_equal(b.job, e.job);
}

/* What must agree: the mode, the nodes, how the program runs. */
static void test_what_must_agree(void **state)
{
	struct ident base = identify(C10D, "train.py", NULL);
	struct ident nodes = identify("--nnodes=2:4", "--rdzv_backend=c10d",
				      "--rdzv_endpoint=h:29400", "train.py", NULL);
	struct ident mode = identify("--nnodes=2", "--rdzv_backend=etcd", "--rdzv_endpoint=h:2379",
				     "train.py", NULL);
	struct ident module = identify(C10D, "-m", "train.py", NULL);
	struct ident nopy = identify(C10D, "--no_python", "train.py", NULL);
	struct ident nproc = identify(C10D, "--nproc_per_node=8", "train.py", NULL);

	assert_string_not_equal(base.job, nodes.job);
	assert_string_not_equal(base.job, mode.job);
	assert_string_not_equal(base.job, module.job);
	assert_string_not_equal(base.job, nopy.job);
	/* hosts with other GPU counts are one job */
	assert_string_equal(base.job, nproc.job);
	assert_string_equal(base.cmd, nproc.cmd);
}

/* Without --rdzv_id the run id comes from the whole command line: two
 * command lines that differ in an argument never meet; the same command
 * line gives the run id it gave before the job's fingerprint was split
 * ("job-" and the first form of the fingerprint, computed by hand). */
static void test_default_run_id_from_command_line(void **state)
{
	struct ident a = identify(C10D, "train.py", "--checkpoint_dir=/ckpt/0", NULL);
	struct ident b = identify(C10D, "train.py", "--checkpoint_dir=/ckpt/1", NULL);
	struct ident again = identify(C10D, "train.py", "--checkpoint_dir=/ckpt/0", NULL);

	assert_string_equal(a.job, b.job);
	assert_string_not_equal(a.run_id, b.run_id);
	assert_string_equal(a.run_id, again.run_id);
	assert_string_equal(a.run_id, "job-94047c285ad7ad2e");
	assert_string_equal(a.run_id + strlen(IDENTITY_RUN_ID_PREFIX), a.cmd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_own_arguments_one_job),
	    cmocka_unit_test(test_program_name_not_directory),
	    cmocka_unit_test(test_what_must_agree),
	    cmocka_unit_test(test_default_run_id_from_command_line),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
