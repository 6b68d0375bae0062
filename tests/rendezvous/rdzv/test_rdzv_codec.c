/*
 * test_rdzv_codec.c - the rendezvous' encodings and rank assignment
 * (rendezvous/rdzv/rdzv_codec.h): round trips, golden bytes, malformed
 * input (every prefix, every single-byte change, hand-picked cases), and
 * the rank rules.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rdzv_codec.h"

#define U8(s) ((const uint8_t *)(s))

static struct rdzv_state sample_state(enum rdzv_phase phase)
{
	struct rdzv_state s = {
	    .gen = 3,
	    .round = 7,
	    .phase = phase,
	    .min_nodes = 2,
	    .max_nodes = 4,
	    .expect = 4,
	    .restarts = 1,
	    .max_restarts = 3,
	    .reason = RDZV_WHY_DEAD,
	};
	strcpy(s.subject, "10.0.0.3:77");
	if (phase == RDZV_RUNNING || phase == RDZV_FINISHED || phase == RDZV_FAILED) {
		s.size = 3;
		strcpy(s.coord, "10.0.0.1:12");
	}
	if (phase == RDZV_FAILED)
		strcpy(s.msg, "workers on node 'x' failed: no restarts left");
	strcpy(s.job, "0123456789abcdef");
	strcpy(s.cmd, "fedcba9876543210");
	strcpy(s.job_text, "'train.py' on --nnodes=2:4");
	return s;
}

static void test_state_golden(void **unused)
{
	char buf[RDZV_STATE_MAX + 1];
	struct rdzv_state s = sample_state(RDZV_RUNNING), d;
	int n = rdzv_state_encode(&s, buf, sizeof(buf));
	const char *want = "rdzv3 3 7 running 2 4 4 3 1 3 dead 10.0.0.3:77 10.0.0.1:12 "
			   "0123456789abcdef fedcba9876543210 26 0\n'train.py' on --nnodes=2:4";
	assert_int_equal(n, strlen(want));
	assert_memory_equal(buf, want, n);
	assert_int_equal(rdzv_state_decode(U8(buf), (size_t)n, &d), 0);
	assert_memory_equal(&s, &d, sizeof(s));
}

static void test_state_round_trip_phases(void **unused)
{
	for (int p = RDZV_OPEN; p <= RDZV_FAILED; p++) {
		char buf[RDZV_STATE_MAX + 1];
		struct rdzv_state s = sample_state((enum rdzv_phase)p), d;
		if (p == RDZV_OPEN)
			memset(s.subject, 0, sizeof(s.subject)); /* "-" on the wire */
		int n = rdzv_state_encode(&s, buf, sizeof(buf));
		assert_true(n > 0);
		assert_int_equal(rdzv_state_decode(U8(buf), (size_t)n, &d), 0);
		assert_memory_equal(&s, &d, sizeof(s));
	}
}

static void test_state_round_trip_reasons(void **unused)
{
	for (int r = RDZV_WHY_START; r <= RDZV_WHY_PERMANENT; r++) {
		char buf[RDZV_STATE_MAX + 1];
		struct rdzv_state s = sample_state(RDZV_RUNNING), d;
		s.reason = (enum rdzv_reason)r;
		int n = rdzv_state_encode(&s, buf, sizeof(buf));
		assert_true(n > 0);
		assert_non_null(strstr(buf, rdzv_reason_name(s.reason)));
		assert_int_equal(rdzv_state_decode(U8(buf), (size_t)n, &d), 0);
		assert_memory_equal(&s, &d, sizeof(s));
	}
}

/* Every accepted input is canonical: it re-encodes to the same bytes. */
static void assert_state_canonical_or_rejected(const uint8_t *p, size_t len)
{
	struct rdzv_state d;
	char buf[RDZV_STATE_MAX + 1];
	if (rdzv_state_decode(p, len, &d) < 0) {
		struct rdzv_state zero;
		memset(&zero, 0, sizeof(zero));
		assert_memory_equal(&d, &zero, sizeof(d));
		return;
	}
	int n = rdzv_state_encode(&d, buf, sizeof(buf));
	assert_int_equal(n, len);
	assert_memory_equal(buf, p, len);
}

static void mutate_all(const char *enc, size_t len, void (*check)(const uint8_t *, size_t))
{
	uint8_t *copy = malloc(len + 1);
	static const uint8_t subst[] = {0, ' ', '\n', '0', '1', '9', '-', '/', 'a', 0x7f, 0xff};
	for (size_t cut = 0; cut <= len; cut++) { /* every prefix (and the whole) */
		memcpy(copy, enc, cut);
		check(copy, cut);
	}
	for (size_t i = 0; i < len; i++)
		for (size_t k = 0; k < sizeof(subst); k++) {
			memcpy(copy, enc, len);
			copy[i] = subst[k];
			check(copy, len);
		}
	free(copy);
}

static void test_state_mutations(void **unused)
{
	for (int p = RDZV_OPEN; p <= RDZV_FAILED; p++) {
		char buf[RDZV_STATE_MAX + 1];
		struct rdzv_state s = sample_state((enum rdzv_phase)p);
		int n = rdzv_state_encode(&s, buf, sizeof(buf));
		mutate_all(buf, (size_t)n, assert_state_canonical_or_rejected);
	}
}

static void test_state_malformed(void **unused)
{
	static const char *bad[] = {
	    "",
	    "\n",
	    "rdzv3 3 7 running 2 4 4 3 1 3 dead - a - - 0 0",	    /* no newline */
	    "rdzv1 3 7 running 2 4 4 3 1 3 dead - a - - 0 0\n",	    /* version */
	    "rdzv3 03 7 running 2 4 4 3 1 3 dead - a - - 0 0\n",    /* leading zero */
	    "rdzv3 3  7 running 2 4 4 3 1 3 dead - a - - 0 0\n",    /* double space */
	    "rdzv3 3 7 running 2 4 4 3 1 3 dead - a - - 0 0 \n",    /* trailing space */
	    "rdzv3 3 7 running 2 4 4 3 1 3 dead - a - - 0\n",	    /* field missing */
	    "rdzv3 3 7 running 2 4 4 3 1 3 dead - a - - 0 0 0\n",   /* field extra */
	    "rdzv3 0 7 running 2 4 4 3 1 3 dead - a - - 0 0\n",	    /* gen 0 */
	    "rdzv3 3 0 running 2 4 4 3 1 3 dead - a - - 0 0\n",	    /* round 0 */
	    "rdzv3 3 7 walking 2 4 4 3 1 3 dead - a - - 0 0\n",	    /* phase */
	    "rdzv3 3 7 running 5 4 4 3 1 3 dead - a - - 0 0\n",	    /* min > max */
	    "rdzv3 3 7 running 2 4 4 5 1 3 dead - a - - 0 0\n",	    /* size > max */
	    "rdzv3 3 7 running 2 4 4 3 4 3 dead - a - - 0 0\n",	    /* restarts > budget */
	    "rdzv3 3 7 running 2 4 4 0 1 3 dead - a - - 0 0\n",	    /* running, no size */
	    "rdzv3 3 7 running 2 4 4 3 1 3 dead - - - - 0 0\n",	    /* running, no coord */
	    "rdzv3 3 7 failed 2 4 4 3 1 3 dead - a - - 0 0\n",	    /* failed, no message */
	    "rdzv3 3 7 open 2 4 4 0 1 3 dead - - - - 0 1\nx",	    /* open with a message */
	    "rdzv3 3 7 failed 2 4 4 3 1 3 dead - a - - 0 3\nab",    /* message short */
	    "rdzv3 3 7 failed 2 4 4 3 1 3 dead - a - - 0 1\nab",    /* message long */
	    "rdzv3 3 7 failed 2 4 4 3 1 3 dead - a - - 0 1\n\t",    /* message not printable */
	    "rdzv3 3 7 running 2 4 4 3 1 3 dead a/b a - - 0 0\n",   /* '/' in an id */
	    "rdzv3 3 7 running 2 4 4 3 1 3 sick - a - - 0 0\n",	    /* reason */
	    "rdzv3 3 7 running 2 99999 4 3 1 3 dead - a - - 0 0\n", /* max too large */
	    "rdzv3 99999999999999999999 7 running 2 4 4 3 1 3 dead - a - - 0 0\n", /* > 2^64 */
	    "rdzv3 3 4294967296 running 2 4 4 3 1 3 dead - a - - 0 0\n",	   /* > 2^32 */
	    "rdzv3 +3 7 running 2 4 4 3 1 3 dead - a - - 0 0\n",
	    "rdzv2 3 7 running 2 4 4 3 1 3 dead - a - 0 0\n",	  /* the version before CMD */
	    "rdzv3 3 7 running 2 4 4 3 1 3 dead - a j/b - 0 0\n", /* '/' in the job */
	    "rdzv3 3 7 running 2 4 4 3 1 3 dead - a j c/d 0 0\n", /* '/' in the command's */
	    "rdzv3 3 7 running 2 4 4 3 1 3 dead - a j - 3 0\nab", /* job text short */
	    "rdzv3 3 7 running 2 4 4 3 1 3 dead - a j - 1 0\nab", /* job text long */
	    "rdzv3 3 7 running 2 4 4 3 1 3 dead - a j - 1 0\n\t", /* not printable */
	    "rdzv3 3 7 running 2 4 4 3 1 3 dead - a j - 201 0\n", /* over RDZV_JOB_MAX */
	    "rdzv3 3 7 failed 2 4 4 3 1 3 dead - a j - 1 1\nx",	  /* no message left */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		struct rdzv_state d;
		if (rdzv_state_decode(U8(bad[i]), strlen(bad[i]), &d) == 0)
			fail_msg("accepted: %s", bad[i]);
	}
	/* A 65-character id is one too many. */
	char big[256];
	snprintf(big, sizeof(big), "rdzv3 3 7 running 2 4 4 3 1 3 dead %065d a - - 0 0\n", 1);
	struct rdzv_state d;
	assert_int_equal(rdzv_state_decode(U8(big), strlen(big), &d), -EINVAL);
	/* Over RDZV_STATE_MAX. */
	char *huge = malloc(RDZV_STATE_MAX + 2);
	memset(huge, 'a', RDZV_STATE_MAX + 1);
	assert_int_equal(rdzv_state_decode(U8(huge), RDZV_STATE_MAX + 1, &d), -EINVAL);
	free(huge);
}

static void test_state_encode_checks(void **unused)
{
	char buf[RDZV_STATE_MAX + 1];
	struct rdzv_state s = sample_state(RDZV_RUNNING);
	s.size = 5; /* > max */
	assert_int_equal(rdzv_state_encode(&s, buf, sizeof(buf)), -EINVAL);
	s = sample_state(RDZV_RUNNING);
	strcpy(s.subject, "has space");
	assert_int_equal(rdzv_state_encode(&s, buf, sizeof(buf)), -EINVAL);
	s = sample_state(RDZV_RUNNING);
	assert_int_equal(rdzv_state_encode(&s, buf, 10), -ENOSPC);
}

static struct rdzv_slot sample_slot(void)
{
	struct rdzv_slot s = {.gen = 1,
			      .round = 2,
			      .port = 29500,
			      .nproc = 8,
			      .node_rank = -1,
			      .prev_round = 1,
			      .prev_rank = 3};
	strcpy(s.id, "node-a:4242");
	strcpy(s.addr, "10.1.2.3");
	return s;
}

static void assert_slot_canonical_or_rejected(const uint8_t *p, size_t len)
{
	struct rdzv_slot d;
	char buf[RDZV_SLOT_MAX + 1];
	if (rdzv_slot_decode(p, len, &d) < 0)
		return;
	int n = rdzv_slot_encode(&d, buf, sizeof(buf));
	assert_int_equal(n, len);
	assert_memory_equal(buf, p, len);
}

static void test_slot(void **unused)
{
	char buf[RDZV_SLOT_MAX + 1];
	struct rdzv_slot s = sample_slot(), d;
	int n = rdzv_slot_encode(&s, buf, sizeof(buf));
	const char *want = "rdzvs1 1 2 node-a:4242 10.1.2.3 29500 8 - 1 3\n";
	assert_int_equal(n, strlen(want));
	assert_memory_equal(buf, want, n);
	assert_int_equal(rdzv_slot_decode(U8(buf), (size_t)n, &d), 0);
	assert_memory_equal(&s, &d, sizeof(s));
	s.node_rank = 5;
	n = rdzv_slot_encode(&s, buf, sizeof(buf));
	assert_int_equal(rdzv_slot_decode(U8(buf), (size_t)n, &d), 0);
	assert_int_equal(d.node_rank, 5);
	mutate_all(buf, (size_t)n, assert_slot_canonical_or_rejected);
	static const char *bad[] = {
	    "rdzvs1 1 2 a b 29500 8 - 1 3",    /* no newline */
	    "rdzvs1 1 2 a b 29500 8 - 1 3\nx", /* trailing bytes */
	    "rdzvs1 1 2 a b 65536 8 - 1 3\n",  /* port */
	    "rdzvs1 1 2 a b 1 0 - 1 3\n",      /* nproc 0 */
	    "rdzvs1 1 2 a b 1 1 - 0 3\n",      /* rank without round */
	    "rdzvs1 1 2 - b 1 1 - 1 3\n",      /* empty id */
	    "rdzvs1 1 2 a b 1 1 -1 1 3\n",     /* signed rank */
	    "rdzvs1 1 2 a b 1 1 65536 1 3\n",  /* rank too large */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
		if (rdzv_slot_decode(U8(bad[i]), strlen(bad[i]), &d) == 0)
			fail_msg("accepted: %s", bad[i]);
}

static void test_world_round_trip(void **unused)
{
	struct rdzv_member m[3] = {{"n0", "10.0.0.1", 2}, {"n1", "10.0.0.2", 4}, {"n2", "h", 1}};
	char *enc;
	size_t len;
	struct rdzv_world_data w;
	assert_int_equal(rdzv_world_encode(5, 9, 29500, m, 3, &enc, &len), 0);
	const char *want = "rdzvw1 5 9 3 29500\nn0 10.0.0.1 2\nn1 10.0.0.2 4\nn2 h 1\n";
	assert_int_equal(len, strlen(want));
	assert_memory_equal(enc, want, len);
	assert_int_equal(rdzv_world_decode(U8(enc), len, 4, &w), 0);
	assert_int_equal(w.gen, 5);
	assert_int_equal(w.round, 9);
	assert_int_equal(w.size, 3);
	assert_int_equal(w.master_port, 29500);
	for (int i = 0; i < 3; i++) {
		assert_string_equal(w.members[i].id, m[i].id);
		assert_string_equal(w.members[i].addr, m[i].addr);
		assert_int_equal(w.members[i].nproc, m[i].nproc);
	}
	rdzv_world_data_release(&w);
	/* More members than the caller allows. */
	assert_int_equal(rdzv_world_decode(U8(enc), len, 2, &w), -EINVAL);
	/* Every prefix but the whole is rejected; so is every byte changed to a
	 * separator or junk (or it decodes to a world that encodes back). */
	for (size_t cut = 0; cut < len; cut++)
		assert_int_equal(rdzv_world_decode(U8(enc), cut, 4, &w), -EINVAL);
	uint8_t *copy = malloc(len);
	static const uint8_t subst[] = {0, ' ', '\n', '0', '/', 'z', 0x80};
	for (size_t i = 0; i < len; i++)
		for (size_t k = 0; k < sizeof(subst); k++) {
			memcpy(copy, enc, len);
			copy[i] = subst[k];
			if (rdzv_world_decode(copy, len, 4, &w) == 0) {
				char *re;
				size_t relen;
				assert_int_equal(rdzv_world_encode(w.gen, w.round, w.master_port,
								   w.members, w.size, &re, &relen),
						 0);
				assert_int_equal(relen, len);
				assert_memory_equal(re, copy, len);
				free(re);
			}
			rdzv_world_data_release(&w);
		}
	free(copy);
	free(enc);
}

static void test_world_malformed(void **unused)
{
	struct rdzv_world_data w;
	static const char *bad[] = {
	    "rdzvw1 1 1 2 0\na b 1\n",	      /* fewer rows */
	    "rdzvw1 1 1 1 0\na b 1\nc d 1\n", /* more rows */
	    "rdzvw1 1 1 0 0\n",		      /* empty world */
	    "rdzvw1 1 1 1 0\na b 0\n",	      /* nproc 0 */
	    "rdzvw1 1 1 1 0\na b 1 x\n",      /* extra field */
	    "rdzvw1 1 1 1 0\na  b 1\n",	      /* double space */
	    "rdzvw1 1 1 65536 0\na b 1\n",    /* announced count beyond the bytes */
	    "rdzvw1 1 1 65537 0\na b 1\n",    /* beyond the limit */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
		if (rdzv_world_decode(U8(bad[i]), strlen(bad[i]), RDZV_NODES_MAX, &w) == 0)
			fail_msg("accepted: %s", bad[i]);
	rdzv_world_data_release(NULL);
	/* Distinct ids are the closer's promise, not the decoder's check. */
	const char *dup = "rdzvw1 1 1 2 0\na b 1\na c 1\n";
	assert_int_equal(rdzv_world_decode(U8(dup), strlen(dup), 8, &w), 0);
	rdzv_world_data_release(&w);
}

static void test_tokens_and_numbers(void **unused)
{
	uint64_t v;
	assert_true(rdzv_token_ok("a", 4));
	assert_true(rdzv_token_ok("[::1]:29500", 64));
	assert_false(rdzv_token_ok("", 4));
	assert_false(rdzv_token_ok("-", 4));
	assert_false(rdzv_token_ok("abcde", 4));
	assert_false(rdzv_token_ok("a b", 4));
	assert_false(rdzv_token_ok("a/b", 4));
	assert_int_equal(rdzv_parse_u64(U8("0"), 1, 10, &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(rdzv_parse_u64(U8("18446744073709551615"), 20, UINT64_MAX, &v), 0);
	assert_int_equal(v, UINT64_MAX);
	assert_int_equal(rdzv_parse_u64(U8("18446744073709551616"), 20, UINT64_MAX, &v), -EINVAL);
	assert_int_equal(rdzv_parse_u64(U8("11"), 2, 10, &v), -EINVAL);
	assert_int_equal(rdzv_parse_u64(U8("01"), 2, 10, &v), -EINVAL);
	assert_int_equal(rdzv_parse_u64(U8(""), 0, 10, &v), -EINVAL);
}

static struct rdzv_slot cand(const char *id, int32_t node_rank, uint32_t prev_round,
			     uint32_t prev_rank)
{
	struct rdzv_slot s = {.gen = 1,
			      .round = 5,
			      .nproc = 1,
			      .node_rank = node_rank,
			      .prev_round = prev_round,
			      .prev_rank = prev_rank};
	strcpy(s.id, id);
	strcpy(s.addr, "h");
	return s;
}

static void assert_ranks(const struct rdzv_slot *s, uint32_t n, uint32_t max, const char *want)
{
	uint32_t order[16], size, a, b;
	char got[128] = "";
	assert_int_equal(rdzv_assign_ranks(s, n, max, order, &size, &a, &b), 0);
	for (uint32_t r = 0; r < size; r++) {
		strcat(got, r ? " " : "");
		strcat(got, s[order[r]].id);
	}
	assert_string_equal(got, want);
}

static void test_ranks(void **unused)
{
	/* New nodes: ticket order. */
	struct rdzv_slot a[] = {cand("x", -1, 0, 0), cand("y", -1, 0, 0), cand("z", -1, 0, 0)};
	assert_ranks(a, 3, 8, "x y z");
	/* Survivors keep their ranks (y was 2, w was 0); rank 1 died; the
	 * newcomer fills the hole. */
	struct rdzv_slot b[] = {cand("new", -1, 0, 0), cand("y", -1, 4, 2), cand("w", -1, 4, 0)};
	assert_ranks(b, 3, 8, "w new y");
	/* Shrinking: old rank 3 does not fit a world of 2, it takes the hole. */
	struct rdzv_slot c[] = {cand("p", -1, 4, 3), cand("q", -1, 4, 0)};
	assert_ranks(c, 2, 8, "q p");
	/* Asked-for ranks win and are honoured where they fit. */
	struct rdzv_slot d[] = {cand("s", -1, 4, 0), cand("r1", 1, 0, 0), cand("r0", 0, 0, 0)};
	assert_ranks(d, 3, 8, "r0 r1 s");
	/* At most max: asked-for first, then survivors, then by ticket. */
	struct rdzv_slot e[] = {cand("late", -1, 0, 0), cand("old", -1, 4, 1), cand("ask", 2, 0, 0),
				cand("later", -1, 0, 0)};
	assert_ranks(e, 4, 2, "ask old");
	/* Two claims of one old rank: the more recent round keeps it. */
	struct rdzv_slot f[] = {cand("stale", -1, 2, 0), cand("fresh", -1, 4, 0)};
	assert_ranks(f, 2, 8, "fresh stale");
	/* Deterministic: the same input in any ticket order gives the same
	 * assignment when no ticket order is involved. */
	struct rdzv_slot g[] = {cand("k", 1, 0, 0), cand("j", 0, 0, 0)};
	assert_ranks(g, 2, 8, "j k");
	/* Duplicate node ranks are refused. */
	struct rdzv_slot h[] = {cand("u", 1, 0, 0), cand("v", 0, 0, 0), cand("t", 1, 0, 0)};
	uint32_t order[3], size, da, db;
	assert_int_equal(rdzv_assign_ranks(h, 3, 8, order, &size, &da, &db), -EEXIST);
	assert_string_equal(h[da].id, "u");
	assert_string_equal(h[db].id, "t");
	assert_int_equal(rdzv_assign_ranks(h, 0, 8, order, &size, &da, &db), 0);
	assert_int_equal(size, 0);
}

static void assert_owner_canonical_or_rejected(const uint8_t *p, size_t len)
{
	struct rdzv_owner d;
	char buf[RDZV_OWNER_MAX + 1];
	if (rdzv_owner_decode(p, len, &d) < 0) {
		struct rdzv_owner zero;
		memset(&zero, 0, sizeof(zero));
		assert_memory_equal(&d, &zero, sizeof(d));
		return;
	}
	int n = rdzv_owner_encode(&d, buf, sizeof(buf));
	assert_int_equal(n, len);
	assert_memory_equal(buf, p, len);
}

/* The owner record of a static job's store: golden, round trip, every
 * mutation canonical or refused, malformed ones refused. */
static void test_owner(void **unused)
{
	struct rdzv_owner o = {0}, d;
	char buf[RDZV_OWNER_MAX + 1];
	strcpy(o.run_id, "job-0123456789abcdef");
	strcpy(o.job, "0123456789abcdef");
	strcpy(o.job_text, "'train.py' 2");
	int n = rdzv_owner_encode(&o, buf, sizeof(buf));
	const char *want = "rdzvo1 job-0123456789abcdef 0123456789abcdef 12\n'train.py' 2";
	assert_int_equal(n, strlen(want));
	assert_memory_equal(buf, want, n);
	assert_int_equal(rdzv_owner_decode(U8(buf), (size_t)n, &d), 0);
	assert_memory_equal(&o, &d, sizeof(o));
	mutate_all(buf, (size_t)n, assert_owner_canonical_or_rejected);
	static const char *bad[] = {
	    "rdzvo1 r j 0",	/* no newline */
	    "rdzvo2 r j 0\n",	/* version */
	    "rdzvo1 - j 0\n",	/* no run id */
	    "rdzvo1 r/x j 0\n", /* '/' in the run id */
	    "rdzvo1 r j 1\n",	/* text short */
	    "rdzvo1 r j 0\nx",	/* text long */
	    "rdzvo1 r j 1\n\n", /* not printable */
	    "rdzvo1 r j 201\n", /* over RDZV_JOB_MAX */
	    "rdzvo1 r j\n",	/* field missing */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
		if (rdzv_owner_decode(U8(bad[i]), strlen(bad[i]), &d) == 0)
			fail_msg("accepted: %s", bad[i]);
	/* No fingerprint and no text: "-" and 0. */
	memset(&o, 0, sizeof(o));
	strcpy(o.run_id, "r");
	n = rdzv_owner_encode(&o, buf, sizeof(buf));
	assert_int_equal(n, strlen("rdzvo1 r - 0\n"));
	assert_int_equal(rdzv_owner_decode(U8(buf), (size_t)n, &d), 0);
	assert_memory_equal(&o, &d, sizeof(o));
}

/* Another ddplaunch version's state: its version, and for an older one
 * the generation, round and phase every version began with. */
static void test_state_version_other(void **unused)
{
	struct rdzv_state st;
	const char *v2 = "rdzv2 5 3 finished 2 2 2 2 0 3 start - a - 0 0\n";
	assert_int_equal(rdzv_state_version_other(U8(v2), strlen(v2), &st), 2);
	assert_int_equal(st.gen, 5);
	assert_int_equal(st.round, 3);
	assert_int_equal(st.phase, RDZV_FINISHED);
	const char *v1 = "rdzv1 4 2 failed 2 2 2 2 1 1 restart n1 - 6\nbroken";
	assert_int_equal(rdzv_state_version_other(U8(v1), strlen(v1), &st), 1);
	assert_int_equal(st.gen, 4);
	assert_int_equal(st.phase, RDZV_FAILED);
	const char *v9 = "rdzv9 anything at all";
	assert_int_equal(rdzv_state_version_other(U8(v9), strlen(v9), &st), 9);
	assert_int_equal(st.gen, 0);
	const char *v12 = "rdzv12 x\n";
	assert_int_equal(rdzv_state_version_other(U8(v12), strlen(v12), &st), 12);
	const char *bad[] = {
	    "rdzv3 5 3 finished 2 2 2 2 0 3 start - a - 0 0\n", /* this version */
	    "rdzv2 5 3 walking 2\n",				/* phase */
	    "rdzv2 0 3 finished 2\n",				/* gen 0 */
	    "rdzv2 5 3\n",					/* too short */
	    "rdzv2 5  3 finished 2\n",				/* double space */
	    "rdzv02 5 3 finished 2\n",				/* leading zero */
	    "rdzv0 5 3 finished 2\n",				/* version 0 */
	    "rdzvx 5 3 finished 2\n",				/* not a number */
	    "rdzv 5 3 finished 2\n",				/* no number */
	    "rdzs2 5 3 finished 2\n",				/* another value */
	    "",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(rdzv_state_version_other(U8(bad[i]), strlen(bad[i]), &st),
				 -EINVAL);
		assert_int_equal(st.gen, 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_state_golden),
	    cmocka_unit_test(test_state_version_other),
	    cmocka_unit_test(test_state_round_trip_phases),
	    cmocka_unit_test(test_state_round_trip_reasons),
	    cmocka_unit_test(test_state_mutations),
	    cmocka_unit_test(test_state_malformed),
	    cmocka_unit_test(test_state_encode_checks),
	    cmocka_unit_test(test_slot),
	    cmocka_unit_test(test_owner),
	    cmocka_unit_test(test_world_round_trip),
	    cmocka_unit_test(test_world_malformed),
	    cmocka_unit_test(test_tokens_and_numbers),
	    cmocka_unit_test(test_ranks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
