/* Who is hung (hang_judge.h): a table of what the agent sees of a worker
 * and the verdict, and the line that names a hang. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "hang_judge.h"

#define MS 1000000ull

struct row {
	const char *name;
	bool page;
	uint32_t phase;
	int waiting_on;
	uint64_t age_ms, deadline_ms;
	enum hang_pstate ps;
	enum hang_verdict want;
	int want_waits_on;
	bool behind; /* a rank of its node has left this collective */
};

static const struct row rows[] = {
    {"no page: never judged", false, DDP_PHASE_COMPUTE, -1, 9000, 500, HANG_PS_STOPPED, HANG_FINE,
     -1, false},
    {"no deadline (warming up)", true, DDP_PHASE_COMPUTE, -1, 9000, 0, HANG_PS_STOPPED, HANG_FINE,
     -1, false},
    {"within its deadline", true, DDP_PHASE_COMPUTE, -1, 400, 500, HANG_PS_STOPPED, HANG_FINE, -1,
     false},
    {"at its deadline exactly", true, DDP_PHASE_COMPUTE, -1, 500, 500, HANG_PS_RUNNING, HANG_FINE,
     -1, false},
    {"has not entered: spinning", true, DDP_PHASE_COMPUTE, -1, 700, 500, HANG_PS_RUNNING,
     HANG_CULPRIT, -1, false},
    {"has not entered: stopped", true, DDP_PHASE_COMPUTE, -1, 700, 500, HANG_PS_STOPPED,
     HANG_CULPRIT, -1, false},
    {"has not entered: blocked", true, DDP_PHASE_COMPUTE, -1, 700, 500, HANG_PS_BLOCKED,
     HANG_CULPRIT, -1, false},
    {"stopped inside the collective", true, DDP_PHASE_COLLECTIVE, 2, 700, 500, HANG_PS_STOPPED,
     HANG_CULPRIT, -1, false},
    {"waits on its neighbour", true, DDP_PHASE_COLLECTIVE, 3, 700, 500, HANG_PS_BLOCKED,
     HANG_VICTIM, 3, false},
    {"waits on someone unknown", true, DDP_PHASE_COLLECTIVE, -1, 700, 500, HANG_PS_BLOCKED,
     HANG_VICTIM, -1, false},
    {"waits, says itself: unknown", true, DDP_PHASE_COLLECTIVE, 1, 700, 500, HANG_PS_BLOCKED,
     HANG_VICTIM, -1, false},
    {"a checkpoint past its own measure", true, DDP_PHASE_CHECKPOINT, -1, 30000, 16000,
     HANG_PS_BLOCKED, HANG_CULPRIT, -1, false},
    {"spins inside a collective its node's other rank left", true, DDP_PHASE_COLLECTIVE, -1, 700,
     500, HANG_PS_RUNNING, HANG_CULPRIT, -1, true},
    {"spins inside one, the others still in it too", true, DDP_PHASE_COLLECTIVE, -1, 700, 500,
     HANG_PS_RUNNING, HANG_VICTIM, -1, false},
    {"behind but blocked: waits", true, DDP_PHASE_COLLECTIVE, -1, 700, 500, HANG_PS_BLOCKED,
     HANG_VICTIM, -1, true},
    {"behind, spinning, waits on a named rank (shm)", true, DDP_PHASE_COLLECTIVE, 3, 700, 500,
     HANG_PS_RUNNING, HANG_VICTIM, 3, true},
};

static void test_rows(void **state)
{
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		const struct row *r = &rows[i];
		struct hang_view v = {.rank = 1, .pid = 100, .ps = r->ps, .behind = r->behind};
		struct hang_judgement j;

		if (r->page) {
			v.page.magic = DDP_PROGRESS_MAGIC;
			v.page.version = DDP_PROGRESS_VERSION;
		}
		v.page.phase = r->phase;
		v.page.waiting_on = r->waiting_on;
		v.age_ns = r->age_ms * MS;
		v.deadline_ns = r->deadline_ms * MS;
		j = hang_judge(&v);
		if (j.verdict != r->want || j.waits_on != r->want_waits_on)
			fail_msg("%s: verdict %d waits on %d, want %d on %d", r->name, j.verdict,
				 j.waits_on, r->want, r->want_waits_on);
		if (j.verdict != HANG_FINE)
			assert_int_equal(j.late_ns, (r->age_ms - r->deadline_ms) * MS);
	}
}

static void test_line(void **state)
{
	struct hang_view v = {.node = 1, .rank = 3, .pid = 4242, .ps = HANG_PS_STOPPED};
	struct hang_judgement j;
	char line[512];

	v.page.magic = DDP_PROGRESS_MAGIC;
	v.page.phase = DDP_PHASE_COMPUTE;
	v.page.op = DDP_OP_ALLREDUCE;
	v.page.seq = 812;
	v.page.step = 57;
	v.age_ns = 1900 * MS;
	v.deadline_ns = 500 * MS;
	j = hang_judge(&v);
	hang_line(&v, &j, DDP_OP_NONE, line, sizeof(line));
	assert_string_equal(line, "hang: node 1 rank 3 pid 4242 has not entered allreduce #813: "
				  "1.40 s past its deadline of 0.50 s (step 57); its process is "
				  "stopped");
	v.page.phase = DDP_PHASE_COLLECTIVE;
	v.ps = HANG_PS_BLOCKED;
	strcpy(v.wchan, "do_epoll_wait");
	hang_line(&v, &j, DDP_OP_NONE, line, sizeof(line));
	assert_string_equal(line, "hang: node 1 rank 3 pid 4242 has not left allreduce #812: "
				  "1.40 s past its deadline of 0.50 s (step 57); its process is "
				  "blocked in the kernel (do_epoll_wait)");
	v.page.phase = DDP_PHASE_COMPUTE;
	v.ps = HANG_PS_RUNNING;
	hang_line(&v, &j, DDP_OP_BROADCAST, line, sizeof(line));
	assert_non_null(strstr(line, "has not entered broadcast #813"));
	assert_non_null(strstr(line, "running on a CPU (spinning)"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_rows),
	    cmocka_unit_test(test_line),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
