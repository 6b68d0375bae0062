/*
 * rdzv_fake.c - the simulated store, agents and scheduler (rdzv_fake.h).
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rdzv_fake.h"

#define BUCKETS 4096

struct watcher {
	int agent;
	uint64_t id;
	struct watcher *next;
};

struct entry {
	char *key;
	uint8_t *val;
	size_t len;
	bool present;
	int owner; /* session owner (agent index) or -1 */
	struct watcher *watchers;
	struct entry *next;
};

/* A message on one of an agent's two FIFOs. */
struct msg {
	enum rdzv_action_kind kind; /* request kind; 0 for a watch event */
	uint64_t id;
	char **keys;
	size_t nkeys;
	uint8_t *val, *exp;
	size_t vlen, elen;
	bool has_exp;
	int64_t delta;
	/* answers */
	int status;
	bool swapped;
	struct rdzv_value *vals; /* GET answers / CAS current / watch value */
	size_t nvals;
	int64_t added;
	struct msg *next;
};

struct fifo {
	struct msg *head, *tail;
	size_t len;
};

struct node {
	struct fake_agent a;
	struct fifo out, in;
};

struct fake_net {
	struct entry *tab[BUCKETS];
	size_t keys;
	struct node *nodes[FAKE_AGENTS_MAX];
	int n;
	int64_t now;
	uint64_t rng, requests;
};

static uint64_t rnd(struct fake_net *net)
{
	net->rng ^= net->rng << 13;
	net->rng ^= net->rng >> 7;
	net->rng ^= net->rng << 17;
	return net->rng;
}

static uint8_t *dup_bytes(const void *p, size_t n)
{
	uint8_t *d = malloc(n + 1);
	assert_non_null(d);
	if (n)
		memcpy(d, p, n);
	d[n] = 0;
	return d;
}

static unsigned hash(const char *k)
{
	unsigned h = 2166136261u;
	for (; *k; k++)
		h = (h ^ (uint8_t)*k) * 16777619u;
	return h % BUCKETS;
}

static struct entry *lookup(struct fake_net *net, const char *key, bool create)
{
	unsigned h = hash(key);
	for (struct entry *e = net->tab[h]; e; e = e->next)
		if (strcmp(e->key, key) == 0)
			return e;
	if (!create)
		return NULL;
	struct entry *e = calloc(1, sizeof(*e));
	assert_non_null(e);
	e->key = strdup(key);
	e->owner = -1;
	e->next = net->tab[h];
	net->tab[h] = e;
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

static void msg_free(struct msg *m)
{
	for (size_t i = 0; i < m->nkeys; i++)
		free(m->keys[i]);
	free(m->keys);
	free(m->val);
	free(m->exp);
	for (size_t i = 0; i < m->nvals; i++)
		free((void *)m->vals[i].bytes.data);
	free(m->vals);
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
		v.bytes.data = dup_bytes(e->val, e->len);
		v.bytes.len = e->len;
	}
	return v;
}

/* Every watcher of e hears its new value. */
static void notify(struct fake_net *net, struct entry *e)
{
	for (struct watcher *w = e->watchers; w; w = w->next) {
		struct node *nd = net->nodes[w->agent];
		if (nd->a.killed)
			continue;
		struct msg *m = calloc(1, sizeof(*m));
		assert_non_null(m);
		m->id = w->id;
		m->vals = calloc(1, sizeof(*m->vals));
		m->vals[0] = value_of(e);
		m->nvals = 1;
		fifo_push(&nd->in, m);
	}
}

static void put(struct fake_net *net, struct entry *e, const uint8_t *v, size_t len, int owner)
{
	if (!e->present)
		net->keys++;
	free(e->val);
	e->val = dup_bytes(v, len);
	e->len = len;
	e->present = true;
	e->owner = owner;
	notify(net, e);
}

static void del(struct fake_net *net, struct entry *e)
{
	if (!e->present)
		return;
	free(e->val);
	e->val = NULL;
	e->len = 0;
	e->present = false;
	e->owner = -1;
	net->keys--;
	notify(net, e);
}

/* TCPStore's compare_set, answered the way a TCPStore driver reports it. */
static void exec_cas(struct fake_net *net, struct msg *m)
{
	struct entry *e = lookup(net, m->keys[0], true);
	const uint8_t *exp = m->has_exp ? m->exp : (const uint8_t *)"";
	size_t elen = m->has_exp ? m->elen : 0;
	const uint8_t *after;
	size_t alen;
	if (!e->present) {
		if (elen == 0) {
			put(net, e, m->val, m->vlen, -1);
			after = e->val;
			alen = e->len;
		} else {
			after = exp; /* TCPStore answers `expected` for a missing key */
			alen = elen;
		}
	} else {
		if (e->len == elen && memcmp(e->val, exp, elen) == 0)
			put(net, e, m->val, m->vlen, -1);
		after = e->val;
		alen = e->len;
	}
	m->swapped = alen == m->vlen && memcmp(after, m->val, alen) == 0;
	m->vals = calloc(1, sizeof(*m->vals));
	m->vals[0] = (struct rdzv_value){true, {dup_bytes(after, alen), alen}};
	m->nvals = 1;
}

static void exec_add(struct fake_net *net, struct msg *m)
{
	struct entry *e = lookup(net, m->keys[0], true);
	int64_t v = e->present ? strtoll((const char *)e->val, NULL, 10) : 0;
	char buf[32];
	v += m->delta;
	int n = snprintf(buf, sizeof(buf), "%" PRId64, v);
	put(net, e, (const uint8_t *)buf, (size_t)n, -1);
	m->added = v;
}

static void unwatch(struct fake_net *net, int agent, uint64_t id)
{
	for (int b = 0; b < BUCKETS; b++)
		for (struct entry *e = net->tab[b]; e; e = e->next)
			for (struct watcher **w = &e->watchers; *w; w = &(*w)->next)
				if ((*w)->agent == agent && (*w)->id == id) {
					struct watcher *dead = *w;
					*w = dead->next;
					free(dead);
					return;
				}
}

/* The store serves one request of agent `ai`; its answer goes back. */
static void exec(struct fake_net *net, int ai, struct msg *m)
{
	struct node *nd = net->nodes[ai];
	struct entry *e;
	net->requests++;
	nd->a.requests++;
	switch (m->kind) {
	case RDZV_ACT_GET:
		m->vals = calloc(m->nkeys ? m->nkeys : 1, sizeof(*m->vals));
		m->nvals = m->nkeys;
		for (size_t i = 0; i < m->nkeys; i++) {
			m->vals[i] = value_of(lookup(net, m->keys[i], false));
			nd->a.bytes_in += m->vals[i].bytes.len;
		}
		break;
	case RDZV_ACT_CAS:
		exec_cas(net, m);
		break;
	case RDZV_ACT_ADD:
		exec_add(net, m);
		break;
	case RDZV_ACT_SET:
		if (nd->a.die_before_slot) { /* between its ticket and its slot */
			msg_free(m);
			fake_kill(net, &nd->a);
			return;
		}
		/* fall through */
	case RDZV_ACT_SET_SESSION:
		put(net, lookup(net, m->keys[0], true), m->val, m->vlen,
		    m->kind == RDZV_ACT_SET_SESSION ? ai : -1);
		break;
	case RDZV_ACT_WATCH: {
		e = lookup(net, m->keys[0], true);
		struct watcher *w = calloc(1, sizeof(*w));
		w->agent = ai;
		w->id = m->id;
		w->next = e->watchers;
		e->watchers = w;
		m->kind = (enum rdzv_action_kind)0; /* answered as a watch event: the value now */
		m->vals = calloc(1, sizeof(*m->vals));
		m->vals[0] = value_of(e);
		m->nvals = 1;
		break;
	}
	case RDZV_ACT_UNWATCH:
		unwatch(net, ai, m->id);
		msg_free(m);
		return;
	default:
		fail_msg("unexpected request %d", m->kind);
	}
	fifo_push(&nd->in, m);
}

static void record_round(struct fake_agent *a)
{
	const struct rdzv_world *w = rdzv_machine_world(a->m);
	assert_non_null(w);
	a->rounds++;
	a->in_round = true;
	a->gen = w->gen;
	a->round = w->round;
	a->rank = w->rank;
	a->size = w->size;
	a->restarts = w->restarts;
	a->first_proc = w->first_proc;
	a->world_procs = w->world_procs;
	snprintf(a->master_addr, sizeof(a->master_addr), "%s", w->master_addr);
	a->master_port = w->master_port;
	snprintf(a->key_prefix, sizeof(a->key_prefix), "%s", w->key_prefix);
	assert_string_equal(w->members[w->rank].id, a->node_id);
}

static void close_session(struct fake_net *net, int ai)
{
	for (int b = 0; b < BUCKETS; b++)
		for (struct entry *e = net->tab[b]; e; e = e->next) {
			for (struct watcher **w = &e->watchers; *w;) {
				if ((*w)->agent == ai) {
					struct watcher *dead = *w;
					*w = dead->next;
					free(dead);
				} else {
					w = &(*w)->next;
				}
			}
			if (e->present && e->owner == ai)
				del(net, e);
		}
}

static void agent_exit(struct fake_net *net, struct node *nd)
{
	nd->a.running = false;
	fifo_clear(&nd->out);
	fifo_clear(&nd->in);
	close_session(net, nd->a.idx);
}

/* Takes every due action of the agent's machine. */
static void drain(struct fake_net *net, struct node *nd)
{
	struct rdzv_action act;
	struct fake_agent *a = &nd->a;
	while (a->running && rdzv_next_action(a->m, &act)) {
		switch (act.kind) {
		case RDZV_ACT_TIMER:
			a->timer_at = act.at_ms;
			continue;
		case RDZV_ACT_ROUND:
			if (getenv("RDZV_TRACE"))
				fprintf(stderr, "%6" PRId64 " %s: ROUND\n", net->now, a->node_id);
			a->round_at = net->now;
			record_round(a);
			continue;
		case RDZV_ACT_ROUND_OVER:
			a->round_overs++;
			a->in_round = false;
			if (a->port_step) { /* a fresh worker store for the next round */
				a->cfg.port = (uint16_t)(a->cfg.port + a->port_step);
				rdzv_set_port(a->m, a->cfg.port);
			}
			continue;
		case RDZV_ACT_NOTICE:
			a->notices++;
			snprintf(a->notice_text, sizeof(a->notice_text), "%s", act.text);
			continue;
		case RDZV_ACT_LEFT:
		case RDZV_ACT_FINISHED:
		case RDZV_ACT_FAILED:
		case RDZV_ACT_REFUSED:
			if (getenv("RDZV_TRACE"))
				fprintf(stderr, "%6" PRId64 " %s: END %d %s\n", net->now,
					a->node_id, act.kind, act.text);
			a->ended = act.kind;
			a->ended_at = net->now;
			a->in_round = false;
			snprintf(a->end_text, sizeof(a->end_text), "%s", act.text);
			agent_exit(net, nd);
			return;
		default:
			break;
		}
		if (getenv("RDZV_TRACE"))
			fprintf(stderr,
				"%6" PRId64 " %s: act %d id %" PRIu64 " key %.*s n %zu val %.*s\n",
				net->now, a->node_id, act.kind, act.id, (int)act.key.len,
				(const char *)act.key.data, act.nkeys, (int)act.value.len,
				(const char *)act.value.data);
		struct msg *m = calloc(1, sizeof(*m));
		assert_non_null(m);
		m->kind = act.kind;
		m->id = act.kind == RDZV_ACT_UNWATCH ? act.watch : act.id;
		m->nkeys = act.kind == RDZV_ACT_GET ? act.nkeys : 1;
		m->keys = calloc(m->nkeys ? m->nkeys : 1, sizeof(*m->keys));
		for (size_t i = 0; i < m->nkeys; i++) {
			struct byteview k = act.kind == RDZV_ACT_GET ? act.keys[i] : act.key;
			m->keys[i] = (char *)dup_bytes(k.data, k.len);
		}
		m->val = dup_bytes(act.value.data, act.value.len);
		m->vlen = act.value.len;
		m->exp = dup_bytes(act.expected.data, act.expected.len);
		m->elen = act.expected.len;
		m->has_exp = act.has_expected;
		m->delta = act.delta;
		fifo_push(&nd->out, m);
	}
}

static void check(int rc)
{
	assert_int_equal(rc, 0);
}

/* The agent receives one answer or watch event. */
static void deliver(struct fake_net *net, struct node *nd, struct msg *m)
{
	struct rdzv_machine *mm = nd->a.m;
	int64_t t = net->now;
	if (!m->kind)
		check(rdzv_on_key(mm, t, m->id, m->vals[0]));
	else
		switch (m->kind) {
		case RDZV_ACT_GET:
			check(rdzv_on_get(mm, t, m->id, 0, m->vals, m->nvals));
			break;
		case RDZV_ACT_CAS:
			check(rdzv_on_cas(mm, t, m->id, 0, m->swapped, m->vals[0]));
			break;
		case RDZV_ACT_ADD:
			check(rdzv_on_add(mm, t, m->id, 0, m->added));
			break;
		default:
			check(rdzv_on_done(mm, t, m->id, 0));
			break;
		}
	msg_free(m);
	drain(net, nd);
}

struct fake_net *fake_net_new(uint64_t seed)
{
	struct fake_net *net = calloc(1, sizeof(*net));
	assert_non_null(net);
	net->rng = seed * 2654435761u + 88172645463325252ull;
	return net;
}

void fake_net_free(struct fake_net *net)
{
	for (int i = 0; i < net->n; i++) {
		fifo_clear(&net->nodes[i]->out);
		fifo_clear(&net->nodes[i]->in);
		rdzv_machine_free(net->nodes[i]->a.m);
		free(net->nodes[i]);
	}
	for (int b = 0; b < BUCKETS; b++)
		while (net->tab[b]) {
			struct entry *e = net->tab[b];
			net->tab[b] = e->next;
			while (e->watchers) {
				struct watcher *w = e->watchers;
				e->watchers = w->next;
				free(w);
			}
			free(e->key);
			free(e->val);
			free(e);
		}
	free(net);
}

struct fake_agent *fake_add(struct fake_net *net, const char *run_id, uint32_t min, uint32_t max)
{
	assert_true(net->n < FAKE_AGENTS_MAX);
	struct node *nd = calloc(1, sizeof(*nd));
	assert_non_null(nd);
	struct fake_agent *a = &nd->a;
	a->idx = net->n;
	snprintf(a->run_id, sizeof(a->run_id), "%s", run_id);
	snprintf(a->node_id, sizeof(a->node_id), "%s-n%d", run_id, a->idx);
	snprintf(a->addr, sizeof(a->addr), "10.0.%d.%d", a->idx / 250, a->idx % 250 + 1);
	rdzv_config_defaults(&a->cfg);
	a->cfg.run_id = a->run_id;
	a->cfg.node_id = a->node_id;
	a->cfg.addr = a->addr;
	a->cfg.port = (uint16_t)(1000 + a->idx);
	a->cfg.nproc = 2;
	a->cfg.min_nodes = min;
	a->cfg.max_nodes = max;
	a->timer_at = -1;
	net->nodes[net->n++] = nd;
	return a;
}

void fake_start(struct fake_net *net, struct fake_agent *a)
{
	struct node *nd = net->nodes[a->idx];
	assert_int_equal(rdzv_machine_new(&a->cfg, &a->m), 0);
	a->running = true;
	check(rdzv_start(a->m, net->now));
	drain(net, nd);
}

void fake_kill(struct fake_net *net, struct fake_agent *a)
{
	a->killed = true;
	a->in_round = false;
	agent_exit(net, net->nodes[a->idx]);
}

void fake_freeze(struct fake_net *net, struct fake_agent *a)
{
	a->frozen = true;
	a->in_round = false;
}

void fake_stop(struct fake_net *net, struct fake_agent *a)
{
	check(rdzv_stop(a->m, net->now));
	drain(net, net->nodes[a->idx]);
}

void fake_stop_permanent(struct fake_net *net, struct fake_agent *a, const char *cause)
{
	check(rdzv_stop_permanent(a->m, net->now, cause));
	drain(net, net->nodes[a->idx]);
}

void fake_workers_exit(struct fake_net *net, struct fake_agent *a, bool success)
{
	a->in_round = false;
	check(rdzv_workers_exited(a->m, net->now, success));
	drain(net, net->nodes[a->idx]);
}

void fake_workers_renew(struct fake_net *net, struct fake_agent *a)
{
	check(rdzv_workers_renew(a->m, net->now));
	drain(net, net->nodes[a->idx]);
}

void fake_workers_grow(struct fake_net *net, struct fake_agent *a)
{
	check(rdzv_workers_grow(a->m, net->now));
	drain(net, net->nodes[a->idx]);
}

static bool active(const struct node *nd)
{
	return nd->a.running && !nd->a.frozen;
}

/* One step: a random non-empty FIFO of an active agent, or the next timer. */
static bool step(struct fake_net *net, int64_t limit)
{
	size_t total = 0;
	for (int i = 0; i < net->n; i++)
		if (active(net->nodes[i]))
			total += (net->nodes[i]->out.len ? 1 : 0) + (net->nodes[i]->in.len ? 1 : 0);
	if (total) {
		size_t pick = rnd(net) % total;
		for (int i = 0; i < net->n; i++) {
			struct node *nd = net->nodes[i];
			if (!active(nd))
				continue;
			for (int dir = 0; dir < 2; dir++) {
				struct fifo *f = dir ? &nd->in : &nd->out;
				if (!f->len || pick--)
					continue;
				struct msg *m = fifo_pop(f);
				if (dir)
					deliver(net, nd, m);
				else
					exec(net, i, m);
				return true;
			}
		}
	}
	int64_t at = -1;
	struct node *next = NULL;
	for (int i = 0; i < net->n; i++) {
		struct node *nd = net->nodes[i];
		if (active(nd) && nd->a.timer_at >= 0 && (at < 0 || nd->a.timer_at < at)) {
			at = nd->a.timer_at;
			next = nd;
		}
	}
	if (!next || at > limit)
		return false;
	if (at > net->now)
		net->now = at;
	next->a.timer_at = -1;
	check(rdzv_on_timer(next->a.m, net->now));
	drain(net, next);
	return true;
}

bool fake_run(struct fake_net *net, bool (*pred)(struct fake_net *, void *), void *ctx,
	      int64_t max_ms)
{
	int64_t limit = net->now + max_ms;
	uint64_t steps = 0;
	while (!(pred && pred(net, ctx))) {
		if (!step(net, limit))
			break;
		/* Agents that keep talking without the clock moving are stuck. */
		if (++steps > 20000000)
			fail_msg("no progress after %" PRIu64 " steps at t=%" PRId64 " ms", steps,
				 net->now);
	}
	return pred ? pred(net, ctx) : true;
}

int64_t fake_now(const struct fake_net *net)
{
	return net->now;
}

struct fake_agent *fake_agent(struct fake_net *net, int idx)
{
	return &net->nodes[idx]->a;
}

int fake_count(const struct fake_net *net)
{
	return net->n;
}

const uint8_t *fake_get(struct fake_net *net, const char *key, size_t *len)
{
	struct entry *e = lookup(net, key, false);
	if (!e || !e->present)
		return NULL;
	*len = e->len;
	return e->val;
}

void fake_set(struct fake_net *net, const char *key, const void *value, size_t len)
{
	put(net, lookup(net, key, true), value, len, -1);
}

void fake_del(struct fake_net *net, const char *key)
{
	struct entry *e = lookup(net, key, false);
	if (e)
		del(net, e);
}

size_t fake_keys(const struct fake_net *net)
{
	return net->keys;
}

uint64_t fake_requests(const struct fake_net *net)
{
	return net->requests;
}

bool fake_all_in_round(struct fake_net *net, void *round_ptr)
{
	uint32_t round = *(uint32_t *)round_ptr;
	int n = 0;
	for (int i = 0; i < net->n; i++) {
		struct fake_agent *a = &net->nodes[i]->a;
		if (!a->running || a->frozen)
			continue;
		if (!a->in_round || a->round != round)
			return false;
		n++;
	}
	return n > 0;
}

bool fake_all_ended(struct fake_net *net, void *unused)
{
	for (int i = 0; i < net->n; i++)
		if (net->nodes[i]->a.running && !net->nodes[i]->a.frozen)
			return false;
	return true;
}
