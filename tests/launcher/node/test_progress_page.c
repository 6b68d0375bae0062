/* The agent's side of a worker's progress page (progress_page.h) through
 * worker_proc on a real loop: launch_helper's "progress" action, a tiny
 * writer that maps DDP_PROGRESS_FILE, is the worker. LAUNCH_HELPER and
 * DDP_EXEC name the programs (set by meson). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "leftovers.h"
#include "progress_page.h"
#include "worker_proc.h"

struct run {
	uv_loop_t loop;
	struct worker_proc p;
	int nexit, exit_code;
	int progress_at_exit; /* worker_proc_progress when the exit was heard */
	struct ddp_progress seen;
};

static const char *program(const char *var)
{
	const char *v = getenv(var);

	if (!v || !*v)
		fail_msg("%s is not set (run this test through meson)", var);
	return v;
}

static void on_exit_cb(struct worker_proc *p, void *arg)
{
	struct run *r = arg;

	r->nexit++;
	r->exit_code = p->exit_code;
	r->progress_at_exit = worker_proc_progress(p, &r->seen);
}

static void on_closed_cb(struct worker_proc *p, void *arg)
{
}

/* Runs argv to its end, with the page at `path` (NULL: none) named in its
 * environment; the page stays mapped in r->p. */
static void run_once(struct run *r, char **argv, const char *path)
{
	char var[PROGRESS_PAGE_PATH_MAX + 32];
	char *env[] = {"RANK=3", "WORLD_SIZE=6", var, NULL};
	struct worker_proc_config cfg = {
	    .loop = &r->loop,
	    .file = argv[0],
	    .argv = argv,
	    .env = env,
	    .console_fd = {-1, -1},
	    .log_fd = {-1, -1},
	    .on_exit = on_exit_cb,
	    .on_closed = on_closed_cb,
	    .arg = r,
	    .progress_path = path,
	};

	snprintf(var, sizeof(var), "%s=%s", DDP_PROGRESS_ENV, path ? path : "");
	r->nexit = 0;
	assert_int_equal(worker_proc_spawn(&r->p, &cfg), 0);
	uv_run(&r->loop, UV_RUN_DEFAULT);
	assert_int_equal(r->nexit, 1);
}

static void tag_for_test(char *tag, size_t len)
{
	snprintf(tag, len, "t%x%x", (unsigned)getpid(), (unsigned)rand());
}

static void test_path(void **state)
{
	char buf[PROGRESS_PAGE_PATH_MAX];

	assert_int_equal(progress_page_path("0123456789abcdef", 2, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "/dev/shm/ddp-0123456789abcdef-progress-2");
	assert_int_equal(progress_page_path("", 0, buf, sizeof(buf)), -EINVAL);
	assert_int_equal(progress_page_path(NULL, 0, buf, sizeof(buf)), -EINVAL);
	assert_int_equal(progress_page_path("a/b", 0, buf, sizeof(buf)), -EINVAL);
	assert_int_equal(progress_page_path("abc", 0, buf, 10), -ENAMETOOLONG);
}

/* Under ddp-exec, as the agent runs a worker: the page is a fresh file of
 * DDP_PROGRESS_SIZE zero bytes (the writer checks) and mode 0600; what the
 * worker wrote is read back, also after it exited and after the job's
 * shared-memory names were removed (its name goes with them). */
static void test_written_by_worker(void **state)
{
	struct run r = {0};
	char tag[32], path[PROGRESS_PAGE_PATH_MAX], parent[24];
	char *argv[] = {(char *)program("DDP_EXEC"),
			parent,
			(char *)program("LAUNCH_HELPER"),
			"progress",
			"812",
			"write",
			NULL};
	struct ddp_progress got;
	struct stat st;

	tag_for_test(tag, sizeof(tag));
	assert_int_equal(progress_page_path(tag, 0, path, sizeof(path)), 0);
	snprintf(parent, sizeof(parent), "%d", (int)getpid());
	assert_int_equal(uv_loop_init(&r.loop), 0);
	worker_proc_init(&r.p);
	assert_int_equal(worker_proc_progress(&r.p, &got), -ENOENT);
	run_once(&r, argv, path);

	assert_int_equal(r.exit_code, 0);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, DDP_PROGRESS_SIZE);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(r.progress_at_exit, 0);
	assert_int_equal(worker_proc_progress(&r.p, &got), 0);
	assert_int_equal(got.pid, r.p.pid);
	assert_int_equal(got.rank, 3);
	assert_int_equal(got.world, 6);
	assert_int_equal(got.phase, DDP_PHASE_COLLECTIVE);
	assert_int_equal(got.op, DDP_OP_ALLREDUCE);
	assert_int_equal(got.seq, 812);
	assert_int_equal(got.bucket, 2);
	assert_int_equal(got.waiting_on, 1);
	assert_int_equal(got.step, 7);
	assert_true(got.entered_ns > 0 && got.left_ns < got.entered_ns);

	assert_int_equal(job_shm_remove(tag), 1);
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(worker_proc_progress(&r.p, &got), 0);
	assert_int_equal(got.seq, 812);
	worker_proc_drop_progress(&r.p);
	assert_null(r.p.progress);
	assert_int_equal(worker_proc_progress(&r.p, &got), -ENOENT);
	assert_int_equal(uv_loop_close(&r.loop), 0);
}

/* A writer that stopped inside a write (the lock odd) gives no copy. */
static void test_writer_inside_a_write(void **state)
{
	struct run r = {0};
	char tag[32], path[PROGRESS_PAGE_PATH_MAX];
	char *argv[] = {(char *)program("LAUNCH_HELPER"), "progress", "5", "odd", NULL};
	struct ddp_progress got;

	tag_for_test(tag, sizeof(tag));
	assert_int_equal(progress_page_path(tag, 1, path, sizeof(path)), 0);
	assert_int_equal(uv_loop_init(&r.loop), 0);
	worker_proc_init(&r.p);
	run_once(&r, argv, path);
	assert_int_equal(r.exit_code, 0);
	assert_int_equal(worker_proc_progress(&r.p, &got), -EAGAIN);
	worker_proc_drop_progress(&r.p);
	assert_int_equal(job_shm_remove(tag), 1);
	assert_int_equal(uv_loop_close(&r.loop), 0);
}

/* Each run gets a fresh page: a worker started again in the same slot
 * (replaced alone) never sees what its predecessor wrote, and a run
 * without a path has none. */
static void test_fresh_page_per_run(void **state)
{
	struct run r = {0};
	char tag[32], path[PROGRESS_PAGE_PATH_MAX];
	char *writer[] = {(char *)program("LAUNCH_HELPER"), "progress", "9", "write", NULL};
	char *silent[] = {"/bin/true", NULL};
	struct ddp_progress got;

	tag_for_test(tag, sizeof(tag));
	assert_int_equal(progress_page_path(tag, 0, path, sizeof(path)), 0);
	assert_int_equal(uv_loop_init(&r.loop), 0);
	worker_proc_init(&r.p);
	run_once(&r, writer, path);
	assert_int_equal(r.exit_code, 0);
	assert_int_equal(worker_proc_progress(&r.p, &got), 0);

	/* The writer checks that the page it finds is all zero. */
	run_once(&r, writer, path);
	assert_int_equal(r.exit_code, 0);
	assert_int_equal(worker_proc_progress(&r.p, &got), 0);
	run_once(&r, silent, path);
	assert_int_equal(r.progress_at_exit, -ENOENT);
	assert_int_equal(worker_proc_progress(&r.p, &got), -ENOENT);
	assert_non_null(r.p.progress);
	run_once(&r, silent, NULL);
	assert_null(r.p.progress);
	assert_int_equal(worker_proc_progress(&r.p, &got), -ENOENT);
	assert_int_equal(job_shm_remove(tag), 1);
	assert_int_equal(uv_loop_close(&r.loop), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_path),
	    cmocka_unit_test(test_written_by_worker),
	    cmocka_unit_test(test_writer_inside_a_write),
	    cmocka_unit_test(test_fresh_page_per_run),
	};

	srand((unsigned)getpid());
	return cmocka_run_group_tests(tests, NULL, NULL);
}
