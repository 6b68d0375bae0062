/* Unit tests: the agent's decisions (launcher/agent/agent_decide.c), as
 * tables of (event, node view) -> decision, without a loop or a process. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>

#include "agent_decide.h"

#define RUN  AGENT_RUNNING
#define REP  AGENT_REPLACING
#define REF  AGENT_REFORMING
#define STOP AGENT_STOPPING

/* One worker's end: the view, then what must be decided. */
struct exit_row {
	const char *what;
	enum agent_state state;
	enum agent_charge charge;
	int exit_code, term_signal;
	bool stopped, permanent, resizable, round_not_taken, others_in_place, left;
	enum agent_exit_action action;
	enum agent_charge charged;
	bool replacement;
};

/* Most rows: started, every sibling in place, replacements left. */
static const struct exit_row exit_rows[] = {
    /* 1-3: nothing to decide */
    {"finished", RUN, 0, 0, 0, false, false, true, false, true, true, AGENT_EXIT_NONE, 0, false},
    {"finished while a round is joined", REF, 0, 0, 0, false, false, true, true, true, true,
     AGENT_EXIT_NONE, 0, false},
    {"stopped by ddplaunch", STOP, AGENT_CHARGE_ROUND, 0, SIGTERM, true, false, true, false, true,
     true, AGENT_EXIT_NONE, 0, false},
    {"second failure of a failed group", STOP, AGENT_CHARGE_FAILURE, 1, 0, false, false, true,
     false, true, true, AGENT_EXIT_NONE, AGENT_CHARGE_FAILURE, false},
    {"failed on its own while the group stops", STOP, AGENT_CHARGE_ROUND, 0, SIGSEGV, false, false,
     true, false, true, true, AGENT_EXIT_NONE, AGENT_CHARGE_FAILURE, false},
    {"exit 78 while the group stops", STOP, AGENT_CHARGE_FAILURE, 78, 0, false, true, true, false,
     true, true, AGENT_EXIT_NONE, AGENT_CHARGE_PERMANENT, false},
    /* 4: a failure that repeats is never replaced nor forgiven */
    {"exit 78", RUN, 0, 78, 0, false, true, true, false, true, true, AGENT_EXIT_STOP,
     AGENT_CHARGE_PERMANENT, false},
    {"exit 78 handed a round", RUN, 0, 78, 0, false, true, true, true, true, true, AGENT_EXIT_STOP,
     AGENT_CHARGE_PERMANENT, false},
    {"exit 78 while joining", REF, 0, 78, 0, false, true, true, false, true, true, AGENT_EXIT_STOP,
     AGENT_CHARGE_PERMANENT, false},
    /* 5: a death by signal is a death, whatever round was in its way */
    {"killed", RUN, 0, 0, SIGKILL, false, false, true, false, true, true, AGENT_EXIT_REPLACE_RENEW,
     0, true},
    {"killed, handed a round it never took", RUN, 0, 0, SIGKILL, false, false, true, true, true,
     true, AGENT_EXIT_REPLACE_RENEW, 0, true},
    {"killed while the round is joined", REF, 0, 0, SIGKILL, false, false, true, false, true, true,
     AGENT_EXIT_REPLACE, 0, true},
    {"killed while a sibling waits for its round", REP, 0, 0, SIGKILL, false, false, true, false,
     true, true, AGENT_EXIT_REPLACE, 0, true},
    {"crashed while joining, no replacement left", REF, 0, 0, SIGSEGV, false, false, true, false,
     true, false, AGENT_EXIT_STOP, AGENT_CHARGE_FAILURE, false},
    {"crashed, handed a round, none left", RUN, 0, 0, SIGSEGV, false, false, true, true, true,
     false, AGENT_EXIT_STOP, AGENT_CHARGE_FAILURE, false},
    {"killed, a sibling blocks", RUN, 0, 0, SIGKILL, false, false, true, false, false, true,
     AGENT_EXIT_STOP, AGENT_CHARGE_FAILURE, false},
    {"killed, never said resizable", REF, 0, 0, SIGKILL, false, false, false, false, true, true,
     AGENT_EXIT_STOP, AGENT_CHARGE_FAILURE, false},
    /* 6: left instead of re-forming: uncharged, the node starts again */
    {"exit 6, handed a round it never took", RUN, 0, 6, 0, false, false, true, true, true, true,
     AGENT_EXIT_NEXT_ROUND, AGENT_CHARGE_ROUND, false},
    {"exit 6 while the round is joined", REF, 0, 6, 0, false, false, true, false, true, true,
     AGENT_EXIT_NEXT_ROUND, AGENT_CHARGE_ROUND, false},
    {"exit 6, none left, handed a round", RUN, 0, 6, 0, false, false, true, true, true, false,
     AGENT_EXIT_NEXT_ROUND, AGENT_CHARGE_ROUND, false},
    /* 7: any other exit with a code */
    {"exit 1 while running", RUN, 0, 1, 0, false, false, true, false, true, true,
     AGENT_EXIT_REPLACE_RENEW, 0, true},
    {"exit 1 while a sibling waits", REP, 0, 1, 0, false, false, true, false, true, true,
     AGENT_EXIT_REPLACE, 0, true},
    {"exit 1, none left", RUN, 0, 1, 0, false, false, true, false, true, false, AGENT_EXIT_STOP,
     AGENT_CHARGE_FAILURE, false},
    {"exit 1, plain program", RUN, 0, 1, 0, false, false, false, false, true, true, AGENT_EXIT_STOP,
     AGENT_CHARGE_FAILURE, false},
    {"exit 1, plain program, while joining", REF, 0, 1, 0, false, false, false, false, false, true,
     AGENT_EXIT_STOP, AGENT_CHARGE_FAILURE, false},
};

static void test_exit_table(void **state)
{
	for (size_t i = 0; i < sizeof(exit_rows) / sizeof(exit_rows[0]); i++) {
		const struct exit_row *r = &exit_rows[i];
		struct agent_exit_view v = {
		    .state = r->state,
		    .charge = r->charge,
		    .stopped = r->stopped,
		    .started = true,
		    .exit_code = r->exit_code,
		    .term_signal = r->term_signal,
		    .permanent = r->permanent,
		    .resizable = r->resizable,
		    .round_not_taken = r->round_not_taken,
		    .others_in_place = r->others_in_place,
		    .replacements_left = r->left,
		};
		struct agent_exit_decision d = agent_decide_exit(&v);

		print_message("row %zu: %s\n", i, r->what);
		assert_int_equal(d.action, r->action);
		assert_int_equal(d.charge, r->charged);
		assert_int_equal(d.replacement, r->replacement);
	}
}

static void test_exit_outside(void **state)
{
	/* A replacement outside the rounds (AGENT_W_AWAITING) that exits with
	 * a code while a round is joined had no round in its way: it did not
	 * leave instead of re-forming (rule 6), it failed (rule 7). */
	struct agent_exit_view v = {.state = REF,
				    .started = true,
				    .exit_code = 1,
				    .resizable = true,
				    .others_in_place = true,
				    .replacements_left = true};

	assert_int_equal(agent_decide_exit(&v).action, AGENT_EXIT_NEXT_ROUND);
	v.outside = true;
	assert_int_equal(agent_decide_exit(&v).action, AGENT_EXIT_REPLACE);
	assert_true(agent_decide_exit(&v).replacement);
	v.replacements_left = false;
	assert_int_equal(agent_decide_exit(&v).action, AGENT_EXIT_STOP);
}

static void test_exit_start_failed(void **state)
{
	/* A worker that could not be started is a failure, never replaced nor
	 * taken for one that left, and permanent when its cause repeats. */
	struct agent_exit_view v = {.state = RUN,
				    .exit_code = 127,
				    .resizable = true,
				    .round_not_taken = true,
				    .others_in_place = true,
				    .replacements_left = true};
	struct agent_exit_decision d = agent_decide_exit(&v);

	assert_int_equal(d.action, AGENT_EXIT_STOP);
	assert_int_equal(d.charge, AGENT_CHARGE_FAILURE);
	v.exit_code = 0; /* a start failure has no exit code of its own */
	assert_int_equal(agent_decide_exit(&v).action, AGENT_EXIT_STOP);
	v.permanent = true;
	assert_int_equal(agent_decide_exit(&v).charge, AGENT_CHARGE_PERMANENT);
}

static void test_in_round(void **state)
{
	static const struct {
		struct agent_worker_view w;
		enum agent_in_round want;
	} rows[] = {
	    {{AGENT_W_RUNNING, true, false, false}, AGENT_IN_ROUND_HANDED},
	    {{AGENT_W_RUNNING, true, true, false}, AGENT_IN_ROUND_HANDED},
	    /* a replacement still starting: started again, not its siblings */
	    {{AGENT_W_RUNNING, false, true, false}, AGENT_IN_ROUND_STARTS},
	    /* a plain program, or one that said "fixed" */
	    {{AGENT_W_RUNNING, false, false, false}, AGENT_IN_ROUND_BLOCKS},
	    {{AGENT_W_REPLACING, false, false, false}, AGENT_IN_ROUND_STARTS},
	    {{AGENT_W_RESPAWN, true, true, false}, AGENT_IN_ROUND_STARTS},
	    {{AGENT_W_EXITED, true, false, false}, AGENT_IN_ROUND_BLOCKS},
	    {{AGENT_W_IDLE, false, false, false}, AGENT_IN_ROUND_BLOCKS},
	    /* replaced early (issue 24): out of the round, blocking nothing,
	     * until its new process says "resizable" outside the rounds */
	    {{AGENT_W_REPLACING, false, false, true}, AGENT_IN_ROUND_OUTSIDE},
	    {{AGENT_W_RESPAWN, false, true, true}, AGENT_IN_ROUND_OUTSIDE},
	    {{AGENT_W_AWAITING, false, true, true}, AGENT_IN_ROUND_OUTSIDE},
	    {{AGENT_W_AWAITING, true, true, true}, AGENT_IN_ROUND_HANDED},
	};

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		print_message("row %zu\n", i);
		assert_int_equal(agent_decide_in_round(&rows[i].w), rows[i].want);
	}
}

static void test_round_over(void **state)
{
	assert_int_equal(agent_decide_round_over(RUN, AGENT_NEXT_NONE, false), AGENT_RO_JOIN);
	assert_int_equal(agent_decide_round_over(RUN, AGENT_NEXT_NONE, true), AGENT_RO_STOP);
	/* the round asked for a worker replaced alone */
	assert_int_equal(agent_decide_round_over(REP, AGENT_NEXT_NONE, false), AGENT_RO_JOIN);
	assert_int_equal(agent_decide_round_over(REP, AGENT_NEXT_NONE, true), AGENT_RO_STOP);
	/* a join in flight, or no group running: only said */
	assert_int_equal(agent_decide_round_over(REF, AGENT_NEXT_JOINING, false), AGENT_RO_LOG);
	assert_int_equal(agent_decide_round_over(STOP, AGENT_NEXT_NONE, false), AGENT_RO_LOG);
	assert_int_equal(agent_decide_round_over(STOP, AGENT_NEXT_KEPT, true), AGENT_RO_LOG);
	assert_int_equal(agent_decide_round_over(AGENT_JOINING, AGENT_NEXT_NONE, false),
			 AGENT_RO_LOG);
	assert_int_equal(agent_decide_round_over(AGENT_AWAITING, AGENT_NEXT_JOINING, false),
			 AGENT_RO_LOG);
}

static void test_joined(void **state)
{
	static const struct {
		enum agent_state s;
		int status;
		bool same, blocked;
		enum agent_charge charge;
		enum agent_joined want;
	} rows[] = {
	    {REF, 0, true, false, AGENT_CHARGE_NONE, AGENT_JOINED_HAND_OUT},
	    {REF, 0, false, false, AGENT_CHARGE_NONE, AGENT_JOINED_STOP_KEEP},
	    /* a worker said "fixed" (or ended) while the round was joined: it
	     * would not take the round, and the others would wait for it */
	    {REF, 0, true, true, AGENT_CHARGE_NONE, AGENT_JOINED_STOP_KEEP},
	    {REF, -ETIMEDOUT, true, false, AGENT_CHARGE_NONE, AGENT_JOINED_FAIL},
	    {STOP, -ECONNRESET, true, false, AGENT_CHARGE_ROUND, AGENT_JOINED_FAIL},
	    /* stopping to start again (a worker left instead of re-forming) */
	    {STOP, 0, true, true, AGENT_CHARGE_ROUND, AGENT_JOINED_KEEP},
	    {AGENT_AWAITING, 0, false, true, AGENT_CHARGE_ROUND, AGENT_JOINED_KEEP},
	    /* a failure while joining is told in the round, not forgotten */
	    {STOP, 0, true, true, AGENT_CHARGE_FAILURE, AGENT_JOINED_ADOPT},
	    {AGENT_AWAITING, 0, true, true, AGENT_CHARGE_PERMANENT, AGENT_JOINED_ADOPT},
	    /* every worker finished while the round was joined */
	    {AGENT_AWAITING, 0, true, true, AGENT_CHARGE_NONE, AGENT_JOINED_ADOPT},
	};

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		print_message("row %zu\n", i);
		assert_int_equal(agent_decide_joined(rows[i].s, rows[i].status, rows[i].same,
						     rows[i].blocked, rows[i].charge),
				 rows[i].want);
	}
}

static void test_charge(void **state)
{
	assert_true(agent_group_runs(RUN) && agent_group_runs(REP) && agent_group_runs(REF));
	assert_false(agent_group_runs(STOP) || agent_group_runs(AGENT_AWAITING) ||
		     agent_group_runs(AGENT_JOINING) || agent_group_runs(AGENT_DONE));
	assert_int_equal(agent_charge_max(AGENT_CHARGE_ROUND, AGENT_CHARGE_FAILURE),
			 AGENT_CHARGE_FAILURE);
	assert_int_equal(agent_charge_max(AGENT_CHARGE_PERMANENT, AGENT_CHARGE_ROUND),
			 AGENT_CHARGE_PERMANENT);
	assert_int_equal(agent_charge_max(AGENT_CHARGE_NONE, AGENT_CHARGE_NONE), AGENT_CHARGE_NONE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_exit_table),	 cmocka_unit_test(test_exit_start_failed),
	    cmocka_unit_test(test_exit_outside), cmocka_unit_test(test_in_round),
	    cmocka_unit_test(test_round_over),	 cmocka_unit_test(test_joined),
	    cmocka_unit_test(test_charge),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
