/* Who waits on whom (hang_waiters.h): a table of what a worker's pages say
 * and its state with respect to a hang; the notice, round trip and
 * malformed; the line every node prints. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "hang_waiters.h"

#define MS    1000000ull
#define ROUND 3
#define SEQ   10
#define NOW   (100000 * MS)

/* A page of round `round` at collective seq: inside it (entered 1.2 s ago,
 * waiting on `on`) or out of it (left 0.3 s ago), in `phase`. */
static struct ddp_progress page(int round, uint32_t phase, uint64_t seq, bool inside, int on)
{
	struct ddp_progress p = {
	    .magic = DDP_PROGRESS_MAGIC,
	    .version = DDP_PROGRESS_VERSION,
	    .round = round,
	    .phase = phase,
	    .op = DDP_OP_ALLREDUCE,
	    .seq = seq,
	    .waiting_on = inside ? on : -1,
	    .entered_ns = NOW - 1200 * MS,
	    .left_ns = inside ? NOW - 1500 * MS : NOW - 300 * MS,
	    .phase_ns = NOW - 2000 * MS,
	};

	return p;
}

struct row {
	const char *name;
	bool cur; /* a page of it */
	int round;
	uint32_t phase;
	uint64_t seq;
	bool inside;
	int on;
	bool snap; /* seen inside SEQ of ROUND, waiting on 4, 0.2 s before NOW */
	enum hang_waiter_state want;
	int want_on;
	uint64_t want_seq, want_ms;
};

static const struct row rows[] = {
    {"no page", false, 0, 0, 0, false, -1, false, HANG_W_UNKNOWN, -1, 0, 0},
    {"inside the hang's collective, on its neighbour", true, ROUND, DDP_PHASE_COLLECTIVE, SEQ, true,
     4, false, HANG_W_WAITS, 4, SEQ, 1200},
    {"inside it, its transport knows not on whom", true, ROUND, DDP_PHASE_COLLECTIVE, SEQ, true, -1,
     false, HANG_W_WAITS, -1, SEQ, 1200},
    {"inside a checkpoint's barrier that is the hang's", true, ROUND, DDP_PHASE_CHECKPOINT, SEQ,
     true, 2, false, HANG_W_WAITS, 2, SEQ, 1200},
    {"inside an earlier collective", true, ROUND, DDP_PHASE_COLLECTIVE, SEQ - 2, true, 1, false,
     HANG_W_BEHIND, 1, SEQ - 2, 1200},
    {"inside a later one (the culprit stuck after S)", true, ROUND, DDP_PHASE_COLLECTIVE, SEQ + 1,
     true, 5, false, HANG_W_PAST, 5, SEQ + 1, 1200},
    {"computing before it", true, ROUND, DDP_PHASE_COMPUTE, SEQ - 1, false, -1, false,
     HANG_W_COMPUTING, -1, SEQ - 1, 300},
    {"left it since it was seen waiting in it", true, ROUND, DDP_PHASE_COMPUTE, SEQ, false, -1,
     true, HANG_W_WAITED, 4, SEQ, 1000},
    {"re-forming since it was seen waiting in it", true, ROUND, DDP_PHASE_REFORM, SEQ, false, -1,
     true, HANG_W_WAITED, 4, SEQ, 1000},
    {"in the next round since it was seen waiting", true, ROUND + 1, DDP_PHASE_COMPUTE, 2, false,
     -1, true, HANG_W_WAITED, 4, SEQ, 1000},
    {"left it, never seen in it: done", true, ROUND, DDP_PHASE_COMPUTE, SEQ, false, -1, false,
     HANG_W_DONE, -1, SEQ, 0},
    {"past it, though seen in it", true, ROUND, DDP_PHASE_COMPUTE, SEQ + 2, false, -1, true,
     HANG_W_DONE, -1, SEQ + 2, 0},
    {"in another round", true, ROUND + 1, DDP_PHASE_COMPUTE, 2, false, -1, false, HANG_W_ELSEWHERE,
     -1, 2, 2000},
    {"saving a checkpoint before it", true, ROUND, DDP_PHASE_CHECKPOINT, SEQ - 1, false, -1, false,
     HANG_W_ELSEWHERE, -1, SEQ - 1, 2000},
};

static void test_state_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		const struct row *r = &rows[i];
		struct ddp_progress cur = page(r->round, r->phase, r->seq, r->inside, r->on);
		struct ddp_progress snap = page(ROUND, DDP_PHASE_COLLECTIVE, SEQ, true, 4);
		struct hang_waiter w =
		    hang_waiter_of(7, r->cur ? &cur : NULL, r->snap ? &snap : NULL, NOW - 200 * MS,
				   ROUND, SEQ, NOW);

		print_message("%s\n", r->name);
		assert_int_equal(w.rank, 7);
		assert_int_equal(w.state, r->want);
		assert_int_equal(w.waits_on, r->want_on);
		if (r->want != HANG_W_UNKNOWN)
			assert_int_equal(w.seq, r->want_seq);
		assert_int_equal(w.for_ms, r->want_ms);
	}
}

static const struct hang_waiter some[] = {
    {0, HANG_W_WAITS, 4, DDP_OP_ALLREDUCE, DDP_PHASE_COLLECTIVE, SEQ, 1100},
    {1, HANG_W_WAITS, -1, DDP_OP_ALLREDUCE, DDP_PHASE_COLLECTIVE, SEQ, 1090},
    {2, HANG_W_WAITED, 1, DDP_OP_ALLREDUCE, DDP_PHASE_REFORM, SEQ, 980},
    {3, HANG_W_BEHIND, 2, DDP_OP_BROADCAST, DDP_PHASE_COLLECTIVE, SEQ - 1, 20},
    {4, HANG_W_COMPUTING, -1, DDP_OP_ALLREDUCE, DDP_PHASE_COMPUTE, SEQ - 1, 300},
    {5, HANG_W_DONE, -1, DDP_OP_ALLREDUCE, DDP_PHASE_COMPUTE, SEQ, 0},
    {6, HANG_W_ELSEWHERE, -1, DDP_OP_NONE, DDP_PHASE_CHECKPOINT, 0, 2500},
    {7, HANG_W_PAST, 0, DDP_OP_BARRIER, DDP_PHASE_COLLECTIVE, SEQ + 1, 700},
    {8, HANG_W_UNKNOWN, -1, 0, 0, 0, 0},
};
#define NSOME ((int)(sizeof(some) / sizeof(some[0])))
static const struct hang_ref ref = {ROUND, 3, SEQ};

/* Field by field: a struct's padding is not its value. */
static void assert_same(const struct hang_waiter *a, const struct hang_waiter *b, int n)
{
	for (int i = 0; i < n; i++) {
		assert_int_equal(a[i].rank, b[i].rank);
		assert_int_equal(a[i].state, b[i].state);
		assert_int_equal(a[i].waits_on, b[i].waits_on);
		assert_int_equal(a[i].op, b[i].op);
		assert_int_equal(a[i].phase, b[i].phase);
		assert_int_equal(a[i].seq, b[i].seq);
		assert_int_equal(a[i].for_ms, b[i].for_ms);
	}
}

static void test_notice_round_trip(void **state)
{
	char buf[1025];
	struct hang_waiter w[HANG_WAITERS_MAX];
	struct hang_ref got;
	int node = -1;

	(void)state;
	assert_int_equal(hang_waiters_encode(&ref, 2, some, NSOME, buf, sizeof(buf)), NSOME);
	assert_string_equal(buf, "wait1 3 3 10 2 9 0,1,4,1,5,10,1100 1,1,-1,1,5,10,1090 "
				 "2,2,1,1,2,10,980 3,3,2,2,5,9,20 4,4,-1,1,4,9,300 5,5,-1,1,4,10,0 "
				 "6,6,-1,0,6,0,2500 7,7,0,3,5,11,700 8,0,-1,0,0,0,0");
	assert_int_equal(hang_waiters_decode(buf, &got, &node, w, HANG_WAITERS_MAX), NSOME);
	assert_int_equal(node, 2);
	assert_int_equal(got.round, ROUND);
	assert_int_equal(got.rank, 3);
	assert_int_equal(got.seq, SEQ);
	assert_same(w, some, NSOME);
	/* none at all */
	assert_int_equal(hang_waiters_encode(&ref, 0, some, 0, buf, sizeof(buf)), 0);
	assert_int_equal(hang_waiters_decode(buf, &got, &node, w, HANG_WAITERS_MAX), 0);
}

static void test_notice_bounded(void **state)
{
	struct hang_waiter many[HANG_WAITERS_MAX], w[HANG_WAITERS_MAX];
	char buf[1025], tiny[12];
	struct hang_ref got;
	int node, k;

	(void)state;
	for (int i = 0; i < HANG_WAITERS_MAX; i++)
		many[i] = (struct hang_waiter){1000000 + i,	 HANG_W_WAITS,	       999999,
					       DDP_OP_ALLREDUCE, DDP_PHASE_COLLECTIVE, UINT64_MAX,
					       UINT64_MAX};
	k = hang_waiters_encode(&ref, 1, many, HANG_WAITERS_MAX, buf, sizeof(buf));
	assert_true(k > 0 && k < HANG_WAITERS_MAX);
	assert_true(strlen(buf) <= 1024);
	assert_int_equal(hang_waiters_decode(buf, &got, &node, w, HANG_WAITERS_MAX), k);
	assert_same(w, many, k);
	assert_int_equal(hang_waiters_encode(&ref, 1, many, 1, tiny, sizeof(tiny)), -ENOSPC);
	/* more than the reader takes */
	assert_int_equal(hang_waiters_decode(buf, &got, &node, w, k - 1), -EINVAL);
}

static void test_notice_malformed(void **state)
{
	static const char *const bad[] = {
	    "wait1 3 3 10 2 2 0,1,4,1,5,10,1100",		     /* one of two */
	    "wait1 3 3 10 2 1 0,1,4,1,5,10,1100 1,1,-1,1,5,10,1090", /* one too many */
	    "wait1 3 3 10 2 1 0,9,4,1,5,10,1100",		     /* no such state */
	    "wait1 3 3 10 2 1 0,1,4,9,5,10,1100",		     /* no such op */
	    "wait1 3 3 10 2 1 0,1,4,1,99,10,1100",		     /* no such phase */
	    "wait1 3 3 10 2 1 0,1,-2,1,5,10,1100",		     /* waits on -2 */
	    "wait1 3 3 10 2 1 -1,1,4,1,5,10,1100",		     /* rank -1 */
	    "wait1 -1 3 10 2 0",				     /* round -1 */
	    "wait1 3 3 10 -2 0",				     /* node -2 */
	    "wait1 3 3 10 2 -1",				     /* count -1 */
	    "wait1 3 3 10 2 1 0,1,4,1,5,10,1100 x",		     /* left over */
	    "wait1 3 3 10 2 1 0,1,4,1,5,10",			     /* short */
	    "wait1 3 3",					     /* short */
	    "wait1 ",
	};
	struct hang_waiter w[HANG_WAITERS_MAX];
	struct hang_ref got;
	char buf[1025];
	int node;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		print_message("%s\n", bad[i]);
		assert_int_equal(hang_waiters_decode(bad[i], &got, &node, w, HANG_WAITERS_MAX),
				 -EINVAL);
	}
	assert_int_equal(hang_waiters_decode("hang1 1 1 3 42 7 100 500\thang: rank 3", &got, &node,
					     w, HANG_WAITERS_MAX),
			 -ENOENT);
	assert_int_equal(hang_waiters_decode("wait2 3 3 10 2 0", &got, &node, w, HANG_WAITERS_MAX),
			 -ENOENT);
	/* every prefix: another kind, malformed, or (cut inside the last
	 * number) all of them; never more */
	hang_waiters_encode(&ref, 2, some, NSOME, buf, sizeof(buf));
	for (size_t len = 0; len < strlen(buf); len++) {
		char cut[1025];
		int n;

		memcpy(cut, buf, len);
		cut[len] = '\0';
		n = hang_waiters_decode(cut, &got, &node, w, HANG_WAITERS_MAX);
		assert_true(n == -ENOENT || n == -EINVAL || n == NSOME);
		assert_int_equal(n == -ENOENT, len < 6);
	}
}

static void test_line(void **state)
{
	char line[2048];

	(void)state;
	hang_waiters_line(&ref, 2, some, NSOME, line, sizeof(line));
	assert_string_equal(
	    line, "waiters of hang 3.3.10 (rank 3) on node 2: "
		  "rank 0 waits on rank 4 in allreduce #10 for 1.10 s; "
		  "rank 1 waits in allreduce #10 for 1.09 s (its transport does not know on whom); "
		  "rank 2 waited on rank 1 in allreduce #10 for 0.98 s (it has left it since); "
		  "rank 3 is not yet at #10: waits on rank 2 in broadcast #9 for 0.02 s; "
		  "rank 4 is computing, not yet at #10 (for 0.30 s); "
		  "rank 5 is done with #10 (now in compute); "
		  "rank 6 is in checkpoint (for 2.50 s); "
		  "rank 7 is past #10: waits on rank 0 in barrier #11 for 0.70 s; "
		  "rank 8 has no progress page");
	hang_waiters_line(&ref, 0, some, 0, line, sizeof(line));
	assert_string_equal(line, "waiters of hang 3.3.10 (rank 3) on node 0: none");
	/* bounded: cut, terminated */
	assert_int_equal(hang_waiters_line(&ref, 2, some, NSOME, line, 40), 39);
	assert_int_equal(strlen(line), 39);
	for (int s = 0; s <= HANG_W_COUNT; s++)
		assert_non_null(hang_waiter_state_name((enum hang_waiter_state)s));
	assert_string_equal(hang_waiter_state_name(HANG_W_WAITED), "waited");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_state_table),	   cmocka_unit_test(test_notice_round_trip),
	    cmocka_unit_test(test_notice_bounded), cmocka_unit_test(test_notice_malformed),
	    cmocka_unit_test(test_line),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
