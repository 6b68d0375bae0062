/*
 * agent_metrics.c - what one agent shows on /metrics (--metrics_port): the
 * job as this node sees it, what it counted (rounds and their causes,
 * re-formations in place, restarts, replacements, failures, the time they
 * cost) and per local rank what its progress page says (step, step time,
 * the last collective's wait). The server is metrics_http's, on the agent's
 * loop: the render reads struct agent between two of its events.
 *
 * Step times: the agent reads each page every AGENT_SAMPLE_MS. The writer
 * counts its own steps and sums their durations (steps_total, step_ns_sum:
 * per process, from 0); the histogram takes the difference since the last
 * read, so its _sum and _count are exact, and the steps of one read fall in
 * the bucket of their mean. Nothing read from the page is looped on: a
 * page is the worker's to write, and a bogus value must not stall the
 * agent's loop. A new writer (pid) is a new baseline.
 */
#include "agent_int.h"
#include "metrics_http.h"
#include "rdzv.h"
#include "store_metrics.h"
#include "worker_proc.h"

#include <errno.h>
#include <log.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <timeutil.h>

#define AGENT_SAMPLE_MS 200

static const double step_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
				     0.25,  0.5,    1,	   2.5,	 5,	10,   30};

static const char *const phase_names[DDP_PHASE_COUNT] = {
    [DDP_PHASE_NONE] = "none",
    [DDP_PHASE_STARTUP] = "startup",
    [DDP_PHASE_REFORM] = "reform",
    [DDP_PHASE_HANDOVER] = "handover",
    [DDP_PHASE_COMPUTE] = "compute",
    [DDP_PHASE_COLLECTIVE] = "collective",
    [DDP_PHASE_CHECKPOINT] = "checkpoint",
    [DDP_PHASE_EVAL] = "eval",
    [DDP_PHASE_FINAL] = "final",
    [DDP_PHASE_SHUTDOWN] = "shutdown",
};

const char *agent_phase_word(uint32_t phase)
{
	return phase < DDP_PHASE_COUNT ? phase_names[phase] : "?";
}

static int reason_index(const char *reason)
{
	for (int i = 0; reason && i < RDZV_REASONS; i++)
		if (!strcmp(reason, rdzv_reasons[i]))
			return i;
	return 0;
}

void agent_metrics_round(struct agent *ag, const struct rdzv_round *r, bool in_place)
{
	int i = reason_index(r->reason);
	struct agent_round_note *n = &ag->stats.notes[ag->stats.nnotes++ % AGENT_ROUND_NOTES];

	ag->stats.rounds[i]++;
	if (in_place)
		ag->stats.reforms[i]++;
	snprintf(ag->subject, sizeof(ag->subject), "%s", r->subject ? r->subject : "");
	*n = (struct agent_round_note){.time = (int64_t)time(NULL),
				       .round = r->round,
				       .nodes = r->group_world_size,
				       .reason = rdzv_reasons[i],
				       .in_place = in_place};
	snprintf(n->subject, sizeof(n->subject), "%s", ag->subject);
}

void agent_metrics_lost(struct agent *ag)
{
	if (!ag->stats.lost_since_ns)
		ag->stats.lost_since_ns = (int64_t)time_now_ns();
	agent_status_publish(ag);
}

double agent_metrics_lost_s(const struct agent *ag)
{
	double lost = ag->stats.lost_s;

	if (ag->stats.lost_since_ns)
		lost += ((int64_t)time_now_ns() - ag->stats.lost_since_ns) / 1e9;
	return lost;
}

void agent_metrics_resumed(struct agent *ag)
{
	if (ag->stats.lost_since_ns) {
		ag->stats.lost_s += ((int64_t)time_now_ns() - ag->stats.lost_since_ns) / 1e9;
		ag->stats.lost_since_ns = 0;
	}
	agent_status_publish(ag);
}

/* One rank's page read: the steps its writer counted since the last read,
 * into the histogram. */
static void sample_rank(struct agent_rank_stats *rs, const struct ddp_progress *p, uint64_t now)
{
	if (p->pid != rs->pid) { /* a new process: its counts start at 0 */
		*rs = (struct agent_rank_stats){
		    .pid = p->pid, .rate_ns = now, .steps_per_s = -1, .times = rs->times};
	} else if (p->steps_total < rs->steps_total) { /* not a counter: a new baseline */
		rs->steps_total = rs->rate_steps = p->steps_total;
		rs->step_ns_sum = p->step_ns_sum;
		rs->rate_ns = now;
		rs->steps_per_s = -1;
		return;
	}
	metrics_hist_observe_n(&rs->times, (double)(p->step_ns_sum - rs->step_ns_sum) / 1e9,
			       p->steps_total - rs->steps_total);
	rs->steps_total = p->steps_total;
	rs->step_ns_sum = p->step_ns_sum;
}

/* The step rate over the last window, for the status record. */
static void rate_rank(struct agent_rank_stats *rs, uint64_t now)
{
	if (rs->pid && rs->steps_total && now > rs->rate_ns && rs->steps_total >= rs->rate_steps)
		rs->steps_per_s =
		    (double)(rs->steps_total - rs->rate_steps) * 1e9 / (double)(now - rs->rate_ns);
	rs->rate_steps = rs->steps_total;
	rs->rate_ns = now;
}

/* Every page, into the histograms; every AGENT_STATUS_EVERY reads, the
 * rates and the status record. */
#define AGENT_STATUS_EVERY 10
static void on_sample(uv_timer_t *t)
{
	struct agent *ag = t->data;
	uint64_t now = time_now_ns();
	bool publish = ++ag->stats.ticks % AGENT_STATUS_EVERY == 0;

	for (int i = 0; i < ag->nproc; i++) {
		struct agent_rank_stats *rs = &ag->stats.ranks[i];
		struct ddp_progress p;

		if (!worker_proc_progress(&ag->w[i].proc, &p))
			sample_rank(rs, &p, now);
		if (publish)
			rate_rank(rs, now);
	}
	if (publish)
		agent_status_publish(ag);
}

/* ---- the exposition ---- */

static void render_job(struct agent *ag, struct metrics_out *o)
{
	struct metrics_label l[2];
	bool round = agent_group_runs(ag->state) || ag->state == AGENT_STOPPING;

	l[0] = (struct metrics_label){"run_id", ag->o->rdzv_id};
	l[1] =
	    (struct metrics_label){"local_addr", ag->round.local_addr ? ag->round.local_addr : ""};
	metrics_family(o, "ddp_agent_info", METRICS_GAUGE,
		       "This agent: its run id and its address as the other nodes reach it.");
	metrics_sample(o, l, 2, 1);
	metrics_family(o, "ddp_agent_state", METRICS_GAUGE,
		       "The agent's state: 1 for the one it is in.");
	for (int i = AGENT_JOINING; i <= AGENT_DONE; i++) {
		l[0] = (struct metrics_label){"state", agent_state_word(i)};
		metrics_sample(o, l, 1, (int)ag->state == (int)i);
	}
	metrics_single(o, "ddp_round", METRICS_GAUGE,
		       "The rendezvous round the workers run in (-1: none yet).",
		       round || ag->attempt ? ag->round.round : -1);
	metrics_single(o, "ddp_nodes", METRICS_GAUGE, "Nodes in the round.",
		       ag->round.group_world_size);
	metrics_single(o, "ddp_node_rank", METRICS_GAUGE, "This node's rank among them.",
		       ag->round.group_rank);
	metrics_single(o, "ddp_world_size", METRICS_GAUGE, "Workers in the whole job.",
		       ag->round.world_size);
	metrics_single(o, "ddp_local_workers", METRICS_GAUGE,
		       "Workers on this node (--nproc_per_node).", ag->nproc);
	metrics_single(o, "ddp_workers_running", METRICS_GAUGE,
		       "This node's worker processes running now.", ag->nrunning);
	metrics_single(
	    o, "ddp_job_restarts_total", METRICS_COUNTER,
	    "Restarts of the worker group the job has used (all nodes; --max_restarts bounds "
	    "them).",
	    ag->round.restart_count);
	metrics_single(o, "ddp_max_restarts", METRICS_GAUGE, "The job's --max_restarts.",
		       ag->o->max_restarts);
}

static void render_counts(struct agent *ag, struct metrics_out *o)
{
	struct metrics_label l;

	metrics_family(o, "ddp_rounds_total", METRICS_COUNTER,
		       "Rounds this node joined, by why the round was opened (start, join, dead, "
		       "left, restart, reform, replace).");
	for (int i = 0; i < RDZV_REASONS; i++) {
		l = (struct metrics_label){"reason", rdzv_reasons[i]};
		metrics_sample(o, &l, 1, (double)ag->stats.rounds[i]);
	}
	metrics_family(o, "ddp_reformations_total", METRICS_COUNTER,
		       "Rounds handed to this node's running workers, which re-formed in place, by "
		       "cause.");
	for (int i = 0; i < RDZV_REASONS; i++) {
		l = (struct metrics_label){"reason", rdzv_reasons[i]};
		metrics_sample(o, &l, 1, (double)ag->stats.reforms[i]);
	}
	metrics_single(
	    o, "ddp_group_starts_total", METRICS_COUNTER,
	    "This node's worker groups started after its first (a restart, or a round that "
	    "could not be joined in place).",
	    ag->attempt);
	metrics_single(o, "ddp_worker_replacements_total", METRICS_COUNTER,
		       "This node's workers replaced alone while the others re-formed in place.",
		       ag->nreplaced);
	metrics_family(o, "ddp_worker_failures_total", METRICS_COUNTER,
		       "This node's workers that failed on their own, by how they ended.");
	l = (struct metrics_label){"how", "exit"};
	metrics_sample(o, &l, 1, (double)ag->stats.failures_exit);
	l = (struct metrics_label){"how", "signal"};
	metrics_sample(o, &l, 1, (double)ag->stats.failures_signal);
	metrics_single(o, "ddp_failure_lost_seconds_total", METRICS_COUNTER,
		       "Time this node's workers did not train because of a failure or a change of "
		       "membership: from when the agent heard of it to the workers running again.",
		       agent_metrics_lost_s(ag));
}

static void render_ranks(struct agent *ag, struct metrics_out *o)
{
	struct ddp_progress *p = calloc((size_t)ag->nproc, sizeof(*p));
	bool *have = calloc((size_t)ag->nproc, sizeof(*have));
	char(*lr)[12] = calloc((size_t)ag->nproc, sizeof(*lr));
	char(*rk)[12] = calloc((size_t)ag->nproc, sizeof(*rk));
	uint64_t now = time_now_ns();
	struct metrics_label l[3];

	if (!p || !have || !lr || !rk) {
		o->err = -ENOMEM; /* the scrape answers 500 */
		goto out;
	}
	for (int i = 0; i < ag->nproc; i++) {
		have[i] = worker_proc_progress(&ag->w[i].proc, &p[i]) == 0;
		snprintf(lr[i], sizeof(lr[i]), "%d", i);
		snprintf(rk[i], sizeof(rk[i]), "%d", ag->w[i].rank);
	}
#define RANK_LABELS(i)                                                                             \
	l[0] = (struct metrics_label){"local_rank", lr[i]};                                        \
	l[1] = (struct metrics_label){"rank", rk[i]}
	metrics_family(o, "ddp_worker_step", METRICS_GAUGE,
		       "Training steps the worker committed (its progress page; absent for a "
		       "program that reports none).");
	for (int i = 0; i < ag->nproc; i++)
		if (have[i] && (p[i].step || p[i].steps_total)) {
			RANK_LABELS(i);
			metrics_sample(o, l, 2, (double)p[i].step);
		}
	metrics_family(o, "ddp_worker_step_seconds", METRICS_HISTOGRAM,
		       "Duration of the worker's steps: _sum and _count exact; the page is read "
		       "every 0.2 s, and the steps of one read fall in their mean's bucket.");
	for (int i = 0; i < ag->nproc; i++)
		if (ag->stats.ranks[i].times.count) {
			RANK_LABELS(i);
			metrics_hist_write(o, l, 2, &ag->stats.ranks[i].times);
		}
	metrics_family(o, "ddp_worker_last_step_seconds", METRICS_GAUGE,
		       "The last committed step's duration.");
	for (int i = 0; i < ag->nproc; i++)
		if (have[i] && p[i].step) {
			RANK_LABELS(i);
			metrics_sample(o, l, 2, p[i].step_ns / 1e9);
		}
	metrics_family(o, "ddp_worker_last_step_wait_seconds", METRICS_GAUGE,
		       "Of the last committed step, the time spent inside collectives.");
	for (int i = 0; i < ag->nproc; i++)
		if (have[i] && p[i].step) {
			RANK_LABELS(i);
			metrics_sample(o, l, 2, p[i].wait_ns / 1e9);
		}
	metrics_family(o, "ddp_worker_collective_wait_seconds", METRICS_GAUGE,
		       "The last collective's wait: from entering it to leaving it, or to now "
		       "while the worker is still inside.");
	for (int i = 0; i < ag->nproc; i++)
		if (have[i] && p[i].seq && p[i].entered_ns) {
			uint64_t end = p[i].left_ns >= p[i].entered_ns ? p[i].left_ns : now;

			RANK_LABELS(i);
			metrics_sample(o, l, 2,
				       end > p[i].entered_ns ? (end - p[i].entered_ns) / 1e9 : 0);
		}
	metrics_family(o, "ddp_worker_collective_seq", METRICS_GAUGE,
		       "The number of the collective the worker is in or left last, in its round.");
	for (int i = 0; i < ag->nproc; i++)
		if (have[i]) {
			RANK_LABELS(i);
			metrics_sample(o, l, 2, (double)p[i].seq);
		}
	metrics_family(o, "ddp_worker_phase", METRICS_GAUGE,
		       "What the worker is doing: 1 for its phase.");
	for (int i = 0; i < ag->nproc; i++)
		if (have[i])
			for (int ph = 0; ph < DDP_PHASE_COUNT; ph++) {
				RANK_LABELS(i);
				l[2] = (struct metrics_label){"phase", phase_names[ph]};
				metrics_sample(o, l, 3, p[i].phase == (uint32_t)ph);
			}
	metrics_family(o, "ddp_worker_progress_age_seconds", METRICS_GAUGE,
		       "Time since the worker last wrote its progress page.");
	for (int i = 0; i < ag->nproc; i++)
		if (have[i] && p[i].written_ns) {
			RANK_LABELS(i);
			metrics_sample(o, l, 2,
				       now > p[i].written_ns ? (now - p[i].written_ns) / 1e9 : 0);
		}
#undef RANK_LABELS
out:
	free(p);
	free(have);
	free(lr);
	free(rk);
}

static void render(void *arg, struct metrics_out *o)
{
	struct agent *ag = arg;

	render_job(ag, o);
	render_counts(ag, o);
	agent_metrics_hangs(ag, o);
	agent_metrics_stragglers(ag, o);
	if (ag->stats.ranks) /* the workers' slots are made */
		render_ranks(ag, o);
	if (rdzv_hosted_store(ag->rdzv)) /* this node hosts the rendezvous store */
		store_server_metrics(rdzv_hosted_store(ag->rdzv), o);
}

int agent_metrics_init(struct agent *ag)
{
	ag->stats.ranks = calloc((size_t)(ag->nproc > 0 ? ag->nproc : 1), sizeof(*ag->stats.ranks));
	if (!ag->stats.ranks) {
		log_error("out of memory");
		return 1;
	}
	for (int i = 0; i < ag->nproc; i++)
		metrics_hist_init(&ag->stats.ranks[i].times, step_bounds,
				  sizeof(step_bounds) / sizeof(step_bounds[0]));
	uv_timer_init(ag->loop, &ag->stats.sample);
	ag->stats.sample.data = ag;
	ag->stats.sampling = true;
	uv_timer_start(&ag->stats.sample, on_sample, AGENT_SAMPLE_MS, AGENT_SAMPLE_MS);
	return 0;
}

int agent_metrics_start(struct agent *ag)
{
	const struct opts_metrics *m = &ag->o->metrics;

	if (m->port < 0)
		return 0;
	return metrics_http_start_said(ag->loop, "ddplaunch", "--metrics_port", m->addr, m->port,
				       render, ag, &ag->stats.http)
		   ? 2
		   : 0;
}

static void noop_close(uv_handle_t *h)
{
}

void agent_metrics_close(struct agent *ag)
{
	metrics_http_close(ag->stats.http);
	ag->stats.http = NULL;
	if (ag->stats.sampling)
		uv_close((uv_handle_t *)&ag->stats.sample, noop_close);
	ag->stats.sampling = false;
	free(ag->stats.ranks);
	ag->stats.ranks = NULL;
}
