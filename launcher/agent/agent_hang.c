/* The agent's watch for hangs (see agent_hang.h). */
#include "agent_hang.h"

#include "opts.h"
#include "rdzv.h"
#include "summary.h"
#include "timeutil.h"
#include "worker_proc.h"

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

struct agent_hang_worker agent_hang_worker_of(const struct agent_hang *h, int i)
{
	struct agent_hang_worker w = {0};

	h->host.worker(h->host.arg, i, &w);
	return w;
}

static uint64_t since(uint64_t now, uint64_t then)
{
	return then && now > then ? now - then : 0;
}

static void view_of(struct agent_hang *h, int i, uint64_t now, struct hang_view *v)
{
	const struct agent_hang_track *t = &h->t[i];
	const struct ddp_progress *p = &t->page;
	uint64_t from;

	memset(v, 0, sizeof(*v));
	v->node = h->host.round->group_rank;
	v->rank = agent_hang_worker_of(h, i).rank;
	v->pid = t->pid;
	v->page = *p;
	if (p->phase == DDP_PHASE_COLLECTIVE)
		from = p->entered_ns;
	else if (p->phase == DDP_PHASE_COMPUTE)
		from = p->left_ns > p->phase_ns ? p->left_ns : p->phase_ns;
	else
		from = p->phase_ns;
	v->age_ns = since(now, from);
	v->deadline_ns = hang_deadline_get(&h->dl, (enum ddp_progress_phase)p->phase,
					   (enum ddp_progress_op)p->op);
	for (int k = 0; k < h->host.nproc && p->phase == DDP_PHASE_COLLECTIVE; k++) {
		const struct ddp_progress *o = &h->t[k].page;

		if (k != i && h->t[k].have && o->round == p->round && o->seq > p->seq)
			v->behind = true;
	}
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
static void publish(struct agent_hang *h, const struct summary_hang *sh)
{
	char id[48], notice[RDZV_POST_MAX + 1];

	hang_id(id, sizeof(id), sh->round, sh->rank, sh->seq);
	mark_seen(h, id);
	log_error("%s", sh->line);
	if (summary_add_hang(h->host.summary, sh))
		log_error("out of memory while recording a hang");
	snprintf(notice, sizeof(notice), "hang1 %d %d %d %d %" PRIu64 " %lld %lld %s %s %s\t%s",
		 sh->round, sh->node, sh->rank, sh->pid, sh->seq, (long long)(sh->late_s * 1000),
		 (long long)(sh->deadline_s * 1000), sh->phase, sh->op, sh->state, sh->line);
	rdzv_post(h->host.rdzv, notice); /* one node: no one else to tell */
	agent_hang_waiters_tell(h, sh);
	h->host.recorded(h->host.arg);
}

/* The op the other local workers are in after `seq`, or NONE. */
static uint32_t next_op(struct agent_hang *h, uint64_t seq)
{
	for (int i = 0; i < h->host.nproc; i++) {
		const struct agent_hang_track *t = &h->t[i];

		if (t->have && t->page.phase == DDP_PHASE_COLLECTIVE && t->page.seq == seq + 1)
			return t->page.op;
	}
	return DDP_OP_NONE;
}

/* Worker i is the culprit: named everywhere, then cut out. */
static void name_local(struct agent_hang *h, int i, const struct hang_view *v,
		       const struct hang_judgement *j, uint64_t now)
{
	struct agent_hang_worker w = agent_hang_worker_of(h, i);
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

	uint32_t op = v->page.phase == DDP_PHASE_COLLECTIVE ? v->page.op : next_op(h, v->page.seq);

	if (v->page.phase == DDP_PHASE_COMPUTE && op == DDP_OP_NONE)
		op = v->page.op; /* the others are in none yet: its last op, as the line */
	snprintf(sh.phase, sizeof(sh.phase), "%s", h->host.phase_word(v->page.phase));
	snprintf(sh.op, sizeof(sh.op), "%s",
		 v->page.phase == DDP_PHASE_COLLECTIVE || v->page.phase == DDP_PHASE_COMPUTE
		     ? hang_op_name(op)
		     : "none");
	hang_pstate_words(v->ps, v->wchan, sh.state, sizeof(sh.state));
	hang_line(v, j, next_op(h, v->page.seq), sh.line, sizeof(sh.line));
	agent_hang_waiters_append(h, now, i, sh.line, sizeof(sh.line));
	publish(h, &sh);
	log_warn("cutting rank %d (local rank %d, pid %d) out: ending its process", w.rank,
		 w.local_rank, v->pid);
	for (int k = 0; k < h->host.nproc; k++)
		h->t[k].skip_step = true;
	if (h->host.finished && agent_hang_rare_finished(h, i, v))
		h->host.finished(h->host.arg, i);
	worker_proc_kill_group(w.proc);
}

/* Worker i waits on rank `on` of another node that said nothing: named for
 * its silent node. */
static void name_remote(struct agent_hang *h, int i, const struct hang_view *v,
			const struct hang_judgement *j, int on)
{
	struct summary_hang sh = {
	    .time_ms = wall_ms(),
	    .round = v->page.round,
	    .node = rdzv_node_of(h->host.rdzv, on),
	    .rank = on,
	    .pid = 0,
	    .seq = v->page.seq,
	    .late_s = j->late_ns / 1e9,
	    .deadline_s = v->deadline_ns / 1e9,
	    .named_here = true,
	};

	snprintf(sh.phase, sizeof(sh.phase), "%s", h->host.phase_word(DDP_PHASE_COLLECTIVE));
	snprintf(sh.op, sizeof(sh.op), "%s", hang_op_name(v->page.op));
	snprintf(sh.state, sizeof(sh.state), "silent (its node is frozen or cut off)");
	snprintf(sh.line, sizeof(sh.line),
		 "hang: node %d rank %d has not answered %s #%" PRIu64
		 ": %.2f s past its deadline of %.2f s; no word from its node (its agent is "
		 "frozen or cut off); rank %d (node %d, pid %d) waits on it",
		 sh.node, on, hang_op_name(v->page.op), v->page.seq, sh.late_s, sh.deadline_s,
		 v->rank, v->node, v->pid);
	(void)i;
	publish(h, &sh);
}

/* This node's workers wait past their deadline in collective seq: said
 * once per place under this node's name, for other agents asking whether
 * it is alive. */
static void say_waiting(struct agent_hang *h, const struct hang_view *v)
{
	char name[32], value[64];
	uint64_t key = agent_hang_place(&v->page);

	if (h->waits_said == key)
		return;
	h->waits_said = key;
	snprintf(name, sizeof(name), "waits%d", h->host.round->group_rank);
	snprintf(value, sizeof(value), "%d %" PRIu64, v->page.round, v->page.seq);
	rdzv_put(h->host.rdzv, name, value);
}

static bool all_resizable(const struct agent_hang *h)
{
	for (int i = 0; i < h->host.nproc; i++) {
		const struct worker_proc *p = agent_hang_worker_of(h, i).proc;

		if (p->running && !p->resizable)
			return false;
	}
	return true;
}

/* The answer about the node of q_rank: alive (it said its workers wait in
 * this round, near this collective) or silent. */
static void on_waits_got(void *arg, const char *value)
{
	struct agent_hang *h = arg;
	const struct hang_view *v = &h->q_view;
	int node = rdzv_node_of(h->host.rdzv, h->q_rank), round = -1;
	uint64_t seq = 0;
	char id[48];

	h->asking = false;
	if (h->host.done(h->host.arg) || !h->t)
		return;
	if (value && sscanf(value, "%d %" SCNu64, &round, &seq) == 2 && round == v->page.round &&
	    seq + 1 >= v->page.seq) {
		h->asked_key = agent_hang_place(&v->page) ^ ((uint64_t)h->q_rank << 32);
		return; /* its agent is alive: its own workers wait too */
	}
	hang_id(id, sizeof(id), v->page.round, h->q_rank, v->page.seq);
	if (seen(h, id))
		return;
	name_remote(h, 0, v, &h->q_j, h->q_rank);
	if (all_resizable(h)) {
		log_warn("re-forming without node %d now (its workers are cut out; it joins again "
			 "when it thaws)",
			 node);
		rdzv_evict(h->host.rdzv, node);
	}
}

/* Asks whether the node of rank `on` is alive (see agent_hang.h). */
static void ask_alive(struct agent_hang *h, const struct hang_view *v,
		      const struct hang_judgement *j, int on)
{
	char name[32];

	if (h->asking || h->asked_key == (agent_hang_place(&v->page) ^ ((uint64_t)on << 32)))
		return;
	snprintf(name, sizeof(name), "waits%d", rdzv_node_of(h->host.rdzv, on));
	h->q_view = *v;
	h->q_j = *j;
	h->q_rank = on;
	if (rdzv_get(h->host.rdzv, name, on_waits_got, h) == 0)
		h->asking = true;
	else
		on_waits_got(h, NULL); /* one node: never here (every rank is local) */
}

static bool rank_is_local(const struct agent_hang *h, int rank)
{
	for (int i = 0; i < h->host.nproc; i++)
		if (agent_hang_worker_of(h, i).rank == rank)
			return true;
	return false;
}

static void judge_one(struct agent_hang *h, int i, uint64_t now)
{
	struct agent_hang_track *t = &h->t[i];
	struct hang_view v;
	struct hang_judgement j;
	char id[48];

	view_of(h, i, now, &v);
	j = hang_judge(&v);
	log_debug("hang watch: rank %d phase %u op %u seq %llu age %.3f deadline %.3f step %llu",
		  v.rank, v.page.phase, v.page.op, (unsigned long long)v.page.seq, v.age_ns / 1e9,
		  v.deadline_ns / 1e9, (unsigned long long)v.page.step);
	if (j.verdict == HANG_FINE && !agent_hang_rare(h, i, &v, now)) {
		t->late_since_ns = 0;
		return;
	}
	agent_hang_read_proc(&v);
	j = hang_judge(&v);
	if (agent_hang_place(&v.page) == t->late_key && j.verdict == HANG_CULPRIT)
		return; /* named already */
	t->late_key = agent_hang_place(&v.page);
	if (j.verdict == HANG_CULPRIT) {
		name_local(h, i, &v, &j, now);
		return;
	}
	if (!t->late_since_ns)
		t->late_since_ns = now;
	say_waiting(h, &v);
	if (j.waits_on < 0 || rank_is_local(h, j.waits_on) ||
	    now - t->late_since_ns < (uint64_t)AGENT_HANG_SILENT_MS * 1000000u)
		return;
	hang_id(id, sizeof(id), v.page.round, j.waits_on, v.page.seq);
	if (seen(h, id))
		return;
	/* Someone of this node named nothing about it, and neither did its
	 * node within the grace: a node frozen whole. */
	hang_id(id, sizeof(id), v.page.round, j.waits_on, v.page.seq - 1);
	if (seen(h, id))
		return; /* named as "has not entered" it, from its own node */
	ask_alive(h, &v, &j, j.waits_on);
}

/* Says once when the deadlines are learned (and what they are). */
static void say_learned(struct agent_hang *h)
{
	uint64_t out = hang_deadline_get(&h->dl, DDP_PHASE_COMPUTE, DDP_OP_NONE);
	uint64_t in = hang_deadline_get(&h->dl, DDP_PHASE_COLLECTIVE, DDP_OP_NONE);

	if (h->said || !out || !in)
		return;
	h->said = true;
	log_info("hang deadlines learned from the job: %.2f s outside a collective, %.2f s "
		 "inside one (they follow the job; --hang_timeout fixes them)",
		 out / 1e9, in / 1e9);
}

static void on_tick(uv_timer_t *timer)
{
	struct agent_hang *h = timer->data;
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
		for (int i = 0; i < h->host.nproc; i++) {
			h->t[i].in_seq = 0;
			h->t[i].late_since_ns = 0;
			h->t[i].skip_step = true;
		}
	}
	h->last_tick_ns = now;
	if (now < h->quiet_until)
		return;
	for (int i = 0; i < h->host.nproc; i++) {
		struct agent_hang_worker w = agent_hang_worker_of(h, i);
		struct agent_hang_track *t = &h->t[i];
		struct ddp_progress p;
		int rc;

		if (!w.proc->running || !w.started || w.proc->pid <= 0)
			continue;
		rc = worker_proc_progress(w.proc, &p);
		if (rc == -ENOENT)
			t->have = false;
		if (rc == 0) {
			t->pid = w.proc->pid;
			agent_hang_learn(h, t, &p);
		}
		if (t->have)
			judge_one(h, i, now);
	}
	say_learned(h);
}

int agent_hang_start(struct agent_hang *h, const struct agent_hang_host *host)
{
	struct hang_deadline_cfg cfg;

	h->host = *host;
	hang_deadline_cfg_defaults(&cfg);
	if (h->host.hang_timeout == OPTS_HANG_OFF)
		cfg.off = true;
	else if (h->host.hang_timeout > 0)
		cfg.fixed_ns = (uint64_t)(h->host.hang_timeout * 1e9);
	hang_deadline_init(&h->dl, &cfg);
	h->t = calloc((size_t)h->host.nproc, sizeof(*h->t));
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
	uv_timer_init(h->host.loop, &h->timer);
	h->timer.data = h;
	h->on = true;
	uv_timer_start(&h->timer, on_tick, AGENT_HANG_TICK_MS, AGENT_HANG_TICK_MS);
	/* The watch never keeps the agent's loop alive. */
	uv_unref((uv_handle_t *)&h->timer);
	return 0;
}

void agent_hang_stop(struct agent_hang *h)
{
	if (h->on)
		uv_close((uv_handle_t *)&h->timer, NULL);
	h->on = false;
	free(h->t);
	h->t = NULL;
}

void agent_hang_reset(struct agent_hang *h, int i)
{
	if (h->t)
		memset(&h->t[i], 0, sizeof(h->t[i]));
}

bool agent_hang_thawed(struct agent_hang *h)
{
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

void agent_hang_notice(struct agent_hang *h, const char *text)
{
	struct summary_hang sh = {.time_ms = wall_ms()};
	long long late_ms, dl_ms;
	const char *tab = strchr(text, '\t');
	char id[48];

	if (agent_hang_waiters_heard(h, text))
		return;
	if (strncmp(text, "hang1 ", 6) || !tab ||
	    sscanf(text + 6, "%d %d %d %d %" SCNu64 " %lld %lld", &sh.round, &sh.node, &sh.rank,
		   &sh.pid, &sh.seq, &late_ms, &dl_ms) != 7)
		return; /* another kind of notice */
	hang_id(id, sizeof(id), sh.round, sh.rank, sh.seq);
	if (seen(h, id))
		return;
	mark_seen(h, id);
	sh.late_s = late_ms / 1000.0;
	sh.deadline_s = dl_ms / 1000.0;
	notice_words(text, tab, &sh);
	snprintf(sh.line, sizeof(sh.line), "%s", tab + 1);
	log_error("%s", sh.line);
	if (summary_add_hang(h->host.summary, &sh))
		log_error("out of memory while recording a hang");
	h->host.recorded(h->host.arg);
	for (int k = 0; k < h->host.nproc && h->t; k++)
		h->t[k].skip_step = true;
	agent_hang_waiters_tell(h, &sh);
}
