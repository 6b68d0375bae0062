/* The group's processes: start, tell, signal and record each worker
 * (agent_int.h). Mechanics only: what to do is the machine's
 * (agent.c, agent_machine_workers.c). */
#include "agent_int.h"
#include "agent_wire.h"
#include "linebuf.h"
#include "signames.h"
#include "worker_env.h"
#include "worker_proc.h"

#include <errno.h>
#include <log.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

int agent_worker_send_round(struct agent_worker *w, const struct rdzv_round *r)
{
	struct agent_wire_round wr = {.round = r->round,
				      .rank = w->rank,
				      .world_size = r->world_size,
				      .local_rank = w->local_rank,
				      .local_world_size = w->ag->round_local,
				      .master_port = r->master_port,
				      .group_rank = r->group_rank,
				      .group_world_size = r->group_world_size};
	int rc = agent_wire_round_set_addr(&wr, r->master_addr);

	return rc < 0 ? rc : worker_proc_send_round(&w->proc, &wr);
}

bool agent_worker_round_not_taken(const struct agent_worker *w)
{
	return w->proc.sent_round > w->proc.took_round;
}

void agent_worker_reprefix(struct agent_worker *w)
{
	char prefix[WORKER_PROC_PREFIX_LEN] = "";

	if (w->ag->o->no_prefix)
		return;
	linebuf_prefix(w->ag->o->prefix, w->rank, w->local_rank, prefix, sizeof(prefix));
	worker_proc_set_prefix(&w->proc, prefix);
}

struct agent_worker_view agent_worker_view(const struct agent_worker *w)
{
	return (struct agent_worker_view){
	    .state = w->state,
	    .resizable = w->proc.resizable,
	    .replacement = w->replacement,
	    .early = w->early,
	};
}

bool agent_workers_block(const struct agent *ag, const struct agent_worker *except)
{
	for (int i = 0; i < ag->nproc; i++) {
		struct agent_worker_view v = agent_worker_view(&ag->w[i]);

		if (&ag->w[i] != except && agent_decide_in_round(&v) == AGENT_IN_ROUND_BLOCKS)
			return true;
	}
	return false;
}

void agent_kill_all(struct agent *ag)
{
	for (int i = 0; i < ag->nproc; i++)
		worker_proc_kill_group(&ag->w[i].proc);
}

bool agent_all_closed(const struct agent *ag)
{
	for (int i = 0; i < ag->nproc; i++)
		if (worker_proc_busy(&ag->w[i].proc))
			return false;
	return true;
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

/* What the worker said of the promise of a 1-rank run's bits, if anything. */
static void agent_worker_numerics(struct agent *ag, const struct agent_worker *w)
{
	static const enum summary_promise promise[] = {
	    [AGENT_WIRE_NUMERICS_KEPT] = SUMMARY_PROMISE_KEPT,
	    [AGENT_WIRE_NUMERICS_DROPPED] = SUMMARY_PROMISE_DROPPED,
	    [AGENT_WIRE_NUMERICS_REFUSED] = SUMMARY_PROMISE_REFUSED,
	};
	int n = w->proc.numerics;

	if (n >= 0 && n < (int)(sizeof(promise) / sizeof(promise[0])))
		summary_note_numerics(&ag->summary, w->rank, promise[n], w->proc.numerics_text);
}

void agent_record_attempt(struct agent *ag)
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
			agent_worker_numerics(ag, w);
			free(msg);
		}
	}
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

/* A worker told of a replica that differed: the summary keeps it once. */
static void agent_worker_replica(struct worker_proc *p, const struct agent_wire_replica *r,
				 void *arg)
{
	struct agent_worker *w = arg;
	struct summary_replica rec = {.step = r->step, .rank = r->rank, .healed = r->healed};

	(void)p;
	snprintf(rec.tensor, sizeof(rec.tensor), "%s", r->tensor);
	if (summary_add_replica(&w->ag->summary, &rec) < 0)
		log_error("out of memory while recording rank %d's replica", r->rank);
}

/* A worker told of a rank named slow or cleared: the summary keeps it once. */
static void agent_worker_straggler(struct worker_proc *p, const struct agent_wire_straggler *g,
				   void *arg)
{
	struct agent_worker *w = arg;
	struct summary_straggler rec = {.step = g->step,
					.rank = g->rank,
					.node = g->node,
					.cause = (int)g->cause,
					.slower = g->slower_x100 / 100.0,
					.cleared_step = -1};

	(void)p;
	if (summary_add_straggler(&w->ag->summary, &rec) < 0)
		log_error("out of memory while recording rank %d as a straggler", g->rank);
}

int agent_worker_start(struct agent_worker *w, bool keep_logs, worker_proc_exit_fn on_exit,
		       worker_proc_closed_fn on_closed, worker_proc_declare_fn on_declare)
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
	    .on_exit = on_exit,
	    .on_closed = on_closed,
	    .on_replica = agent_worker_replica,
	    .on_straggler = agent_worker_straggler,
	    .on_declare = on_declare,
	    .arg = w,
	};
	int rc = agent_worker_open_logs(w, keep_logs);

	if (progress_page_path(ag->fp.tag, w->local_rank, w->progress_path,
			       sizeof(w->progress_path)))
		w->progress_path[0] = '\0';
	cfg.progress_path = w->progress_path[0] ? w->progress_path : NULL;
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

void agent_forward(struct agent *ag, int sig)
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
