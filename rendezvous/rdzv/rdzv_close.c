/*
 * rdzv_close.c - closing a round, and the census behind the join deadline's
 * message. Both read the round's pool the same way:
 *   0. GET the ticket counter            -> count
 *   1. GET slots 1..count                -> who took each ticket
 *   2. (close only) WATCH the slots still being written, at most
 *      close_timeout (a ticket is taken before its slot is written)
 *   3. GET the heartbeat key of each     -> who is still alive
 * then the closer assigns ranks and CASes the world key (absent -> world:
 * one world per round, whoever writes first) and the state (open ->
 * running); the census writes the message: every node that took a ticket
 * counts as joined ("(gone)" when its session has ended since: nodes time
 * out one after the other), the rest of --nnodes as missing.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_machine_int.h"

#define NAMES_SHOWN 8
#define RANKS_SHOWN 16

void rdzv_census_release(struct rdzv_census *c)
{
	free(c->slots);
	free(c->valid);
	free(c->alive);
	free(c->watch);
	memset(c, 0, sizeof(*c));
}

static void count_key(const struct rdzv_machine *m, void *ctx, size_t i, char *key)
{
	rdzv_key(m, key, "c/%" PRIu64 ".%" PRIu32, m->census.gen, m->census.round);
}

static void slot_key(const struct rdzv_machine *m, void *ctx, size_t i, char *key)
{
	rdzv_key(m, key, "s/%zu", i + 1);
}

/* Keys of the slots read, by index into the valid ones (ctx: index map). */
static void alive_key(const struct rdzv_machine *m, void *ctx, size_t i, char *key)
{
	const uint32_t *idx = ctx;
	rdzv_key(m, key, "a/%s", m->census.slots[idx[i]].id);
}

int rdzv_op_close(struct rdzv_machine *m, bool census_only, int64_t now)
{
	struct rdzv_census *c = &m->census;
	const struct rdzv_state *s = &m->st;
	m->op = census_only ? OP_CENSUS : OP_CLOSE;
	m->step = 0;
	if (m->ticket) {
		c->gen = m->pool_gen;
		c->round = m->pool_round;
	} else if (m->st_present && s->phase <= RDZV_RUNNING) {
		c->gen = s->gen;
		c->round = s->phase == RDZV_OPEN ? s->round : s->round + 1;
	} else {
		return rdzv_end(m, RDZV_ACT_FAILED,
				"rendezvous of run id '%s' timed out: no node created the job "
				"(is the store reachable? raise join_timeout in --rdzv_conf)",
				m->run_id);
	}
	m->op_gen = c->gen;
	m->op_round = c->round;
	return rdzv_push_get(m, 1, count_key, NULL, &m->req);
}

static int census_alloc(struct rdzv_census *c)
{
	size_t n = c->count ? c->count : 1;
	c->slots = calloc(n, sizeof(*c->slots));
	c->valid = calloc(n, 1);
	c->alive = calloc(n, 1);
	c->watch = calloc(n, sizeof(*c->watch));
	return c->slots && c->valid && c->alive && c->watch ? 0 : -ENOMEM;
}

static bool slot_take(struct rdzv_census *c, uint32_t i, struct rdzv_value v)
{
	struct rdzv_slot *sl = &c->slots[i];
	if (!v.present || rdzv_slot_decode(v.bytes.data, v.bytes.len, sl) < 0 ||
	    sl->gen != c->gen || sl->round != c->round)
		return false;
	c->valid[i] = 1;
	return true;
}

static int cmp_slot_id(const void *a, const void *b, void *ctx)
{
	const struct rdzv_slot *s = ctx;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	int d = strcmp(s[x].id, s[y].id);
	return d ? d : (x < y ? -1 : x > y);
}

/* Step 3: heartbeat keys of the valid slots, one slot per node id (the
 * lowest ticket wins if an id took two). */
static int ask_alive(struct rdzv_machine *m)
{
	struct rdzv_census *c = &m->census;
	uint32_t n = 0, *idx = malloc((c->count ? c->count : 1) * sizeof(*idx));
	if (!idx)
		return -ENOMEM;
	for (uint32_t i = 0; i < c->count; i++)
		if (c->valid[i])
			idx[n++] = i;
	qsort_r(idx, n, sizeof(*idx), cmp_slot_id, c->slots);
	for (uint32_t i = 1; i < n; i++)
		if (strcmp(c->slots[idx[i]].id, c->slots[idx[i - 1]].id) == 0)
			c->valid[idx[i]] = 0;
	n = 0;
	for (uint32_t i = 0; i < c->count; i++)
		if (c->valid[i])
			idx[n++] = i;
	m->step = 3;
	int rc = rdzv_push_get(m, n, alive_key, idx, &m->req);
	free(idx);
	return rc;
}

static int watch_pending(struct rdzv_machine *m, int64_t now)
{
	struct rdzv_census *c = &m->census;
	char key[RDZV_KEY_MAX];
	m->step = 2;
	m->op_deadline = now + m->cfg.close_timeout_ms;
	for (uint32_t i = 0; i < c->count; i++) {
		if (c->valid[i])
			continue;
		rdzv_key(m, key, "s/%" PRIu32, i + 1);
		int rc = rdzv_push_kv(m, RDZV_ACT_WATCH, key, NULL, 0, &c->watch[i]);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static void unwatch_pending(struct rdzv_machine *m)
{
	struct rdzv_census *c = &m->census;
	for (uint32_t i = 0; i < c->count; i++)
		rdzv_unwatch(m, &c->watch[i]);
	c->pending = 0;
	m->op_deadline = -1;
}

static int got_count(struct rdzv_machine *m, struct rdzv_value v)
{
	struct rdzv_census *c = &m->census;
	uint64_t n = 0;
	if (v.present && rdzv_parse_u64(v.bytes.data, v.bytes.len, UINT64_MAX, &n) < 0)
		n = 0;
	if (m->ticket && m->pool_gen == c->gen && m->pool_round == c->round && n < m->ticket)
		n = m->ticket;
	c->count = n > RDZV_EXPECT_MAX ? RDZV_EXPECT_MAX : (uint32_t)n;
	if (census_alloc(c) < 0)
		return -ENOMEM;
	m->step = 1;
	return rdzv_push_get(m, c->count, slot_key, NULL, &m->req);
}

static int got_slots(struct rdzv_machine *m, int64_t now, const struct rdzv_value *v, size_t n)
{
	struct rdzv_census *c = &m->census;
	if (n != c->count)
		return rdzv_end(m, RDZV_ACT_FAILED, "the store answered %zu values for %u keys", n,
				c->count);
	c->pending = 0;
	for (uint32_t i = 0; i < c->count; i++)
		if (!slot_take(c, i, v[i]))
			c->pending++;
	if (m->op == OP_CENSUS || c->pending == 0)
		return ask_alive(m);
	return watch_pending(m, now);
}

int rdzv_close_on_key(struct rdzv_machine *m, int64_t now, uint64_t watch, struct rdzv_value v)
{
	struct rdzv_census *c = &m->census;
	if (m->step != 2)
		return 0;
	for (uint32_t i = 0; i < c->count; i++) {
		if (c->watch[i] != watch)
			continue;
		if (!slot_take(c, i, v))
			return 0;
		rdzv_unwatch(m, &c->watch[i]);
		if (--c->pending == 0) {
			m->op_deadline = -1;
			return ask_alive(m);
		}
		return 0;
	}
	return 0;
}

int rdzv_close_timer(struct rdzv_machine *m, int64_t now)
{
	const struct rdzv_state *s = &m->st;
	if (m->step != 2)
		return 0;
	/* Give up on slots never written (their writer died between ticket and
	 * slot), or on the whole close when the round moved on meanwhile. */
	if (!(s->phase == RDZV_OPEN && s->gen == m->op_gen && s->round == m->op_round)) {
		unwatch_pending(m);
		rdzv_op_reset(m);
		return 0;
	}
	if (now < m->op_deadline)
		return 0;
	unwatch_pending(m);
	return ask_alive(m);
}

static void list_names(const struct rdzv_census *c, char *buf, size_t cap, uint32_t *joined)
{
	size_t len = 0;
	uint32_t shown = 0;
	buf[0] = '\0';
	*joined = 0;
	for (uint32_t i = 0; i < c->count; i++) {
		if (!c->valid[i])
			continue;
		if (++*joined <= NAMES_SHOWN)
			len +=
			    (size_t)snprintf(buf + len, cap - len, "%s'%s'%s", shown++ ? ", " : "",
					     c->slots[i].id, c->alive[i] ? "" : " (gone)");
	}
	if (*joined > NAMES_SHOWN)
		snprintf(buf + len, cap - len, " and %u more", *joined - NAMES_SHOWN);
}

/* Static mode: the node ranks no slot asked for. */
static int list_missing_ranks(const struct rdzv_machine *m, char *buf, size_t cap,
			      uint32_t *missing)
{
	const struct rdzv_census *c = &m->census;
	uint32_t n = m->cfg.max_nodes, shown = 0;
	size_t len = 0;
	uint8_t *seen = calloc(n, 1);
	if (!seen)
		return -ENOMEM;
	for (uint32_t i = 0; i < c->count; i++)
		if (c->valid[i] && c->slots[i].node_rank >= 0 &&
		    (uint32_t)c->slots[i].node_rank < n)
			seen[c->slots[i].node_rank] = 1;
	buf[0] = '\0';
	*missing = 0;
	for (uint32_t r = 0; r < n; r++) {
		if (seen[r])
			continue;
		if (++*missing <= RANKS_SHOWN)
			len +=
			    (size_t)snprintf(buf + len, cap - len, "%s%u", shown++ ? ", " : "", r);
	}
	if (*missing > RANKS_SHOWN)
		snprintf(buf + len, cap - len, " and %u more", *missing - RANKS_SHOWN);
	free(seen);
	return 0;
}

static int timeout_message(struct rdzv_machine *m)
{
	char names[NAMES_SHOWN * (RDZV_ID_MAX + 4) + 32], ranks[RANKS_SHOWN * 8 + 32], after[32];
	uint32_t joined, missing, min = m->cfg.min_nodes, max = m->cfg.max_nodes;
	int64_t t = m->cfg.join_timeout_ms;
	if (t % 1000 == 0)
		snprintf(after, sizeof(after), "%" PRId64 " s", t / 1000);
	else
		snprintf(after, sizeof(after), "%.1f s", (double)t / 1000.0);
	list_names(&m->census, names, sizeof(names), &joined);
	if (m->cfg.node_rank >= 0 && min == max) {
		if (list_missing_ranks(m, ranks, sizeof(ranks), &missing) < 0)
			return -ENOMEM;
		return rdzv_end(
		    m, RDZV_ACT_FAILED,
		    "rendezvous of run id '%s' timed out after %s: %u of %u nodes "
		    "joined (%s), %u missing: node rank%s %s never came (start them, or "
		    "raise join_timeout in --rdzv_conf)",
		    m->run_id, after, joined, max, joined ? names : "none", missing,
		    missing == 1 ? "" : "s", ranks);
	}
	if (joined < min)
		return rdzv_end(m, RDZV_ACT_FAILED,
				"rendezvous of run id '%s' timed out after %s: %u node%s joined "
				"(%s), %u missing for --nnodes=%u:%u (start more nodes, or raise "
				"join_timeout in --rdzv_conf)",
				m->run_id, after, joined, joined == 1 ? "" : "s",
				joined ? names : "none", min - joined, min, max);
	return rdzv_end(m, RDZV_ACT_FAILED,
			"rendezvous of run id '%s' timed out after %s: %u nodes joined (%s) but "
			"this node was not admitted to a round (raise join_timeout in "
			"--rdzv_conf)",
			m->run_id, after, joined, names);
}

/* "57 s left until the join deadline (join_timeout=60 s)". */
static void deadline_text(const struct rdzv_machine *m, int64_t now, char *buf, size_t cap)
{
	int64_t left = m->join_deadline - now;
	snprintf(buf, cap, "%.0f s left until the join deadline (join_timeout=%g s)",
		 left > 0 ? (double)left / 1000.0 : 0.0, (double)m->cfg.join_timeout_ms / 1000.0);
}

/* A WAITING report from the census: who took a ticket in this node's pool,
 * who is missing, until when. */
static int waiting_message(struct rdzv_machine *m, int64_t now)
{
	char names[NAMES_SHOWN * (RDZV_ID_MAX + 4) + 32], ranks[RANKS_SHOWN * 8 + 32];
	char need[RANKS_SHOWN * 8 + 160], until[96], text[sizeof(names) + sizeof(need) + 400];
	const struct rdzv_state *s = &m->st;
	uint32_t joined, missing, min = m->cfg.min_nodes, max = m->cfg.max_nodes;
	list_names(&m->census, names, sizeof(names), &joined);
	deadline_text(m, now, until, sizeof(until));
	if (s->phase == RDZV_RUNNING) {
		snprintf(text, sizeof(text),
			 "waiting as a spare of run id '%s': round %u runs with all of its %u "
			 "nodes; %u node%s wait%s for a place (%s); %s",
			 m->run_id, s->round, s->size, joined, joined == 1 ? "" : "s",
			 joined == 1 ? "s" : "", names, until);
		return rdzv_push_simple(m, RDZV_ACT_WAITING, -1, 0, text);
	}
	if (m->cfg.node_rank >= 0 && min == max) {
		if (list_missing_ranks(m, ranks, sizeof(ranks), &missing) < 0)
			return -ENOMEM;
		snprintf(need, sizeof(need), "%u missing: node rank%s %s (start %s)", missing,
			 missing == 1 ? "" : "s", ranks, missing == 1 ? "it" : "them");
	} else if (joined < min)
		snprintf(need, sizeof(need), "%u more needed for --nnodes=%u:%u (start them)",
			 min - joined, min, max);
	else
		snprintf(need, sizeof(need),
			 "enough for --nnodes=%u:%u: the round forms at the last call "
			 "(last_call_timeout=%g s)",
			 min, max, (double)m->cfg.last_call_timeout_ms / 1000.0);
	snprintf(text, sizeof(text),
		 "waiting for round %u of run id '%s': %u of %u node%s joined (%s), %s; %s",
		 m->census.round, m->run_id, joined, max, max == 1 ? "" : "s", names, need, until);
	return rdzv_push_simple(m, RDZV_ACT_WAITING, -1, 0, text);
}

/* Group rank order -> members, and the world CAS (absent -> ours). */
static int publish_world(struct rdzv_machine *m, const struct rdzv_slot *cand,
			 const uint32_t *order, uint32_t size)
{
	char key[RDZV_KEY_MAX];
	struct rdzv_member *mem = malloc(size * sizeof(*mem));
	if (!mem)
		return -ENOMEM;
	for (uint32_t r = 0; r < size; r++)
		mem[r] = (struct rdzv_member){cand[order[r]].id, cand[order[r]].addr,
					      cand[order[r]].nproc};
	int rc = rdzv_world_encode(m->op_gen, m->op_round, cand[order[0]].port, mem, size,
				   &m->new_world, &m->new_world_len);
	free(mem);
	if (rc < 0)
		return rc == -ENOMEM ? rc : rdzv_end(m, RDZV_ACT_FAILED, "internal error: world");
	m->step = 4;
	rdzv_key(m, key, "w/%" PRIu64 ".%" PRIu32, m->op_gen, m->op_round);
	return rdzv_push_cas(m, key, NULL, 0, false, m->new_world, m->new_world_len, &m->req);
}

/* Too few live nodes, or two asking for one node rank: the round cannot
 * form as it is. */
static int close_instead(struct rdzv_machine *m, const struct rdzv_slot *cand, int rc, uint32_t a,
			 uint32_t b)
{
	struct rdzv_state ns = m->st;
	if (rc == -EEXIST) {
		snprintf(ns.msg, sizeof(ns.msg),
			 "node rank %d is claimed by both '%s' and '%s'; give each node its own "
			 "--node_rank",
			 cand[a].node_rank, cand[a].id, cand[b].id);
		ns.phase = RDZV_FAILED;
	} else {
		ns.round++;
		ns.reason = RDZV_WHY_REFORM;
		ns.subject[0] = '\0';
	}
	m->step = 5;
	return rdzv_state_cas(m, &ns);
}

static int build(struct rdzv_machine *m)
{
	struct rdzv_census *c = &m->census;
	uint32_t n = 0, size = 0, a = 0, b = 0;
	struct rdzv_slot *cand = malloc((c->count ? c->count : 1) * sizeof(*cand));
	uint32_t *order = malloc((c->count ? c->count : 1) * sizeof(*order));
	int rc = -ENOMEM;
	if (!cand || !order)
		goto out;
	for (uint32_t i = 0; i < c->count; i++)
		if (c->alive[i])
			cand[n++] = c->slots[i];
	const struct rdzv_state *s = &m->st;
	if (s->phase != RDZV_OPEN || s->gen != m->op_gen || s->round != m->op_round) {
		rdzv_op_reset(m); /* someone else closed it meanwhile */
		rc = 0;
		goto out;
	}
	rc = rdzv_assign_ranks(cand, n, m->cfg.max_nodes, order, &size, &a, &b);
	if (rc == -ENOMEM)
		goto out;
	if (rc == -EEXIST || size < m->cfg.min_nodes)
		rc = close_instead(m, cand, rc, a, b);
	else
		rc = publish_world(m, cand, order, size);
out:
	free(cand);
	free(order);
	return rc;
}

static int got_alive(struct rdzv_machine *m, int64_t now, const struct rdzv_value *v, size_t n)
{
	struct rdzv_census *c = &m->census;
	size_t k = 0;
	for (uint32_t i = 0; i < c->count; i++) {
		if (!c->valid[i])
			continue;
		if (k >= n)
			return rdzv_end(m, RDZV_ACT_FAILED, "the store answered too few values");
		c->alive[i] = v[k].present &&
			      !(v[k].bytes.len == 4 && memcmp(v[k].bytes.data, "done", 4) == 0);
		k++;
	}
	if (k != n)
		return rdzv_end(m, RDZV_ACT_FAILED, "the store answered too many values");
	if (m->op == OP_CENSUS && m->reporting) {
		int rc = waiting_message(m, now);
		rdzv_op_reset(m); /* back to waiting */
		return rc;
	}
	return m->op == OP_CENSUS ? timeout_message(m) : build(m);
}

int rdzv_close_on_get(struct rdzv_machine *m, int64_t now, const struct rdzv_value *v, size_t n)
{
	switch (m->step) {
	case 0:
		if (n != 1)
			return rdzv_end(m, RDZV_ACT_FAILED,
					"the store answered %zu values for 1 key", n);
		return got_count(m, v[0]);
	case 1:
		return got_slots(m, now, v, n);
	case 3:
		return got_alive(m, now, v, n);
	default:
		return 0;
	}
}

/* The world is in the store (ours or a faster closer's): keep a copy for
 * our own read, then CAS the state to running with its size and rank 0. */
static int world_written(struct rdzv_machine *m, bool swapped, struct rdzv_value cur)
{
	struct rdzv_world_data wd;
	const uint8_t *p = swapped ? (const uint8_t *)m->new_world : cur.bytes.data;
	size_t len = swapped ? m->new_world_len : cur.bytes.len;
	if (!swapped && !cur.present)
		return rdzv_end(m, RDZV_ACT_FAILED, "the store refused to write the world");
	if (rdzv_world_decode(p, len, m->cfg.max_nodes, &wd) < 0 || wd.gen != m->op_gen ||
	    wd.round != m->op_round) {
		rdzv_world_data_release(&wd);
		return rdzv_end(m, RDZV_ACT_FAILED,
				"round %u of run id '%s' has an unreadable world in the store",
				m->op_round, m->run_id);
	}
	free(m->cached_world);
	m->cached_world = malloc(len);
	if (!m->cached_world) {
		rdzv_world_data_release(&wd);
		return -ENOMEM;
	}
	memcpy(m->cached_world, p, len);
	m->cached_len = len;
	m->cached_gen = m->op_gen;
	m->cached_round = m->op_round;
	struct rdzv_state ns = m->st;
	ns.phase = RDZV_RUNNING;
	ns.size = wd.size;
	snprintf(ns.coord, sizeof(ns.coord), "%s", wd.members[0].id);
	rdzv_world_data_release(&wd);
	if (m->st.phase != RDZV_OPEN || m->st.gen != m->op_gen || m->st.round != m->op_round) {
		rdzv_op_reset(m);
		return 0;
	}
	m->step = 5;
	return rdzv_state_cas(m, &ns);
}

int rdzv_close_on_cas(struct rdzv_machine *m, int64_t now, bool swapped, struct rdzv_value cur)
{
	if (m->step == 4)
		return world_written(m, swapped, cur);
	int rc = rdzv_state_cas_answer(m, swapped, cur);
	if (m->mode != MODE_END)
		rdzv_op_reset(m);
	return rc;
}
