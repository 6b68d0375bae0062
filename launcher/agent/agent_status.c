/*
 * agent_status.c - this node's status record in the rendezvous store, for
 * `ddplaunch status` (launcher/status/): a small JSON object, written under
 * RDZV_STATUS_KEY_FMT (bound to the node's session, so it goes with a dead
 * node) every AGENT_STATUS_MS and at each event that changes it (a round
 * joined, a failure, a membership change). At most RDZV_PUBLISH_MAX bytes:
 * the first AGENT_STATUS_RANKS local ranks are listed, the three last
 * re-formations in place. One node (no rendezvous store) publishes nothing.
 *
 * The record (version 1; docs/ddplaunch.1, STATUS):
 *   {"v":1, "addr", "state", "round", "reason", "subject", "node_rank",
 *    "nodes", "world", "rank_base", "nproc", "restarts", "group_starts",
 *    "reformations_in_place", "replaced", "failures", "lost_s", "time",
 *    "ranks":[{"local","rank","pid","step","steps_per_s","step_s","wait_s",
 *              "phase","age_s"}...],
 *    "reformations":[{"time","round","nodes","why","waited_s"}...],
 *    "rounds":[{"time","round","nodes","reason","subject","in_place"}...],
 *    "hangs_total",
 *    "hangs":[{"time","round","node","rank","pid","phase","op","seq","late_s",
 *              "deadline_s","state","cut","waits"}...]}
 * (the last three rounds joined, in place or by a new group: a restart; the
 * last AGENT_STATUS_HANGS hangs this node printed, its own or heard; "waits":
 * who of the waiters this node heard waits on whom, "R>Q" by rank, Q "?"
 * where its transport does not know, at most AGENT_STATUS_WAITS of them)
 */
#include "agent_int.h"
#include "rdzv.h"
#include "worker_proc.h"

#include <errno.h>
#include <jansson.h>
#include <log.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <timeutil.h>

#define AGENT_STATUS_RANKS   16
#define AGENT_STATUS_REFORMS 3
#define AGENT_STATUS_HANGS   3
#define AGENT_STATUS_WAITS   32

static const char *const state_words[] = {
    [AGENT_JOINING] = "joining",     [AGENT_RUNNING] = "running",   [AGENT_REPLACING] = "replacing",
    [AGENT_REFORMING] = "reforming", [AGENT_STOPPING] = "stopping", [AGENT_AWAITING] = "awaiting",
    [AGENT_DONE] = "done",
};

const char *agent_state_word(enum agent_state s)
{
	return (unsigned)s < sizeof(state_words) / sizeof(state_words[0]) ? state_words[s] : "?";
}

static json_t *status_rank(struct agent *ag, int i, uint64_t now)
{
	struct agent_worker *w = &ag->w[i];
	const struct agent_rank_stats *rs = &ag->stats.ranks[i];
	struct ddp_progress p;
	json_t *o = json_pack("{s:i, s:i, s:i}", "local", i, "rank", w->rank, "pid",
			      w->proc.running ? w->proc.pid : 0);

	if (!o || worker_proc_progress(&w->proc, &p))
		return o;
	json_object_set_new(o, "phase", json_string(agent_phase_word(p.phase)));
	if (p.written_ns && now > p.written_ns)
		json_object_set_new(o, "age_s", json_real((now - p.written_ns) / 1e9));
	if (!p.step)
		return o; /* a program that does not report steps (or none yet) */
	if (rs->steps_per_s >= 0 && rs->pid == p.pid) /* agent_metrics' window (2 s) */
		json_object_set_new(o, "steps_per_s", json_real(rs->steps_per_s));
	json_object_set_new(o, "step", json_integer((json_int_t)p.step));
	json_object_set_new(o, "step_s", json_real(p.step_ns / 1e9));
	json_object_set_new(o, "wait_s", json_real(p.wait_ns / 1e9));
	return o;
}

static json_t *status_reforms(const struct agent *ag)
{
	json_t *a = json_array();
	size_t n = ag->summary.nreforms;

	for (size_t i = n > AGENT_STATUS_REFORMS ? n - AGENT_STATUS_REFORMS : 0; a && i < n; i++) {
		const struct summary_reform *r = &ag->summary.reforms[i];

		json_array_append_new(a, json_pack("{s:I, s:i, s:i, s:s, s:f}", "time",
						   (json_int_t)(r->time_ms / 1000), "round",
						   r->round, "nodes", r->nodes_after, "why", r->why,
						   "waited_s", r->waited_s));
	}
	return a;
}

/* The last rounds this node joined, oldest first. */
static json_t *status_rounds(const struct agent *ag)
{
	json_t *a = json_array();
	unsigned n = ag->stats.nnotes;

	for (unsigned i = n > AGENT_ROUND_NOTES ? n - AGENT_ROUND_NOTES : 0; a && i < n; i++) {
		const struct agent_round_note *r = &ag->stats.notes[i % AGENT_ROUND_NOTES];

		json_array_append_new(a, json_pack("{s:I, s:i, s:i, s:s, s:s, s:b}", "time",
						   (json_int_t)r->time, "round", r->round, "nodes",
						   r->nodes, "reason", r->reason, "subject",
						   r->subject, "in_place", r->in_place));
	}
	return a;
}

/* The last hangs this node printed, oldest first. */
static json_t *status_hangs(const struct agent *ag, size_t keep)
{
	json_t *a = json_array();
	size_t n = ag->summary.nhangs;

	for (size_t i = n > keep ? n - keep : 0; a && i < n; i++) {
		const struct summary_hang *h = &ag->summary.hangs[i];
		char waits[AGENT_STATUS_WAITS * 24];

		summary_hang_waits(h, AGENT_STATUS_WAITS, waits, sizeof(waits));
		json_array_append_new(
		    a,
		    json_pack("{s:I, s:i, s:i, s:i, s:i, s:s, s:s, s:I, s:f, s:f, s:s, s:b, s:s}",
			      "time", (json_int_t)(h->time_ms / 1000), "round", h->round, "node",
			      h->node, "rank", h->rank, "pid", h->pid, "phase", h->phase, "op",
			      h->op, "seq", (json_int_t)h->seq, "late_s", h->late_s, "deadline_s",
			      h->deadline_s, "state", h->state, "cut", h->cut, "waits", waits));
	}
	return a;
}

/* The record, or NULL (out of memory). */
static char *status_record(struct agent *ag, size_t *len)
{
	uint64_t now = time_now_ns();
	int nlisted = ag->nproc < AGENT_STATUS_RANKS ? ag->nproc : AGENT_STATUS_RANKS;
	json_t *ranks = json_array();
	json_t *o = json_pack(
	    "{s:i, s:s, s:s, s:i, s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:I, "
	    "s:f, s:I}",
	    "v", 1, "addr", ag->round.local_addr ? ag->round.local_addr : "", "state",
	    agent_state_word(ag->state), "round", ag->round.round, "reason",
	    ag->round.reason ? ag->round.reason : "", "subject", ag->subject, "node_rank",
	    ag->round.group_rank, "nodes", ag->round.group_world_size, "world",
	    ag->round.world_size, "rank_base", ag->round.rank_base, "nproc", ag->nproc, "restarts",
	    ag->round.restart_count, "group_starts", ag->attempt, "reformations_in_place",
	    ag->nreform, "replaced", ag->nreplaced, "failures",
	    (json_int_t)(ag->stats.failures_exit + ag->stats.failures_signal), "lost_s",
	    agent_metrics_lost_s(ag), "time", (json_int_t)time(NULL));
	char *text = NULL;

	if (!o || !ranks)
		goto out;
	for (int i = 0; i < nlisted && ag->stats.ranks; i++)
		json_array_append_new(ranks, status_rank(ag, i, now));
	json_object_set(o, "ranks", ranks);
	json_object_set_new(o, "reformations", status_reforms(ag));
	json_object_set_new(o, "rounds", status_rounds(ag));
	json_object_set_new(o, "hangs_total", json_integer((json_int_t)ag->summary.nhangs));
	json_object_set_new(o, "hangs", status_hangs(ag, AGENT_STATUS_HANGS));
	text = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
	/* Within the bound: fewer hangs (their lines are long), fewer ranks,
	 * then no re-formations. */
	for (size_t keep = AGENT_STATUS_HANGS; text && strlen(text) > RDZV_PUBLISH_MAX && keep;) {
		free(text);
		json_object_set_new(o, "hangs", status_hangs(ag, --keep));
		text = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
	}
	while (text && strlen(text) > RDZV_PUBLISH_MAX && json_array_size(ranks) > 1) {
		free(text);
		json_array_remove(ranks, json_array_size(ranks) - 1);
		text = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
	}
	if (text && strlen(text) > RDZV_PUBLISH_MAX) {
		free(text);
		json_object_set_new(o, "reformations", json_array());
		text = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
	}
out:
	json_decref(ranks);
	json_decref(o);
	*len = text ? strlen(text) : 0;
	return text;
}

void agent_status_publish(struct agent *ag)
{
	size_t len;
	char *rec;
	int rc;

	if (!ag->rdzv || ag->state == AGENT_DONE || ag->stats.no_publish)
		return;
	rec = status_record(ag, &len);
	if (!rec)
		return;
	rc = rdzv_publish(ag->rdzv, rec, len);
	ag->stats.no_publish = rc == -ENOTSUP; /* one node: never again */
	if (rc && rc != -ENOTCONN && rc != -ENOTSUP)
		log_debug("cannot publish this node's status: %s", strerror(-rc));
	free(rec);
}
