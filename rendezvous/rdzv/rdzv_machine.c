/*
 * rdzv_machine.c - the machine's life cycle, its queue of actions, the
 * entry points and the one timer (see rdzv_machine.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_machine_int.h"

void rdzv_config_defaults(struct rdzv_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->nproc = 1;
	cfg->min_nodes = 1;
	cfg->max_nodes = 1;
	cfg->node_rank = -1;
	cfg->join_timeout_ms = 600000;
	cfg->last_call_timeout_ms = 30000;
	cfg->close_timeout_ms = 30000;
	cfg->keep_alive_interval_ms = 5000;
	cfg->keep_alive_max_attempt = 3;
}

static bool text_ok(const char *s)
{
	size_t n = strnlen(s, RDZV_JOB_MAX + 1);
	if (n > RDZV_JOB_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (s[i] < 0x20 || s[i] > 0x7e)
			return false;
	return true;
}

static int check_tokens(const struct rdzv_config *c, char *msg, size_t n)
{
	if (!c->run_id || !rdzv_token_ok(c->run_id, RDZV_RUN_ID_MAX))
		snprintf(msg, n,
			 "the run id must be 1 to %d printable characters without spaces "
			 "or '/'",
			 RDZV_RUN_ID_MAX);
	else if (!c->node_id || !rdzv_token_ok(c->node_id, RDZV_ID_MAX))
		snprintf(msg, n,
			 "the node id must be 1 to %d printable characters without "
			 "spaces or '/'",
			 RDZV_ID_MAX);
	else if (!c->addr || !rdzv_token_ok(c->addr, RDZV_ADDR_MAX))
		snprintf(msg, n,
			 "the node address must be 1 to %d printable characters without "
			 "spaces or '/'",
			 RDZV_ADDR_MAX);
	else if (c->job && !rdzv_token_ok(c->job, RDZV_ID_MAX))
		snprintf(msg, n,
			 "the job's fingerprint must be 1 to %d printable characters without "
			 "spaces or '/'",
			 RDZV_ID_MAX);
	else if (c->cmd && !rdzv_token_ok(c->cmd, RDZV_ID_MAX))
		snprintf(msg, n,
			 "the command line's fingerprint must be 1 to %d printable characters "
			 "without spaces or '/'",
			 RDZV_ID_MAX);
	else if (c->job_text && !text_ok(c->job_text))
		snprintf(msg, n, "the job's description must be at most %d printable characters",
			 RDZV_JOB_MAX);
	else
		return 0;
	return -EINVAL;
}

int rdzv_config_check(const struct rdzv_config *c, char *msg, size_t n)
{
	if (check_tokens(c, msg, n) < 0)
		return -EINVAL;
	if (c->min_nodes < 1 || c->min_nodes > c->max_nodes || c->max_nodes > RDZV_NODES_MAX)
		snprintf(msg, n, "--nnodes=%" PRIu32 ":%" PRIu32 " is not a range of 1 to %d nodes",
			 c->min_nodes, c->max_nodes, RDZV_NODES_MAX);
	else if (c->nproc < 1 || c->nproc > RDZV_NPROC_MAX)
		snprintf(msg, n, "--nproc_per_node=%" PRIu32 " is out of range (1 to %d)", c->nproc,
			 RDZV_NPROC_MAX);
	else if (c->node_rank < -1 || (c->node_rank >= 0 && (uint32_t)c->node_rank >= c->max_nodes))
		snprintf(msg, n,
			 "--node_rank=%" PRId32 " is out of range for --nnodes=%" PRIu32
			 " (use 0 to %" PRIu32 ")",
			 c->node_rank, c->max_nodes, c->max_nodes - 1);
	else if (c->join_timeout_ms <= 0 || c->last_call_timeout_ms < 0 ||
		 c->close_timeout_ms <= 0 || c->keep_alive_interval_ms <= 0 ||
		 c->keep_alive_max_attempt < 1 || c->fail_grace_ms < 0)
		snprintf(msg, n,
			 "join_timeout, close_timeout, keep_alive_interval and "
			 "keep_alive_max_attempt must be positive, last_call_timeout not "
			 "negative (--rdzv_conf)");
	else
		return 0;
	return -EINVAL;
}

int rdzv_machine_new(const struct rdzv_config *cfg, struct rdzv_machine **out)
{
	char msg[256];
	if (rdzv_config_check(cfg, msg, sizeof(msg)) < 0)
		return -EINVAL;
	struct rdzv_machine *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->cfg = *cfg;
	m->nproc_max = cfg->nproc;
	m->run_id = strdup(cfg->run_id);
	m->node_id = strdup(cfg->node_id);
	m->addr = strdup(cfg->addr);
	m->job = strdup(cfg->job ? cfg->job : "");
	m->job_text = strdup(cfg->job_text ? cfg->job_text : "");
	m->cmd = strdup(cfg->cmd ? cfg->cmd : "");
	if (!m->run_id || !m->node_id || !m->addr || !m->job || !m->job_text || !m->cmd) {
		rdzv_machine_free(m);
		return -ENOMEM;
	}
	m->cfg.run_id = m->run_id;
	m->cfg.node_id = m->node_id;
	m->cfg.addr = m->addr;
	m->cfg.job = m->job;
	m->cfg.job_text = m->job_text;
	m->cfg.cmd = m->cmd;
	snprintf(m->prefix, sizeof(m->prefix), "ddprdzv/%s/", m->run_id);
	m->next_id = 1;
	m->timer_armed = -1;
	m->close_at = m->trig_at = m->join_deadline = m->hb_next = -1;
	m->report_since = m->report_at = -1;
	m->ring_deadline = m->op_deadline = m->stop_deadline = m->fail_at = m->gr_gone = -1;
	*out = m;
	return 0;
}

void rdzv_machine_free(struct rdzv_machine *m)
{
	if (!m)
		return;
	rdzv_acts_release(m);
	rdzv_census_release(&m->census);
	rdzv_world_data_release(&m->trig_world);
	rdzv_world_data_release(&m->wd);
	free(m->new_world);
	free(m->cached_world);
	free(m->gr_watch);
	free(m->gr_state);
	free(m->gr_value);
	free(m->run_id);
	free(m->node_id);
	free(m->addr);
	free(m->job);
	free(m->job_text);
	free(m->cmd);
	free(m);
}

int rdzv_end(struct rdzv_machine *m, enum rdzv_action_kind kind, const char *fmt, ...)
{
	char text[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (m->mode == MODE_END)
		return 0;
	m->mode = MODE_END;
	m->hb_next = -1;
	rdzv_op_reset(m);
	return rdzv_push_simple(m, kind, -1, 0, text);
}

/* States are ordered by (gen, round, phase): a value older than the one
 * held (a watch event overtaken by a CAS answer) is dropped. */
static int state_cmp(const struct rdzv_state *a, const struct rdzv_state *b)
{
	if (a->gen != b->gen)
		return a->gen < b->gen ? -1 : 1;
	if (a->round != b->round)
		return a->round < b->round ? -1 : 1;
	int pa = a->phase >= RDZV_FINISHED ? 2 : (int)a->phase;
	int pb = b->phase >= RDZV_FINISHED ? 2 : (int)b->phase;
	return pa < pb ? -1 : pa > pb;
}

/* A state that is not this version's: another ddplaunch version's (a job
 * of the run id that ended before an upgrade, kept by etcd or a standalone
 * ddp-rdzvd, or a node of this job running another version) or another
 * program's. An older version's finished or failed job is over: it is
 * taken as that version's last generation, phase and nothing else, so a
 * joiner starts a new generation over it exactly as over one of its own
 * (rdzv_op_create swaps against its bytes). Returns 0 with *st filled, or
 * the end the machine reports. */
static int take_other_version(struct rdzv_machine *m, struct rdzv_value v, struct rdzv_state *st)
{
	int ver = rdzv_state_version_other(v.bytes.data, v.bytes.len, st);
	if (ver < 0)
		return rdzv_end(m, RDZV_ACT_FAILED,
				"the store key '%sstate' does not hold a ddplaunch rendezvous "
				"state; is another program using run id '%s'? (use another "
				"--rdzv_id)",
				m->prefix, m->run_id);
	if (ver < RDZV_STATE_VERSION && st->phase >= RDZV_FINISHED && m->mode != MODE_RUN) {
		st->min_nodes = st->max_nodes = 1;
		return 0;
	}
	return rdzv_end(m, RDZV_ACT_FAILED,
			"run id '%s' holds a %s job of another ddplaunch version (its "
			"rendezvous state is version %d, this node's is %d); every node must run "
			"the same ddplaunch version; end that job or use another --rdzv_id",
			m->run_id,
			ver > RDZV_STATE_VERSION    ? "newer"
			: st->phase == RDZV_OPEN    ? "forming"
			: st->phase == RDZV_RUNNING ? "running"
						    : "finished",
			ver, RDZV_STATE_VERSION);
}

int rdzv_take_state(struct rdzv_machine *m, struct rdzv_value v)
{
	struct rdzv_state st;
	if (!v.present) {
		/* Gone after being there: the store lost its data. A member cannot
		 * go on; a joiner starts the job again. */
		if (m->st_present && m->mode == MODE_RUN)
			return rdzv_end(m, RDZV_ACT_FAILED,
					"the rendezvous state of run id '%s' vanished from the "
					"store (was the store restarted?)",
					m->run_id);
		m->st_have = true;
		m->st_present = false;
		return 0;
	}
	if (rdzv_state_decode(v.bytes.data, v.bytes.len, &st) < 0) {
		int rc = take_other_version(m, v, &st);
		if (rc != 0)
			return rc;
	}
	if (m->st_present && state_cmp(&st, &m->st) < 0)
		return 0;
	m->st = st;
	memcpy(m->st_raw, v.bytes.data, v.bytes.len);
	m->st_len = v.bytes.len;
	m->st_have = m->st_present = true;
	return 0;
}

int rdzv_take_state_struct(struct rdzv_machine *m, const struct rdzv_state *st)
{
	char buf[RDZV_STATE_MAX + 1];
	int n = rdzv_state_encode(st, buf, sizeof(buf));
	if (n < 0)
		return rdzv_end(m, RDZV_ACT_FAILED, "internal error: state not encodable");
	struct rdzv_value v = {true, {(const uint8_t *)buf, (size_t)n}};
	return rdzv_take_state(m, v);
}

/* Every entry point ends here: decide, then re-arm the timer if it moved. */
static int settle(struct rdzv_machine *m, int64_t now, int rc)
{
	if (rc == 0)
		rc = rdzv_evaluate(m, now);
	if (rc < 0)
		return rc;
	int64_t at = m->mode == MODE_END ? -1 : rdzv_next_deadline(m);
	if (at != m->timer_armed) {
		m->timer_armed = at;
		rc = rdzv_push_simple(m, RDZV_ACT_TIMER, at, 0, NULL);
	}
	return rc;
}

static bool fail_status(struct rdzv_machine *m, int status, int *rc)
{
	if (status >= 0 || m->mode == MODE_END)
		return false;
	*rc = rdzv_end(m, RDZV_ACT_FAILED, "a request to the rendezvous store failed: %s",
		       strerror(-status));
	return true;
}

/* The store's owner: written by its host, watched by its job's others. */
static int store_owner(struct rdzv_machine *m)
{
	struct rdzv_owner o = {0};
	char buf[RDZV_OWNER_MAX + 1];
	if (m->cfg.store_role == RDZV_STORE_OWNED)
		return rdzv_push_kv(m, RDZV_ACT_WATCH, RDZV_OWNER_KEY, NULL, 0, &m->owner_watch);
	if (m->cfg.store_role != RDZV_STORE_OWN)
		return 0;
	snprintf(o.run_id, sizeof(o.run_id), "%s", m->run_id);
	snprintf(o.job, sizeof(o.job), "%s", m->job);
	snprintf(o.job_text, sizeof(o.job_text), "%s", m->job_text);
	int n = rdzv_owner_encode(&o, buf, sizeof(buf));
	if (n < 0)
		return rdzv_end(m, RDZV_ACT_FAILED, "internal error: owner not encodable");
	return rdzv_push_kv(m, RDZV_ACT_SET, RDZV_OWNER_KEY, buf, (size_t)n, NULL);
}

int rdzv_start(struct rdzv_machine *m, int64_t now)
{
	char key[RDZV_KEY_MAX];
	rdzv_acts_gc(m);
	if (m->mode != MODE_IDLE)
		return 0;
	m->mode = MODE_JOIN;
	m->join_deadline = now + m->cfg.join_timeout_ms;
	m->hb_next = now + m->cfg.keep_alive_interval_ms;
	m->hb_count = 1;
	int rc = store_owner(m);
	rdzv_key(m, key, "state");
	if (rc == 0)
		rc = rdzv_push_kv(m, RDZV_ACT_WATCH, key, NULL, 0, &m->st_watch);
	if (rc == 0) {
		rdzv_key(m, key, "a/%s", m->node_id);
		m->op = OP_ALIVE;
		rc = rdzv_push_kv(m, RDZV_ACT_SET_SESSION, key, "1", 1, &m->req);
	}
	return settle(m, now, rc);
}

int rdzv_on_get(struct rdzv_machine *m, int64_t now, uint64_t id, int status,
		const struct rdzv_value *vals, size_t nvals)
{
	int rc = 0;
	rdzv_acts_gc(m);
	if (!fail_status(m, status, &rc) && m->mode != MODE_END && id == m->req && id)
		rc = rdzv_ops_on_get(m, now, vals, nvals);
	return settle(m, now, rc);
}

int rdzv_on_cas(struct rdzv_machine *m, int64_t now, uint64_t id, int status, bool swapped,
		struct rdzv_value current)
{
	int rc = 0;
	rdzv_acts_gc(m);
	if (!fail_status(m, status, &rc) && m->mode != MODE_END && id == m->req && id)
		rc = rdzv_ops_on_cas(m, now, swapped, current);
	return settle(m, now, rc);
}

int rdzv_on_add(struct rdzv_machine *m, int64_t now, uint64_t id, int status, int64_t value)
{
	int rc = 0;
	rdzv_acts_gc(m);
	if (!fail_status(m, status, &rc) && m->mode != MODE_END && id == m->req && id)
		rc = rdzv_ops_on_add(m, now, value);
	return settle(m, now, rc);
}

int rdzv_on_done(struct rdzv_machine *m, int64_t now, uint64_t id, int status)
{
	int rc = 0;
	rdzv_acts_gc(m);
	if (!fail_status(m, status, &rc) && m->mode != MODE_END && id == m->req && id)
		rc = rdzv_ops_on_done(m, now);
	return settle(m, now, rc);
}

int rdzv_on_key(struct rdzv_machine *m, int64_t now, uint64_t watch, struct rdzv_value v)
{
	int rc = 0;
	rdzv_acts_gc(m);
	if (m->mode == MODE_END || !watch)
		return settle(m, now, 0);
	if (watch == m->st_watch) {
		rc = rdzv_take_state(m, v);
		if (rc == 0 && m->op == OP_CLOSE)
			rc = rdzv_close_timer(m, now); /* abandons a close the state overtook */
	} else if (watch == m->owner_watch)
		rc = rdzv_owner_event(m, v);
	else if (watch == m->ring_watch)
		rc = rdzv_ring_event(m, now, v);
	else if (watch == m->coord_watch)
		rdzv_coord_event(m, v);
	else if (!rdzv_grace_event(m, now, watch, v) && (m->op == OP_CLOSE || m->op == OP_CENSUS))
		rc = rdzv_close_on_key(m, now, watch, v);
	return settle(m, now, rc);
}

static int heartbeat(struct rdzv_machine *m, int64_t now)
{
	char key[RDZV_KEY_MAX], val[24];
	if (m->hb_next < 0 || now < m->hb_next)
		return 0;
	m->hb_next = now + m->cfg.keep_alive_interval_ms;
	m->hb_count++;
	rdzv_key(m, key, "a/%s", m->node_id);
	int n = snprintf(val, sizeof(val), "%" PRIu64, m->hb_count);
	return rdzv_push_kv(m, RDZV_ACT_SET_SESSION, key, val, (size_t)n, NULL);
}

int rdzv_on_timer(struct rdzv_machine *m, int64_t now)
{
	rdzv_acts_gc(m);
	m->timer_armed = -1; /* it fired: whatever is due next must be armed again */
	if (m->mode == MODE_END || m->mode == MODE_IDLE)
		return settle(m, now, 0);
	int rc = heartbeat(m, now);
	if (rc == 0 && m->stop_deadline >= 0 && now >= m->stop_deadline)
		rc = rdzv_end(m, RDZV_ACT_LEFT,
			      "left run id '%s' without telling the others (no answer within "
			      "close_timeout); they notice when this node's session closes",
			      m->run_id);
	if (rc == 0 && (m->op == OP_CLOSE || m->op == OP_CENSUS))
		rc = rdzv_close_timer(m, now);
	if (rc == 0)
		rdzv_timer_check(m, now);
	return settle(m, now, rc);
}

int rdzv_stop(struct rdzv_machine *m, int64_t now)
{
	rdzv_acts_gc(m);
	if (m->mode == MODE_END || m->stop_req)
		return settle(m, now, 0);
	if (m->mode == MODE_IDLE)
		return settle(m, now, rdzv_end(m, RDZV_ACT_LEFT, "stopped before joining"));
	m->stop_req = true;
	m->stop_deadline = now + m->cfg.close_timeout_ms;
	return settle(m, now, 0);
}

int rdzv_stop_permanent(struct rdzv_machine *m, int64_t now, const char *cause)
{
	size_t n = 0;
	if (m->mode != MODE_END && !m->stop_req) {
		m->stop_perm = true;
		for (; cause && cause[n] && n < sizeof(m->stop_cause) - 1; n++)
			m->stop_cause[n] = cause[n] >= 0x20 && cause[n] <= 0x7e ? cause[n] : '?';
		m->stop_cause[n] = '\0';
	}
	return rdzv_stop(m, now);
}

bool rdzv_machine_failed_permanent(const struct rdzv_machine *m)
{
	return m->st_present && m->st.phase == RDZV_FAILED && m->st.reason == RDZV_WHY_PERMANENT;
}

int rdzv_workers_exited(struct rdzv_machine *m, int64_t now, bool success)
{
	rdzv_acts_gc(m);
	int rc = 0;
	if (m->mode == MODE_RUN && !m->exit_req) {
		m->exit_req = success ? 1 : 2;
		m->fail_at = success ? -1 : now + m->cfg.fail_grace_ms;
		if (!success)
			rc = rdzv_grace_start(m, now);
	}
	return settle(m, now, rc);
}

int rdzv_workers_renew(struct rdzv_machine *m, int64_t now)
{
	rdzv_acts_gc(m);
	if (m->mode == MODE_RUN && !m->exit_req)
		m->exit_req = 3;
	m->grow = false; /* a death's: never dropped */
	return settle(m, now, 0);
}

int rdzv_workers_grow(struct rdzv_machine *m, int64_t now)
{
	rdzv_acts_gc(m);
	if (m->mode == MODE_RUN && !m->exit_req) {
		m->exit_req = 3;
		m->grow = true;
	}
	return settle(m, now, 0);
}

int rdzv_member_hung(struct rdzv_machine *m, int64_t now, uint32_t rank)
{
	rdzv_acts_gc(m);
	if (m->mode == MODE_RUN && !m->exit_req && rank < m->world.size && rank != m->mem_rank)
		m->gr_gone = (int64_t)rank;
	return settle(m, now, 0);
}

void rdzv_set_port(struct rdzv_machine *m, uint16_t port)
{
	m->cfg.port = port;
}

int rdzv_set_local_procs(struct rdzv_machine *m, uint32_t nproc)
{
	if (nproc < 1 || nproc > m->nproc_max)
		return -EINVAL;
	m->cfg.nproc = nproc;
	return 0;
}

const struct rdzv_world *rdzv_machine_world(const struct rdzv_machine *m)
{
	return m->mode == MODE_RUN ? &m->world : NULL;
}

const struct rdzv_state *rdzv_machine_state(const struct rdzv_machine *m)
{
	return m->st_present ? &m->st : NULL;
}
