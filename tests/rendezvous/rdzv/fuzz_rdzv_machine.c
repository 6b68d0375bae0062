/*
 * fuzz_rdzv_machine.c - libFuzzer target over the rendezvous state machine
 * (rendezvous/rdzv/rdzv_machine.h), driven through its public API only.
 *
 * The input is a script. Its first bytes give 1 to 4 agents and their
 * configuration (elastic or static, the store's role, node ranks, job
 * fingerprints, timeouts); every following byte picks one step:
 *  - the store serves the next request of an agent, honestly (an in-memory
 *    store with the machine's primitives: GET, CAS answered as TCPStore's
 *    compare_set, ADD, SET, session-bound SET, WATCH and UNWATCH);
 *  - an agent receives its next answer or watch event, as served, or with
 *    its content replaced by bytes of the input (a failed status, other
 *    values, a lying `swapped`, another counter): what a malicious or
 *    broken store answers;
 *  - a stranger writes one of the store's keys (raw input bytes, or a
 *    state, world, slot or counter built from input bytes so that valid
 *    encodings with hostile fields are reached often), or deletes it;
 *  - the clock moves, an agent's timer fires, an agent is killed (its
 *    session keys go), asked to stop, restarted, or its workers exit.
 * Invariants: no crash, leak or undefined behaviour; every entry point
 * answers 0; a ROUND names this node at its rank in a world within the
 * job's size; an end (FAILED, REFUSED, ...) comes with its text; and while
 * no one tampered with the store, agents in the same round agree on it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "rdzv_codec.h"
#include "rdzv_machine.h"

#define AGENTS_MAX  4
#define VALUE_MAX   1100 /* a little over RDZV_STATE_MAX */
#define PENDING_MAX 256	 /* messages in flight per agent (then the agent is killed) */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- the store ---- */

struct entry {
	uint8_t *key;
	size_t klen;
	uint8_t *val;
	size_t vlen;
	bool present;
	int owner; /* the session (agent) a session-bound key belongs to, or -1 */
	struct entry *next;
};

struct watcher {
	struct entry *e;
	int agent;
	uint64_t id;
	struct watcher *next;
};

/* A request on its way to the store, then its answer on its way back. */
struct msg {
	enum rdzv_action_kind kind; /* 0: a watch event */
	uint64_t id;
	struct byteview *keys; /* owned copies */
	size_t nkeys;
	struct byteview val, exp;
	bool has_exp;
	int64_t delta;
	bool swapped;
	int64_t added;
	struct rdzv_value *vals; /* owned copies */
	size_t nvals;
	struct msg *next;
};

struct fifo {
	struct msg *head, *tail;
	size_t len;
};

struct agent {
	struct rdzv_config cfg;
	char node_id[32], addr[32], run_id[16];
	struct rdzv_machine *m;
	bool running;
	int64_t timer_at;
	unsigned lives;
	unsigned notices; /* NOTICEs of this machine: at most one */
	bool in_round;
	uint64_t gen;
	uint32_t round, size, rank;
	uint16_t master_port;
	struct fifo out, in;
};

struct sim {
	struct entry *entries;
	size_t nentries;
	struct watcher *watchers;
	struct agent agents[AGENTS_MAX];
	int n;
	int64_t now;
	bool tampered; /* a stranger wrote or a lie was told */
};

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);
	if (!p)
		abort();
	return p;
}

static uint8_t *dup_bytes(const void *p, size_t n)
{
	uint8_t *d = xcalloc(n + 1, 1);
	if (n)
		memcpy(d, p, n);
	return d;
}

static struct byteview copy_view(struct byteview b)
{
	return (struct byteview){dup_bytes(b.data, b.len), b.len};
}

static struct entry *lookup(struct sim *s, struct byteview key, bool create)
{
	for (struct entry *e = s->entries; e; e = e->next)
		if (e->klen == key.len && memcmp(e->key, key.data, key.len) == 0)
			return e;
	if (!create)
		return NULL;
	struct entry *e = xcalloc(1, sizeof(*e));
	e->key = dup_bytes(key.data, key.len);
	e->klen = key.len;
	e->owner = -1;
	e->next = s->entries;
	s->entries = e;
	s->nentries++;
	return e;
}

static struct entry *entry_at(struct sim *s, size_t i)
{
	struct entry *e = s->entries;
	for (; e && i; i--)
		e = e->next;
	return e;
}

static void fifo_push(struct fifo *f, struct msg *m)
{
	m->next = NULL;
	if (f->tail)
		f->tail->next = m;
	else
		f->head = m;
	f->tail = m;
	f->len++;
}

static struct msg *fifo_pop(struct fifo *f)
{
	struct msg *m = f->head;
	if (m) {
		f->head = m->next;
		if (!f->head)
			f->tail = NULL;
		f->len--;
	}
	return m;
}

static void vals_free(struct msg *m)
{
	for (size_t i = 0; i < m->nvals; i++)
		free((void *)m->vals[i].bytes.data);
	free(m->vals);
	m->vals = NULL;
	m->nvals = 0;
}

static void msg_free(struct msg *m)
{
	for (size_t i = 0; i < m->nkeys; i++)
		free((void *)m->keys[i].data);
	free(m->keys);
	free((void *)m->val.data);
	free((void *)m->exp.data);
	vals_free(m);
	free(m);
}

static void fifo_clear(struct fifo *f)
{
	struct msg *m;
	while ((m = fifo_pop(f)))
		msg_free(m);
}

static struct rdzv_value value_of(const struct entry *e)
{
	struct rdzv_value v = {false, {NULL, 0}};
	if (e && e->present) {
		v.present = true;
		v.bytes = copy_view((struct byteview){e->val, e->vlen});
	}
	return v;
}

static void set_vals(struct msg *m, size_t n)
{
	vals_free(m);
	m->vals = xcalloc(n, sizeof(*m->vals));
	m->nvals = n;
}

/* Every watcher of e hears its new value. */
static void notify(struct sim *s, struct entry *e)
{
	for (struct watcher *w = s->watchers; w; w = w->next) {
		struct agent *a = &s->agents[w->agent];
		if (w->e != e || !a->running)
			continue;
		struct msg *m = xcalloc(1, sizeof(*m));
		m->id = w->id;
		set_vals(m, 1);
		m->vals[0] = value_of(e);
		fifo_push(&a->in, m);
	}
}

static void put(struct sim *s, struct entry *e, const uint8_t *v, size_t len, int owner)
{
	free(e->val);
	e->val = dup_bytes(v, len);
	e->vlen = len;
	e->present = true;
	e->owner = owner;
	notify(s, e);
}

static void del(struct sim *s, struct entry *e)
{
	if (!e->present)
		return;
	free(e->val);
	e->val = NULL;
	e->vlen = 0;
	e->present = false;
	e->owner = -1;
	notify(s, e);
}

/* TCPStore's compare_set, answered the way a TCPStore driver reports it. */
static void exec_cas(struct sim *s, struct msg *m)
{
	struct entry *e = lookup(s, m->keys[0], true);
	struct byteview exp = m->has_exp ? m->exp : (struct byteview){(const uint8_t *)"", 0};
	struct byteview after;
	if (!e->present && exp.len != 0) {
		after = exp; /* TCPStore answers `expected` for a missing key */
	} else {
		if (!e->present || (e->vlen == exp.len && memcmp(e->val, exp.data, exp.len) == 0))
			put(s, e, m->val.data, m->val.len, -1);
		after = (struct byteview){e->val, e->vlen};
	}
	m->swapped = after.len == m->val.len && memcmp(after.data, m->val.data, after.len) == 0;
	set_vals(m, 1);
	m->vals[0] = (struct rdzv_value){true, copy_view(after)};
}

static void exec_add(struct sim *s, struct msg *m)
{
	struct entry *e = lookup(s, m->keys[0], true);
	int64_t v = e->present ? strtoll((const char *)e->val, NULL, 10) : 0;
	char buf[32];
	v = (int64_t)((uint64_t)v + (uint64_t)m->delta);
	int n = snprintf(buf, sizeof(buf), "%" PRId64, v);
	put(s, e, (const uint8_t *)buf, (size_t)n, -1);
	m->added = v;
}

static void unwatch_where(struct sim *s, int agent, bool all, uint64_t id)
{
	for (struct watcher **w = &s->watchers; *w;) {
		if ((*w)->agent == agent && (all || (*w)->id == id)) {
			struct watcher *dead = *w;
			*w = dead->next;
			free(dead);
		} else {
			w = &(*w)->next;
		}
	}
}

static void exec_watch(struct sim *s, int ai, struct msg *m)
{
	struct entry *e = lookup(s, m->keys[0], true);
	struct watcher *w = xcalloc(1, sizeof(*w));
	w->e = e;
	w->agent = ai;
	w->id = m->id;
	w->next = s->watchers;
	s->watchers = w;
	m->kind = (enum rdzv_action_kind)0; /* answered as a watch event: the value now */
	set_vals(m, 1);
	m->vals[0] = value_of(e);
}

/* The store serves one request of agent ai; its answer goes back. */
static void exec(struct sim *s, int ai, struct msg *m)
{
	struct agent *a = &s->agents[ai];
	switch (m->kind) {
	case RDZV_ACT_GET:
		set_vals(m, m->nkeys);
		for (size_t i = 0; i < m->nkeys; i++)
			m->vals[i] = value_of(lookup(s, m->keys[i], false));
		break;
	case RDZV_ACT_CAS:
		exec_cas(s, m);
		break;
	case RDZV_ACT_ADD:
		exec_add(s, m);
		break;
	case RDZV_ACT_SET:
	case RDZV_ACT_SET_SESSION:
		put(s, lookup(s, m->keys[0], true), m->val.data, m->val.len,
		    m->kind == RDZV_ACT_SET_SESSION ? ai : -1);
		break;
	case RDZV_ACT_WATCH:
		exec_watch(s, ai, m);
		break;
	case RDZV_ACT_UNWATCH:
		unwatch_where(s, ai, false, m->id);
		msg_free(m);
		return;
	default:
		abort(); /* the machine asked for something that is not a request */
	}
	fifo_push(&a->in, m);
}

/* The agent's session ends: its watches and session keys go. */
static void close_session(struct sim *s, int ai)
{
	struct agent *a = &s->agents[ai];
	a->running = false;
	a->in_round = false;
	a->timer_at = -1;
	fifo_clear(&a->out);
	fifo_clear(&a->in);
	unwatch_where(s, ai, true, 0);
	for (struct entry *e = s->entries; e; e = e->next)
		if (e->present && e->owner == ai)
			del(s, e);
}

/* ---- the agents ---- */

/* FUZZ_TRACE=1 in the environment: what happens, on stderr (to build seeds). */
static void trace(const struct sim *s, const struct agent *a, const char *what, const char *text)
{
	static int on = -1;
	if (on < 0)
		on = getenv("FUZZ_TRACE") != NULL;
	if (on)
		fprintf(stderr,
			"%8" PRId64 " %s: %s gen %" PRIu64 " round %" PRIu32 " rank %" PRIu32
			" of %" PRIu32 " %s\n",
			s->now, a->node_id, what, a->gen, a->round, a->rank, a->size, text);
}

/* Agents that ran in the same round agree on it while the store is honest.
 * Returns false when the machine has no world: the round was over before
 * the driver took it (the agent's driver skips it); a ROUND_OVER or an end
 * must then follow in the same batch. */
static bool check_round(struct sim *s, struct agent *a)
{
	const struct rdzv_world *w = rdzv_machine_world(a->m);
	if (!w)
		return false;
	if (w->rank >= w->size || w->size > a->cfg.max_nodes || !w->master_addr ||
	    strcmp(w->members[w->rank].id, a->node_id) != 0 || !w->key_prefix)
		abort();
	a->in_round = true;
	a->gen = w->gen;
	a->round = w->round;
	a->size = w->size;
	a->rank = w->rank;
	a->master_port = w->master_port;
	for (int i = 0; i < s->n && !s->tampered; i++) {
		struct agent *b = &s->agents[i];
		if (b == a || !b->in_round || b->gen != a->gen || b->round != a->round)
			continue;
		if (b->size != a->size || b->master_port != a->master_port || b->rank == a->rank) {
			trace(s, a, "disagrees on the round with", b->node_id);
			abort();
		}
	}
	trace(s, a, "round", "");
	return true;
}

static struct msg *msg_of(const struct rdzv_action *act)
{
	struct msg *m = xcalloc(1, sizeof(*m));
	m->kind = act->kind;
	m->id = act->kind == RDZV_ACT_UNWATCH ? act->watch : act->id;
	m->nkeys = act->kind == RDZV_ACT_GET ? act->nkeys : 1;
	m->keys = xcalloc(m->nkeys, sizeof(*m->keys));
	for (size_t i = 0; i < m->nkeys; i++)
		m->keys[i] = copy_view(act->kind == RDZV_ACT_GET ? act->keys[i] : act->key);
	m->val = copy_view(act->value);
	m->exp = copy_view(act->expected);
	m->has_exp = act->has_expected;
	m->delta = act->delta;
	return m;
}

/* Takes every due action of agent ai's machine. */
static void drain(struct sim *s, int ai)
{
	struct agent *a = &s->agents[ai];
	struct rdzv_action act;
	bool stale = false; /* a ROUND without a world: its end must follow */
	while (a->running && rdzv_next_action(a->m, &act)) {
		switch (act.kind) {
		case RDZV_ACT_TIMER:
			a->timer_at = act.at_ms;
			break;
		case RDZV_ACT_ROUND:
			stale = !check_round(s, a);
			break;
		case RDZV_ACT_ROUND_OVER:
			stale = false;
			a->in_round = false;
			rdzv_set_port(a->m, (uint16_t)(a->cfg.port + 1));
			break;
		case RDZV_ACT_LEFT:
		case RDZV_ACT_FINISHED:
		case RDZV_ACT_FAILED:
		case RDZV_ACT_REFUSED:
			if (!act.text || (act.kind >= RDZV_ACT_FAILED && !act.text[0]) ||
			    strlen(act.text) > 4096)
				abort();
			trace(s, a, "end", act.text);
			close_session(s, ai);
			return;
		case RDZV_ACT_NOTICE: /* a line, said once */
			if (!act.text || !act.text[0] || strlen(act.text) > 4096 ||
			    ++a->notices > 1)
				abort();
			break;
		default:
			if (a->out.len >= PENDING_MAX) { /* a machine that floods the store */
				close_session(s, ai);
				return;
			}
			fifo_push(&a->out, msg_of(&act));
			break;
		}
	}
	/* A ROUND without a world must be over; the state seen decoded. */
	const struct rdzv_state *st = a->running ? rdzv_machine_state(a->m) : NULL;
	if ((stale && a->running) || (st && (st->gen < 1 || st->round < 1)))
		abort();
}

/* An entry point's answer: 0, or -ENOMEM (then the machine is unusable). */
static void check(struct sim *s, int ai, int rc)
{
	if (rc == -ENOMEM)
		close_session(s, ai);
	else if (rc != 0)
		abort();
	else
		drain(s, ai);
}

/* Agent ai receives one answer or watch event. */
static void deliver(struct sim *s, int ai, struct msg *m, int status)
{
	struct rdzv_machine *mm = s->agents[ai].m;
	int64_t t = s->now;
	int rc;
	if (!m->kind)
		rc = rdzv_on_key(mm, t, m->id, m->vals[0]);
	else if (m->kind == RDZV_ACT_GET)
		rc = rdzv_on_get(mm, t, m->id, status, status ? NULL : m->vals,
				 status ? 0 : m->nvals);
	else if (m->kind == RDZV_ACT_CAS)
		rc = rdzv_on_cas(mm, t, m->id, status, m->swapped,
				 status ? (struct rdzv_value){false, {NULL, 0}} : m->vals[0]);
	else if (m->kind == RDZV_ACT_ADD)
		rc = rdzv_on_add(mm, t, m->id, status, m->added);
	else
		rc = rdzv_on_done(mm, t, m->id, status);
	msg_free(m);
	check(s, ai, rc);
}

static struct rdzv_value fuzz_value(struct fuzz_input *in)
{
	uint8_t how = fuzz_u8(in);
	struct rdzv_value v = {false, {NULL, 0}};
	if (how & 1) {
		v.present = true;
		v.bytes = copy_view(fuzz_bytes(in, how & 2 ? 16 : VALUE_MAX));
	}
	return v;
}

/* Replaces the answer's content with the input's: a malicious store. */
static int lie(struct sim *s, struct fuzz_input *in, struct msg *m)
{
	static const int errs[] = {-EIO, -ECONNRESET, -ENOSPC, -EINVAL, -ERANGE, -ETIMEDOUT};
	uint8_t how = fuzz_u8(in);
	s->tampered = true;
	if (m->kind && (how & 1))
		return errs[(how >> 1) % (sizeof(errs) / sizeof(errs[0]))];
	for (size_t i = 0; i < m->nvals; i++)
		if (fuzz_u8(in) & 1) {
			free((void *)m->vals[i].bytes.data);
			m->vals[i] = fuzz_value(in);
		}
	if (how & 2)
		m->swapped = !m->swapped;
	if (how & 4)
		m->added =
		    (int64_t)((uint64_t)fuzz_u16(in) << 48 | (uint64_t)fuzz_u16(in) << 16) - 3;
	return 0;
}

/* ---- a stranger writes the store ---- */

static const char *pick_id(struct sim *s, struct fuzz_input *in)
{
	uint8_t k = fuzz_u8(in) % (s->n + 2);
	return k < s->n ? s->agents[k].node_id : k == s->n ? "stranger" : "";
}

static int build_state(struct sim *s, struct fuzz_input *in, char *buf, size_t cap)
{
	struct rdzv_state st;
	memset(&st, 0, sizeof(st));
	st.gen = 1 + fuzz_u8(in) % 3;
	st.round = 1 + fuzz_u8(in) % 4;
	st.phase = (enum rdzv_phase)(1 + fuzz_u8(in) % 4);
	st.min_nodes = 1 + fuzz_u8(in) % 4;
	st.max_nodes = st.min_nodes + fuzz_u8(in) % 3;
	st.expect = fuzz_u8(in) % 8;
	st.size = fuzz_u8(in) % (st.max_nodes + 1);
	st.max_restarts = fuzz_u8(in) % 4;
	st.restarts = fuzz_u8(in) % (st.max_restarts + 1);
	st.reason = (enum rdzv_reason)(1 + fuzz_u8(in) % 6);
	snprintf(st.subject, sizeof(st.subject), "%s", pick_id(s, in));
	snprintf(st.coord, sizeof(st.coord), "%s", pick_id(s, in));
	snprintf(st.job, sizeof(st.job), "%s", fuzz_u8(in) & 1 ? "jobA" : "jobB");
	snprintf(st.cmd, sizeof(st.cmd), "%s", st.round & 1 ? "cmdA" : "cmdB"); /* no input used */
	if (st.phase == RDZV_FAILED)
		snprintf(st.msg, sizeof(st.msg), "a stranger says so");
	return rdzv_state_encode(&st, buf, cap);
}

static int build_slot(struct sim *s, struct fuzz_input *in, char *buf, size_t cap)
{
	struct rdzv_slot sl;
	memset(&sl, 0, sizeof(sl));
	sl.gen = 1 + fuzz_u8(in) % 3;
	sl.round = 1 + fuzz_u8(in) % 4;
	snprintf(sl.id, sizeof(sl.id), "%s", pick_id(s, in));
	snprintf(sl.addr, sizeof(sl.addr), "10.9.9.%u", fuzz_u8(in));
	sl.port = fuzz_u16(in);
	sl.nproc = 1 + fuzz_u8(in) % 4;
	sl.node_rank = (int32_t)(fuzz_u8(in) % 6) - 1;
	sl.prev_round = fuzz_u8(in) % 4;
	sl.prev_rank = sl.prev_round ? fuzz_u8(in) % 4 : 0;
	return rdzv_slot_encode(&sl, buf, cap);
}

static int build_world(struct sim *s, struct fuzz_input *in, char **out, size_t *len)
{
	struct rdzv_member mem[6];
	uint32_t n = 1 + fuzz_u8(in) % 6;
	for (uint32_t i = 0; i < n; i++) {
		mem[i].id = pick_id(s, in);
		mem[i].addr = i & 1 ? "10.9.9.9" : "127.0.0.9";
		mem[i].nproc = 1 + fuzz_u8(in) % 3;
	}
	uint64_t gen = 1 + fuzz_u8(in) % 3;
	uint32_t round = 1 + fuzz_u8(in) % 4;
	return rdzv_world_encode(gen, round, fuzz_u16(in), mem, n, out, len);
}

/* Writes a value built from the input, in the encoding the key holds now. */
static void stranger_builds(struct sim *s, struct fuzz_input *in, struct entry *e)
{
	char buf[RDZV_STATE_MAX + RDZV_SLOT_MAX], *world = NULL;
	size_t wlen = 0;
	int n = -EINVAL;
	if (e->vlen >= 6 && memcmp(e->val, "rdzv3 ", 6) == 0)
		n = build_state(s, in, buf, sizeof(buf));
	else if (e->vlen >= 7 && memcmp(e->val, "rdzvs1 ", 7) == 0)
		n = build_slot(s, in, buf, sizeof(buf));
	else if (e->vlen >= 7 && memcmp(e->val, "rdzvw1 ", 7) == 0 &&
		 build_world(s, in, &world, &wlen) == 0)
		put(s, e, (const uint8_t *)world, wlen, -1);
	else
		n = snprintf(buf, sizeof(buf), "%d", (int)(int16_t)fuzz_u16(in));
	if (n >= 0)
		put(s, e, (const uint8_t *)buf, (size_t)n, -1);
	free(world);
}

static void stranger(struct sim *s, struct fuzz_input *in, uint8_t how)
{
	struct entry *e = s->nentries ? entry_at(s, fuzz_u8(in) % s->nentries) : NULL;
	if (!e)
		return;
	s->tampered = true;
	if (how == 0) {
		struct byteview b = fuzz_bytes(in, VALUE_MAX);
		put(s, e, b.data, b.len, -1);
	} else if (how == 1) {
		del(s, e);
	} else if (e->present) {
		stranger_builds(s, in, e);
	}
}

/* ---- the script ---- */

struct setup {
	uint8_t mode; /* 0 elastic, 1 elastic with node ranks, 2 static (own/owned store) */
	uint32_t min, max, restarts;
	uint8_t jobs; /* bit i: agent i has another job's fingerprint */
	int64_t join, last_call, close, keep_alive;
	uint32_t attempts;
};

static void configure(struct sim *s, struct setup *u, int ai)
{
	struct agent *a = &s->agents[ai];
	struct rdzv_config *c = &a->cfg;
	rdzv_config_defaults(c);
	snprintf(a->run_id, sizeof(a->run_id), "run");
	snprintf(a->node_id, sizeof(a->node_id), "n%d.%u", ai, a->lives);
	snprintf(a->addr, sizeof(a->addr), "10.0.0.%d", ai + 1);
	c->run_id = a->run_id;
	c->node_id = a->node_id;
	c->addr = a->addr;
	c->port = (uint16_t)(1000 + ai);
	c->nproc = 1 + (uint32_t)ai % 2;
	c->min_nodes = u->min;
	c->max_nodes = u->max;
	c->node_rank = u->mode ? ai : -1;
	c->max_restarts = u->restarts;
	c->job = u->jobs >> ai & 1 ? "jobB" : "jobA";
	c->job_text = "a fuzzed job";
	c->cmd = ai % 2 ? "cmdB" : "cmdA"; /* one job's nodes may differ here */
	c->store_role = u->mode < 2 ? RDZV_STORE_SHARED : ai ? RDZV_STORE_OWNED : RDZV_STORE_OWN;
	c->join_timeout_ms = u->join;
	c->last_call_timeout_ms = u->last_call;
	c->close_timeout_ms = u->close;
	c->keep_alive_interval_ms = u->keep_alive;
	c->keep_alive_max_attempt = u->attempts;
}

static void start(struct sim *s, struct setup *u, int ai)
{
	struct agent *a = &s->agents[ai];
	rdzv_machine_free(a->m);
	a->m = NULL;
	configure(s, u, ai);
	a->timer_at = -1;
	a->notices = 0;
	a->lives++;
	if (rdzv_machine_new(&a->cfg, &a->m) < 0)
		abort(); /* configure() gives valid configurations only */
	a->running = true;
	check(s, ai, rdzv_start(a->m, s->now));
}

static void read_setup(struct sim *s, struct fuzz_input *in, struct setup *u)
{
	s->n = 1 + fuzz_u8(in) % AGENTS_MAX;
	u->mode = fuzz_u8(in) % 3;
	u->max = (uint32_t)s->n;
	u->min = u->mode == 2 ? u->max : 1 + fuzz_u8(in) % u->max;
	u->restarts = fuzz_u8(in) % 4;
	u->jobs = fuzz_u8(in) & (uint8_t)(fuzz_u8(in) & 1 ? 0xf : 0); /* mostly one job */
	u->join = 1000 + (int64_t)fuzz_u8(in) * 1000;
	u->last_call = (int64_t)fuzz_u8(in) * 50;
	u->close = 100 + (int64_t)fuzz_u8(in) * 100;
	u->keep_alive = 100 + (int64_t)fuzz_u8(in) * 20;
	u->attempts = 1 + fuzz_u8(in) % 4;
}

static void fire_timer(struct sim *s, int ai)
{
	struct agent *a = &s->agents[ai];
	if (!a->running || a->timer_at < 0)
		return;
	if (a->timer_at > s->now)
		s->now = a->timer_at;
	a->timer_at = -1;
	check(s, ai, rdzv_on_timer(a->m, s->now));
}

/* The node's process: killed, stopped, restarted, or its workers exit. */
static void life(struct sim *s, struct setup *u, struct fuzz_input *in, int ai)
{
	struct agent *a = &s->agents[ai];
	uint8_t what = fuzz_u8(in) % 5;
	if (!a->running) {
		if (what == 0 && a->lives < 4)
			start(s, u, ai); /* a node that comes back */
	} else if (what == 0) {
		close_session(s, ai); /* kill -9 */
	} else if (what == 1) {
		check(s, ai, rdzv_stop(a->m, s->now));
	} else if (a->in_round && what < 4) {
		a->in_round = false;
		check(s, ai, rdzv_workers_exited(a->m, s->now, what == 2));
	} else {
		rdzv_set_port(a->m, fuzz_u16(in));
	}
}

static void step(struct sim *s, struct setup *u, struct fuzz_input *in)
{
	uint8_t op = fuzz_u8(in);
	int ai = (op >> 4) % s->n;
	struct agent *a = &s->agents[ai];
	switch (op & 15) {
	case 0 ... 4: /* the store serves a request */
		if (a->running && a->out.len)
			exec(s, ai, fifo_pop(&a->out));
		break;
	case 5 ... 9: /* the agent hears the answer */
		if (a->running && a->in.len)
			deliver(s, ai, fifo_pop(&a->in), 0);
		break;
	case 10: /* ... or what a malicious store puts in its place */
		if (a->running && a->in.len) {
			struct msg *m = fifo_pop(&a->in);
			deliver(s, ai, m, lie(s, in, m));
		}
		break;
	case 11:
		stranger(s, in, fuzz_u8(in) % 3);
		break;
	case 12:
		fire_timer(s, ai);
		break;
	case 13:
		s->now += (int64_t)fuzz_u16(in) * 4;
		break;
	default:
		life(s, u, in, ai);
		break;
	}
}

static void sim_free(struct sim *s)
{
	for (int i = 0; i < s->n; i++) {
		fifo_clear(&s->agents[i].out);
		fifo_clear(&s->agents[i].in);
		rdzv_machine_free(s->agents[i].m);
	}
	while (s->watchers) {
		struct watcher *w = s->watchers;
		s->watchers = w->next;
		free(w);
	}
	while (s->entries) {
		struct entry *e = s->entries;
		s->entries = e->next;
		free(e->key);
		free(e->val);
		free(e);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_input in = {data, size};
	struct setup u;
	struct sim s;
	memset(&s, 0, sizeof(s));
	read_setup(&s, &in, &u);
	for (int i = 0; i < s.n; i++)
		start(&s, &u, i);
	while (in.n)
		step(&s, &u, &in);
	sim_free(&s);
	return 0;
}
