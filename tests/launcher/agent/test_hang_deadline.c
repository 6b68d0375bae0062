/* The learned hang deadline (hang_deadline.h): a table of sample sets and
 * the deadline each gives. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "hang_deadline.h"

#define MS 1000000ull
#define S  1000000000ull

/* n samples of `ns` each, in phase/op. */
struct feed {
	enum ddp_progress_phase phase;
	enum ddp_progress_op op;
	uint64_t ns;
	int n;
};

struct row {
	const char *name;
	uint64_t fixed_ns; /* the override, 0: learned */
	bool off;
	struct feed feed[4];
	enum ddp_progress_phase phase; /* asked */
	enum ddp_progress_op op;
	uint64_t want;
};

static const struct row rows[] = {
    {"nothing seen: no deadline", 0, false, {{0}}, DDP_PHASE_COMPUTE, DDP_OP_NONE, 0},
    {"start-up is never judged without its measure",
     0,
     false,
     {{0}},
     DDP_PHASE_STARTUP,
     DDP_OP_NONE,
     0},
    {"19 steps: still warming up",
     0,
     false,
     {{DDP_PHASE_COMPUTE, 0, 1 * MS, 19}, {DDP_PHASE_COLLECTIVE, DDP_OP_ALLREDUCE, 1 * MS, 20}},
     DDP_PHASE_COMPUTE,
     DDP_OP_NONE,
     0},
    {"compute warm, collectives not: still warming up",
     0,
     false,
     {{DDP_PHASE_COMPUTE, 0, 1 * MS, 20}, {DDP_PHASE_COLLECTIVE, DDP_OP_ALLREDUCE, 1 * MS, 19}},
     DDP_PHASE_COMPUTE,
     DDP_OP_NONE,
     0},
    {"20 fast steps: the floor",
     0,
     false,
     {{DDP_PHASE_COMPUTE, 0, 1 * MS, 20}, {DDP_PHASE_COLLECTIVE, DDP_OP_ALLREDUCE, 1 * MS, 20}},
     DDP_PHASE_COMPUTE,
     DDP_OP_NONE,
     500 * MS},
    {"slow steps: k x p99",
     0,
     false,
     {{DDP_PHASE_COMPUTE, 0, 200 * MS, 20}, {DDP_PHASE_COLLECTIVE, DDP_OP_ALLREDUCE, 1 * MS, 20}},
     DDP_PHASE_COMPUTE,
     DDP_OP_NONE,
     800 * MS},
    {"peers wait long inside: compute's deadline at least theirs",
     0,
     false,
     {{DDP_PHASE_COMPUTE, 0, 1 * MS, 20}, {DDP_PHASE_COLLECTIVE, DDP_OP_ALLREDUCE, 300 * MS, 20}},
     DDP_PHASE_COMPUTE,
     DDP_OP_NONE,
     1200 * MS},
    {"one stall among many: m x the longest",
     0,
     false,
     {{DDP_PHASE_COMPUTE, 0, 10 * MS, 255},
      {DDP_PHASE_COMPUTE, 0, 1 * S, 1},
      {DDP_PHASE_COLLECTIVE, DDP_OP_NONE, 1 * MS, 20}},
     DDP_PHASE_COMPUTE,
     DDP_OP_NONE,
     2 * S},
    {"the stall falls out of the ring",
     0,
     false,
     {{DDP_PHASE_COMPUTE, 0, 1 * S, 1},
      {DDP_PHASE_COMPUTE, 0, 10 * MS, HANG_RING},
      {DDP_PHASE_COLLECTIVE, DDP_OP_NONE, 1 * MS, 20}},
     DDP_PHASE_COMPUTE,
     DDP_OP_NONE,
     500 * MS},
    {"an all-reduce: its own waits",
     0,
     false,
     {{DDP_PHASE_COLLECTIVE, DDP_OP_ALLREDUCE, 300 * MS, 20},
      {DDP_PHASE_COLLECTIVE, DDP_OP_NONE, 50 * MS, 20}},
     DDP_PHASE_COLLECTIVE,
     DDP_OP_ALLREDUCE,
     1200 * MS},
    {"an op never seen: the steps' waits",
     0,
     false,
     {{DDP_PHASE_COLLECTIVE, DDP_OP_ALLREDUCE, 300 * MS, 20},
      {DDP_PHASE_COLLECTIVE, DDP_OP_NONE, 150 * MS, 20}},
     DDP_PHASE_COLLECTIVE,
     DDP_OP_BROADCAST,
     600 * MS},
    {"steps' waits longer than the op's: the larger",
     0,
     false,
     {{DDP_PHASE_COLLECTIVE, DDP_OP_ALLREDUCE, 10 * MS, 20},
      {DDP_PHASE_COLLECTIVE, DDP_OP_NONE, 400 * MS, 20}},
     DDP_PHASE_COLLECTIVE,
     DDP_OP_ALLREDUCE,
     1600 * MS},
    {"compute samples do not warm a collective",
     0,
     false,
     {{DDP_PHASE_COMPUTE, 0, 10 * MS, 50}},
     DDP_PHASE_COLLECTIVE,
     DDP_OP_ALLREDUCE,
     0},
    {"two checkpoints: not judged yet",
     0,
     false,
     {{DDP_PHASE_CHECKPOINT, 0, 4 * S, 2}},
     DDP_PHASE_CHECKPOINT,
     DDP_OP_NONE,
     0},
    {"three checkpoints: their own measure",
     0,
     false,
     {{DDP_PHASE_CHECKPOINT, 0, 4 * S, 3}},
     DDP_PHASE_CHECKPOINT,
     DDP_OP_NONE,
     16 * S},
    {"quick checkpoints: the long floor",
     0,
     false,
     {{DDP_PHASE_CHECKPOINT, 0, 100 * MS, 3}},
     DDP_PHASE_CHECKPOINT,
     DDP_OP_NONE,
     HANG_LONG_FLOOR_NS},
    {"the override judges compute at once",
     2 * S,
     false,
     {{0}},
     DDP_PHASE_COMPUTE,
     DDP_OP_NONE,
     2 * S},
    {"the override replaces what was learned",
     2 * S,
     false,
     {{DDP_PHASE_COLLECTIVE, DDP_OP_ALLREDUCE, 3 * S, 30}},
     DDP_PHASE_COLLECTIVE,
     DDP_OP_ALLREDUCE,
     2 * S},
    {"the override leaves start-up alone", 2 * S, false, {{0}}, DDP_PHASE_STARTUP, DDP_OP_NONE, 0},
    {"an override below the floor is raised",
     100 * MS,
     false,
     {{0}},
     DDP_PHASE_COMPUTE,
     DDP_OP_NONE,
     HANG_FLOOR_MIN_NS},
    {"off: nothing",
     0,
     true,
     {{DDP_PHASE_COMPUTE, 0, 10 * MS, 50}, {DDP_PHASE_CHECKPOINT, 0, 1 * S, 5}},
     DDP_PHASE_COMPUTE,
     DDP_OP_NONE,
     0},
    {"NONE is never judged",
     0,
     false,
     {{DDP_PHASE_NONE, 0, 1 * MS, 50}},
     DDP_PHASE_NONE,
     DDP_OP_NONE,
     0},
    {"an unknown phase is ignored",
     0,
     false,
     {{(enum ddp_progress_phase)99, 0, 1 * MS, 50}},
     (enum ddp_progress_phase)99,
     DDP_OP_NONE,
     0},
};

static void test_rows(void **state)
{
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		const struct row *r = &rows[i];
		struct hang_deadline_cfg c;
		static struct hang_deadline d;
		uint64_t got;

		hang_deadline_cfg_defaults(&c);
		c.fixed_ns = r->fixed_ns;
		c.off = r->off;
		hang_deadline_init(&d, &c);
		for (int f = 0; f < 4 && r->feed[f].n; f++)
			for (int j = 0; j < r->feed[f].n; j++)
				hang_deadline_add(&d, r->feed[f].phase, r->feed[f].op,
						  r->feed[f].ns);
		got = hang_deadline_get(&d, r->phase, r->op);
		if (got != r->want)
			fail_msg("%s: got %llu ns, want %llu ns", r->name, (unsigned long long)got,
				 (unsigned long long)r->want);
	}
}

static void test_p99(void **state)
{
	struct hang_ring r = {0};

	assert_int_equal(hang_ring_p99(&r), 0);
	for (uint64_t v = 100; v >= 1; v--) {
		r.v[r.next++] = v;
		r.n++;
	}
	assert_int_equal(hang_ring_p99(&r), 99);
	r.n = 1;
	assert_int_equal(hang_ring_p99(&r), 100);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_rows),
	    cmocka_unit_test(test_p99),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
