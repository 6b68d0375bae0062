/* The agent's watch for hangs (see agent_hang.h). */
#include "agent_hang.h"

#include "agent_int.h"
#include "proc_state.h"
#include "timeutil.h"

#include <errno.h>
#include <inttypes.h>
#include <log.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- judging ---- */

static uint64_t since(uint64_t now, uint64_t then)
{
	return then && now > then ? now - then : 0;
}

static void view_of(struct agent *ag, int i, uint64_t now, struct hang_view *v)
{
	const struct agent_hang_track *t = &ag->hang.t[i];
	const struct ddp_progress *p = &t->page;
	uint64_t from;

	memset(v, 0, sizeof(*v));
	v->node = ag->round.group_rank;
	v->rank = ag->w[i].rank;
	v->pid = t->pid;
	v->page = *p;
	if (p->phase == DDP_PHASE_COLLECTIVE)
		from = p->entered_ns;
	else if (p->phase == DDP_PHASE_COMPUTE)
		from = p->left_ns > p->phase_ns ? p->left_ns : p->phase_ns;
	else
		from = p->phase_ns;
	v->age_ns = since(now, from);
	v->deadline_ns = hang_deadline_get(&ag->hang.dl, (enum ddp_progress_phase)p->phase,
					   (enum ddp_progress_op)p->op);
	for (int k = 0; k < ag->nproc && p->phase == DDP_PHASE_COLLECTIVE; k++) {
		const struct ddp_progress *o = &ag->hang.t[k].page;

		if (k != i && ag->hang.t[k].have && o->round == p->round && o->seq > p->seq)
			v->behind = true;
	}
}

static void read_proc(struct hang_view *v)
{
	struct proc_state ps;
	int rc = proc_state_read(v->pid, &ps);

	if (rc == -ENOENT) {
		v->ps = HANG_PS_GONE;
		return;
	}
	if (rc) {
		v->ps = HANG_PS_UNKNOWN;
		return;
	}
	snprintf(v->wchan, sizeof(v->wchan), "%s", ps.wchan);
	if (ps.stopped)
		v->ps = HANG_PS_STOPPED;
	else if (ps.main_state == 'R')
		v->ps = HANG_PS_RUNNING;
	else if (ps.zombie == ps.threads)
		v->ps = HANG_PS_GONE;
	else
		v->ps = HANG_PS_BLOCKED;
}

static bool seen(struct agent_hang *h, const char *id)
{
	for (int i = 0; i < h->nseen && i < AGENT_HANG_SEEN; i++)
		if (!strcmp(h->seen[i], id))
			return true;
	return false;
}

static void mark_seen(struct agent_hang *h, const char *id)
{
	snprintf(h->seen[h->nseen % AGENT_HANG_SEEN], sizeof(h->seen[0]), "%s", id);
	h->nseen++;
}

static void hang_id(char *buf, size_t len, int round, int rank, uint64_t seq)
{
	snprintf(buf, len, "%d.%d.%" PRIu64, round, rank, seq);
}

/* Prints, records and posts a hang this node named. */
static void publish(struct agent *ag, const struct summary_hang *sh)
{
	char id[48], notice[RDZV_POST_MAX + 1];

	hang_id(id, sizeof(id), sh->round, sh->rank, sh->seq);
	mark_seen(&ag->hang, id);
	log_error("%s", sh->line);
	if (summary_add_hang(&ag->summary, sh))
		log_error("out of memory while recording a hang");
	snprintf(notice, sizeof(notice), "hang1 %d %d %d %d %" PRIu64 " %lld %lld %s %s %s\t%s",
		 sh->round, sh->node, sh->rank, sh->pid, sh->seq, (long long)(sh->late_s * 1000),
		 (long long)(sh->deadline_s * 1000), sh->phase, sh->op, sh->state, sh->line);
	rdzv_post(ag->rdzv, notice); /* one node: no one else to tell */
	agent_status_publish(ag);
}

/* What the local workers inside a collective wait on, appended to line. */
static void append_waiters(struct agent *ag, uint64_t now, int except, char *line, size_t len)
{
	size_t n = strlen(line);

	for (int i = 0; i < ag->nproc && n < len; i++) {
		const struct agent_hang_track *t = &ag->hang.t[i];
		int k;

		if (i == except || !t->have || t->page.phase != DDP_PHASE_COLLECTIVE)
			continue;
		if (t->page.waiting_on >= 0)
			k = snprintf(line + n, len - n,
				     "; rank %d waits on rank %d in %s #%" PRIu64 " for %.2f s",
				     ag->w[i].rank, t->page.waiting_on, hang_op_name(t->page.op),
				     t->page.seq, since(now, t->page.entered_ns) / 1e9);
		else
			k = snprintf(line + n, len - n,
				     "; rank %d waits in %s #%" PRIu64 " for %.2f s", ag->w[i].rank,
				     hang_op_name(t->page.op), t->page.seq,
				     since(now, t->page.entered_ns) / 1e9);
		if (k < 0)
			break;
		n += (size_t)k;
	}
}

/* The op the other local workers are in after `seq`, or NONE. */
static uint32_t next_op(struct agent *ag, uint64_t seq)
{
	for (int i = 0; i < ag->nproc; i++) {
		const struct agent_hang_track *t = &ag->hang.t[i];

		if (t->have && t->page.phase == DDP_PHASE_COLLECTIVE && t->page.seq == seq + 1)
			return t->page.op;
	}
	return DDP_OP_NONE;
}

/* Worker i is the culprit: named everywhere, then cut out. */
static void name_local(struct agent *ag, int i, const struct hang_view *v,
		       const struct hang_judgement *j, uint64_t now)
{
	struct agent_worker *w = &ag->w[i];
	struct summary_hang sh = {
	    .time_ms = wall_ms(),
	    .round = v->page.round,
	    .node = v->node,
	    .rank = v->rank,
	    .pid = v->pid,
	    .seq = v->page.phase == DDP_PHASE_COMPUTE ? v->page.seq + 1 : v->page.seq,
	    .late_s = j->late_ns / 1e9,
	    .deadline_s = v->deadline_ns / 1e9,
	    .named_here = true,
	    .cut = true,
	};

	uint32_t op = v->page.phase == DDP_PHASE_COLLECTIVE ? v->page.op : next_op(ag, v->page.seq);

	if (v->page.phase == DDP_PHASE_COMPUTE && op == DDP_OP_NONE)
		op = v->page.op; /* the others are in none yet: its last op, as the line */
	snprintf(sh.phase, sizeof(sh.phase), "%s", agent_phase_word(v->page.phase));
	snprintf(sh.op, sizeof(sh.op), "%s",
		 v->page.phase == DDP_PHASE_COLLECTIVE || v->page.phase == DDP_PHASE_COMPUTE
		     ? hang_op_name(op)
		     : "none");
	hang_pstate_words(v->ps, v->wchan, sh.state, sizeof(sh.state));
	hang_line(v, j, next_op(ag, v->page.seq), sh.line, sizeof(sh.line));
	append_waiters(ag, now, i, sh.line, sizeof(sh.line));
	publish(ag, &sh);
	log_warn("cutting rank %d (local rank %d, pid %d) out: ending its process", w->rank,
		 w->local_rank, v->pid);
	for (int k = 0; k < ag->nproc; k++)
		ag->hang.t[k].skip_step = true;
	worker_proc_kill_group(&w->proc);
}

/* Worker i waits on rank `on` of another node that said nothing: named for
 * its silent node. */
static void name_remote(struct agent *ag, int i, const struct hang_view *v,
			const struct hang_judgement *j, int on)
{
	int per_node = ag->nproc > 0 ? ag->nproc : 1;
	struct summary_hang sh = {
	    .time_ms = wall_ms(),
	    .round = v->page.round,
	    .node = on / per_node,
	    .rank = on,
	    .pid = 0,
	    .seq = v->page.seq,
	    .late_s = j->late_ns / 1e9,
	    .deadline_s = v->deadline_ns / 1e9,
	    .named_here = true,
	};

	snprintf(sh.phase, sizeof(sh.phase), "%s", agent_phase_word(DDP_PHASE_COLLECTIVE));
	snprintf(sh.op, sizeof(sh.op), "%s", hang_op_name(v->page.op));
	snprintf(sh.state, sizeof(sh.state), "silent (its node is frozen or cut off)");
	snprintf(sh.line, sizeof(sh.line),
		 "hang: node %d rank %d has not answered %s #%" PRIu64
		 ": %.2f s past its deadline of %.2f s; no word from its node (its agent is "
		 "frozen or cut off); rank %d (node %d, pid %d) waits on it",
		 sh.node, on, hang_op_name(v->page.op), v->page.seq, sh.late_s, sh.deadline_s,
		 v->rank, v->node, v->pid);
	(void)i;
	publish(ag, &sh);
}

/* This node's workers wait past their deadline in collective seq: said
 * once per place under this node's name, for other agents asking whether
 * it is alive. */
static void say_waiting(struct agent *ag, const struct hang_view *v)
{
	char name[32], value[64];
	uint64_t key = agent_hang_place(&v->page);

	if (ag->hang.waits_said == key)
		return;
	ag->hang.waits_said = key;
	snprintf(name, sizeof(name), "waits%d", ag->round.group_rank);
	snprintf(value, sizeof(value), "%d %" PRIu64, v->page.round, v->page.seq);
	rdzv_put(ag->rdzv, name, value);
}

static bool all_resizable(const struct agent *ag)
{
	for (int i = 0; i < ag->nproc; i++)
		if (ag->w[i].proc.running && !ag->w[i].proc.resizable)
			return false;
	return true;
}

/* The answer about the node of q_rank: alive (it said its workers wait in
 * this round, near this collective) or silent. */
static void on_waits_got(void *arg, const char *value)
{
	struct agent *ag = arg;
	struct agent_hang *h = &ag->hang;
	const struct hang_view *v = &h->q_view;
	int per_node = ag->nproc > 0 ? ag->nproc : 1, round = -1;
	uint64_t seq = 0;
	char id[48];

	h->asking = false;
	if (ag->state == AGENT_DONE || !h->t)
		return;
	if (value && sscanf(value, "%d %" SCNu64, &round, &seq) == 2 && round == v->page.round &&
	    seq + 1 >= v->page.seq) {
		h->asked_key = agent_hang_place(&v->page) ^ ((uint64_t)h->q_rank << 32);
		return; /* its agent is alive: its own workers wait too */
	}
	hang_id(id, sizeof(id), v->page.round, h->q_rank, v->page.seq);
	if (seen(h, id))
		return;
	name_remote(ag, 0, v, &h->q_j, h->q_rank);
	if (all_resizable(ag)) {
		log_warn("re-forming without node %d now (its workers are cut out; it joins again "
			 "when it thaws)",
			 h->q_rank / per_node);
		rdzv_evict(ag->rdzv, h->q_rank / per_node);
	}
}

/* Asks whether the node of rank `on` is alive (see agent_hang.h). */
static void ask_alive(struct agent *ag, const struct hang_view *v, const struct hang_judgement *j,
		      int on)
{
	struct agent_hang *h = &ag->hang;
	int per_node = ag->nproc > 0 ? ag->nproc : 1;
	char name[32];

	if (h->asking || h->asked_key == (agent_hang_place(&v->page) ^ ((uint64_t)on << 32)))
		return;
	snprintf(name, sizeof(name), "waits%d", on / per_node);
	h->q_view = *v;
	h->q_j = *j;
	h->q_rank = on;
	if (rdzv_get(ag->rdzv, name, on_waits_got, ag) == 0)
		h->asking = true;
	else
		on_waits_got(ag, NULL); /* one node: never here (every rank is local) */
}

static bool rank_is_local(const struct agent *ag, int rank)
{
	for (int i = 0; i < ag->nproc; i++)
		if (ag->w[i].rank == rank)
			return true;
	return false;
}

static void judge_one(struct agent *ag, int i, uint64_t now)
{
	struct agent_hang_track *t = &ag->hang.t[i];
	struct hang_view v;
	struct hang_judgement j;
	char id[48];

	view_of(ag, i, now, &v);
	j = hang_judge(&v);
	log_debug("hang watch: rank %d phase %u op %u seq %llu age %.3f deadline %.3f step %llu",
		  v.rank, v.page.phase, v.page.op, (unsigned long long)v.page.seq, v.age_ns / 1e9,
		  v.deadline_ns / 1e9, (unsigned long long)v.page.step);
	if (j.verdict == HANG_FINE) {
		t->late_since_ns = 0;
		return;
	}
	read_proc(&v);
	j = hang_judge(&v);
	if (agent_hang_place(&v.page) == t->late_key && j.verdict == HANG_CULPRIT)
		return; /* named already */
	t->late_key = agent_hang_place(&v.page);
	if (j.verdict == HANG_CULPRIT) {
		name_local(ag, i, &v, &j, now);
		return;
	}
	if (!t->late_since_ns)
		t->late_since_ns = now;
	say_waiting(ag, &v);
	if (j.waits_on < 0 || rank_is_local(ag, j.waits_on) ||
	    now - t->late_since_ns < (uint64_t)AGENT_HANG_SILENT_MS * 1000000u)
		return;
	hang_id(id, sizeof(id), v.page.round, j.waits_on, v.page.seq);
	if (seen(&ag->hang, id))
		return;
	/* Someone of this node named nothing about it, and neither did its
	 * node within the grace: a node frozen whole. */
	hang_id(id, sizeof(id), v.page.round, j.waits_on, v.page.seq - 1);
	if (seen(&ag->hang, id))
		return; /* named as "has not entered" it, from its own node */
	ask_alive(ag, &v, &j, j.waits_on);
}

/* Says once when the deadlines are learned (and what they are). */
static void say_learned(struct agent *ag)
{
	uint64_t out = hang_deadline_get(&ag->hang.dl, DDP_PHASE_COMPUTE, DDP_OP_NONE);
	uint64_t in = hang_deadline_get(&ag->hang.dl, DDP_PHASE_COLLECTIVE, DDP_OP_NONE);

	if (ag->hang.said || !out || !in)
		return;
	ag->hang.said = true;
	log_info("hang deadlines learned from the job: %.2f s outside a collective, %.2f s "
		 "inside one (they follow the job; --hang_timeout fixes them)",
		 out / 1e9, in / 1e9);
}

static void on_tick(uv_timer_t *timer)
{
	struct agent *ag = timer->data;
	struct agent_hang *h = &ag->hang;
	uint64_t now = time_now_ns();

	if (h->last_tick_ns && now - h->last_tick_ns > 1000000000ull) {
		/* This agent was stopped (or starved): what its workers did
		 * meanwhile is no sample, and their waits are its own. */
		log_info("the hang watch ran %.1f s late (this node was stopped?): judging "
			 "nobody for %d ms",
			 (now - h->last_tick_ns) / 1e9, 2 * AGENT_HANG_SILENT_MS);
		h->quiet_until = now + 2ull * AGENT_HANG_SILENT_MS * 1000000u;
		h->thawed_ns = now;
		h->stopped_from = h->last_tick_ns;
		for (int i = 0; i < ag->nproc; i++) {
			h->t[i].in_seq = 0;
			h->t[i].late_since_ns = 0;
			h->t[i].skip_step = true;
		}
	}
	h->last_tick_ns = now;
	if (now < h->quiet_until)
		return;
	for (int i = 0; i < ag->nproc; i++) {
		struct agent_worker *w = &ag->w[i];
		struct agent_hang_track *t = &ag->hang.t[i];
		struct ddp_progress p;
		int rc;

		if (!w->proc.running || w->state != AGENT_W_RUNNING || w->proc.pid <= 0)
			continue;
		rc = worker_proc_progress(&w->proc, &p);
		if (rc == -ENOENT)
			t->have = false;
		if (rc == 0) {
			t->pid = w->proc.pid;
			agent_hang_learn(&ag->hang, t, &p);
		}
		if (t->have)
			judge_one(ag, i, now);
	}
	say_learned(ag);
}

int agent_hang_start(struct agent *ag)
{
	struct agent_hang *h = &ag->hang;
	struct hang_deadline_cfg cfg;

	hang_deadline_cfg_defaults(&cfg);
	if (ag->o->hang_timeout == OPTS_HANG_OFF)
		cfg.off = true;
	else if (ag->o->hang_timeout > 0)
		cfg.fixed_ns = (uint64_t)(ag->o->hang_timeout * 1e9);
	hang_deadline_init(&h->dl, &cfg);
	h->t = calloc((size_t)ag->nproc, sizeof(*h->t));
	if (!h->t) {
		log_warn("out of memory: hangs will not be named");
		return -ENOMEM;
	}
	if (cfg.off)
		return 0;
	if (cfg.fixed_ns) {
		log_info("hang deadline: %.2f s outside or inside a collective (--hang_timeout)",
			 cfg.fixed_ns / 1e9);
		h->said = true;
	}
	uv_timer_init(ag->loop, &h->timer);
	h->timer.data = ag;
	h->on = true;
	uv_timer_start(&h->timer, on_tick, AGENT_HANG_TICK_MS, AGENT_HANG_TICK_MS);
	/* The watch never keeps the agent's loop alive. */
	uv_unref((uv_handle_t *)&h->timer);
	return 0;
}

void agent_hang_stop(struct agent *ag)
{
	if (ag->hang.on)
		uv_close((uv_handle_t *)&ag->hang.timer, NULL);
	ag->hang.on = false;
	free(ag->hang.t);
	ag->hang.t = NULL;
}

void agent_hang_reset(struct agent *ag, int i)
{
	if (ag->hang.t)
		memset(&ag->hang.t[i], 0, sizeof(ag->hang.t[i]));
}

bool agent_hang_thawed(struct agent *ag)
{
	struct agent_hang *h = &ag->hang;
	uint64_t now = time_now_ns();
	bool thawed;

	/* The watch's tick may not have run yet since the thaw: a late tick is
	 * seen here too. */
	if (h->on && h->last_tick_ns && now - h->last_tick_ns > 1000000000ull) {
		h->thawed_ns = now;
		h->stopped_from = h->last_tick_ns;
	}
	thawed = h->thawed_ns && now - h->thawed_ns < (uint64_t)AGENT_HANG_THAW_MS * 1000000u;
	h->thawed_ns = 0;
	return thawed;
}

/* The words after the notice's seven numbers: "PHASE OP STATE..." up to
 * the tab (a notice of an older agent has none: left empty). */
static void notice_words(const char *text, const char *tab, struct summary_hang *sh)
{
	const char *p = text + 6;
	int len;

	for (int k = 0; k < 7 && p < tab; k++) { /* past the numbers */
		p = strchr(p, ' ');
		if (!p || p > tab)
			return;
		p++;
	}
	if (sscanf(p, "%15[^ \t] %15[^ \t] ", sh->phase, sh->op) != 2)
		return;
	for (int k = 0; k < 2 && p; k++) {
		p = strchr(p, ' ');
		p = p && p < tab ? p + 1 : NULL;
	}
	len = p ? (int)(tab - p) : 0;
	snprintf(sh->state, sizeof(sh->state), "%.*s", len, p ? p : "");
}

void agent_hang_notice(struct agent *ag, const char *text)
{
	struct summary_hang sh = {.time_ms = wall_ms()};
	long long late_ms, dl_ms;
	const char *tab = strchr(text, '\t');
	char id[48];

	if (strncmp(text, "hang1 ", 6) || !tab ||
	    sscanf(text + 6, "%d %d %d %d %" SCNu64 " %lld %lld", &sh.round, &sh.node, &sh.rank,
		   &sh.pid, &sh.seq, &late_ms, &dl_ms) != 7)
		return; /* another kind of notice */
	hang_id(id, sizeof(id), sh.round, sh.rank, sh.seq);
	if (seen(&ag->hang, id))
		return;
	mark_seen(&ag->hang, id);
	sh.late_s = late_ms / 1000.0;
	sh.deadline_s = dl_ms / 1000.0;
	notice_words(text, tab, &sh);
	snprintf(sh.line, sizeof(sh.line), "%s", tab + 1);
	log_error("%s", sh.line);
	if (summary_add_hang(&ag->summary, &sh))
		log_error("out of memory while recording a hang");
	agent_status_publish(ag);
	for (int k = 0; k < ag->nproc && ag->hang.t; k++)
		ag->hang.t[k].skip_step = true;
}
