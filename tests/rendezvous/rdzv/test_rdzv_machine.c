/*
 * test_rdzv_machine.c - the rendezvous machine (rendezvous/rdzv/) driven by
 * simulated agents over the fake store of rdzv_fake.c, with a fake clock:
 * formation, last call, death, leave, joins, deadlines, restarts (and the
 * grace that keeps a failure a death caused from being charged), run ids.
 * Times asserted are fake-clock times, so "at once" means no timer had to
 * fire: the agents reacted to changes, nobody polled.
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rdzv_fake.h"

#define SEEDS 12

/* The scheduler's seed for the single-net tests; RDZV_SEEDS=N runs the
 * whole group N times with seeds RDZV_SEED (1) .. RDZV_SEED + N - 1 (a
 * local stress run). */
static uint64_t g_seed = 1;

static struct fake_net *net_of(void **state)
{
	return *state;
}

static int setup(void **state)
{
	*state = fake_net_new(g_seed);
	return 0;
}

static int teardown(void **state)
{
	fake_net_free(*state);
	return 0;
}

static void add_n(struct fake_net *net, const char *run, int n, uint32_t min, uint32_t max)
{
	for (int i = 0; i < n; i++)
		fake_add(net, run, min, max);
}

static void start_range(struct fake_net *net, int from, int to)
{
	for (int i = from; i < to; i++)
		fake_start(net, fake_agent(net, i));
}

static bool run_to_round(struct fake_net *net, uint32_t round, int64_t max_ms)
{
	return fake_run(net, fake_all_in_round, &round, max_ms);
}

static struct fake_agent *with_rank(struct fake_net *net, uint32_t rank)
{
	for (int i = 0; i < fake_count(net); i++) {
		struct fake_agent *a = fake_agent(net, i);
		if (a->running && !a->frozen && a->in_round && a->rank == rank)
			return a;
	}
	fail_msg("no running agent has rank %u", rank);
	return NULL;
}

/* Every running agent agrees on the round and its ranks are 0..size-1. */
static void assert_world(struct fake_net *net, uint32_t round, uint32_t size)
{
	uint8_t seen[FAKE_AGENTS_MAX] = {0};
	uint32_t n = 0;
	const char *master = NULL;
	for (int i = 0; i < fake_count(net); i++) {
		struct fake_agent *a = fake_agent(net, i);
		if (!a->running || a->frozen)
			continue;
		assert_true(a->in_round);
		assert_int_equal(a->round, round);
		assert_int_equal(a->size, size);
		assert_true(a->rank < size);
		assert_false(seen[a->rank]);
		seen[a->rank] = 1;
		assert_int_equal(a->first_proc, 2 * (uint64_t)a->rank);
		assert_int_equal(a->world_procs, 2 * (uint64_t)size);
		if (a->rank == 0)
			master = a->addr;
		n++;
	}
	assert_int_equal(n, size);
	assert_non_null(master);
	for (int i = 0; i < fake_count(net); i++) {
		struct fake_agent *a = fake_agent(net, i);
		if (a->running && !a->frozen) {
			assert_string_equal(a->master_addr, master);
			assert_int_equal(a->master_port, with_rank(net, 0)->cfg.port);
		}
	}
}

static void formation(uint32_t n, uint64_t seed)
{
	struct fake_net *net = fake_net_new(seed);
	add_n(net, "job", (int)n, n, n);
	start_range(net, 0, (int)n);
	assert_true(run_to_round(net, 1, 1000));
	assert_int_equal(fake_now(net), 0); /* formed without any timer firing */
	assert_world(net, 1, n);
	for (int i = 0; i < (int)n; i++) {
		assert_int_equal(fake_agent(net, i)->gen, 1);
		assert_int_equal(fake_agent(net, i)->restarts, 0);
	}
	/* Linear cost: a handful of store requests per agent, whatever n is. */
	uint64_t per = fake_requests(net) / n;
	if (per > 10)
		fail_msg("%" PRIu64 " requests per agent for %u agents", per, n);
	/* A minute of heartbeats changes nothing. */
	fake_run(net, NULL, NULL, 60000);
	assert_world(net, 1, n);
	for (int i = 0; i < (int)n; i++)
		assert_int_equal(fake_agent(net, i)->rounds, 1);
	fake_net_free(net);
}

static void test_form_2(void **unused)
{
	for (uint64_t s = 1; s <= SEEDS; s++)
		formation(2, s + 1000 * g_seed);
}

static void test_form_4(void **unused)
{
	for (uint64_t s = 1; s <= SEEDS; s++)
		formation(4, s + 1000 * g_seed);
}

static void test_form_8(void **unused)
{
	for (uint64_t s = 1; s <= SEEDS; s++)
		formation(8, s + 1000 * g_seed);
}

static void test_form_512(void **unused)
{
	formation(512, 7 + g_seed);
}

static void test_last_call(void **state)
{
	struct fake_net *net = net_of(state);
	add_n(net, "job", 3, 2, 4);
	start_range(net, 0, 3);
	fake_run(net, NULL, NULL, 29999);
	for (int i = 0; i < 3; i++)
		assert_false(fake_agent(net, i)->in_round);
	assert_true(run_to_round(net, 1, 60000));
	assert_int_equal(fake_now(net), 30000); /* last_call_timeout after MIN */
	assert_world(net, 1, 3);
}

static void test_max_closes_at_once(void **state)
{
	struct fake_net *net = net_of(state);
	add_n(net, "job", 4, 2, 4);
	start_range(net, 0, 4);
	assert_true(run_to_round(net, 1, 60000));
	assert_int_equal(fake_now(net), 0);
	assert_world(net, 1, 4);
}

/* Forms 4 nodes of a 2:4 job at once. */
static void form_four(struct fake_net *net)
{
	add_n(net, "job", 4, 2, 4);
	start_range(net, 0, 4);
	assert_true(run_to_round(net, 1, 1000));
}

static void death(uint64_t seed)
{
	struct fake_net *net = fake_net_new(seed);
	form_four(net);
	struct fake_agent *r0 = with_rank(net, 0), *r1 = with_rank(net, 1), *r3 = with_rank(net, 3);
	char prefix[256];
	snprintf(prefix, sizeof(prefix), "%s", r0->key_prefix);
	int64_t t0 = fake_now(net);
	fake_kill(net, with_rank(net, 2));
	assert_true(run_to_round(net, 2, 60000));
	assert_int_equal(fake_now(net), t0); /* the session's end was heard at once */
	assert_world(net, 2, 3);
	assert_int_equal(r0->rank, 0); /* survivors keep their ranks ... */
	assert_int_equal(r1->rank, 1);
	assert_int_equal(r3->rank, 2);	   /* ... where the smaller world has them */
	assert_int_equal(r0->restarts, 0); /* membership changes are free */
	assert_string_not_equal(r0->key_prefix, prefix);
	assert_int_equal(r0->round_overs, 1);
	fake_net_free(net);
}

static void test_death(void **unused)
{
	for (uint64_t s = 1; s <= SEEDS; s++)
		death(s + 1000 * g_seed);
}

static void test_leave(void **state)
{
	struct fake_net *net = net_of(state);
	form_four(net);
	struct fake_agent *leaver = with_rank(net, 1), *r3 = with_rank(net, 3);
	int64_t t0 = fake_now(net);
	fake_stop(net, leaver);
	assert_true(run_to_round(net, 2, 60000));
	assert_int_equal(fake_now(net), t0);
	assert_int_equal(leaver->ended, RDZV_ACT_LEFT);
	assert_world(net, 2, 3);
	assert_int_equal(r3->rank, 1);
	const struct rdzv_state *st = rdzv_machine_state(r3->m);
	assert_int_equal(st->reason, RDZV_WHY_LEFT);
	assert_string_equal(st->subject, leaver->node_id);
}

/* A node of a job that cannot go on without it leaves with a failure that
 * will repeat: every other node ends at once, FAILED as permanent, with
 * the leaver and its cause in its message (before, the others re-formed
 * without it and waited for join_timeout). n nodes of --nnodes=min:max. */
static void permanent_ends_all(uint32_t n, uint32_t min, uint32_t max)
{
	struct fake_net *net = fake_net_new(g_seed);
	add_n(net, "job", (int)n, min, max);
	start_range(net, 0, (int)n);
	assert_true(run_to_round(net, 1, 120000)); /* n < max: after the last call */
	struct fake_agent *leaver = with_rank(net, 1);
	int64_t t0 = fake_now(net);
	fake_stop_permanent(net, leaver, "worker rank 2 exited with status 78\n(disk full)");
	assert_true(fake_run(net, fake_all_ended, NULL, 60000));
	assert_int_equal(fake_now(net), t0); /* at once, not at a deadline */
	assert_int_equal(leaver->ended, RDZV_ACT_LEFT);
	for (uint32_t i = 0; i < n; i++) {
		struct fake_agent *a = fake_agent(net, (int)i);
		assert_true(rdzv_machine_failed_permanent(a->m));
		if (a == leaver)
			continue;
		assert_int_equal(a->ended, RDZV_ACT_FAILED);
		assert_int_equal(a->round_overs, 0);
		assert_non_null(strstr(a->end_text, leaver->node_id));
		assert_non_null(strstr(a->end_text, leaver->addr));
		/* the cause, its newline made printable */
		assert_non_null(strstr(a->end_text, "worker rank 2 exited with status 78?(disk"));
		assert_non_null(strstr(a->end_text, "exit status 78"));
	}
	const struct rdzv_state *st = rdzv_machine_state(fake_agent(net, 0)->m);
	assert_int_equal(st->reason, RDZV_WHY_PERMANENT);
	assert_string_equal(st->subject, leaver->node_id);
	fake_net_free(net);
}

static void test_permanent_leave_fixed_size_ends_all(void **unused)
{
	permanent_ends_all(3, 3, 3);
	permanent_ends_all(2, 2, 2);
}

/* An elastic job at its minimum (2 of --nnodes=2:4) goes on waiting for a
 * replacement node (an elastic scheduler starts one) when a node leaves
 * with a failure that will repeat, and forms with it (before, every node
 * ended as for a fixed-size job). */
static void test_permanent_leave_elastic_at_minimum_waits(void **unused)
{
	struct fake_net *net = fake_net_new(g_seed + 3);
	add_n(net, "job", 2, 2, 4);
	start_range(net, 0, 2);
	assert_true(run_to_round(net, 1, 120000));
	struct fake_agent *leaver = with_rank(net, 1);
	struct fake_agent *stays = with_rank(net, 0);
	fake_stop_permanent(net, leaver, "worker rank 2 exited with status 78");
	fake_run(net, NULL, NULL, 30000);
	assert_int_equal(leaver->ended, RDZV_ACT_LEFT);
	assert_int_equal(stays->ended, 0);
	assert_false(rdzv_machine_failed_permanent(stays->m));
	const struct rdzv_state *st = rdzv_machine_state(stays->m);
	assert_int_equal(st->phase, RDZV_OPEN);
	assert_int_equal(st->round, 2);
	assert_int_equal(st->reason, RDZV_WHY_LEFT);
	struct fake_agent *repl = fake_add(net, "job", 2, 4);
	fake_start(net, repl);
	assert_true(run_to_round(net, 2, 120000));
	assert_world(net, 2, 2);
	assert_true(repl->in_round);
	assert_int_equal(stays->ended, 0);
	fake_net_free(net);
}

/* Above its minimum an elastic job goes on without the node, as after any
 * leave; and a fixed-size job with a spare waiting goes on with the spare. */
static void test_permanent_leave_goes_on_with_enough(void **state)
{
	struct fake_net *net = net_of(state);
	form_four(net);
	struct fake_agent *leaver = with_rank(net, 2);
	fake_stop_permanent(net, leaver, "worker rank 4 exited with status 78");
	assert_true(run_to_round(net, 2, 60000));
	assert_int_equal(leaver->ended, RDZV_ACT_LEFT);
	assert_world(net, 2, 3);
	const struct rdzv_state *st = rdzv_machine_state(with_rank(net, 0)->m);
	assert_int_equal(st->reason, RDZV_WHY_LEFT);
	assert_false(rdzv_machine_failed_permanent(with_rank(net, 0)->m));

	struct fake_net *fixed = fake_net_new(g_seed + 7);
	add_n(fixed, "fix", 3, 3, 3);
	start_range(fixed, 0, 3);
	assert_true(run_to_round(fixed, 1, 1000));
	struct fake_agent *spare = fake_add(fixed, "fix", 3, 3);
	fake_start(fixed, spare);
	fake_run(fixed, NULL, NULL, 100); /* the spare takes its ticket and waits */
	fake_stop_permanent(fixed, with_rank(fixed, 0), "no space left");
	assert_true(run_to_round(fixed, 2, 60000));
	assert_world(fixed, 2, 3);
	assert_true(spare->in_round);
	fake_net_free(fixed);
}

static void test_join_running(void **state)
{
	struct fake_net *net = net_of(state);
	add_n(net, "job", 4, 2, 4);
	start_range(net, 0, 2);
	assert_true(run_to_round(net, 1, 60000)); /* 2 of 2:4, after the last call */
	struct fake_agent *r0 = with_rank(net, 0), *r1 = with_rank(net, 1);
	fake_run(net, NULL, NULL, 5000);
	int64_t t0 = fake_now(net);
	fake_start(net, fake_agent(net, 2));
	assert_true(run_to_round(net, 2, 60000));
	assert_int_equal(fake_now(net), t0 + 30000); /* the last-call window */
	assert_world(net, 2, 3);
	assert_int_equal(r0->rank, 0);
	assert_int_equal(r1->rank, 1);
	assert_int_equal(fake_agent(net, 2)->rank, 2);
	int64_t t1 = fake_now(net);
	fake_start(net, fake_agent(net, 3)); /* reaches MAX: at once */
	assert_true(run_to_round(net, 3, 60000));
	assert_int_equal(fake_now(net), t1);
	assert_world(net, 3, 4);
	assert_int_equal(r0->restarts, 0);
}

static void test_spare_waits_then_fills_in(void **state)
{
	struct fake_net *net = net_of(state);
	add_n(net, "job", 3, 2, 2);
	start_range(net, 0, 2);
	assert_true(run_to_round(net, 1, 1000));
	fake_start(net, fake_agent(net, 2));
	/* The job is full: the third waits, within its join deadline. */
	fake_run(net, NULL, NULL, 500000);
	struct fake_agent *spare = fake_agent(net, 2);
	assert_true(spare->running);
	assert_int_equal(spare->rounds, 0);
	assert_int_equal(fake_agent(net, 0)->rounds, 1);
	int64_t t0 = fake_now(net);
	fake_kill(net, with_rank(net, 1));
	assert_true(run_to_round(net, 2, 60000));
	assert_int_equal(fake_now(net), t0);
	assert_world(net, 2, 2);
	assert_int_equal(spare->rank, 1);
}

/* A spare respects its own join deadline: it gives up, saying it never
 * had a place, and the job goes on untouched. */
static void test_spare_gives_up_at_join_deadline(void **state)
{
	struct fake_net *net = net_of(state);
	add_n(net, "job", 3, 2, 2);
	start_range(net, 0, 2);
	assert_true(run_to_round(net, 1, 1000));
	int64_t t0 = fake_now(net);
	struct fake_agent *spare = fake_agent(net, 2);
	fake_start(net, spare);
	fake_run(net, NULL, NULL, 700000);
	assert_false(spare->running);
	assert_int_equal(spare->ended, RDZV_ACT_FAILED);
	assert_int_equal(spare->ended_at, t0 + 600000);
	assert_int_equal(spare->rounds, 0);
	if (!strstr(spare->end_text, "never given a place in the job of run id 'job'") ||
	    !strstr(spare->end_text, "all of its 2 nodes"))
		fail_msg("message: %s", spare->end_text);
	for (int i = 0; i < 2; i++) {
		assert_true(fake_agent(net, i)->in_round);
		assert_int_equal(fake_agent(net, i)->rounds, 1);
		assert_int_equal(fake_agent(net, i)->round_overs, 0);
	}
}

/* Another job (another fingerprint) under the same run id: refused before
 * it takes a ticket, naming both jobs; the running job is not disturbed.
 * Once that job has finished, the run id is free for the other. */
static void test_other_job_refused(void **state)
{
	struct fake_net *net = net_of(state);
	add_n(net, "job", 2, 2, 2);
	for (int i = 0; i < 2; i++) {
		fake_agent(net, i)->cfg.job = "aaaa";
		fake_agent(net, i)->cfg.job_text = "'train.py' on --nnodes=2";
	}
	start_range(net, 0, 2);
	assert_true(run_to_round(net, 1, 1000));
	struct fake_agent *b = fake_add(net, "job", 2, 2);
	b->cfg.job = "bbbb";
	b->cfg.job_text = "'eval.py' on --nnodes=2";
	int64_t t0 = fake_now(net);
	fake_start(net, b);
	fake_run(net, NULL, NULL, 60000);
	assert_int_equal(b->ended, RDZV_ACT_REFUSED);
	assert_int_equal(b->ended_at, t0); /* at once: no timer fired */
	assert_int_equal(b->rounds, 0);
	if (!strstr(b->end_text, "'train.py' on --nnodes=2") ||
	    !strstr(b->end_text, "'eval.py' on --nnodes=2") || !strstr(b->end_text, "refused"))
		fail_msg("message: %s", b->end_text);
	assert_null(fake_get(net, "ddprdzv/job/c/1.2", &(size_t){0})); /* no ticket taken */
	for (int i = 0; i < 2; i++) {
		assert_true(fake_agent(net, i)->in_round);
		assert_int_equal(fake_agent(net, i)->round_overs, 0);
	}
	/* The first job finishes: the same run id now starts the other's. */
	fake_workers_exit(net, fake_agent(net, 0), true);
	fake_workers_exit(net, fake_agent(net, 1), true);
	assert_true(fake_run(net, fake_all_ended, NULL, 1000));
	for (int i = 0; i < 2; i++) {
		struct fake_agent *c = fake_add(net, "job", 2, 2);
		c->cfg.job = "bbbb";
		fake_start(net, c);
	}
	assert_true(run_to_round(net, 1, 1000));
	assert_int_equal(fake_agent(net, 3)->gen, 2);
}

/* One job (one fingerprint) whose nodes' command lines differ (each its
 * own --checkpoint_dir): it forms; each node whose command line differs
 * from the creator's says so once, naming both, and not again when the
 * job re-forms; a node with the creator's command line says nothing. */
static void test_same_job_other_command_noticed(void **state)
{
	struct fake_net *net = net_of(state);
	static const char *const cmds[] = {"cmdA", "cmdB", "cmdA", "cmdB"};
	static const char *const texts[] = {"'t.py --dir=a'", "'t.py --dir=b'", "'t.py --dir=a'",
					    "'t.py --dir=b'"};
	add_n(net, "job", 4, 3, 4);
	for (int i = 0; i < 4; i++) {
		fake_agent(net, i)->cfg.job = "aaaa";
		fake_agent(net, i)->cfg.cmd = cmds[i];
		fake_agent(net, i)->cfg.job_text = texts[i];
	}
	start_range(net, 0, 4);
	assert_true(run_to_round(net, 1, 60000));
	const struct rdzv_state *st = rdzv_machine_state(fake_agent(net, 0)->m);
	assert_non_null(st);
	const char *creator = st->cmd, *there = strcmp(creator, "cmdA") ? texts[1] : texts[0];
	for (int i = 0; i < 4; i++) {
		struct fake_agent *a = fake_agent(net, i);
		assert_int_equal(a->size, 4);
		assert_int_equal(a->notices, strcmp(cmds[i], creator) != 0);
		if (a->notices &&
		    (!strstr(a->notice_text, "differ between this node") ||
		     !strstr(a->notice_text, texts[i]) || !strstr(a->notice_text, there) ||
		     !strstr(a->notice_text, "run id 'job'")))
			fail_msg("notice: %s", a->notice_text);
	}
	/* A node dies: the others re-form as one job and say nothing more. */
	fake_kill(net, fake_agent(net, 3));
	assert_true(run_to_round(net, 2, 60000));
	for (int i = 0; i < 3; i++)
		assert_int_equal(fake_agent(net, i)->notices, strcmp(cmds[i], creator) != 0);
}

/* A static job's store: node 0 names its job there; a node of another job
 * (another run id) is refused at once, one of the same job joins. A node
 * that comes before node 0 waits for it. */
static void test_store_owner(void **state)
{
	struct fake_net *net = net_of(state);
	struct fake_agent *early = fake_add(net, "A", 2, 2);
	early->cfg.node_rank = 1;
	early->cfg.store_role = RDZV_STORE_OWNED;
	fake_start(net, early);
	fake_run(net, NULL, NULL, 10000);
	assert_true(early->running); /* no owner yet: waits */
	struct fake_agent *host = fake_add(net, "A", 2, 2);
	host->cfg.node_rank = 0;
	host->cfg.store_role = RDZV_STORE_OWN;
	host->cfg.job_text = "'train.py'";
	fake_start(net, host);
	assert_true(run_to_round(net, 1, 1000));
	struct fake_agent *b = fake_add(net, "B", 2, 2);
	b->cfg.node_rank = 1;
	b->cfg.store_role = RDZV_STORE_OWNED;
	b->cfg.job_text = "'eval.py'";
	int64_t t0 = fake_now(net);
	fake_start(net, b);
	fake_run(net, NULL, NULL, 60000);
	assert_int_equal(b->ended, RDZV_ACT_REFUSED);
	assert_int_equal(b->ended_at, t0);
	if (!strstr(b->end_text, "'A' ('train.py')") || !strstr(b->end_text, "'B' ('eval.py')"))
		fail_msg("message: %s", b->end_text);
	assert_null(fake_get(net, "ddprdzv/B/state", &(size_t){0})); /* nothing of B's */
	assert_int_equal(early->round_overs, 0);
	assert_int_equal(host->round_overs, 0);
}

static void test_join_deadline_message(void **state)
{
	struct fake_net *net = net_of(state);
	add_n(net, "job", 2, 3, 3);
	start_range(net, 0, 2);
	assert_true(fake_run(net, fake_all_ended, NULL, 700000));
	for (int i = 0; i < 2; i++) {
		struct fake_agent *a = fake_agent(net, i);
		assert_int_equal(a->ended, RDZV_ACT_FAILED);
		assert_int_equal(a->ended_at, 600000);
		/* The first to give up is gone when the second counts. */
		if (!strstr(a->end_text,
			    "rendezvous of run id 'job' timed out after 600 s: 2 nodes "
			    "joined (") ||
		    !strstr(a->end_text, "'job-n0'") || !strstr(a->end_text, "'job-n1'") ||
		    !strstr(a->end_text, "), 1 missing for --nnodes=3:3"))
			fail_msg("message: %s", a->end_text);
		assert_non_null(strstr(a->end_text, "join_timeout"));
	}
}

static void test_static_missing_ranks(void **state)
{
	struct fake_net *net = net_of(state);
	add_n(net, "job", 2, 4, 4);
	fake_agent(net, 0)->cfg.node_rank = 0;
	fake_agent(net, 1)->cfg.node_rank = 2;
	fake_agent(net, 0)->cfg.join_timeout_ms = 30000;
	fake_agent(net, 1)->cfg.join_timeout_ms = 30000;
	start_range(net, 0, 2);
	assert_true(fake_run(net, fake_all_ended, NULL, 700000));
	for (int i = 0; i < 2; i++) {
		struct fake_agent *a = fake_agent(net, i);
		assert_int_equal(a->ended_at, 30000);
		if (!strstr(a->end_text, "timed out after 30 s: 2 of 4 nodes joined (") ||
		    !strstr(a->end_text, "'job-n0'") || !strstr(a->end_text, "'job-n1'") ||
		    !strstr(a->end_text, "), 2 missing: node ranks 1, 3 never came"))
			fail_msg("message: %s", a->end_text);
	}
}

static void test_static_ranks_honoured(void **state)
{
	struct fake_net *net = net_of(state);
	add_n(net, "job", 4, 4, 4);
	for (int i = 0; i < 4; i++)
		fake_agent(net, i)->cfg.node_rank = 3 - i;
	start_range(net, 0, 4);
	assert_true(run_to_round(net, 1, 1000));
	for (int i = 0; i < 4; i++)
		assert_int_equal(fake_agent(net, i)->rank, 3 - i);
	assert_world(net, 1, 4);
}

static void test_duplicate_node_rank(void **state)
{
	struct fake_net *net = net_of(state);
	add_n(net, "job", 2, 2, 2);
	fake_agent(net, 0)->cfg.node_rank = 1;
	fake_agent(net, 1)->cfg.node_rank = 1;
	start_range(net, 0, 2);
	assert_true(fake_run(net, fake_all_ended, NULL, 1000));
	assert_int_equal(fake_agent(net, 0)->ended, RDZV_ACT_FAILED);
	assert_non_null(strstr(fake_agent(net, 0)->end_text, "node rank 1 is claimed by both"));
}

static void test_restart_budget_for_the_job(void **state)
{
	struct fake_net *net = net_of(state);
	add_n(net, "job", 3, 3, 3);
	for (int i = 0; i < 3; i++)
		fake_agent(net, i)->cfg.max_restarts = 1;
	start_range(net, 0, 3);
	assert_true(run_to_round(net, 1, 1000));
	/* Two nodes' workers fail at the same moment: one restart. */
	fake_workers_exit(net, fake_agent(net, 0), false);
	fake_workers_exit(net, fake_agent(net, 2), false);
	assert_true(run_to_round(net, 2, 1000));
	for (int i = 0; i < 3; i++)
		assert_int_equal(fake_agent(net, i)->restarts, 1);
	/* A node dying and coming back costs nothing. */
	fake_kill(net, fake_agent(net, 1));
	fake_start(net, fake_add(net, "job", 3, 3));
	assert_true(run_to_round(net, 3, 1000));
	assert_int_equal(fake_agent(net, 0)->restarts, 1);
	/* The budget is spent: the next failure ends the job everywhere. */
	fake_workers_exit(net, fake_agent(net, 3), false);
	assert_true(fake_run(net, fake_all_ended, NULL, 1000));
	for (int i = 0; i < 4; i++) {
		if (i == 1)
			continue;
		assert_int_equal(fake_agent(net, i)->ended, RDZV_ACT_FAILED);
		assert_non_null(strstr(fake_agent(net, i)->end_text, "no restarts left"));
	}
}

/* Three nodes, no restart allowed, a failure grace of 5 s (etcd's: the
 * lease's TTL + slack). */
static void form_three_with_grace(struct fake_net *net)
{
	add_n(net, "job", 3, 2, 3);
	for (int i = 0; i < 3; i++)
		fake_agent(net, i)->cfg.fail_grace_ms = 5000;
	start_range(net, 0, 3);
	assert_true(run_to_round(net, 1, 1000));
}

/* A node dies; the survivors' workers fail on it before the store can
 * tell (etcd: its lease has not expired yet). Their failure waits the
 * grace, the death arrives within it: not charged, and the smaller world
 * forms at once (no last call). */
static void test_failure_before_death_not_charged(void **state)
{
	struct fake_net *net = net_of(state);
	form_three_with_grace(net);
	struct fake_agent *victim = with_rank(net, 2), *a = with_rank(net, 0),
			  *b = with_rank(net, 1);
	fake_freeze(net, victim); /* dead, its session keys not yet gone */
	fake_workers_exit(net, a, false);
	fake_workers_exit(net, b, false);
	fake_run(net, NULL, NULL, 3000);
	assert_int_equal(a->ended, 0);
	assert_int_equal(b->ended, 0);
	int64_t t_gone = fake_now(net);
	fake_kill(net, victim); /* the lease expires */
	assert_true(run_to_round(net, 2, 60000));
	assert_int_equal(fake_now(net), t_gone);
	assert_world(net, 2, 2);
	assert_int_equal(a->restarts, 0);
	assert_int_equal(rdzv_machine_state(a->m)->reason, RDZV_WHY_DEAD);
}

/* A failure with every node alive is charged once the grace has passed. */
static void test_failure_charged_after_grace(void **state)
{
	struct fake_net *net = net_of(state);
	form_three_with_grace(net);
	int64_t t0 = fake_now(net);
	fake_workers_exit(net, with_rank(net, 1), false);
	assert_true(fake_run(net, fake_all_ended, NULL, 60000));
	for (int i = 0; i < 3; i++)
		assert_non_null(strstr(fake_agent(net, i)->end_text, "no restarts left"));
	if (fake_now(net) - t0 < 5000)
		fail_msg("charged %" PRId64 " ms after the failure", fake_now(net) - t0);
}

/* The grace is over and the dead node's ring watcher has not acted (it is
 * frozen too): the census of the restart finds the dead node's heartbeat
 * key gone and re-forms as `dead`, not charged. */
static void test_restart_census_blames_death(void **state)
{
	struct fake_net *net = net_of(state);
	char key[128];
	form_three_with_grace(net);
	struct fake_agent *a = with_rank(net, 0), *watcher = with_rank(net, 1),
			  *victim = with_rank(net, 2);
	fake_freeze(net, watcher);
	fake_freeze(net, victim);
	fake_workers_exit(net, a, false);
	snprintf(key, sizeof(key), "ddprdzv/job/a/%s", victim->node_id);
	fake_del(net, key);
	fake_run(net, NULL, NULL, 6000);
	const struct rdzv_state *st = rdzv_machine_state(a->m);
	assert_int_equal(a->ended, 0);
	assert_int_equal(st->round, 2);
	assert_int_equal(st->reason, RDZV_WHY_DEAD);
	assert_string_equal(st->subject, victim->node_id);
	assert_int_equal(st->restarts, 0);
}

/* Our store's grace: the keep-alive window (5 s x 3) + 2 s, longer than a
 * heartbeat period: the failing node watches the others. */
static void form_three_with_long_grace(struct fake_net *net, uint32_t max_restarts)
{
	add_n(net, "job", 3, 2, 3);
	for (int i = 0; i < 3; i++) {
		fake_agent(net, i)->cfg.fail_grace_ms = 17000;
		fake_agent(net, i)->cfg.max_restarts = max_restarts;
	}
	start_range(net, 0, 3);
	assert_true(run_to_round(net, 1, 1000));
}

/* Every other member beats after the failure: nobody died, the failure is
 * charged then (within a heartbeat period), not after the whole grace. */
static void test_grace_ends_when_all_alive(void **state)
{
	struct fake_net *net = net_of(state);
	form_three_with_long_grace(net, 1);
	int64_t t0 = fake_now(net);
	fake_workers_exit(net, with_rank(net, 1), false);
	assert_true(run_to_round(net, 2, 60000));
	int64_t took = fake_now(net) - t0;
	if (took > 5000)
		fail_msg("charged %" PRId64 " ms after the failure", took);
	assert_int_equal(with_rank(net, 0)->restarts, 1);
}

/* A member's heartbeat key vanishes during the grace (its ring watcher is
 * frozen): the failing node sees it itself and re-forms as `dead` at once. */
static void test_grace_sees_death(void **state)
{
	struct fake_net *net = net_of(state);
	char key[128];
	form_three_with_long_grace(net, 0);
	struct fake_agent *a = with_rank(net, 0), *watcher = with_rank(net, 1),
			  *victim = with_rank(net, 2);
	fake_freeze(net, watcher);
	fake_freeze(net, victim);
	fake_workers_exit(net, a, false);
	fake_run(net, NULL, NULL, 1000);
	assert_int_equal(rdzv_machine_state(a->m)->round, 1);
	snprintf(key, sizeof(key), "ddprdzv/job/a/%s", victim->node_id);
	fake_del(net, key);
	fake_run(net, NULL, NULL, 100);
	const struct rdzv_state *st = rdzv_machine_state(a->m);
	assert_int_equal(a->ended, 0);
	assert_int_equal(st->round, 2);
	assert_int_equal(st->reason, RDZV_WHY_DEAD);
	assert_string_equal(st->subject, victim->node_id);
	assert_int_equal(st->restarts, 0);
}

static bool both_jobs_formed(struct fake_net *net, void *unused)
{
	for (int i = 0; i < fake_count(net); i++)
		if (!fake_agent(net, i)->in_round)
			return false;
	return true;
}

static void test_two_run_ids(void **state)
{
	struct fake_net *net = net_of(state);
	add_n(net, "A", 2, 2, 2);
	add_n(net, "B", 2, 2, 2);
	start_range(net, 0, 4);
	assert_true(fake_run(net, both_jobs_formed, NULL, 1000));
	for (int i = 0; i < 4; i++) {
		struct fake_agent *a = fake_agent(net, i);
		assert_int_equal(a->size, 2);
		assert_non_null(strstr(a->key_prefix, i < 2 ? "ddprdzv/A/" : "ddprdzv/B/"));
	}
	/* A ends (one finishes, one dies): B does not notice. */
	fake_workers_exit(net, fake_agent(net, 0), true);
	fake_kill(net, fake_agent(net, 1));
	fake_run(net, NULL, NULL, 120000);
	for (int i = 2; i < 4; i++) {
		assert_true(fake_agent(net, i)->in_round);
		assert_int_equal(fake_agent(net, i)->rounds, 1);
	}
}

static void test_run_id_reuse(void **state)
{
	struct fake_net *net = net_of(state);
	add_n(net, "job", 2, 2, 2);
	start_range(net, 0, 2);
	assert_true(run_to_round(net, 1, 1000));
	fake_workers_exit(net, fake_agent(net, 0), true);
	fake_workers_exit(net, fake_agent(net, 1), true);
	assert_true(fake_run(net, fake_all_ended, NULL, 1000));
	assert_int_equal(fake_agent(net, 0)->ended, RDZV_ACT_FINISHED);
	assert_int_equal(fake_agent(net, 1)->ended, RDZV_ACT_FINISHED);
	size_t len;
	const uint8_t *v = fake_get(net, "ddprdzv/job/state", &len);
	struct rdzv_state st;
	assert_int_equal(rdzv_state_decode(v, len, &st), 0);
	assert_int_equal(st.phase, RDZV_FINISHED);
	/* The same run id right after: a new generation from round 1. */
	add_n(net, "job", 2, 2, 2);
	start_range(net, 2, 4);
	assert_true(run_to_round(net, 1, 1000));
	assert_int_equal(fake_agent(net, 2)->gen, 2);
	assert_world(net, 1, 2);
}

static void test_relaunch_after_crash(void **state)
{
	struct fake_net *net = net_of(state);
	add_n(net, "job", 2, 2, 2);
	start_range(net, 0, 2);
	assert_true(run_to_round(net, 1, 1000));
	fake_kill(net, fake_agent(net, 0));
	fake_kill(net, fake_agent(net, 1));
	add_n(net, "job", 2, 2, 2);
	int64_t t0 = fake_now(net);
	start_range(net, 2, 4);
	assert_true(run_to_round(net, 2, 60000));
	assert_int_equal(fake_now(net), t0);
	assert_world(net, 2, 2);
}

static void test_heartbeat_staleness(void **state)
{
	struct fake_net *net = net_of(state);
	add_n(net, "job", 3, 2, 3);
	start_range(net, 0, 3);
	assert_true(run_to_round(net, 1, 1000));
	fake_run(net, NULL, NULL, 2500);
	int64_t t0 = fake_now(net);
	fake_freeze(net, with_rank(net, 1)); /* session open, heartbeats stop */
	assert_true(run_to_round(net, 2, 60000));
	int64_t took = fake_now(net) - t0;
	/* keep_alive_interval x keep_alive_max_attempt = 15 s since the last beat */
	if (took < 10000 || took > 20000)
		fail_msg("noticed after %" PRId64 " ms", took);
	assert_world(net, 2, 2);
}

static void test_death_while_forming(void **state)
{
	struct fake_net *net = net_of(state);
	add_n(net, "job", 4, 3, 4);
	start_range(net, 0, 2);
	fake_run(net, NULL, NULL, 1000);
	fake_kill(net, fake_agent(net, 1)); /* took a ticket, then died */
	start_range(net, 2, 4);
	assert_true(run_to_round(net, 1, 60000));
	assert_world(net, 1, 3);
}

static void test_failure_after_finish(void **state)
{
	struct fake_net *net = net_of(state);
	add_n(net, "job", 2, 2, 2);
	for (int i = 0; i < 2; i++)
		fake_agent(net, i)->cfg.max_restarts = 3;
	start_range(net, 0, 2);
	assert_true(run_to_round(net, 1, 1000));
	fake_workers_exit(net, fake_agent(net, 0), true);
	fake_run(net, NULL, NULL, 1000);
	fake_workers_exit(net, fake_agent(net, 1), false);
	assert_true(fake_run(net, fake_all_ended, NULL, 1000));
	assert_int_equal(fake_agent(net, 0)->ended, RDZV_ACT_FINISHED);
	assert_int_equal(fake_agent(net, 1)->ended, RDZV_ACT_FAILED);
	assert_non_null(strstr(fake_agent(net, 1)->end_text, "had finished"));
}

/* A worker replaced alone: a new round of the same nodes, every node told
 * (reason `replace`), nothing charged even with no restart allowed; the
 * workers' end after it is heard as before. */
static void test_replace_worker_not_charged(void **state)
{
	struct fake_net *net = net_of(state);
	add_n(net, "job", 3, 3, 3);
	start_range(net, 0, 3);
	assert_true(run_to_round(net, 1, 1000));
	struct fake_agent *a = with_rank(net, 1);
	fake_workers_renew(net, a);
	fake_workers_renew(net, a); /* a second death before the round: one round */
	assert_true(run_to_round(net, 2, 1000));
	assert_world(net, 2, 3);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(fake_agent(net, i)->restarts, 0);
		assert_int_equal(fake_agent(net, i)->ended, 0);
	}
	const struct rdzv_state *st = rdzv_machine_state(a->m);
	assert_int_equal(st->reason, RDZV_WHY_REPLACE);
	assert_int_equal(st->round, 2);
	for (int i = 0; i < 3; i++)
		fake_workers_exit(net, fake_agent(net, i), true);
	assert_true(fake_run(net, fake_all_ended, NULL, 1000));
	for (int i = 0; i < 3; i++)
		assert_int_equal(fake_agent(net, i)->ended, RDZV_ACT_FINISHED);
}

/* Once a node has finished, a replacement fails the job as a failure
 * would: the finished node cannot re-form. */
static void test_replace_after_finish_fails(void **state)
{
	struct fake_net *net = net_of(state);
	add_n(net, "job", 2, 2, 2);
	start_range(net, 0, 2);
	assert_true(run_to_round(net, 1, 1000));
	fake_workers_exit(net, fake_agent(net, 0), true);
	fake_run(net, NULL, NULL, 1000);
	fake_workers_renew(net, fake_agent(net, 1));
	assert_true(fake_run(net, fake_all_ended, NULL, 1000));
	assert_int_equal(fake_agent(net, 1)->ended, RDZV_ACT_FAILED);
	assert_non_null(strstr(fake_agent(net, 1)->end_text, "had finished"));
}

/* Issue 24: a worker replaced alone whose new process starts outside the
 * rounds: its node counts one worker fewer in the round the death opens
 * (ranks and world follow), then, the replacement ready, all again in a
 * round rdzv_workers_grow opens; neither is charged. */
static void test_shrink_then_grow(void **state)
{
	struct fake_net *net = net_of(state);
	add_n(net, "job", 3, 3, 3);
	start_range(net, 0, 3);
	assert_true(run_to_round(net, 1, 1000));
	struct fake_agent *a = with_rank(net, 1);
	assert_int_equal(rdzv_set_local_procs(a->m, 0), -EINVAL);
	assert_int_equal(rdzv_set_local_procs(a->m, 3), -EINVAL); /* more than cfg.nproc */
	assert_int_equal(rdzv_set_local_procs(a->m, 1), 0);
	fake_workers_renew(net, a);
	assert_true(run_to_round(net, 2, 1000));
	for (int i = 0; i < 3; i++) {
		struct fake_agent *b = fake_agent(net, i);
		assert_int_equal(b->world_procs, 5);
		assert_int_equal(b->first_proc, b->rank == 0 ? 0 : b->rank == 1 ? 2 : 3);
		assert_int_equal(b->restarts, 0);
	}
	assert_int_equal(rdzv_set_local_procs(a->m, 2), 0);
	fake_workers_grow(net, a);
	assert_true(run_to_round(net, 3, 1000));
	assert_world(net, 3, 3); /* 6 workers: 2 per node again */
	assert_int_equal(rdzv_machine_state(a->m)->reason, RDZV_WHY_REPLACE);
	for (int i = 0; i < 3; i++)
		assert_int_equal(fake_agent(net, i)->restarts, 0);
}

/* A replacement ready once a node has finished is not needed: the grow
 * is dropped (where a death's renew fails the job, above) and the job
 * finishes when the node's workers do. */
static void test_grow_after_finish_dropped(void **state)
{
	struct fake_net *net = net_of(state);
	add_n(net, "job", 2, 2, 2);
	start_range(net, 0, 2);
	assert_true(run_to_round(net, 1, 1000));
	fake_workers_exit(net, fake_agent(net, 0), true);
	fake_run(net, NULL, NULL, 1000);
	fake_workers_grow(net, fake_agent(net, 1));
	fake_run(net, NULL, NULL, 1000);
	assert_int_equal(fake_agent(net, 1)->ended, 0);
	fake_workers_exit(net, fake_agent(net, 1), true);
	assert_true(fake_run(net, fake_all_ended, NULL, 1000));
	for (int i = 0; i < 2; i++)
		assert_int_equal(fake_agent(net, i)->ended, RDZV_ACT_FINISHED);
}

static void test_malformed_state_in_store(void **state)
{
	struct fake_net *net = net_of(state);
	fake_set(net, "ddprdzv/job/state", "rdzv1 garbage\n", 14);
	add_n(net, "job", 1, 1, 1);
	start_range(net, 0, 1);
	assert_true(fake_run(net, fake_all_ended, NULL, 1000));
	assert_int_equal(fake_agent(net, 0)->ended, RDZV_ACT_FAILED);
	assert_non_null(strstr(fake_agent(net, 0)->end_text, "does not hold a ddplaunch"));
}

/* A run id reused after an upgrade: the store (etcd, a kept ddp-rdzvd)
 * still holds the ended job's state in an older version's format. A
 * finished or failed one is over, and a new generation starts over it as
 * over one of this version's own (before, every node was refused as if
 * another program used the run id). */
static void older_version_over(const char *old, uint64_t want_gen)
{
	struct fake_net *net = fake_net_new(g_seed);
	fake_set(net, "ddprdzv/job/state", old, strlen(old));
	add_n(net, "job", 2, 2, 2);
	start_range(net, 0, 2);
	assert_true(run_to_round(net, 1, 1000));
	assert_world(net, 1, 2);
	assert_int_equal(fake_agent(net, 0)->gen, want_gen);
	size_t len;
	const uint8_t *v = fake_get(net, "ddprdzv/job/state", &len);
	struct rdzv_state st;
	assert_int_equal(rdzv_state_decode(v, len, &st), 0);
	assert_int_equal(st.gen, want_gen);
	fake_net_free(net);
}

static void test_older_version_ended_started_over(void **unused)
{
	older_version_over("rdzv2 5 3 finished 2 2 2 2 0 3 start - 127.0.0.1:5 "
			   "0123456789abcdef 0 0\n",
			   6);
	older_version_over("rdzv2 9 1 failed 2 4 4 2 3 3 restart n1 127.0.0.1:5 - 0 6\nbroken", 10);
	older_version_over("rdzv1 4 2 failed 2 2 2 2 1 1 restart n1 - 6\nbroken", 5);
}

/* A job of another version that is open or running under the run id (a
 * node of this job runs another version, or that job still runs): every
 * node is refused, naming the versions, not "another program". */
static void other_version_refused(const char *other, const char *want)
{
	struct fake_net *net = fake_net_new(g_seed);
	fake_set(net, "ddprdzv/job/state", other, strlen(other));
	add_n(net, "job", 1, 1, 1);
	start_range(net, 0, 1);
	assert_true(fake_run(net, fake_all_ended, NULL, 1000));
	const char *text = fake_agent(net, 0)->end_text;
	assert_int_equal(fake_agent(net, 0)->ended, RDZV_ACT_FAILED);
	assert_non_null(strstr(text, "every node must run the same ddplaunch version"));
	assert_non_null(strstr(text, want));
	assert_null(strstr(text, "another program"));
	fake_net_free(net);
}

static void test_other_version_refused(void **unused)
{
	other_version_refused("rdzv2 5 3 running 2 2 2 2 0 3 start - 127.0.0.1:5 - 0 0\n",
			      "running job of another ddplaunch version (its rendezvous "
			      "state is version 2, this node's is 3)");
	other_version_refused("rdzv1 5 1 open 2 2 2 0 0 3 start - - 0\n",
			      "forming job of another ddplaunch version (its rendezvous "
			      "state is version 1");
	other_version_refused("rdzv4 1 1 finished whatever\n", "state is version 4");
}

static void test_nnodes_mismatch(void **state)
{
	struct fake_net *net = net_of(state);
	fake_add(net, "job", 2, 2);
	fake_add(net, "job", 2, 3);
	start_range(net, 0, 1);
	fake_run(net, NULL, NULL, 100);
	start_range(net, 1, 2);
	fake_run(net, NULL, NULL, 100);
	assert_int_equal(fake_agent(net, 1)->ended, RDZV_ACT_FAILED);
	assert_non_null(strstr(fake_agent(net, 1)->end_text, "--nnodes=2:3"));
}

static void test_config_check(void **unused)
{
	struct rdzv_config c;
	char msg[256];
	rdzv_config_defaults(&c);
	assert_int_equal(c.join_timeout_ms, 600000);
	assert_int_equal(c.last_call_timeout_ms, 30000);
	assert_int_equal(c.close_timeout_ms, 30000);
	assert_int_equal(c.keep_alive_interval_ms, 5000);
	assert_int_equal(c.keep_alive_max_attempt, 3);
	c.run_id = "job";
	c.node_id = "n0";
	c.addr = "10.0.0.1";
	assert_int_equal(rdzv_config_check(&c, msg, sizeof(msg)), 0);
	c.max_nodes = 4;
	c.node_rank = 4;
	assert_int_equal(rdzv_config_check(&c, msg, sizeof(msg)), -EINVAL);
	assert_string_equal(msg, "--node_rank=4 is out of range for --nnodes=4 (use 0 to 3)");
	c.node_rank = -1;
	c.run_id = "a/b";
	assert_int_equal(rdzv_config_check(&c, msg, sizeof(msg)), -EINVAL);
	struct rdzv_machine *m;
	assert_int_equal(rdzv_machine_new(&c, &m), -EINVAL);
}

static void test_static_node_comes_back(void **state)
{
	struct fake_net *net = net_of(state);
	add_n(net, "job", 3, 3, 3);
	for (int i = 0; i < 3; i++)
		fake_agent(net, i)->cfg.node_rank = i;
	start_range(net, 0, 3);
	assert_true(run_to_round(net, 1, 1000));
	fake_kill(net, fake_agent(net, 1));
	/* A fixed-size job waits for the node (until the join deadline). */
	fake_run(net, NULL, NULL, 60000);
	assert_false(fake_agent(net, 0)->in_round);
	assert_true(fake_agent(net, 0)->running);
	struct fake_agent *back = fake_add(net, "job", 3, 3);
	back->cfg.node_rank = 1;
	fake_start(net, back);
	assert_true(run_to_round(net, 2, 1000));
	for (int i = 0; i < 4; i++)
		if (i != 1)
			assert_int_equal(fake_agent(net, i)->rank, i == 3 ? 1 : i);
	assert_int_equal(fake_agent(net, 0)->restarts, 0);
}

static void test_stop_while_joining(void **state)
{
	struct fake_net *net = net_of(state);
	add_n(net, "job", 1, 3, 3);
	start_range(net, 0, 1);
	fake_run(net, NULL, NULL, 1000);
	fake_stop(net, fake_agent(net, 0));
	assert_true(fake_run(net, fake_all_ended, NULL, 1000));
	assert_int_equal(fake_agent(net, 0)->ended, RDZV_ACT_LEFT);
}

static void test_dies_between_ticket_and_slot(void **state)
{
	struct fake_net *net = net_of(state);
	add_n(net, "job", 4, 3, 4);
	fake_agent(net, 1)->die_before_slot = true;
	start_range(net, 0, 4);
	/* The closer waits close_timeout for the slot that never comes; when
	 * the dead node held the last ticket, the last call comes first. */
	assert_true(run_to_round(net, 1, 120000));
	assert_true(fake_agent(net, 1)->killed);
	assert_world(net, 1, 3);
	assert_true(fake_now(net) == 30000 || fake_now(net) == 60000);
}

static void test_reform_when_too_few_alive(void **state)
{
	struct fake_net *net = net_of(state);
	add_n(net, "job", 4, 3, 3);
	start_range(net, 0, 2);
	fake_run(net, NULL, NULL, 100);
	fake_kill(net, fake_agent(net, 1)); /* took ticket 2 and died */
	start_range(net, 2, 3);		    /* ticket 3 = EXPECT, but 2 alive */
	fake_run(net, NULL, NULL, 100);
	const struct rdzv_state *st = rdzv_machine_state(fake_agent(net, 0)->m);
	assert_int_equal(st->round, 2);
	assert_int_equal(st->reason, RDZV_WHY_REFORM);
	start_range(net, 3, 4);
	assert_true(run_to_round(net, 2, 1000));
	assert_world(net, 2, 3);
}

static void test_overflow_at_formation(void **state)
{
	struct fake_net *net = net_of(state);
	add_n(net, "job", 3, 2, 2);
	start_range(net, 0, 3);
	fake_run(net, NULL, NULL, 1000);
	int in = 0, waiting = 0;
	for (int i = 0; i < 3; i++) {
		struct fake_agent *a = fake_agent(net, i);
		assert_true(a->running);
		if (a->in_round)
			in++;
		else
			waiting++;
	}
	assert_int_equal(in, 2);
	assert_int_equal(waiting, 1);
	/* The job finishes: the spare has nothing to wait for, and having run
	 * nothing it does not end as a success. */
	for (int i = 0; i < 3; i++)
		if (fake_agent(net, i)->in_round)
			fake_workers_exit(net, fake_agent(net, i), true);
	assert_true(fake_run(net, fake_all_ended, NULL, 1000));
	for (int i = 0; i < 3; i++) {
		struct fake_agent *a = fake_agent(net, i);
		assert_int_equal(a->ended, a->rounds ? RDZV_ACT_FINISHED : RDZV_ACT_FAILED);
		if (!a->rounds && !strstr(a->end_text, "never given a place"))
			fail_msg("message: %s", a->end_text);
	}
}

static void test_death_while_finishing(void **state)
{
	struct fake_net *net = net_of(state);
	add_n(net, "job", 3, 2, 3);
	start_range(net, 0, 3);
	assert_true(run_to_round(net, 1, 60000));
	fake_workers_exit(net, with_rank(net, 0), true);
	fake_run(net, NULL, NULL, 100);
	/* A node goes while the job finishes: taken as finishing, no new round. */
	struct fake_agent *r1 = with_rank(net, 1), *r2 = with_rank(net, 2);
	fake_kill(net, r1);
	fake_run(net, NULL, NULL, 60000);
	assert_true(r2->in_round);
	assert_int_equal(r2->rounds, 1);
	fake_workers_exit(net, r2, true);
	assert_true(fake_run(net, fake_all_ended, NULL, 1000));
	assert_int_equal(r2->ended, RDZV_ACT_FINISHED);
}

static void test_fresh_port_each_round(void **state)
{
	struct fake_net *net = net_of(state);
	form_four(net);
	for (int i = 0; i < 4; i++)
		fake_agent(net, i)->port_step = 100;
	struct fake_agent *r0 = with_rank(net, 0);
	uint16_t before = r0->master_port;
	fake_kill(net, with_rank(net, 3));
	assert_true(run_to_round(net, 2, 1000));
	assert_int_equal(r0->rank, 0);
	assert_int_equal(r0->master_port, before + 100);
	assert_world(net, 2, 3);
}

static void test_state_vanishes(void **state)
{
	struct fake_net *net = net_of(state);
	add_n(net, "job", 2, 2, 2);
	start_range(net, 0, 2);
	assert_true(run_to_round(net, 1, 1000));
	fake_del(net, "ddprdzv/job/state");
	assert_true(fake_run(net, fake_all_ended, NULL, 1000));
	for (int i = 0; i < 2; i++) {
		assert_int_equal(fake_agent(net, i)->ended, RDZV_ACT_FAILED);
		assert_non_null(strstr(fake_agent(net, i)->end_text, "vanished"));
	}
}

/* One machine driven by hand: the exact requests of a one-node job, and
 * TCPStore's answer for a CAS on an absent key. */
static bool pop(struct rdzv_machine *m, enum rdzv_action_kind kind, const char *key,
		struct rdzv_action *a)
{
	do
		assert_true(rdzv_next_action(m, a));
	while (a->kind == RDZV_ACT_TIMER && kind != RDZV_ACT_TIMER);
	if (a->kind != kind)
		fail_msg("action %d, wanted %d", a->kind, kind);
	if (key && (a->key.len != strlen(key) || memcmp(a->key.data, key, a->key.len) != 0))
		fail_msg("key %.*s, wanted %s", (int)a->key.len, (const char *)a->key.data, key);
	return true;
}

static struct rdzv_value val(const char *s)
{
	struct rdzv_value v = {s != NULL, {(const uint8_t *)s, s ? strlen(s) : 0}};
	return v;
}

static struct rdzv_machine *one_node(void)
{
	struct rdzv_config c;
	struct rdzv_machine *m;
	rdzv_config_defaults(&c);
	c.run_id = "r";
	c.node_id = "n0";
	c.addr = "10.0.0.1";
	c.port = 4000;
	assert_int_equal(rdzv_machine_new(&c, &m), 0);
	return m;
}

static void test_one_node_by_hand(void **unused)
{
	struct rdzv_machine *m = one_node();
	struct rdzv_action a;
	uint64_t watch, id;
	assert_int_equal(rdzv_start(m, 0), 0);
	pop(m, RDZV_ACT_WATCH, "ddprdzv/r/state", &a);
	watch = a.id;
	pop(m, RDZV_ACT_SET_SESSION, "ddprdzv/r/a/n0", &a);
	assert_int_equal(a.value.len, 1);
	id = a.id;
	pop(m, RDZV_ACT_TIMER, NULL, &a);
	assert_int_equal(a.at_ms, 5000); /* the first heartbeat */
	assert_int_equal(rdzv_on_key(m, 0, watch, val(NULL)), 0);
	assert_false(rdzv_next_action(m, &a)); /* the heartbeat key first */
	assert_int_equal(rdzv_on_done(m, 0, id, 0), 0);
	pop(m, RDZV_ACT_CAS, "ddprdzv/r/state", &a);
	assert_false(a.has_expected);
	const char *open1 = "rdzv3 1 1 open 1 1 1 0 0 0 start - - - - 0 0\n";
	assert_int_equal(a.value.len, strlen(open1));
	assert_memory_equal(a.value.data, open1, a.value.len);
	assert_int_equal(rdzv_on_cas(m, 0, a.id, 0, true, val(open1)), 0);
	pop(m, RDZV_ACT_ADD, "ddprdzv/r/c/1.1", &a);
	assert_int_equal(a.delta, 1);
	assert_int_equal(rdzv_on_add(m, 0, a.id, 0, 1), 0);
	pop(m, RDZV_ACT_SET, "ddprdzv/r/s/1", &a);
	const char *slot = "rdzvs1 1 1 n0 10.0.0.1 4000 1 - 0 0\n";
	assert_memory_equal(a.value.data, slot, strlen(slot));
	assert_int_equal(rdzv_on_done(m, 0, a.id, 0), 0);
	/* Ticket 1 of 1: close at once. */
	pop(m, RDZV_ACT_GET, NULL, &a);
	assert_int_equal(a.nkeys, 1);
	struct rdzv_value one = val("1");
	assert_int_equal(rdzv_on_get(m, 0, a.id, 0, &one, 1), 0);
	pop(m, RDZV_ACT_GET, NULL, &a);
	assert_int_equal(a.nkeys, 1);
	struct rdzv_value sv = val(slot);
	assert_int_equal(rdzv_on_get(m, 0, a.id, 0, &sv, 1), 0);
	pop(m, RDZV_ACT_GET, NULL, &a);
	assert_memory_equal(a.keys[0].data, "ddprdzv/r/a/n0", a.keys[0].len);
	assert_int_equal(rdzv_on_get(m, 0, a.id, 0, &one, 1), 0);
	pop(m, RDZV_ACT_CAS, "ddprdzv/r/w/1.1", &a);
	assert_false(a.has_expected);
	const char *world = "rdzvw1 1 1 1 4000\nn0 10.0.0.1 1\n";
	assert_memory_equal(a.value.data, world, strlen(world));
	assert_int_equal(rdzv_on_cas(m, 0, a.id, 0, true, val(world)), 0);
	pop(m, RDZV_ACT_CAS, "ddprdzv/r/state", &a);
	assert_true(a.has_expected);
	id = a.id;
	/* A TCPStore-style answer for an absent key (it echoes `expected`) must
	 * read as "absent", and the state then be created anew. */
	char expected[128];
	memcpy(expected, a.expected.data, a.expected.len);
	expected[a.expected.len] = '\0';
	assert_int_equal(rdzv_on_cas(m, 0, id, 0, false, val(expected)), 0);
	assert_null(rdzv_machine_state(m));
	pop(m, RDZV_ACT_CAS, "ddprdzv/r/state", &a);
	assert_false(a.has_expected);
	rdzv_machine_free(m);
}

static void test_store_error_fails(void **unused)
{
	struct rdzv_machine *m = one_node();
	struct rdzv_action a;
	assert_int_equal(rdzv_start(m, 0), 0);
	pop(m, RDZV_ACT_WATCH, NULL, &a);
	pop(m, RDZV_ACT_SET_SESSION, NULL, &a);
	assert_int_equal(rdzv_on_done(m, 0, a.id, -ECONNRESET), 0);
	pop(m, RDZV_ACT_FAILED, NULL, &a);
	assert_non_null(strstr(a.text, "a request to the rendezvous store failed"));
	/* Ended: everything after is ignored, and stop says nothing more. */
	assert_int_equal(rdzv_on_timer(m, 100000), 0);
	assert_int_equal(rdzv_stop(m, 100000), 0);
	while (rdzv_next_action(m, &a))
		assert_int_equal(a.kind, RDZV_ACT_TIMER);
	rdzv_machine_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_config_check),
	    cmocka_unit_test(test_form_2),
	    cmocka_unit_test(test_form_4),
	    cmocka_unit_test(test_form_8),
	    cmocka_unit_test(test_form_512),
	    cmocka_unit_test_setup_teardown(test_last_call, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_max_closes_at_once, setup, teardown),
	    cmocka_unit_test(test_death),
	    cmocka_unit_test_setup_teardown(test_leave, setup, teardown),
	    cmocka_unit_test(test_permanent_leave_fixed_size_ends_all),
	    cmocka_unit_test(test_permanent_leave_elastic_at_minimum_waits),
	    cmocka_unit_test_setup_teardown(test_permanent_leave_goes_on_with_enough, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_join_running, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_spare_waits_then_fills_in, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_spare_gives_up_at_join_deadline, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_other_job_refused, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_same_job_other_command_noticed, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_store_owner, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_join_deadline_message, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_static_missing_ranks, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_static_ranks_honoured, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_duplicate_node_rank, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_restart_budget_for_the_job, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_failure_before_death_not_charged, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_failure_charged_after_grace, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_restart_census_blames_death, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_grace_ends_when_all_alive, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_grace_sees_death, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_two_run_ids, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_run_id_reuse, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_relaunch_after_crash, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_heartbeat_staleness, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_death_while_forming, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_failure_after_finish, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_replace_worker_not_charged, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_replace_after_finish_fails, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_shrink_then_grow, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_grow_after_finish_dropped, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_malformed_state_in_store, setup, teardown),
	    cmocka_unit_test(test_older_version_ended_started_over),
	    cmocka_unit_test(test_other_version_refused),
	    cmocka_unit_test_setup_teardown(test_nnodes_mismatch, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_static_node_comes_back, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_stop_while_joining, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_dies_between_ticket_and_slot, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reform_when_too_few_alive, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_overflow_at_formation, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_death_while_finishing, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_fresh_port_each_round, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_state_vanishes, setup, teardown),
	    cmocka_unit_test(test_one_node_by_hand),
	    cmocka_unit_test(test_store_error_fails),
	};
	if (getenv("RDZV_TEST")) /* e.g. RDZV_TEST='test_form_*' */
		cmocka_set_test_filter(getenv("RDZV_TEST"));
	int runs = getenv("RDZV_SEEDS") ? atoi(getenv("RDZV_SEEDS")) : 1, rc = 0;
	int first = getenv("RDZV_SEED") ? atoi(getenv("RDZV_SEED")) : 1;
	for (g_seed = (uint64_t)first; g_seed < (uint64_t)first + (runs > 0 ? runs : 1) && rc == 0;
	     g_seed++)
		rc = cmocka_run_group_tests(tests, NULL, NULL);
	return rc;
}
