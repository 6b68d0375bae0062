/* One worker: spawn through ddp-exec, its three pipes, output lines, exit. */
#include "agent_int.h"
#include "worker_env.h"

#include <errno.h>
#include <fcntl.h>
#include <log.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* One read buffer for every pipe: the loop is single-threaded and each
 * read is consumed before the next allocation. */
static char worker_readbuf[65536];
/* prefix + longest line + '\n' */
static char worker_linebuf[64 + AGENT_MAX_LINE + 1];

static int64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN) {
			/* A console someone made non-blocking: wait until it drains
			 * rather than cut the line. */
			struct pollfd pfd = {.fd = fd, .events = POLLOUT};

			if (poll(&pfd, 1, -1) >= 0 || errno == EINTR)
				continue;
		}
		if (w <= 0)
			return; /* a closed console must not stop the job */
		p += w;
		n -= (size_t)w;
	}
}

static void worker_tail_add(struct agent_worker *w, const char *line, size_t len)
{
	char *slot = w->tail[w->tail_next];

	if (len >= AGENT_TAIL_LEN)
		len = AGENT_TAIL_LEN - 1;
	memcpy(slot, line, len);
	slot[len] = '\0';
	w->tail_next = (w->tail_next + 1) % AGENT_TAIL_LINES;
	if (w->tail_n < AGENT_TAIL_LINES)
		w->tail_n++;
}

/* A whole line of stream `s` (0 stdout, 1 stderr): log file, console, tail. */
static void worker_line(struct agent_worker *w, int s, const char *line, size_t len)
{
	size_t n = 0;

	if (w->log_fd[s] >= 0) {
		memcpy(worker_linebuf, line, len);
		worker_linebuf[len] = '\n';
		write_all(w->log_fd[s], worker_linebuf, len + 1);
	}
	if (w->console[s]) {
		memcpy(worker_linebuf, w->prefix, w->prefix_len);
		n = w->prefix_len;
		memcpy(worker_linebuf + n, line, len);
		n += len;
		worker_linebuf[n++] = '\n';
		/* One write per line: lines of different ranks never mix. */
		write_all(s == 0 ? STDOUT_FILENO : STDERR_FILENO, worker_linebuf, n);
	}
	if (s == 1)
		worker_tail_add(w, line, len);
}

static void emit_out(void *arg, const char *line, size_t len)
{
	worker_line(arg, 0, line, len);
}

static void emit_err(void *arg, const char *line, size_t len)
{
	worker_line(arg, 1, line, len);
}

static void emit_pid(void *arg, const char *line, size_t len)
{
	struct agent_worker *w = arg;
	char buf[24];

	if (len == 0 || len >= sizeof(buf))
		return;
	memcpy(buf, line, len);
	buf[len] = '\0';
	w->pid = atoi(buf);
}

static void worker_handle_closed(uv_handle_t *h)
{
	struct agent_worker *w = h->data;

	w->nhandles--;
	agent_on_handle_closed(w->ag);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	buf->base = worker_readbuf;
	buf->len = sizeof(worker_readbuf);
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct agent_worker *w = s->data;
	struct linebuf *lb = s == (uv_stream_t *)&w->out   ? &w->lb_out
			     : s == (uv_stream_t *)&w->err ? &w->lb_err
							   : &w->lb_pid;
	linebuf_emit_fn emit = lb == &w->lb_out ? emit_out : lb == &w->lb_err ? emit_err : emit_pid;

	if (nread > 0) {
		linebuf_feed(lb, buf->base, (size_t)nread, emit, w);
		return;
	}
	if (nread == 0)
		return;
	/* EOF or error: the stream is over. */
	linebuf_flush(lb, emit, w);
	if (!uv_is_closing((uv_handle_t *)s))
		uv_close((uv_handle_t *)s, worker_handle_closed);
}

static void exit_cb(uv_process_t *p, int64_t status, int term_signal)
{
	struct agent_worker *w = p->data;

	w->running = false;
	w->exited = true;
	w->exit_code = (int)status;
	w->term_signal = term_signal;
	w->exit_time_ms = wall_ms();
	uv_close((uv_handle_t *)p, worker_handle_closed);
	agent_on_worker_exit(w->ag, w);
}

static int worker_open_logs(struct agent_worker *w)
{
	static const char *const names[2] = {"stdout.log", "stderr.log"};
	char path[PATH_MAX + 16];

	for (int s = 0; s < 2; s++) {
		w->log_fd[s] = -1;
		if (!w->ag->files)
			continue;
		snprintf(path, sizeof(path), "%s/%s", w->dir, names[s]);
		w->log_fd[s] =
		    open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
		if (w->log_fd[s] < 0) {
			log_error("cannot create log file '%s': %s (check --log_dir)", path,
				  strerror(errno));
			return -errno;
		}
	}
	return 0;
}

/* Fills the parts of w that depend on the attempt. */
static int worker_reset(struct agent_worker *w)
{
	struct agent *ag = w->ag;
	const struct launch_opts *o = ag->o;
	int redirect = opts_streams_mask(&o->redirects, w->local_rank);
	bool shown = opts_rank_shown(o, w->local_rank);

	w->running = w->exited = w->stopped = false;
	w->exit_code = w->term_signal = w->exit_seq = 0;
	w->pid = w->shim_pid = 0;
	w->tail_n = w->tail_next = 0;
	w->console[0] = shown && !(redirect & 1);
	w->console[1] = shown && !(redirect & 2);
	w->prefix_len = o->no_prefix ? 0
				     : linebuf_prefix(o->prefix, w->rank, w->local_rank, w->prefix,
						      sizeof(w->prefix));
	linebuf_init(&w->lb_out, AGENT_MAX_LINE);
	linebuf_init(&w->lb_err, AGENT_MAX_LINE);
	linebuf_init(&w->lb_pid, 32);
	unlink(w->error_file);
	return worker_open_logs(w);
}

/* argv: ddp-exec PARENT PROGRAM... [--local_rank=N] ARGS... */
static char **worker_argv(struct agent_worker *w, char *parent, char *local_rank_arg)
{
	struct agent *ag = w->ag;
	size_t n = 0;
	char **v = calloc(ag->argc + 4, sizeof(*v));

	if (!v)
		return NULL;
	v[n++] = ag->shim;
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

static int worker_env(struct agent_worker *w, char ***env)
{
	struct agent *ag = w->ag;
	struct worker_env_spec s = {
	    .rank = w->rank,
	    .local_rank = w->local_rank,
	    .world_size = ag->round.world_size,
	    .local_world_size = ag->nproc,
	    .group_rank = ag->round.group_rank,
	    .group_world_size = ag->round.group_world_size,
	    .role_rank = w->rank,
	    .role_world_size = ag->round.world_size,
	    .role_name = ag->o->role,
	    .master_addr = ag->round.master_addr,
	    .master_port = ag->round.master_port,
	    .restart_count = ag->attempt,
	    .max_restarts = ag->o->max_restarts,
	    .run_id = ag->o->rdzv_id,
	    .error_file = w->error_file,
	    .set_omp = ag->set_omp,
	    .extra = ag->o->env.v,
	    .nextra = ag->o->env.n,
	};

	return worker_env_build(ag->environ_in, &s, env);
}

static void worker_init_handles(struct agent_worker *w)
{
	uv_pipe_t *pipes[3] = {&w->out, &w->err, &w->pidp};

	for (int i = 0; i < 3; i++) {
		uv_pipe_init(w->ag->loop, pipes[i], 0);
		pipes[i]->data = w;
	}
	w->proc.data = w;
	w->nhandles = 4;
	w->ag->nhandles += 4;
}

/* Starts ddp-exec with the worker's command line; stdout, stderr and the
 * pid report (fd 3) come back on pipes. */
static int worker_uv_spawn(struct agent_worker *w, char **argv, char **env)
{
	uv_stdio_container_t stdio[4];
	uv_process_options_t opt = {0};

	stdio[0].flags = UV_INHERIT_FD;
	stdio[0].data.fd = STDIN_FILENO;
	stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
	stdio[1].data.stream = (uv_stream_t *)&w->out;
	stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
	stdio[2].data.stream = (uv_stream_t *)&w->err;
	stdio[3].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
	stdio[3].data.stream = (uv_stream_t *)&w->pidp;
	opt.exit_cb = exit_cb;
	opt.file = w->ag->shim;
	opt.args = argv;
	opt.env = env;
	opt.flags = UV_PROCESS_DETACHED; /* setsid: its own session and process group */
	opt.stdio_count = 4;
	opt.stdio = stdio;
	return uv_spawn(w->ag->loop, &w->proc, &opt);
}

int agent_worker_spawn(struct agent_worker *w)
{
	struct agent *ag = w->ag;
	char parent[24], lr[32];
	char **argv = NULL, **env = NULL;
	bool spawn_called = false;
	int rc = worker_reset(w);

	worker_init_handles(w);
	snprintf(parent, sizeof(parent), "%d", (int)getpid());
	snprintf(lr, sizeof(lr), "--local_rank=%d", w->local_rank);
	if (!rc)
		rc = worker_env(w, &env);
	if (!rc && !(argv = worker_argv(w, parent, ag->o->pass_local_rank ? lr : NULL)))
		rc = -ENOMEM;
	if (rc)
		goto out;
	spawn_called = true;
	rc = worker_uv_spawn(w, argv, env);
	if (rc)
		goto out;
	w->running = true;
	w->shim_pid = w->proc.pid;
	uv_read_start((uv_stream_t *)&w->out, alloc_cb, read_cb);
	uv_read_start((uv_stream_t *)&w->err, alloc_cb, read_cb);
	uv_read_start((uv_stream_t *)&w->pidp, alloc_cb, read_cb);
out:
	if (rc) {
		log_error("cannot start worker %d: %s", w->rank, uv_strerror(rc));
		if (spawn_called) {
			uv_close((uv_handle_t *)&w->proc, worker_handle_closed);
		} else {
			/* uv_spawn never initialised the handle: nothing to close. */
			w->nhandles--;
			ag->nhandles--;
		}
		agent_worker_close_pipes(w);
	}
	free(argv);
	worker_env_free(env);
	return rc;
}

void agent_worker_signal(struct agent_worker *w, int sig)
{
	if (w->running && w->shim_pid > 0)
		kill(-w->shim_pid, sig);
}

void agent_worker_kill_group(struct agent_worker *w)
{
	/* Also after the worker exited: a grandchild may still hold the group. */
	if (w->shim_pid > 0)
		kill(-w->shim_pid, SIGKILL);
}

void agent_worker_close_pipes(struct agent_worker *w)
{
	uv_pipe_t *pipes[3] = {&w->out, &w->err, &w->pidp};
	linebuf_emit_fn emits[3] = {emit_out, emit_err, emit_pid};
	struct linebuf *lbs[3] = {&w->lb_out, &w->lb_err, &w->lb_pid};

	for (int i = 0; i < 3; i++)
		if (!uv_is_closing((uv_handle_t *)pipes[i])) {
			linebuf_flush(lbs[i], emits[i], w);
			uv_close((uv_handle_t *)pipes[i], worker_handle_closed);
		}
}

/* Frees what one attempt of the worker used (after every handle closed). */
void agent_worker_release(struct agent_worker *w)
{
	linebuf_release(&w->lb_out);
	linebuf_release(&w->lb_err);
	linebuf_release(&w->lb_pid);
	for (int s = 0; s < 2; s++) {
		if (w->log_fd[s] >= 0)
			close(w->log_fd[s]);
		w->log_fd[s] = -1;
	}
}

/* Fills rec for the summary; *errmsg (malloc'ed or NULL) and tailbuf are
 * owned by the caller. */
int agent_worker_record(struct agent_worker *w, struct summary_rec *rec, char **errmsg,
			char *tailbuf, size_t taillen)
{
	size_t n = 0;

	memset(rec, 0, sizeof(*rec));
	rec->attempt = w->ag->attempt;
	rec->rank = w->rank;
	rec->local_rank = w->local_rank;
	rec->pid = w->pid > 0 ? w->pid : w->shim_pid;
	rec->exit_code = w->exit_code;
	rec->term_signal = w->term_signal;
	rec->stopped = w->stopped;
	rec->time_ms = w->exit_time_ms;
	*errmsg = NULL;
	if (summary_rec_failed(rec))
		summary_read_error_file(w->error_file, errmsg);
	rec->error_message = *errmsg;
	tailbuf[0] = '\0';
	for (int i = 0; i < w->tail_n; i++) {
		int slot = (w->tail_next - w->tail_n + i + AGENT_TAIL_LINES) % AGENT_TAIL_LINES;
		int k = snprintf(tailbuf + n, taillen - n, "%s%s", i ? "\n" : "", w->tail[slot]);

		if (k < 0 || (size_t)k >= taillen - n)
			break;
		n += (size_t)k;
	}
	rec->stderr_tail = n ? tailbuf : NULL;
	return 0;
}
