/* The agent's one path: join -> spawn -> run -> the group ends -> the
 * rendezvous answers with the next round (join again) or the end -> finish. */
#include "agent.h"
#include "agent_int.h"
#include "envp.h"
#include "exit_status.h"
#include "linebuf.h"
#include "policy.h"
#include "rdzv.h"
#include "signames.h"
#include "worker_env.h"
#include "worker_proc.h"

#include <errno.h>
#include <log.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <timeutil.h>
#include <unistd.h>

static void agent_start_attempt(struct agent *ag);
static void agent_finish(struct agent *ag);
static void on_none_started(uv_timer_t *t);

static bool worker_failed(const struct agent_worker *w)
{
	return w->term_signal > 0 || w->exit_code != 0;
}

static void agent_kill_all(struct agent *ag)
{
	for (int i = 0; i < ag->nproc; i++)
		worker_proc_kill_group(&ag->w[i].proc);
}

static void on_grace(uv_timer_t *t)
{
	struct agent *ag = t->data;

	log_warn("workers still running after the %.3g s grace period; sending SIGKILL",
		 ag->o->grace_period);
	agent_kill_all(ag);
}

/* Whether every worker's handles of the attempt have closed. */
static bool agent_all_closed(const struct agent *ag)
{
	for (int i = 0; i < ag->nproc; i++)
		if (worker_proc_busy(&ag->w[i].proc))
			return false;
	return true;
}

/* Sends `sig` to every running worker's process group, then the grace
 * period, then SIGKILL. SIGCONT follows `sig`: a stopped worker (SIGSTOP,
 * a debugger's ^Z) acts on it at once instead of costing the grace. */
void agent_stop_group(struct agent *ag, int sig)
{
	uint64_t grace_ms = (uint64_t)(ag->o->grace_period * 1000.0 + 0.5);
	bool replacing = agent_inplace_pending(ag);

	agent_inplace_drop(ag); /* the group ends: no worker is replaced */

	for (int i = 0; i < ag->nproc; i++) {
		struct agent_worker *w = &ag->w[i];

		if (w->proc.running) {
			w->stopped = true;
			worker_proc_signal(&w->proc, sig);
			worker_proc_signal(&w->proc, SIGCONT);
		}
	}
	if (ag->state == AGENT_STOPPING)
		return;
	ag->state = AGENT_STOPPING;
	if (ag->nrunning == 0) {
		/* Only a worker that waited to be replaced was left: the
		 * group's end comes from the loop. */
		if (replacing && agent_all_closed(ag))
			uv_timer_start(&ag->drain, on_none_started, 0, 0);
		return;
	}
	if (grace_ms == 0)
		agent_kill_all(ag);
	else
		uv_timer_start(&ag->grace, on_grace, grace_ms, 0);
}

static void on_drain(uv_timer_t *t)
{
	struct agent *ag = t->data;

	/* A process outside the worker's group still holds its output pipe. */
	log_debug("closing output pipes still open %d ms after the group ended", AGENT_DRAIN_MS);
	for (int i = 0; i < ag->nproc; i++)
		worker_proc_close_pipes(&ag->w[i].proc);
}

/* Every worker process of the attempt has exited. */
static void agent_group_exited(struct agent *ag)
{
	uv_timer_stop(&ag->grace);
	/* Grandchildren left in a worker's group go now, so its pipes end;
	 * what escaped a guard goes with the job's cgroup, and the names in
	 * /dev/shm that ranks which died left go too. */
	agent_kill_all(ag);
	footprint_sweep(&ag->fp);
	if (!agent_all_closed(ag))
		uv_timer_start(&ag->drain, on_drain, AGENT_DRAIN_MS, 0);
}

/* Worker w failed on its own: replaced alone, started again in the next
 * round, or the group stops. Returns false when the group goes on without
 * it for now (a replacement). */
static bool agent_worker_failed(struct agent *ag, struct agent_worker *w)
{
	char how[64];
	struct summary_rec r = {
	    .pid = w->proc.pid > 0 ? w->proc.pid : w->proc.shim_pid,
	    .exit_code = w->exit_code,
	    .term_signal = w->term_signal,
	};

	summary_describe(&r, how, sizeof(how));
	if (agent_inplace_worker_failed(ag, w, how))
		return !w->replacing;
	ag->failed = true;
	ag->last_fail_ns = (int64_t)time_now_ns();
	log_warn("rank %d (local rank %d) %s; stopping the other workers", w->rank, w->local_rank,
		 how);
	if (ag->state == AGENT_RUNNING)
		agent_stop_group(ag, SIGTERM);
	return true;
}

void agent_worker_exited(struct agent *ag, struct agent_worker *w)
{
	ag->nrunning--;
	w->exit_seq = ++ag->nexited;
	if (worker_failed(w) && !ag->failed && !w->stopped && !agent_worker_failed(ag, w))
		return;
	if (ag->nrunning == 0)
		agent_group_exited(ag);
}

static void on_proc_exit(struct worker_proc *p, void *arg)
{
	struct agent_worker *w = arg;

	w->exit_code = p->exit_code;
	w->term_signal = p->term_signal;
	w->exit_time_ms = p->exit_time_ms;
	if (policy_exit_permanent(w->exit_code, w->term_signal))
		w->ag->permanent = true;
	agent_worker_exited(w->ag, w);
}

/* Fills rec for the summary; *errmsg (malloc'ed or NULL) and tailbuf are
 * the caller's. */
static void agent_worker_record(struct agent_worker *w, struct summary_rec *rec, char **errmsg,
				char *tailbuf, size_t taillen)
{
	const struct worker_proc *p = &w->proc;

	memset(rec, 0, sizeof(*rec));
	rec->attempt = w->ag->attempt;
	rec->rank = w->rank;
	rec->local_rank = w->local_rank;
	rec->pid = p->pid > 0 ? p->pid : p->shim_pid;
	rec->exit_code = w->exit_code;
	rec->term_signal = w->term_signal;
	rec->stopped = w->stopped;
	rec->time_ms = w->exit_time_ms;
	*errmsg = NULL;
	if (summary_rec_failed(rec))
		summary_read_error_file(w->error_file, errmsg);
	rec->error_message = *errmsg;
	rec->stderr_tail = worker_proc_tail(p, tailbuf, taillen) ? tailbuf : NULL;
}

/* Records the attempt in the summary, in exit order. */
static void agent_record_attempt(struct agent *ag)
{
	bool first_done = false;

	for (int seq = 1; seq <= ag->nexited; seq++) {
		for (int i = 0; i < ag->nproc; i++) {
			struct agent_worker *w = &ag->w[i];
			struct summary_rec rec;
			char *msg;
			char tail[WORKER_PROC_TAIL_LINES * WORKER_PROC_TAIL_LEN];

			if (w->exit_seq != seq)
				continue;
			agent_worker_record(w, &rec, &msg, tail, sizeof(tail));
			if (!first_done && summary_rec_failed(&rec) && !rec.stopped) {
				rec.first = true;
				first_done = true;
			}
			if (summary_add(&ag->summary, &rec))
				log_error("out of memory while recording rank %d", w->rank);
			free(msg);
		}
	}
}

/* Prints the attempt's summary of failures, once. */
static void agent_show_summary(void *arg)
{
	struct agent *ag = arg;

	if (ag->shown == ag->attempt)
		return;
	ag->shown = ag->attempt;
	summary_print(&ag->summary, ag->attempt, ag->o->max_restarts);
}

/* The job is over for this node: its exit status from the outcome. */
static void agent_end(struct agent *ag, enum rdzv_outcome how)
{
	if (how == RDZV_OUT_FAILED && ag->nexited)
		agent_show_summary(ag);
	ag->exit_status = rdzv_exit_status(how, ag->stop_signal, ag->permanent, ag->fail_status);
	agent_finish(ag);
}

/* This node's status if the job fails now: its last group's first failure,
 * or 0 when that group did not fail. */
static int agent_fail_status(const struct agent *ag)
{
	const struct summary_rec *first = summary_first_failure(&ag->summary, ag->attempt);

	if (!ag->failed || !first)
		return 0;
	return policy_exit_status(0, true, first->exit_code, first->term_signal);
}

/* A failure that will repeat, in words for the other nodes: its first
 * failed worker and how (rdzv_group_end's cause), or NULL. */
static const char *agent_permanent_cause(const struct agent *ag, char *buf, size_t len)
{
	const struct summary_rec *f = summary_first_failure(&ag->summary, ag->attempt);

	if (!ag->permanent || !f)
		return NULL;
	if (f->exit_code == AGENT_START_FAILED && f->term_signal <= 0)
		snprintf(buf, len, "worker rank %d could not be started", f->rank);
	else
		snprintf(buf, len, "worker rank %d exited with status %d%s%.200s", f->rank,
			 f->exit_code, f->error_message ? ": " : "",
			 f->error_message ? f->error_message : "");
	return buf;
}

/* The group stopped for a round already joined (agent_keep_round): the
 * next attempt starts in it, without asking the rendezvous again. */
static void agent_start_in_kept_round(struct agent *ag)
{
	ag->have_kept = false;
	ag->round_over = false;
	ag->failed = false;
	ag->permanent = false;
	ag->nexited = 0;
	ag->attempt++;
	ag->state = AGENT_JOINING;
	agent_on_joined(ag, 0, &ag->kept);
}

/* Every handle of the attempt is closed: tell the rendezvous, which answers
 * with the next round or the end. */
void agent_group_ended(struct agent *ag)
{
	char cause[320];
	struct rdzv_group_end g = {
	    .attempt = ag->attempt,
	    .failed = ag->failed,
	    .permanent = ag->permanent,
	    .round_over = ag->round_over,
	    .stop_signal = ag->stop_signal,
	    .show_summary = agent_show_summary,
	    .arg = ag,
	};

	if (ag->inplace_join && ag->stop_signal <= 0 && ag->end < 0) {
		/* A worker ended while the next round was being joined in place:
		 * the group's end is that round's, once joined (on_joined). */
		ag->group_end_pending = true;
		return;
	}
	uv_timer_stop(&ag->drain);
	agent_record_attempt(ag);
	if (ag->end >= 0) {
		agent_end(ag, ag->end); /* heard while the workers stopped */
		return;
	}
	if (ag->have_kept) {
		agent_start_in_kept_round(ag);
		return;
	}
	ag->round_over = false;
	if (!g.round_over && ag->stop_signal <= 0)
		ag->fail_status = agent_fail_status(ag);
	g.cause = agent_permanent_cause(ag, cause, sizeof(cause));
	/* Waiting for the rendezvous from now on: an end it answers at once
	 * finishes the agent. */
	ag->state = AGENT_JOINING;
	if (!rdzv_group_ended(ag->rdzv, &g) || ag->state == AGENT_DONE)
		return;
	ag->attempt++;
	agent_start_attempt(ag);
}

/* Every handle of worker w's run has closed: its log files go. */
static void on_proc_closed(struct worker_proc *p, void *arg)
{
	struct agent_worker *w = arg;
	struct agent *ag = w->ag;
	static const char *const names[2] = {"stdout", "stderr"};

	for (int s = 0; s < 2; s++) {
		if (!p->log_lost[s])
			continue;
		log_error("rank %d: %llu bytes of its %s could not be written to '%s/%s.log' (%s); "
			  "that log is incomplete (free space under --log_dir)",
			  w->rank, (unsigned long long)p->log_lost[s], names[s], w->dir, names[s],
			  strerror(p->log_errno[s]));
		ag->lost_output = true;
	}
	if (agent_worker_close_logs(w))
		ag->lost_output = true;
	agent_inplace_closed(ag, w);
	if (ag->nrunning == 0 && agent_all_closed(ag) && !agent_inplace_pending(ag) &&
	    (ag->state == AGENT_RUNNING || ag->state == AGENT_STOPPING))
		agent_group_ended(ag);
}

/* Says why worker w could not be started, with the fix for the shortages
 * that a restart does not cure (policy_start_error_permanent). */
static void agent_start_error(const struct agent_worker *w, int rc)
{
	struct rlimit rl;

	if (rc == UV_EMFILE && getrlimit(RLIMIT_NOFILE, &rl) == 0)
		log_error("cannot start worker %d: ddplaunch has no file descriptor left (its "
			  "limit, ulimit -n, is %llu); a shortage that may pass, so it is not "
			  "taken as permanent: the restart tries again after its backoff if "
			  "--max_restarts allows (if it persists, raise the limit or run fewer "
			  "workers per node)",
			  w->rank, (unsigned long long)rl.rlim_cur);
	else if (rc == UV_ENFILE)
		log_error("cannot start worker %d: the system's table of open files is full "
			  "(fs.file-max); a shortage that may pass, so the restart tries again "
			  "after its backoff if --max_restarts allows (close programs or raise "
			  "the limit)",
			  w->rank);
	else if (rc == UV_ENOSPC || rc == -EDQUOT)
		log_error("cannot start worker %d: no space left for its log files under '%s': "
			  "free space there or give --log_dir elsewhere",
			  w->rank, w->dir);
	else
		log_error("cannot start worker %d: %s", w->rank, uv_strerror(rc));
}

int agent_worker_start(struct agent_worker *w, bool keep_logs)
{
	struct agent *ag = w->ag;
	const struct launch_opts *o = ag->o;
	int redirect = opts_streams_mask(&o->redirects, w->local_rank);
	bool shown = opts_rank_shown(o, w->local_rank);
	char parent[24], lr[32], prefix[WORKER_PROC_PREFIX_LEN] = "";
	char **argv = NULL, **env = NULL;
	struct worker_proc_config cfg = {
	    .loop = ag->loop,
	    .file = ag->shim,
	    .prefix = prefix,
	    .console_fd = {shown && !(redirect & 1) ? STDOUT_FILENO : -1,
			   shown && !(redirect & 2) ? STDERR_FILENO : -1},
	    .on_exit = on_proc_exit,
	    .on_closed = on_proc_closed,
	    .arg = w,
	};
	int rc = agent_worker_open_logs(w, keep_logs);

	if (!o->no_prefix)
		linebuf_prefix(o->prefix, w->rank, w->local_rank, prefix, sizeof(prefix));
	snprintf(parent, sizeof(parent), "%d", (int)getpid());
	if (opts_local_rank_arg(o))
		snprintf(lr, sizeof(lr), "%s=%d", opts_local_rank_arg(o), w->local_rank);
	if (!rc)
		rc = agent_worker_env(w, &env);
	if (!rc && !(argv = agent_worker_argv(w, parent, opts_local_rank_arg(o) ? lr : NULL)))
		rc = -ENOMEM;
	if (rc) {
		/* Nothing was spawned: no on_closed will close the logs. */
		agent_worker_close_logs(w);
		goto out;
	}
	cfg.argv = argv;
	cfg.env = env;
	cfg.log_fd[0] = w->log_fd[0];
	cfg.log_fd[1] = w->log_fd[1];
	rc = worker_proc_spawn(&w->proc, &cfg);
out:
	if (rc)
		agent_start_error(w, rc);
	free(argv);
	worker_env_free(env);
	return rc;
}

static void on_none_started(uv_timer_t *t)
{
	agent_group_ended(t->data);
}

static void agent_spawn_all(struct agent *ag)
{
	int rc;

	ag->state = AGENT_RUNNING;
	/* Workers left unstarted below must carry nothing of the last attempt. */
	for (int i = 0; i < ag->nproc; i++) {
		worker_proc_init(&ag->w[i].proc);
		ag->w[i].exit_seq = 0;
		ag->w[i].stopped = false;
		ag->w[i].sent_round = -1;
	}
	agent_inplace_drop(ag);
	for (int i = 0; i < ag->nproc; i++) {
		struct agent_worker *w = &ag->w[i];

		ag->nrunning++;
		rc = agent_worker_start(w, false);
		if (rc == 0)
			continue;
		if (policy_start_error_permanent(rc))
			ag->permanent = true;
		w->exit_code = AGENT_START_FAILED;
		w->term_signal = 0;
		w->exit_time_ms = (int64_t)time(NULL) * 1000;
		agent_worker_exited(ag, w);
		if (ag->state == AGENT_STOPPING)
			break;
	}
	if (ag->last_fail_ns && ag->attempt > 0)
		log_debug("restart took %.3f ms from the failure to the last spawn",
			  ((int64_t)time_now_ns() - ag->last_fail_ns) / 1e6);
	/* No worker got as far as a process: end the attempt from the loop, so
	 * that restarts of a group that never starts do not nest. */
	if (ag->nrunning == 0 && agent_all_closed(ag))
		uv_timer_start(&ag->drain, on_none_started, 0, 0);
}

void agent_on_joined(void *arg, int status, const struct rdzv_round *r)
{
	struct agent *ag = arg;

	if (ag->inplace_join) {
		agent_inplace_joined(ag, status, r);
		return;
	}
	if (ag->state != AGENT_JOINING)
		return; /* stopped by a signal while joining */
	if (status) {
		log_error("cannot join rendezvous round %d: %s", ag->attempt, strerror(-status));
		ag->exit_status = 1;
		agent_finish(ag);
		return;
	}
	ag->round = *r;
	for (int i = 0; i < ag->nproc; i++)
		ag->w[i].rank = r->rank_base + i;
	if (agent_prepare_attempt_dirs(ag)) {
		ag->exit_status = 1;
		agent_finish(ag);
		return;
	}
	agent_spawn_all(ag);
}

/* One attempt: join a rendezvous round, then spawn the group. */
static void agent_start_attempt(struct agent *ag)
{
	int rc;

	ag->state = AGENT_JOINING;
	ag->failed = false;
	ag->permanent = false;
	ag->nexited = 0;
	rc = rdzv_join(ag->rdzv, agent_on_joined, ag);
	if (rc == -ECANCELED)
		return; /* the rendezvous ended: its event finishes the agent */
	if (rc) {
		log_error("cannot join rendezvous round %d: %s", ag->attempt, strerror(-rc));
		ag->exit_status = 1;
		agent_finish(ag);
	}
}

/* A --forward_signals signal: passed on to the running workers, and the
 * job goes on (their exit decides its status). */
static void agent_forward(struct agent *ag, int sig)
{
	int n = 0;

	for (int i = 0; i < ag->nproc; i++)
		if (ag->w[i].proc.running) {
			worker_proc_signal(&ag->w[i].proc, sig);
			n++;
		}
	if (n)
		log_info("got %s; passing it on to the workers (--forward_signals)",
			 signame_name(sig));
	else
		log_info("got %s; no worker runs to pass it on to (--forward_signals)",
			 signame_name(sig));
}

static void on_signal(uv_signal_t *h, int sig)
{
	struct agent *ag = h->data;
	bool again = ag->stop_signal > 0;

	if (ag->state == AGENT_DONE)
		return;
	if (opts_forward_only(ag->o, sig)) {
		agent_forward(ag, sig);
		return;
	}
	if (again) {
		log_warn("got %s; killing the workers now", signame_name(sig));
		if (ag->state == AGENT_JOINING)
			agent_end(ag, RDZV_OUT_STOPPED); /* no longer waits to leave */
		else
			agent_kill_all(ag);
		return;
	}
	ag->stop_signal = sig;
	/* It says what follows; one node between rounds ends here. */
	rdzv_signal(ag->rdzv, sig);
	if (ag->state == AGENT_RUNNING || ag->state == AGENT_STOPPING)
		agent_stop_group(ag, sig);
}

static void on_round_over(void *arg, const char *why)
{
	struct agent *ag = arg;

	if (ag->state != AGENT_RUNNING || ag->inplace_join) {
		log_info("%s", why);
		return;
	}
	if (agent_inplace_round_over(ag, why))
		return;
	log_warn("%s; stopping this node's workers for the next round (no restart is "
		 "counted for it)",
		 why);
	ag->round_over = true;
	agent_stop_group(ag, SIGTERM);
}

static void on_ended(void *arg, enum rdzv_outcome how, const char *msg)
{
	struct agent *ag = arg;

	if (ag->state == AGENT_DONE)
		return;
	ag->end = (int)how;
	if (msg)
		log_msg(how == RDZV_OUT_FAILED || how == RDZV_OUT_REFUSED ||
				how == RDZV_OUT_PERMANENT
			    ? LOG_ERROR
			    : LOG_INFO,
			"%s", msg);
	/* Workers of this node still run: they stop, and the group's end
	 * finishes the agent. */
	if (ag->state == AGENT_RUNNING) {
		agent_stop_group(ag, SIGTERM);
		return;
	}
	if (ag->state == AGENT_STOPPING)
		return;
	agent_end(ag, how);
}

const struct rdzv_events agent_rdzv_events = {
    .round_over = on_round_over,
    .ended = on_ended,
};

static void handle_free_noop(uv_handle_t *h)
{
}

static void agent_finish(struct agent *ag)
{
	char path[PATH_MAX + 16];

	ag->state = AGENT_DONE;
	summary_print_reforms(&ag->summary);
	if (ag->lost_output && ag->exit_status == 0) {
		log_error("the workers succeeded but some of their output was lost (see above); "
			  "exiting with status 1");
		ag->exit_status = 1;
	}
	if (ag->o->log_dir) {
		snprintf(path, sizeof(path), "%s/summary.json", ag->rd.path);
		if (summary_write_json(&ag->summary, path, ag->exit_status, ag->attempt + 1,
				       ag->stop_signal)) {
			log_error("cannot write '%s' (free space under --log_dir)", path);
			if (ag->exit_status == 0)
				ag->exit_status = 1;
		}
	}
	rundir_close(&ag->rd);
	footprint_close(&ag->fp);
	uv_close((uv_handle_t *)&ag->grace, handle_free_noop);
	uv_close((uv_handle_t *)&ag->drain, handle_free_noop);
	for (int i = 0; i < ag->nsig; i++)
		uv_close((uv_handle_t *)&ag->sig[i], handle_free_noop);
	rdzv_shutdown(ag->rdzv, ag->exit_status);
}

/* Whether one of ag's signal handlers is for sig already. */
static bool agent_has_handler(const struct agent *ag, int sig)
{
	for (int i = 0; i < ag->nsig; i++)
		if (ag->sig[i].signum == sig)
			return true;
	return false;
}

static void agent_init_handles(struct agent *ag)
{
	uv_timer_init(ag->loop, &ag->grace);
	uv_timer_init(ag->loop, &ag->drain);
	ag->grace.data = ag->drain.data = ag;
	ag->nsig = 0;
	for (int i = 0; i < ag->o->nsignals + ag->o->nforward; i++) {
		int sig = i < ag->o->nsignals ? ag->o->signals[i]
					      : ag->o->forward_signals[i - ag->o->nsignals];

		if (i >= ag->o->nsignals && agent_has_handler(ag, sig))
			continue; /* both lists name it: one handler */
		uv_signal_init(ag->loop, &ag->sig[ag->nsig]);
		ag->sig[ag->nsig].data = ag;
		uv_signal_start(&ag->sig[ag->nsig++], on_signal, sig);
	}
	for (int i = 0; i < ag->nproc; i++) {
		ag->w[i].ag = ag;
		ag->w[i].local_rank = i;
		ag->w[i].log_fd[0] = ag->w[i].log_fd[1] = -1;
		worker_proc_init(&ag->w[i].proc);
	}
}

int agent_run(const struct launch_opts *o, char **environ_in)
{
	uv_loop_t loop;
	struct agent ag = {.loop = &loop,
			   .o = o,
			   .environ_in = environ_in,
			   .exit_status = 1,
			   .end = -1,
			   .shown = -1};
	int rc;

	summary_init(&ag.summary);
	ag.rd.lock_fd = -1;
	if (uv_loop_init(&loop)) {
		log_error("cannot create the event loop");
		return 1;
	}
	rc = agent_setup(&ag);
	if (rc == 0) {
		/* Names the Python in the summary if a worker lacks a module. */
		summary_set_interpreter(&ag.summary, ag.argv[0], envp_get(environ_in, "PATH"));
		agent_init_handles(&ag);
		agent_start_attempt(&ag);
	} else {
		ag.exit_status = rc;
		rdzv_shutdown(ag.rdzv, rc);
	}
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
	rdzv_free(ag.rdzv);
	summary_release(&ag.summary);
	free(ag.argv);
	free(ag.w);
	return ag.exit_status;
}
