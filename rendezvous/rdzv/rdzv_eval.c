/*
 * rdzv_eval.c - what this node does next, decided from the latest job state
 * and what it knows locally (its ticket, its round, its watches). Called
 * after every event while no operation runs; it starts at most one.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "rdzv_machine_int.h"

static int64_t stale_span(const struct rdzv_machine *m)
{
	return m->cfg.keep_alive_interval_ms * (int64_t)m->cfg.keep_alive_max_attempt;
}

static bool holds_ticket(const struct rdzv_machine *m, uint64_t gen, uint64_t round)
{
	return m->ticket && m->pool_gen == gen && m->pool_round == round;
}

/* Triggering was declined in exactly this state: do not try again. */
static bool quiet(const struct rdzv_machine *m)
{
	return m->quiet_gen == m->st.gen && m->quiet_round == m->st.round &&
	       m->quiet_phase == m->st.phase;
}

static const char *why_text(const struct rdzv_state *s, char *buf, size_t n)
{
	switch (s->reason) {
	case RDZV_WHY_DEAD:
		snprintf(buf, n, "node '%s' is gone", s->subject);
		break;
	case RDZV_WHY_LEFT:
		snprintf(buf, n, "node '%s' left", s->subject);
		break;
	case RDZV_WHY_RESTART:
		snprintf(buf, n, "workers failed on node '%s' (restart %u of %u)", s->subject,
			 s->restarts, s->max_restarts);
		break;
	case RDZV_WHY_REPLACE:
		snprintf(buf, n, "a worker on node '%s' is replaced", s->subject);
		break;
	case RDZV_WHY_JOIN:
		snprintf(buf, n, "nodes joined");
		break;
	default:
		snprintf(buf, n, "the round is re-formed");
		break;
	}
	return buf;
}

static int round_over(struct rdzv_machine *m, int64_t now)
{
	char why[RDZV_ID_MAX + 96], text[RDZV_ID_MAX + 256];
	m->prev_round = m->mem_round;
	m->prev_rank = m->mem_rank;
	rdzv_unwatch(m, &m->ring_watch);
	m->ring_dead = m->ring_off = false;
	m->ring_deadline = -1;
	m->exit_req = 0;
	m->fail_at = -1;
	rdzv_grace_stop(m);
	m->mode = MODE_JOIN;
	m->join_deadline = now + m->cfg.join_timeout_ms;
	rdzv_world_data_release(&m->wd);
	snprintf(text, sizeof(text), "round %u of run id '%s' is over: %s", m->mem_round, m->run_id,
		 why_text(&m->st, why, sizeof(why)));
	return rdzv_push_simple(m, RDZV_ACT_ROUND_OVER, -1, 0, text);
}

static int ring_setup(struct rdzv_machine *m, int64_t now)
{
	char key[RDZV_KEY_MAX];
	if (m->ring_watch || m->ring_off || m->world.size < 2)
		return 0;
	m->ring_target = (m->mem_rank + 1) % m->world.size;
	rdzv_key(m, key, "a/%s", m->world.members[m->ring_target].id);
	m->ring_last_len = SIZE_MAX;
	m->ring_deadline = now + stale_span(m);
	return rdzv_push_kv(m, RDZV_ACT_WATCH, key, NULL, 0, &m->ring_watch);
}

int rdzv_ring_event(struct rdzv_machine *m, int64_t now, struct rdzv_value v)
{
	if (m->mode != MODE_RUN)
		return 0;
	if (!v.present) {
		m->ring_dead = true;
		return 0;
	}
	if (v.bytes.len == 4 && memcmp(v.bytes.data, "done", 4) == 0) {
		/* The successor finished: the job is ending, nobody is watched. */
		m->ring_off = true;
		m->ring_deadline = -1;
		rdzv_unwatch(m, &m->ring_watch);
		return 0;
	}
	size_t keep = v.bytes.len < sizeof(m->ring_last) ? v.bytes.len : sizeof(m->ring_last);
	if (v.bytes.len != m->ring_last_len ||
	    (keep && memcmp(m->ring_last, v.bytes.data, keep) != 0)) {
		if (keep)
			memcpy(m->ring_last, v.bytes.data, keep);
		m->ring_last_len = v.bytes.len;
		m->ring_deadline = now + stale_span(m);
	}
	return 0;
}

void rdzv_coord_event(struct rdzv_machine *m, struct rdzv_value v)
{
	if (!v.present)
		m->coord_gone = true;
	else if (v.bytes.len == 4 && memcmp(v.bytes.data, "done", 4) == 0)
		m->coord_done = true;
}

/* "'RUN' (TEXT)": a job for messages. */
static const char *job_name(const char *run_id, const char *text, char *buf, size_t n)
{
	snprintf(buf, n, "'%s'%s%s%s", run_id, text[0] ? " (" : "", text, text[0] ? ")" : "");
	return buf;
}

int rdzv_owner_event(struct rdzv_machine *m, struct rdzv_value v)
{
	char mine[RDZV_RUN_ID_MAX + RDZV_JOB_MAX + 8], theirs[sizeof(mine)];
	struct rdzv_owner o;
	if (m->owner_ok || !v.present)
		return 0; /* the host has not written it yet: wait (join deadline) */
	if (rdzv_owner_decode(v.bytes.data, v.bytes.len, &o) < 0)
		return rdzv_end(m, RDZV_ACT_REFUSED,
				"the rendezvous store this node reached holds no ddplaunch job in "
				"'%s'; is it another program's? (give this job its own "
				"--master_port)",
				RDZV_OWNER_KEY);
	if (strcmp(o.run_id, m->run_id) == 0 && strcmp(o.job, m->job) == 0) {
		m->owner_ok = true;
		rdzv_unwatch(m, &m->owner_watch);
		return 0;
	}
	return rdzv_end(m, RDZV_ACT_REFUSED,
			"the rendezvous store this node reached is node 0's of another job, run "
			"id %s, not of this node's job, run id %s; this node is refused and "
			"leaves that job alone (give each job its own --master_port, or start "
			"every node of one job with the same command line)",
			job_name(o.run_id, o.job_text, theirs, sizeof(theirs)),
			job_name(m->run_id, m->job_text, mine, sizeof(mine)));
}

/* An open or running generation of another job holds the run id. */
static int refuse_other_job(struct rdzv_machine *m)
{
	char mine[RDZV_RUN_ID_MAX + RDZV_JOB_MAX + 8], theirs[sizeof(mine)];
	return rdzv_end(m, RDZV_ACT_REFUSED,
			"run id %s on the rendezvous store belongs to another job than this "
			"node's, run id %s, started with another command line; this node is "
			"refused and leaves that job alone (give each job its own --rdzv_id, or "
			"leave --rdzv_id out: its default differs for different command lines)",
			job_name(m->run_id, m->st.job_text, theirs, sizeof(theirs)),
			job_name(m->run_id, m->job_text, mine, sizeof(mine)));
}

/* One job (the same fingerprint) whose creator's command line differs
 * from this node's (each node its own paths): said once, then on. */
static int notice_other_command(struct rdzv_machine *m)
{
	char text[RDZV_RUN_ID_MAX + 2 * RDZV_JOB_MAX + 320];
	const struct rdzv_state *s = &m->st;

	if (m->cmd_noticed || !m->cmd[0] || !s->cmd[0] || strcmp(s->cmd, m->cmd) == 0)
		return 0;
	m->cmd_noticed = true;
	snprintf(text, sizeof(text),
		 "the arguments (or the program's directory) differ between this node and the "
		 "node that started run id '%s' (here %s, there %s); going on as one job: the "
		 "run id names it, and only the program's name, --nnodes and the rendezvous "
		 "must agree",
		 m->run_id, m->job_text[0] ? m->job_text : "-", s->job_text[0] ? s->job_text : "-");
	return rdzv_push_simple(m, RDZV_ACT_NOTICE, -1, 0, text);
}

/* The job this node waited for finished (or its join deadline passed while
 * the job ran full) and it never had a place: never a success. */
static int never_placed(struct rdzv_machine *m, const char *how)
{
	char mine[RDZV_RUN_ID_MAX + RDZV_JOB_MAX + 8];
	return rdzv_end(m, RDZV_ACT_FAILED,
			"this node was never given a place in the job of run id %s, so its "
			"program never ran here: %s",
			job_name(m->run_id, m->job_text, mine, sizeof(mine)), how);
}

static int eval_run(struct rdzv_machine *m, int64_t now)
{
	const struct rdzv_state *s = &m->st;
	if (m->stop_req)
		return rdzv_op_trigger(m, RDZV_WHY_LEFT, m->node_id);
	if (!m->st_present)
		return rdzv_end(m, RDZV_ACT_FAILED,
				"the rendezvous state of run id '%s' vanished from the store",
				m->run_id);
	if (s->gen != m->my_gen)
		return rdzv_end(m, RDZV_ACT_FAILED,
				"run id '%s' was taken by a new job while this node's workers "
				"ran",
				m->run_id);
	if (s->phase == RDZV_FAILED)
		return rdzv_end(m, RDZV_ACT_FAILED, "%s", s->msg);
	if (s->phase == RDZV_FINISHED)
		return rdzv_end(m, RDZV_ACT_FINISHED, "the job of run id '%s' finished", m->run_id);
	/* A round that is over already absorbs the workers' exit: everyone
	 * restarts anyway, and nothing is counted twice. */
	if (s->round > m->mem_round)
		return round_over(m, now);
	if (m->exit_req == 1)
		return rdzv_op_done(m);
	/* A dead successor comes before this node's failure: the death may
	 * be what made its workers fail, and a death is not charged. */
	if (m->ring_dead && !m->ring_off)
		return rdzv_op_trigger(m, RDZV_WHY_DEAD, m->world.members[m->ring_target].id);
	if (m->gr_gone >= 0) {
		uint32_t gone = (uint32_t)m->gr_gone;
		m->gr_gone = -1; /* once: a declined trigger is not tried again */
		return rdzv_op_trigger(m, RDZV_WHY_DEAD, m->world.members[gone].id);
	}
	/* A peer's workers often see a node die before the store does (a
	 * closed connection at once; etcd's lease only after its TTL): the
	 * failure waits fail_grace_ms for the round to move on. */
	if (m->exit_req == 2 && now >= m->fail_at)
		return rdzv_op_trigger(m, RDZV_WHY_RESTART, m->node_id);
	if (m->exit_req == 3)
		return rdzv_op_trigger(m, RDZV_WHY_REPLACE, m->node_id);
	return ring_setup(m, now);
}

int rdzv_report_due(struct rdzv_machine *m, int64_t now)
{
	int64_t waited;
	if (m->cfg.report_first_ms <= 0)
		return 0;
	if (m->report_since < 0) {
		m->report_since = now;
		m->report_at = now + m->cfg.report_first_ms;
	}
	if (now < m->report_at)
		return 0;
	/* The next when the time waited has doubled: 3, 6, 12, 24 s, ... */
	waited = now - m->report_since;
	m->report_at = now + (waited < RDZV_REPORT_MAX_MS ? waited : RDZV_REPORT_MAX_MS);
	m->reporting = true;
	return rdzv_op_close(m, true, now);
}

static int eval_open(struct rdzv_machine *m, int64_t now)
{
	const struct rdzv_state *s = &m->st;
	uint32_t min = m->cfg.min_nodes;
	if (m->join_deadline < 0)
		m->join_deadline = now + m->cfg.join_timeout_ms;
	if (!holds_ticket(m, s->gen, s->round))
		return rdzv_op_join(m, s->gen, s->round);
	if (m->ticket >= s->expect && m->ticket >= min)
		return rdzv_op_close(m, false, now);
	if (m->ticket < min)
		return rdzv_report_due(m, now);
	/* The MIN-th ticket holds the last call; the later ones close only if
	 * it did not, close_timeout after the window. */
	if (m->close_at < 0)
		m->close_at = now + m->cfg.last_call_timeout_ms +
			      (m->ticket == min ? 0 : m->cfg.close_timeout_ms);
	if (now < m->close_at)
		return rdzv_report_due(m, now);
	m->close_at = now + m->cfg.close_timeout_ms;
	return rdzv_op_close(m, false, now);
}

static int coord_follow(struct rdzv_machine *m)
{
	char key[RDZV_KEY_MAX];
	if (strcmp(m->coord_id, m->st.coord) == 0)
		return 0;
	rdzv_unwatch(m, &m->coord_watch);
	strcpy(m->coord_id, m->st.coord);
	m->coord_gone = m->coord_done = false;
	rdzv_key(m, key, "a/%s", m->coord_id);
	return rdzv_push_kv(m, RDZV_ACT_WATCH, key, NULL, 0, &m->coord_watch);
}

/* A waiter holds a ticket for round + 1 while the round runs. */
static int eval_waiter(struct rdzv_machine *m, int64_t now)
{
	const struct rdzv_state *s = &m->st;
	int rc = coord_follow(m);
	if (rc < 0 || quiet(m))
		return rc;
	if (m->coord_done) { /* the job is finishing: it will not admit us */
		if (m->join_deadline < 0)
			m->join_deadline = now + m->cfg.join_timeout_ms;
		return 0;
	}
	if (m->coord_gone)
		return rdzv_op_trigger(m, RDZV_WHY_DEAD, s->coord);
	if (m->join_deadline < 0)
		m->join_deadline = now + m->cfg.join_timeout_ms;
	if (s->size >= s->max_nodes) /* a spare: waits, within its join deadline */
		return rdzv_report_due(m, now);
	if ((uint64_t)s->size + m->ticket >= s->max_nodes)
		return rdzv_op_trigger(m, RDZV_WHY_JOIN, "");
	if (m->trig_at < 0)
		m->trig_at = m->ticket_at + m->cfg.last_call_timeout_ms +
			     (m->ticket == 1 ? 0 : m->cfg.close_timeout_ms);
	if (now < m->trig_at)
		return 0;
	m->trig_at = now + m->cfg.close_timeout_ms;
	return rdzv_op_trigger(m, RDZV_WHY_JOIN, "");
}

/* A spare of a job that runs full gives up with its own words; otherwise
 * the census names who came and who is missing. */
static int join_deadline_passed(struct rdzv_machine *m, int64_t now)
{
	const struct rdzv_state *s = &m->st;
	char how[160];
	if (m->st_present && s->phase == RDZV_RUNNING && s->size >= s->max_nodes &&
	    holds_ticket(m, s->gen, (uint64_t)s->round + 1)) {
		snprintf(how, sizeof(how),
			 "the job ran with all of its %u nodes for this node's whole "
			 "join_timeout (%g s); raise join_timeout in --rdzv_conf to wait "
			 "longer as a spare",
			 s->max_nodes, (double)m->cfg.join_timeout_ms / 1000.0);
		return never_placed(m, how);
	}
	return rdzv_op_close(m, true, now);
}

static int eval_join(struct rdzv_machine *m, int64_t now)
{
	const struct rdzv_state *s = &m->st;
	if (m->stop_req)
		return rdzv_end(m, RDZV_ACT_LEFT,
				"left run id '%s' before it had a place in a round", m->run_id);
	m->exit_req = 0;
	if (m->join_deadline >= 0 && now >= m->join_deadline)
		return join_deadline_passed(m, now);
	if (!m->st_have || (m->cfg.store_role == RDZV_STORE_OWNED && !m->owner_ok))
		return 0;
	if (!m->st_present)
		return rdzv_op_create(m);
	if (s->phase >= RDZV_FINISHED) {
		if (m->my_gen != s->gen)
			return rdzv_op_create(m);
		if (s->phase == RDZV_FINISHED && !m->ran)
			return never_placed(m, "the job finished while this node waited");
		if (s->phase == RDZV_FINISHED)
			return rdzv_end(m, RDZV_ACT_FINISHED,
					"the job of run id '%s' finished without this node",
					m->run_id);
		return rdzv_end(m, RDZV_ACT_FAILED, "%s", s->msg);
	}
	if (m->my_gen && m->my_gen != s->gen) {
		m->my_gen = 0; /* our job ended; the run id holds a new one */
		m->ticket = 0;
		m->prev_round = m->prev_rank = 0;
	}
	if (strcmp(s->job, m->job) != 0)
		return refuse_other_job(m);
	if (s->min_nodes != m->cfg.min_nodes || s->max_nodes != m->cfg.max_nodes)
		return rdzv_end(m, RDZV_ACT_FAILED,
				"this node was started with --nnodes=%u:%u but the job of run id "
				"'%s' runs with --nnodes=%u:%u; start every node alike",
				m->cfg.min_nodes, m->cfg.max_nodes, m->run_id, s->min_nodes,
				s->max_nodes);
	int rc = notice_other_command(m);
	if (rc < 0)
		return rc;
	if (s->phase == RDZV_OPEN)
		return eval_open(m, now);
	if (holds_ticket(m, s->gen, s->round))
		return rdzv_op_world(m, now);
	if (!holds_ticket(m, s->gen, (uint64_t)s->round + 1))
		return rdzv_op_join(m, s->gen, s->round + 1);
	return eval_waiter(m, now);
}

int rdzv_evaluate(struct rdzv_machine *m, int64_t now)
{
	/* Loop while the mode changes (a round over: rejoin at once). */
	for (int guard = 0; guard < 4; guard++) {
		if (m->op != OP_NONE || m->mode == MODE_IDLE || m->mode == MODE_END)
			return 0;
		enum rdzv_mode before = m->mode;
		int rc = m->mode == MODE_RUN ? eval_run(m, now) : eval_join(m, now);
		if (rc < 0 || m->mode == before)
			return rc;
	}
	return 0;
}

void rdzv_timer_check(struct rdzv_machine *m, int64_t now)
{
	if (m->mode == MODE_RUN && m->ring_watch && m->ring_deadline >= 0 &&
	    now >= m->ring_deadline) {
		m->ring_dead = true;
		m->ring_deadline = -1;
	}
}

void rdzv_resumed(struct rdzv_machine *m, int64_t now)
{
	if (m->ring_deadline >= 0 && m->ring_deadline < now + stale_span(m))
		m->ring_deadline = now + stale_span(m);
}

static void earliest(int64_t *at, int64_t t)
{
	if (t >= 0 && (*at < 0 || t < *at))
		*at = t;
}

int64_t rdzv_next_deadline(const struct rdzv_machine *m)
{
	int64_t at = -1;
	earliest(&at, m->hb_next);
	earliest(&at, m->stop_deadline);
	earliest(&at, m->op_deadline);
	if (m->mode == MODE_JOIN) {
		earliest(&at, m->join_deadline);
		if (m->op == OP_NONE)
			earliest(&at, m->report_at);
		if (m->st_present && m->st.phase == RDZV_OPEN)
			earliest(&at, m->close_at);
		if (m->st_present && m->st.phase == RDZV_RUNNING)
			earliest(&at, m->trig_at);
	}
	if (m->mode == MODE_RUN) {
		earliest(&at, m->ring_deadline);
		if (m->exit_req == 2)
			earliest(&at, m->fail_at);
	}
	return at;
}
