/* Unit tests: a worker's environment (worker_env.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "command.h"
#include "envp.h"
#include "opts.h"
#include "worker_env.h"

static struct worker_env_spec spec(void)
{
	struct worker_env_spec s = {
	    .rank = 5,
	    .local_rank = 1,
	    .world_size = 8,
	    .local_world_size = 4,
	    .group_rank = 1,
	    .group_world_size = 2,
	    .role_rank = 5,
	    .role_world_size = 8,
	    .role_name = "default",
	    .master_addr = "127.0.0.1",
	    .master_port = 40817,
	    .restart_count = 2,
	    .max_restarts = 3,
	    .run_id = "none",
	    .error_file = "/tmp/x/attempt_2/5/error.json",
	    .job_tag = "0123456789abcdef",
	    .set_omp = true,
	};
	return s;
}

static void test_torchrun_vars(void **state)
{
	char *base[] = {"PATH=/usr/bin", "HOME=/root", "RANK=99", "DDP_JOB_TAG=stale", NULL};
	struct worker_env_spec s = spec();
	char **env;
	const char *expect[][2] = {
	    {"RANK", "5"},
	    {"LOCAL_RANK", "1"},
	    {"WORLD_SIZE", "8"},
	    {"LOCAL_WORLD_SIZE", "4"},
	    {"GROUP_RANK", "1"},
	    {"GROUP_WORLD_SIZE", "2"},
	    {"ROLE_RANK", "5"},
	    {"ROLE_WORLD_SIZE", "8"},
	    {"ROLE_NAME", "default"},
	    {"MASTER_ADDR", "127.0.0.1"},
	    {"MASTER_PORT", "40817"},
	    {"TORCHELASTIC_RESTART_COUNT", "2"},
	    {"TORCHELASTIC_MAX_RESTARTS", "3"},
	    {"TORCHELASTIC_RUN_ID", "none"},
	    {"TORCHELASTIC_USE_AGENT_STORE", "True"},
	    {"TORCHELASTIC_ERROR_FILE", "/tmp/x/attempt_2/5/error.json"},
	    {"DDP_JOB_TAG", "0123456789abcdef"},
	    {"DDP_AGENT_FD", "4"},
	    {"NCCL_ASYNC_ERROR_HANDLING", "1"},
	    {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
	    {"OMP_NUM_THREADS", "1"},
	    {"PATH", "/usr/bin"},
	    {"HOME", "/root"},
	};
	size_t n = 0;

	assert_int_equal(worker_env_build(base, &s, &env), 0);
	for (size_t i = 0; i < sizeof(expect) / sizeof(expect[0]); i++) {
		const char *v = envp_get(env, expect[i][0]);

		if (!v || strcmp(v, expect[i][1]))
			fail_msg("%s = %s, expected %s", expect[i][0], v ? v : "(unset)",
				 expect[i][1]);
	}
	while (env[n])
		n++;
	/* No duplicates: each name once. */
	assert_int_equal(n, sizeof(expect) / sizeof(expect[0]));
	worker_env_free(env);
}

static void test_extra_and_user_values(void **state)
{
	char *base[] = {"NCCL_ASYNC_ERROR_HANDLING=0", "FOO=base", NULL};
	char *extra[] = {"FOO=job", "BAR=x=y", "WORLD_SIZE=1"};
	struct worker_env_spec s = spec();
	char **env;

	s.extra = extra;
	s.nextra = 3;
	s.set_omp = false;
	assert_int_equal(worker_env_build(base, &s, &env), 0);
	assert_string_equal(envp_get(env, "FOO"), "job");
	assert_string_equal(envp_get(env, "BAR"), "x=y");
	/* The contract's variables cannot be overridden by the job file. */
	assert_string_equal(envp_get(env, "WORLD_SIZE"), "8");
	/* A user's NCCL setting is kept, as torchrun does. */
	assert_string_equal(envp_get(env, "NCCL_ASYNC_ERROR_HANDLING"), "0");
	assert_null(envp_get(env, "OMP_NUM_THREADS"));
	worker_env_free(env);
}

/* The rendezvous token reaches no worker, from the agent's environment
 * or the job file's (a worker's environment is in /proc/PID/environ). */
static void test_no_token(void **state)
{
	char *base[] = {"DDP_RDZV_TOKEN=0123456789abcdef-secret", "DDP_RDZV_TOKENX=kept", NULL};
	char *extra[] = {"DDP_RDZV_TOKEN=from-the-job-file-0123"};
	struct worker_env_spec s = spec();
	char **env;

	s.extra = extra;
	s.nextra = 1;
	assert_int_equal(worker_env_build(base, &s, &env), 0);
	assert_null(envp_get(env, "DDP_RDZV_TOKEN"));
	assert_string_equal(envp_get(env, "DDP_RDZV_TOKENX"), "kept");
	for (char **p = env; *p; p++)
		assert_null(strstr(*p, "secret"));
	worker_env_free(env);
}

/* The progress page is the agent's to name: an outer launcher's (in
 * ddplaunch's environment) or the job file's never reaches a worker; the
 * spec's does, and without one there is none. */
static void test_progress_file(void **state)
{
	char *base[] = {"DDP_PROGRESS_FILE=/dev/shm/ddp-outer-progress-0", NULL};
	char *extra[] = {"DDP_PROGRESS_FILE=/tmp/from-the-job-file"};
	struct worker_env_spec s = spec();
	char **env;

	s.extra = extra;
	s.nextra = 1;
	assert_int_equal(worker_env_build(base, &s, &env), 0);
	assert_null(envp_get(env, "DDP_PROGRESS_FILE"));
	worker_env_free(env);
	s.progress_file = "/dev/shm/ddp-0123456789abcdef-progress-1";
	assert_int_equal(worker_env_build(base, &s, &env), 0);
	assert_string_equal(envp_get(env, "DDP_PROGRESS_FILE"),
			    "/dev/shm/ddp-0123456789abcdef-progress-1");
	worker_env_free(env);
}

/* DDP_AWAIT_ROUND is the agent's to give (a replacement started outside
 * the rounds): an outer launcher's or the job file's never reaches a
 * worker, which would wait for a round on the channel that never comes. */
static void test_await_round(void **state)
{
	char *base[] = {"DDP_AWAIT_ROUND=1", NULL};
	char *extra[] = {"DDP_AWAIT_ROUND=1"};
	struct worker_env_spec s = spec();
	char **env;

	s.extra = extra;
	s.nextra = 1;
	assert_int_equal(worker_env_build(base, &s, &env), 0);
	assert_null(envp_get(env, "DDP_AWAIT_ROUND"));
	worker_env_free(env);
	s.await_round = true;
	assert_int_equal(worker_env_build(base, &s, &env), 0);
	assert_string_equal(envp_get(env, "DDP_AWAIT_ROUND"), "1");
	worker_env_free(env);
}

static void test_omp(void **state)
{
	char *with[] = {"OMP_NUM_THREADS=4", NULL};
	char *without[] = {"PATH=/bin", NULL};
	char *extra[] = {"OMP_NUM_THREADS=2"};

	assert_true(worker_env_needs_omp(without, NULL, 0, 2));
	assert_false(worker_env_needs_omp(without, NULL, 0, 1));
	assert_false(worker_env_needs_omp(with, NULL, 0, 2));
	assert_false(worker_env_needs_omp(without, extra, 1, 2));
	assert_true(worker_env_needs_omp(NULL, NULL, 0, 4));
}

static void check_cmd(struct launch_opts *o, const char *python, const char *expect)
{
	char **argv, buf[256] = "";
	size_t argc;

	assert_int_equal(command_build(o, python, &argv, &argc), 0);
	for (size_t i = 0; i < argc; i++) {
		strcat(buf, i ? " " : "");
		strcat(buf, argv[i]);
	}
	assert_null(argv[argc]);
	assert_string_equal(buf, expect);
	free(argv);
}

static void test_command(void **state)
{
	struct launch_opts o;
	char err[OPTS_ERR_LEN];

	assert_int_equal(opts_init(&o), 0);
	o.program = strdup("train.py");
	opts_strv_push(&o.args, "--lr");
	opts_strv_push(&o.args, "0.1");
	check_cmd(&o, NULL, "python3 -u train.py --lr 0.1");
	check_cmd(&o, "/usr/bin/python3", "/usr/bin/python3 -u train.py --lr 0.1");
	opts_set(&o, "no_python", NULL, OPTS_SRC_CLI, err, sizeof(err));
	check_cmd(&o, "", "train.py --lr 0.1");
	o.no_python = false;
	o.module = true;
	check_cmd(&o, "", "python3 -u -m train.py --lr 0.1");
	o.module = false;
	free(o.program);
	o.program = strdup("./train");
	check_cmd(&o, "py", "./train --lr 0.1");
	opts_release(&o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_torchrun_vars), cmocka_unit_test(test_extra_and_user_values),
	    cmocka_unit_test(test_no_token),	  cmocka_unit_test(test_progress_file),
	    cmocka_unit_test(test_await_round),	  cmocka_unit_test(test_omp),
	    cmocka_unit_test(test_command),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
