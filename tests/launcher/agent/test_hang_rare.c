/* A worker where no deadline is learned (hang_rare.h): a table of what the
 * watch knows of it and the verdict, with the long floor at 10 s. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "hang_rare.h"

#define S     1000000000ull
#define FLOOR (10 * S)

struct row {
	const char *name;
	struct hang_rare_facts f;
	enum hang_rare_why want;
};

#define FINAL	DDP_PHASE_FINAL
#define SHUT	DDP_PHASE_SHUTDOWN
#define RUNNING HANG_PS_RUNNING
#define BLOCKED HANG_PS_BLOCKED
#define STOPPED HANG_PS_STOPPED

static const struct row rows[] = {
    /* the floor first: nothing is judged within it */
    {"stopped within the floor", {.phase = FINAL, .age_ns = 9 * S, .ps = STOPPED}, HANG_RARE_NONE},
    {"stopped past the floor",
     {.phase = FINAL, .age_ns = 11 * S, .ps = STOPPED},
     HANG_RARE_STOPPED},
    {"stopped in a checkpoint not yet learned",
     {.phase = DDP_PHASE_CHECKPOINT, .age_ns = 11 * S, .ps = STOPPED},
     HANG_RARE_STOPPED},
    {"compute is the deadline's, never this rule's",
     {.phase = DDP_PHASE_COMPUTE, .age_ns = 99 * S, .ps = STOPPED},
     HANG_RARE_NONE},
    {"a collective likewise",
     {.phase = DDP_PHASE_COLLECTIVE, .age_ns = 99 * S, .ps = STOPPED},
     HANG_RARE_NONE},
    /* the final save: a slow save that writes is never cut */
    {"final save writing slowly",
     {.phase = FINAL, .age_ns = 60 * S, .ps = RUNNING, .still_ns = 0},
     HANG_RARE_NONE},
    {"final save spinning, nothing written",
     {.phase = FINAL, .age_ns = 12 * S, .ps = RUNNING, .still_ns = 11 * S},
     HANG_RARE_SPINNING},
    {"final save spinning, still within the floor",
     {.phase = FINAL, .age_ns = 30 * S, .ps = RUNNING, .still_ns = 9 * S},
     HANG_RARE_NONE},
    {"final save blocked (slow disk, an upload): not by time",
     {.phase = FINAL, .age_ns = 99 * S, .ps = BLOCKED, .still_ns = 99 * S},
     HANG_RARE_NONE},
    {"final save's collective, waiting on rank 0's write",
     {.phase = FINAL, .inside = true, .age_ns = 99 * S, .ps = RUNNING, .still_ns = 99 * S},
     HANG_RARE_NONE},
    {"final save's collective that its node's rank left",
     {.phase = FINAL,
      .inside = true,
      .peer_left = true,
      .age_ns = 20 * S,
      .ps = RUNNING,
      .still_ns = 20 * S},
     HANG_RARE_SPINNING},
    {"rank 0 saving after the others finished (they may)",
     {.phase = FINAL, .age_ns = 60 * S, .ps = BLOCKED, .peer_done_ns = 50 * S, .peer_left = true},
     HANG_RARE_NONE},
    /* shutdown: after the peers of its node finished it */
    {"shutdown, a peer finished long ago, asleep in one wait",
     {.phase = SHUT,
      .age_ns = 20 * S,
      .ps = BLOCKED,
      .peer_done_ns = 11 * S,
      .peer_rank = 3,
      .still_ns = 20 * S},
     HANG_RARE_PEER_DONE},
    {"shutdown, a peer finished long ago, spinning",
     {.phase = SHUT,
      .age_ns = 20 * S,
      .ps = RUNNING,
      .peer_done_ns = 11 * S,
      .peer_rank = 3,
      .still_ns = 11 * S},
     HANG_RARE_PEER_DONE},
    {"shutdown, a peer finished long ago, this one saves after it (writes)",
     {.phase = SHUT, .age_ns = 60 * S, .ps = BLOCKED, .peer_done_ns = 50 * S, .still_ns = 0},
     HANG_RARE_NONE},
    {"shutdown, a peer finished long ago, this one waits on the disk",
     {.phase = SHUT,
      .age_ns = 60 * S,
      .ps = BLOCKED,
      .disk_wait = true,
      .peer_done_ns = 50 * S,
      .still_ns = 50 * S},
     HANG_RARE_NONE},
    {"shutdown, a peer finished just now",
     {.phase = SHUT, .age_ns = 20 * S, .ps = BLOCKED, .peer_done_ns = 2 * S, .still_ns = 20 * S},
     HANG_RARE_NONE},
    {"shutdown alone on its node, spinning",
     {.phase = SHUT, .age_ns = 20 * S, .ps = RUNNING, .still_ns = 15 * S},
     HANG_RARE_SPINNING},
    {"shutdown alone on its node, blocked",
     {.phase = SHUT, .age_ns = 99 * S, .ps = BLOCKED, .still_ns = 99 * S},
     HANG_RARE_NONE},
};

static void test_rows(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		enum hang_rare_why got = hang_rare_judge(&rows[i].f, FLOOR);

		if (got != rows[i].want)
			fail_msg("%s: got %d, want %d", rows[i].name, got, rows[i].want);
	}
}

static void test_words(void **state)
{
	struct hang_rare_facts f = {
	    .peer_done_ns = 12100000000ull, .peer_rank = 3, .still_ns = 10300000000ull};
	char buf[128];

	(void)state;
	hang_rare_words(HANG_RARE_PEER_DONE, &f, buf, sizeof(buf));
	assert_string_equal(buf, "rank 3 of this node finished its shutdown 12.1 s ago; this one "
				 "has not written or woken for 10.3 s");
	hang_rare_words(HANG_RARE_SPINNING, &f, buf, sizeof(buf));
	assert_string_equal(buf, "it wrote nothing and never slept for 10.3 s");
	hang_rare_words(HANG_RARE_STOPPED, &f, buf, sizeof(buf));
	assert_string_equal(buf, "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_rows),
	    cmocka_unit_test(test_words),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
