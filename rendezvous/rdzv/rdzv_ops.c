/*
 * rdzv_ops.c - the short request sequences: a new generation (create), a
 * ticket and slot (join), reading a formed round (world), moving a running
 * job to its next round (trigger) and recording this node's success (done).
 * Closing a round lives in rdzv_close.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_machine_int.h"

void rdzv_op_reset(struct rdzv_machine *m)
{
	rdzv_census_release(&m->census);
	rdzv_world_data_release(&m->trig_world);
	free(m->new_world);
	m->new_world = NULL;
	m->op = OP_NONE;
	m->step = 0;
	m->req = 0;
	m->op_deadline = -1;
	m->reporting = false;
}

int rdzv_state_cas(struct rdzv_machine *m, const struct rdzv_state *ns)
{
	char key[RDZV_KEY_MAX], buf[RDZV_STATE_MAX + 1];
	int n = rdzv_state_encode(ns, buf, sizeof(buf));
	if (n < 0)
		return rdzv_end(m, RDZV_ACT_FAILED, "internal error: state not encodable");
	m->new_st = *ns;
	m->cas_has_exp = m->st_present;
	m->cas_exp_len = m->st_present ? m->st_len : 0;
	memcpy(m->cas_exp, m->st_raw, m->cas_exp_len);
	rdzv_key(m, key, "state");
	return rdzv_push_cas(m, key, m->cas_exp, m->cas_exp_len, m->cas_has_exp, buf, (size_t)n,
			     &m->req);
}

int rdzv_state_cas_answer(struct rdzv_machine *m, bool swapped, struct rdzv_value cur)
{
	if (swapped)
		return rdzv_take_state_struct(m, &m->new_st);
	/* TCPStore answers the expected value itself when the key is absent. */
	if (cur.present && m->cas_has_exp && cur.bytes.len == m->cas_exp_len &&
	    memcmp(cur.bytes.data, m->cas_exp, m->cas_exp_len) == 0)
		cur.present = false;
	return rdzv_take_state(m, cur);
}

int rdzv_op_create(struct rdzv_machine *m)
{
	struct rdzv_state ns = {
	    .gen = m->st_present ? m->st.gen + 1 : 1,
	    .round = 1,
	    .phase = RDZV_OPEN,
	    .min_nodes = m->cfg.min_nodes,
	    .max_nodes = m->cfg.max_nodes,
	    .expect = m->cfg.max_nodes,
	    .max_restarts = m->cfg.max_restarts,
	    .reason = RDZV_WHY_START,
	};
	snprintf(ns.job, sizeof(ns.job), "%s", m->job);
	snprintf(ns.cmd, sizeof(ns.cmd), "%s", m->cmd);
	snprintf(ns.job_text, sizeof(ns.job_text), "%s", m->job_text);
	m->op = OP_CREATE;
	return rdzv_state_cas(m, &ns);
}

int rdzv_op_join(struct rdzv_machine *m, uint64_t gen, uint32_t round)
{
	char key[RDZV_KEY_MAX];
	m->op = OP_JOIN;
	m->step = 0;
	m->op_gen = gen;
	m->op_round = round;
	rdzv_key(m, key, "c/%" PRIu64 ".%" PRIu32, gen, round);
	return rdzv_push_add(m, key, 1, &m->req);
}

static int join_added(struct rdzv_machine *m, int64_t now, int64_t value)
{
	char key[RDZV_KEY_MAX], buf[RDZV_SLOT_MAX + 1];
	struct rdzv_slot slot = {
	    .gen = m->op_gen,
	    .round = m->op_round,
	    .port = m->cfg.port,
	    .nproc = m->cfg.nproc,
	    .node_rank = m->cfg.node_rank,
	    .prev_round = m->prev_round,
	    .prev_rank = m->prev_round ? m->prev_rank : 0,
	};
	if (value < 1 || value > RDZV_EXPECT_MAX)
		return rdzv_end(m, RDZV_ACT_FAILED,
				"the ticket counter of run id '%s' holds %" PRId64
				"; is another program using the run id?",
				m->run_id, value);
	strcpy(slot.id, m->node_id);
	strcpy(slot.addr, m->addr);
	int n = rdzv_slot_encode(&slot, buf, sizeof(buf));
	if (n < 0)
		return rdzv_end(m, RDZV_ACT_FAILED, "internal error: slot not encodable");
	m->op_ticket = (uint64_t)value;
	m->op_ticket_at = now;
	m->step = 1;
	rdzv_key(m, key, "s/%" PRIu64, m->op_ticket);
	return rdzv_push_kv(m, RDZV_ACT_SET, key, buf, (size_t)n, &m->req);
}

static void join_done(struct rdzv_machine *m)
{
	m->my_gen = m->pool_gen = m->op_gen;
	m->pool_round = m->op_round;
	m->ticket = m->op_ticket;
	m->ticket_at = m->op_ticket_at;
	m->close_at = m->trig_at = -1;
	rdzv_op_reset(m);
}

int rdzv_become_member(struct rdzv_machine *m, struct rdzv_world_data *wd, uint32_t rank)
{
	char text[RDZV_RUN_ID_MAX + 96];
	struct rdzv_world *w = &m->world;
	rdzv_world_data_release(&m->wd);
	m->report_since = m->report_at = -1; /* the wait is over */
	m->wd = *wd;
	memset(wd, 0, sizeof(*wd));
	memset(w, 0, sizeof(*w));
	w->gen = m->wd.gen;
	w->round = m->wd.round;
	w->restarts = m->st.restarts;
	w->size = m->wd.size;
	w->rank = rank;
	for (uint32_t i = 0; i < w->size; i++) {
		if (i < rank)
			w->first_proc += m->wd.members[i].nproc;
		w->world_procs += m->wd.members[i].nproc;
	}
	w->members = m->wd.members;
	w->master_addr = m->wd.members[0].addr;
	w->master_port = m->wd.master_port;
	snprintf(m->key_prefix, sizeof(m->key_prefix), "%sk/%" PRIu64 ".%" PRIu32 "/", m->prefix,
		 w->gen, w->round);
	w->key_prefix = m->key_prefix;
	m->mode = MODE_RUN;
	m->ran = true;
	m->mem_round = w->round;
	m->mem_rank = rank;
	m->ticket = 0;
	m->close_at = m->trig_at = m->fail_at = -1;
	m->ring_watch = 0;
	m->ring_dead = m->ring_off = false;
	rdzv_unwatch(m, &m->coord_watch);
	m->coord_id[0] = '\0';
	snprintf(text, sizeof(text), "round %u of run id '%s'", w->round, m->run_id);
	return rdzv_push_simple(m, RDZV_ACT_ROUND, -1, 0, text);
}

/* The world of the round this node took a ticket in: member or not. */
static int world_got(struct rdzv_machine *m, int64_t now, struct rdzv_value v)
{
	struct rdzv_world_data wd;
	uint64_t gen = m->op_gen;
	uint32_t round = m->op_round;
	if (!v.present || rdzv_world_decode(v.bytes.data, v.bytes.len, m->cfg.max_nodes, &wd) < 0 ||
	    wd.gen != gen || wd.round != round) {
		if (v.present)
			rdzv_world_data_release(&wd);
		return rdzv_end(m, RDZV_ACT_FAILED,
				"round %u of run id '%s' is formed but its world in the store is "
				"missing or unreadable",
				round, m->run_id);
	}
	rdzv_op_reset(m);
	uint32_t rank = UINT32_MAX;
	for (uint32_t i = 0; i < wd.size; i++) {
		if (strcmp(wd.members[i].id, m->node_id) != 0)
			continue;
		if (rank != UINT32_MAX) {
			rdzv_world_data_release(&wd);
			return rdzv_end(
			    m, RDZV_ACT_FAILED,
			    "round %u of run id '%s' lists node id '%s' twice; give every "
			    "node its own id",
			    round, m->run_id, m->node_id);
		}
		rank = i;
	}
	if (rank != UINT32_MAX)
		return rdzv_become_member(m, &wd, rank);
	rdzv_world_data_release(&wd);
	return rdzv_op_join(m, gen, round + 1); /* left out: wait for the next round */
}

int rdzv_op_world(struct rdzv_machine *m, int64_t now)
{
	char key[RDZV_KEY_MAX];
	m->op = OP_WORLD;
	m->op_gen = m->st.gen;
	m->op_round = m->st.round;
	if (m->cached_world && m->cached_gen == m->op_gen && m->cached_round == m->op_round) {
		struct rdzv_value v = {true, {m->cached_world, m->cached_len}};
		int rc = world_got(m, now, v);
		free(m->cached_world);
		m->cached_world = NULL;
		return rc;
	}
	rdzv_key(m, key, "w/%" PRIu64 ".%" PRIu32, m->op_gen, m->op_round);
	return rdzv_push_get1(m, key, &m->req);
}

/* Keys of a trigger's census: every member's heartbeat key, then the done
 * counter of the round and the ticket counter of the next one. */
static void trig_key(const struct rdzv_machine *m, void *ctx, size_t i, char *key)
{
	const struct rdzv_world_data *w = ctx;
	if (i < w->size)
		rdzv_key(m, key, "a/%s", w->members[i].id);
	else if (i == w->size)
		rdzv_key(m, key, "d/%" PRIu64 ".%" PRIu32, m->op_gen, m->op_round);
	else
		rdzv_key(m, key, "c/%" PRIu64 ".%" PRIu32, m->op_gen, m->op_round + 1);
}

static struct rdzv_world_data *trig_world(struct rdzv_machine *m)
{
	return m->mode == MODE_RUN ? &m->wd : &m->trig_world;
}

static int trig_census(struct rdzv_machine *m)
{
	struct rdzv_world_data *w = trig_world(m);
	m->step = 1;
	return rdzv_push_get(m, (size_t)w->size + 2, trig_key, w, &m->req);
}

int rdzv_op_trigger(struct rdzv_machine *m, enum rdzv_reason why, const char *subject)
{
	char key[RDZV_KEY_MAX];
	m->op = OP_TRIGGER;
	m->trig_reason = why;
	snprintf(m->trig_subject, sizeof(m->trig_subject), "%s", subject);
	m->op_gen = m->st.gen;
	m->op_round = m->st.round;
	if (m->mode == MODE_RUN)
		return trig_census(m);
	m->step = 0; /* a waiter reads the running world first */
	rdzv_key(m, key, "w/%" PRIu64 ".%" PRIu32, m->op_gen, m->op_round);
	return rdzv_push_get1(m, key, &m->req);
}

static uint64_t counter_of(struct rdzv_value v)
{
	uint64_t n = 0;
	if (v.present && rdzv_parse_u64(v.bytes.data, v.bytes.len, RDZV_EXPECT_MAX, &n) < 0)
		n = 0;
	return n;
}

static bool is_done(struct rdzv_value v)
{
	return v.present && v.bytes.len == 4 && memcmp(v.bytes.data, "done", 4) == 0;
}

/* Nothing to do in this state (the job is finishing, or full). */
static int trig_decline(struct rdzv_machine *m)
{
	m->quiet_gen = m->st.gen;
	m->quiet_round = m->st.round;
	m->quiet_phase = m->st.phase;
	if (m->trig_reason == RDZV_WHY_DEAD && m->mode == MODE_RUN)
		m->ring_off = true;
	enum rdzv_reason why = m->trig_reason;
	if (why == RDZV_WHY_REPLACE && m->grow) {
		/* a grow dropped: this node's workers may report their end */
		m->grow = false;
		m->exit_req = 0;
	}
	rdzv_op_reset(m);
	if (why == RDZV_WHY_LEFT)
		return rdzv_end(m, RDZV_ACT_LEFT, "left run id '%s' while it was finishing",
				m->run_id);
	return 0;
}

static void fail_state(struct rdzv_state *ns, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void fail_state(struct rdzv_state *ns, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(ns->msg, sizeof(ns->msg), fmt, ap);
	va_end(ap);
	ns->phase = RDZV_FAILED;
}

/* A restart asked for while a member's heartbeat key is gone is that
 * member's death, seen first by this node's workers: it re-forms the round
 * as `dead` and is not charged. Not once a node has finished (the job is
 * ending: the failure fails it, as before). */
static void trig_blame_death(struct rdzv_machine *m, const struct rdzv_value *v, uint64_t done)
{
	const struct rdzv_world_data *w = trig_world(m);

	if ((m->trig_reason != RDZV_WHY_RESTART && m->trig_reason != RDZV_WHY_REPLACE) || done > 0)
		return;
	for (uint32_t i = 0; i < w->size; i++) {
		if (v[i].present || strcmp(w->members[i].id, m->node_id) == 0)
			continue;
		m->trig_reason = RDZV_WHY_DEAD;
		snprintf(m->trig_subject, sizeof(m->trig_subject), "%s", w->members[i].id);
		return;
	}
}

/* Decides the next state from the census: survivors, done and waiters. */
static int trig_decide(struct rdzv_machine *m, const struct rdzv_value *v, size_t n)
{
	const struct rdzv_world_data *w = trig_world(m);
	const struct rdzv_state *s = &m->st;
	uint64_t survivors = 0, done = counter_of(v[n - 2]), waiting = counter_of(v[n - 1]);
	trig_blame_death(m, v, done);
	enum rdzv_reason why = m->trig_reason;
	bool without_subject = why == RDZV_WHY_DEAD || why == RDZV_WHY_LEFT;
	if (s->gen != m->op_gen || s->round != m->op_round || s->phase != RDZV_RUNNING) {
		rdzv_op_reset(m); /* it moved on while we counted */
		return why == RDZV_WHY_LEFT
			   ? rdzv_end(m, RDZV_ACT_LEFT, "left run id '%s'", m->run_id)
			   : 0;
	}
	for (uint32_t i = 0; i < w->size; i++)
		if (v[i].present && !is_done(v[i]) &&
		    !(without_subject && strcmp(w->members[i].id, m->trig_subject) == 0))
			survivors++;
	if (done > 0 && (why != RDZV_WHY_RESTART && why != RDZV_WHY_REPLACE))
		return trig_decline(m);
	/* A replacement ready to join a job that is finishing is not needed. */
	if (done > 0 && why == RDZV_WHY_REPLACE && m->grow)
		return trig_decline(m);
	if (why == RDZV_WHY_JOIN && s->size >= s->max_nodes)
		return trig_decline(m);
	struct rdzv_state ns = *s;
	if (why == RDZV_WHY_LEFT && m->stop_perm && s->min_nodes == s->max_nodes &&
	    survivors + waiting < s->min_nodes) {
		/* A fixed-size job cannot go on without this node, and its
		 * failure would come back: every node ends now, not at
		 * join_timeout. An elastic job at its minimum waits for a
		 * replacement node as after any leave (an elastic scheduler
		 * starts one). */
		fail_state(&ns,
			   "node '%s' (%s) left the job of run id '%s' with a failure that will "
			   "repeat (%s); the job cannot go on without it (%" PRIu64 " node(s) "
			   "left for --nnodes=%u:%u), so every node ends with exit status 78: "
			   "fix the cause on that node, then run again",
			   m->node_id, m->addr, m->run_id,
			   m->stop_cause[0] ? m->stop_cause : "exit status 78", survivors + waiting,
			   s->min_nodes, s->max_nodes);
		ns.reason = RDZV_WHY_PERMANENT;
		snprintf(ns.subject, sizeof(ns.subject), "%s", m->node_id);
	} else if (done > 0) {
		fail_state(&ns,
			   "workers on node '%s' failed after %" PRIu64 " node(s) of run id "
			   "'%s' had finished; the job is not restarted",
			   m->trig_subject, done, m->run_id);
	} else if (why == RDZV_WHY_RESTART && s->restarts >= s->max_restarts) {
		fail_state(&ns,
			   "workers on node '%s' failed and the job of run id '%s' has no "
			   "restarts left (--max_restarts=%u)",
			   m->trig_subject, m->run_id, s->max_restarts);
	} else {
		ns.round = s->round + 1;
		ns.phase = RDZV_OPEN;
		ns.size = 0;
		ns.coord[0] = '\0';
		ns.reason = why;
		snprintf(ns.subject, sizeof(ns.subject), "%s", m->trig_subject);
		ns.expect = survivors + waiting > RDZV_EXPECT_MAX ? RDZV_EXPECT_MAX
								  : (uint32_t)(survivors + waiting);
		if (why == RDZV_WHY_RESTART)
			ns.restarts++;
	}
	m->step = 2;
	return rdzv_state_cas(m, &ns);
}

static int trig_got(struct rdzv_machine *m, int64_t now, const struct rdzv_value *v, size_t n)
{
	if (m->step == 0) {
		/* A waiter: a missing or unreadable world counts nobody alive. */
		if (n != 1 || !v[0].present ||
		    rdzv_world_decode(v[0].bytes.data, v[0].bytes.len, m->cfg.max_nodes,
				      &m->trig_world) < 0)
			memset(&m->trig_world, 0, sizeof(m->trig_world));
		return trig_census(m);
	}
	if (n != (size_t)trig_world(m)->size + 2)
		return rdzv_end(m, RDZV_ACT_FAILED, "the store answered %zu values for %zu keys", n,
				(size_t)trig_world(m)->size + 2);
	return trig_decide(m, v, n);
}

static int trig_cas_done(struct rdzv_machine *m, bool swapped, struct rdzv_value cur)
{
	enum rdzv_reason why = m->trig_reason;
	int rc = rdzv_state_cas_answer(m, swapped, cur);
	if (m->mode == MODE_END)
		return rc;
	rdzv_op_reset(m);
	if (rc == 0 && why == RDZV_WHY_LEFT && rdzv_machine_failed_permanent(m))
		rc = rdzv_end(m, RDZV_ACT_LEFT, "left run id '%s', which ends on every node: %s",
			      m->run_id, m->st.msg);
	else if (rc == 0 && why == RDZV_WHY_LEFT)
		rc = rdzv_end(m, RDZV_ACT_LEFT,
			      "left run id '%s'; the other nodes re-form without it", m->run_id);
	if (why == RDZV_WHY_RESTART || why == RDZV_WHY_REPLACE) {
		m->exit_req = 0;
		m->grow = false;
	}
	m->ring_dead = false;
	m->coord_gone = false;
	return rc;
}

int rdzv_op_done(struct rdzv_machine *m)
{
	char key[RDZV_KEY_MAX];
	m->op = OP_DONE;
	m->step = 0;
	m->hb_next = -1; /* "done" must stay the heartbeat key's last value */
	m->op_gen = m->my_gen;
	m->op_round = m->mem_round;
	rdzv_key(m, key, "a/%s", m->node_id);
	return rdzv_push_kv(m, RDZV_ACT_SET_SESSION, key, "done", 4, &m->req);
}

static int done_added(struct rdzv_machine *m, int64_t value)
{
	const struct rdzv_state *s = &m->st;
	bool last = value >= (int64_t)m->world.size;
	if (!last || s->gen != m->op_gen || s->round != m->op_round || s->phase != RDZV_RUNNING)
		return rdzv_end(m, RDZV_ACT_FINISHED,
				"the workers of this node finished (%" PRId64 " of %u nodes of run "
				"id '%s' done)",
				value, m->world.size, m->run_id);
	struct rdzv_state ns = *s;
	ns.phase = RDZV_FINISHED;
	m->step = 2;
	return rdzv_state_cas(m, &ns);
}

int rdzv_ops_on_get(struct rdzv_machine *m, int64_t now, const struct rdzv_value *v, size_t n)
{
	switch (m->op) {
	case OP_WORLD:
		if (n != 1)
			return rdzv_end(m, RDZV_ACT_FAILED,
					"the store answered %zu values for 1 key", n);
		return world_got(m, now, v[0]);
	case OP_TRIGGER:
		return trig_got(m, now, v, n);
	case OP_CLOSE:
	case OP_CENSUS:
		return rdzv_close_on_get(m, now, v, n);
	default:
		return 0;
	}
}

int rdzv_ops_on_cas(struct rdzv_machine *m, int64_t now, bool swapped, struct rdzv_value cur)
{
	int rc;
	switch (m->op) {
	case OP_CREATE:
		rc = rdzv_state_cas_answer(m, swapped, cur);
		if (m->op == OP_CREATE)
			rdzv_op_reset(m);
		return rc;
	case OP_TRIGGER:
		return trig_cas_done(m, swapped, cur);
	case OP_DONE:
		rc = rdzv_state_cas_answer(m, swapped, cur);
		if (rc < 0 || m->mode == MODE_END)
			return rc;
		return rdzv_end(m, RDZV_ACT_FINISHED,
				swapped ? "the workers of this node finished, the last of run id "
					  "'%s': the job is complete"
					: "the workers of this node finished (run id '%s')",
				m->run_id);
	case OP_CLOSE:
		return rdzv_close_on_cas(m, now, swapped, cur);
	default:
		return 0;
	}
}

int rdzv_ops_on_add(struct rdzv_machine *m, int64_t now, int64_t value)
{
	if (m->op == OP_JOIN && m->step == 0)
		return join_added(m, now, value);
	if (m->op == OP_DONE && m->step == 1)
		return done_added(m, value);
	return 0;
}

int rdzv_ops_on_done(struct rdzv_machine *m, int64_t now)
{
	char key[RDZV_KEY_MAX];
	if (m->op == OP_ALIVE) {
		rdzv_op_reset(m);
	} else if (m->op == OP_JOIN && m->step == 1) {
		join_done(m);
	} else if (m->op == OP_DONE && m->step == 0) {
		m->step = 1;
		rdzv_key(m, key, "d/%" PRIu64 ".%" PRIu32, m->op_gen, m->op_round);
		return rdzv_push_add(m, key, 1, &m->req);
	}
	return 0;
}
