/* What the agent prepares once (the number of workers, the ddp-exec guard,
 * the worker command line, the rendezvous, the run directory, the handles),
 * per attempt (each worker's directory, log files, command line and
 * environment), and what it closes at the end (agent_teardown). */
#include "agent.h"
#include "agent_int.h"
#include "command.h"
#include "envp.h"
#include "worker_env.h"

#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <log.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef DDP_LIBEXECDIR
#define DDP_LIBEXECDIR "/usr/local/libexec/ddplaunch"
#endif
#ifndef DDP_LIBEXECDIR_FROM_BINDIR
#define DDP_LIBEXECDIR_FROM_BINDIR "" /* none: only the absolute one */
#endif

static int agent_build_argv(struct agent *ag)
{
	return command_build(ag->o, envp_get(ag->environ_in, "PYTHON_EXEC"), &ag->argv, &ag->argc);
}

static int agent_prepare_run_dir(struct agent *ag)
{
	const struct launch_opts *o = ag->o;
	bool files = o->log_dir != NULL;

	for (int lr = 0; lr < ag->nproc; lr++)
		if (opts_streams_mask(&o->redirects, lr) || opts_streams_mask(&o->tee, lr))
			files = true;
	ag->files = files;
	return rundir_open(&ag->rd, o->log_dir, o->rdzv_id, envp_get(ag->environ_in, "TMPDIR"),
			   files);
}

int agent_prepare_attempt_dirs(struct agent *ag)
{
	int rc = rundir_attempt(&ag->rd, ag->attempt);

	for (int i = 0; i < ag->nproc && !rc; i++)
		rc = rundir_rank(&ag->rd, ag->attempt, ag->w[i].rank, ag->w[i].dir,
				 ag->w[i].error_file);
	return rc;
}

int agent_worker_open_logs(struct agent_worker *w, bool keep)
{
	w->log_fd[0] = w->log_fd[1] = -1;
	return w->ag->files ? rundir_open_logs(w->dir, w->log_fd, keep) : 0;
}

int agent_worker_close_logs(struct agent_worker *w)
{
	return rundir_close_logs(w->dir, w->rank, w->log_fd);
}

char **agent_worker_argv(struct agent_worker *w, char *parent, char *local_rank_arg)
{
	struct agent *ag = w->ag;
	size_t n = 0;
	char **v = calloc(ag->argc + 6, sizeof(*v));

	if (!v)
		return NULL;
	v[n++] = ag->shim;
	if (ag->fp.cgroup[0]) {
		v[n++] = "--cgroup";
		v[n++] = ag->fp.cgroup;
	}
	v[n++] = parent;
	for (size_t i = 0; i < ag->argc; i++) {
		/* torch.distributed.launch put --local_rank before the script's
		 * own arguments: right after the script (argv[0] = program or
		 * python's "-u script"/"-u -m module"). */
		if (local_rank_arg && i == ag->argc - ag->o->args.n)
			v[n++] = local_rank_arg;
		v[n++] = ag->argv[i];
	}
	if (local_rank_arg && ag->o->args.n == 0)
		v[n++] = local_rank_arg;
	v[n] = NULL;
	return v;
}

/* A worker started outside the rounds has no rank in the round now held:
 * it is told one past the round's (the round's world size plus its place
 * among this node's workers outside), in a world that counts them, so that
 * RANK < WORLD_SIZE holds for a program that checks before it waits for
 * its round (DDP_AWAIT_ROUND). In a round: its rank and the round's world. */
static void agent_env_rank(const struct agent_worker *w, int *rank, int *world)
{
	const struct agent *ag = w->ag;
	int before = 0, outside = 0;

	*rank = w->rank;
	*world = ag->round.world_size;
	if (w->state != AGENT_W_AWAITING)
		return;
	for (int i = 0; i < ag->nproc; i++) {
		if (ag->w[i].state != AGENT_W_AWAITING)
			continue;
		outside++;
		before += ag->w[i].local_rank < w->local_rank;
	}
	*rank = ag->round.world_size + before;
	*world = ag->round.world_size + outside;
}

int agent_worker_env(struct agent_worker *w, char ***env)
{
	struct agent *ag = w->ag;
	int rank, world;

	agent_env_rank(w, &rank, &world);
	struct worker_env_spec s = {
	    .rank = rank,
	    .local_rank = w->local_rank,
	    .world_size = world,
	    .local_world_size = ag->round_local > 0 ? ag->round_local : ag->nproc,
	    .group_rank = ag->round.group_rank,
	    .group_world_size = ag->round.group_world_size,
	    .role_rank = rank,
	    .role_world_size = world,
	    .role_name = ag->o->role,
	    .master_addr = ag->round.master_addr,
	    .master_port = ag->round.master_port,
	    .restart_count = ag->round.restart_count,
	    .local_addr = ag->round.local_addr,
	    /* Many nodes; one node once a round was renewed (rdzv_renew). */
	    .round = ag->round.local_addr || ag->round.round != ag->round.restart_count
			 ? ag->round.round
			 : 0,
	    .max_restarts = ag->o->max_restarts,
	    .run_id = ag->o->rdzv_id,
	    .error_file = w->error_file,
	    .job_tag = ag->fp.tag,
	    .progress_file = w->progress_path[0] ? w->progress_path : NULL,
	    .set_omp = ag->set_omp,
	    .await_round = w->state == AGENT_W_AWAITING,
	    .extra = ag->o->env.v,
	    .nextra = ag->o->env.n,
	};

	return worker_env_build(ag->environ_in, &s, env);
}

/* ddp-exec next to ddplaunch (the build tree), else where the install put
 * it relative to ddplaunch (a moved or DESTDIR-staged install runs its own),
 * else in the configured libexecdir. */
/* ddp-exec: next to ddplaunch (a build tree, or an install moved or staged
 * whole), or in the configured libexecdir. Returns 0 with shim filled, or
 * -ENOENT. */
static int find_shim(char *shim, size_t len)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	const char *dir;

	if (n > 0) {
		self[n] = '\0';
		dir = dirname(self);
		snprintf(shim, len, "%s/ddp-exec", dir);
		if (access(shim, X_OK) == 0)
			return 0;
		snprintf(shim, len, "%s/%s/ddp-exec", dir, DDP_LIBEXECDIR_FROM_BINDIR);
		if (DDP_LIBEXECDIR_FROM_BINDIR[0] && access(shim, X_OK) == 0)
			return 0;
	}
	snprintf(shim, len, "%s/ddp-exec", DDP_LIBEXECDIR);
	return access(shim, X_OK) == 0 ? 0 : -ENOENT;
}

#define SHIM_MISSING "cannot find 'ddp-exec' next to ddplaunch or in '%s' (reinstall ddplaunch)"

static int agent_find_shim(struct agent *ag)
{
	int rc = find_shim(ag->shim, sizeof(ag->shim));

	if (rc)
		log_error(SHIM_MISSING, DDP_LIBEXECDIR);
	return rc;
}

/* GPUs visible as /dev/nvidiaN (for --nproc_per_node=gpu/auto). */
static int count_gpus(const struct agent *ag)
{
	DIR *d = opendir("/dev");
	struct dirent *e;
	int n = 0;

	if (!d)
		return 0;
	while ((e = readdir(d)))
		if (!strncmp(e->d_name, "nvidia", 6) && e->d_name[6] >= '0' && e->d_name[6] <= '9')
			n++;
	closedir(d);
	return opts_visible_gpus(envp_get(ag->environ_in, "CUDA_VISIBLE_DEVICES"), n);
}

int agent_check(const struct launch_opts *o, char **environ_in, char *err, size_t errlen)
{
	struct agent ag = {.o = o, .environ_in = environ_in};
	char shim[PATH_MAX];
	int nproc = opts_nproc(o, (int)sysconf(_SC_NPROCESSORS_ONLN), count_gpus(&ag), err, errlen);

	if (nproc < 0)
		return nproc;
	if (find_shim(shim, sizeof(shim))) {
		snprintf(err, errlen, SHIM_MISSING, DDP_LIBEXECDIR);
		return -ENOENT;
	}
	return rdzv_check(o, environ_in, nproc, err, errlen);
}

int agent_setup(struct agent *ag, const struct rdzv_events *events)
{
	char err[OPTS_ERR_LEN];
	const char *cg;
	int rc;

	ag->nproc =
	    opts_nproc(ag->o, (int)sysconf(_SC_NPROCESSORS_ONLN), count_gpus(ag), err, sizeof(err));
	if (ag->nproc < 0) {
		log_error("%s", err);
		return 2;
	}
	ag->w = calloc((size_t)ag->nproc, sizeof(*ag->w));
	if (!ag->w || agent_find_shim(ag) || agent_build_argv(ag))
		return 1;
	/* Fail on an unsupported rendezvous before taking any port. */
	rc = rdzv_new(ag->o, ag->environ_in, ag->nproc, &ag->rdzv, err, sizeof(err));
	if (rc) {
		log_error("%s", err);
		return 2;
	}
	/* Many nodes: a worker replaced alone joins a later round than the
	 * others' (agent_decide.h); one node: it re-forms with them. */
	ag->round_local = ag->nproc;
	ag->can_shrink = ag->nproc > 1 && rdzv_set_nproc(ag->rdzv, ag->nproc) == 0;
	/* The workers' store (one node) or the rendezvous store (many) is
	 * bound here, or its host reached. */
	rc = rdzv_attach(ag->rdzv, ag->loop, events, ag);
	if (rc)
		return rc == -EADDRINUSE ? 2 : 1;
	if (agent_prepare_run_dir(ag))
		return 1;
	cg = envp_get(ag->environ_in, "DDPLAUNCH_CGROUP");
	footprint_open(&ag->fp, !cg || strcmp(cg, "off"));
	ag->set_omp = worker_env_needs_omp(ag->environ_in, ag->o->env.v, ag->o->env.n, ag->nproc);
	if (ag->set_omp)
		log_info("setting OMP_NUM_THREADS=1 for each worker (%d workers on this node); "
			 "set it yourself to tune",
			 ag->nproc);
	return 0;
}

static void handle_free_noop(uv_handle_t *h)
{
}

void agent_teardown(struct agent *ag)
{
	char path[PATH_MAX + 16];

	summary_print_reforms(&ag->summary);
	summary_print_hangs(&ag->summary);
	summary_print_stragglers(&ag->summary);
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
	for (int i = 0; i < ag->nproc; i++)
		worker_proc_drop_progress(&ag->w[i].proc);
	footprint_close(&ag->fp);
	agent_metrics_close(ag);
	agent_hang_stop(&ag->hang);
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

/* The hang watch's view of the agent (agent_hang_host). */
static void hang_worker(void *arg, int i, struct agent_hang_worker *out)
{
	struct agent *ag = arg;
	struct agent_worker *w = &ag->w[i];

	out->proc = &w->proc;
	out->rank = w->rank;
	out->local_rank = w->local_rank;
	out->started = w->state == AGENT_W_RUNNING;
}

static bool hang_done(void *arg)
{
	const struct agent *ag = arg;

	return ag->state == AGENT_DONE;
}

static void hang_recorded(void *arg)
{
	agent_status_publish(arg);
}

static void hang_finished(void *arg, int i)
{
	struct agent *ag = arg;

	ag->w[i].done_cut = true;
}

void agent_init_handles(struct agent *ag, uv_signal_cb on_signal)
{
	struct agent_hang_host host = {
	    .loop = ag->loop,
	    .nproc = ag->nproc,
	    .hang_timeout = ag->o->hang_timeout,
	    .rdzv = ag->rdzv,
	    .round = &ag->round,
	    .summary = &ag->summary,
	    .arg = ag,
	    .worker = hang_worker,
	    .done = hang_done,
	    .recorded = hang_recorded,
	    .finished = hang_finished,
	    .phase_word = agent_phase_word,
	};

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
	agent_hang_start(&ag->hang, &host);
}
