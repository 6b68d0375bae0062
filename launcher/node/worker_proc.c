/* One supervised process: spawn, its three pipes, output lines, exit, close. */
#include "worker_proc.h"

#include "log.h"
#include "progress_page.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* the process, its three pipes, the agent channel, a quiet timer per
 * output stream */
#define WORKER_PROC_NHANDLES 7

/* One read buffer for every pipe: the loop is single-threaded and each
 * read is consumed before the next allocation. */
static char worker_readbuf[65536];
/* prefix + longest line + '\n' */
static char worker_linebuf[WORKER_PROC_PREFIX_LEN + WORKER_PROC_MAX_LINE + 1];

/* The stream whose line the console shows unfinished (a partial line was
 * shown), or NULL: any other stream's output first ends that console line,
 * so two workers' text never shares one. */
static struct worker_proc *console_open_proc;
static int console_open_stream;

static int64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Writes all n bytes. Returns 0, or the negative errno of the write that
 * failed (a full disk, a closed console). */
static int write_all(int fd, const char *p, size_t n)
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
			return w < 0 ? -errno : -EIO;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static void tail_add(struct worker_proc *p, const char *line, size_t len)
{
	char *slot = p->tail[p->tail_next];

	if (len >= WORKER_PROC_TAIL_LEN)
		len = WORKER_PROC_TAIL_LEN - 1;
	memcpy(slot, line, len);
	slot[len] = '\0';
	p->tail_next = (p->tail_next + 1) % WORKER_PROC_TAIL_LINES;
	if (p->tail_n < WORKER_PROC_TAIL_LINES)
		p->tail_n++;
}

/* Appends n bytes to the console line being built in worker_linebuf,
 * writing it out first when it would not fit. */
static void console_put(int fd, size_t *used, const char *p, size_t n)
{
	if (*used + n > sizeof(worker_linebuf)) {
		write_all(fd, worker_linebuf, *used);
		*used = 0;
	}
	if (n > sizeof(worker_linebuf)) {
		write_all(fd, p, n);
		return;
	}
	memcpy(worker_linebuf + *used, p, n);
	*used += n;
}

/* Ends the console line a partial line of another stream left open. */
static void console_take(struct worker_proc *p, int s)
{
	struct worker_proc *o = console_open_proc;

	if (!o || (o == p && console_open_stream == s))
		return;
	write_all(o->console_fd[console_open_stream], "\n", 1);
	o->console_open[console_open_stream] = false;
	console_open_proc = NULL;
}

/* New bytes `text` of a line of stream s on the console: the prefix when
 * the console line is not already this stream's, and again after each
 * '\r' (a progress bar redrawn keeps its prefix); '\n' when it ends. */
static void console_piece(struct worker_proc *p, int s, const char *text, size_t n, bool cont,
			  bool ends)
{
	int fd = p->console_fd[s];
	size_t used = 0;

	console_take(p, s);
	if (cont && !p->console_open[s] && n == 0)
		return; /* shown already, and its console line ended by another */
	if (!p->console_open[s]) {
		console_put(fd, &used, p->prefix, p->prefix_len);
		/* The prefix starts the console line: a '\r' there is a no-op. */
		if (p->prefix_len && n && text[0] == '\r') {
			text++;
			n--;
		}
	}
	for (size_t i = 0; i < n; i++) {
		const char *cr = p->prefix_len ? memchr(text + i, '\r', n - i) : NULL;
		size_t k = cr ? (size_t)(cr - text) + 1 : n;

		console_put(fd, &used, text + i, k - i);
		if (cr && k < n)
			console_put(fd, &used, p->prefix, p->prefix_len);
		i = k - 1;
	}
	if (ends)
		console_put(fd, &used, "\n", 1);
	/* One write per line as a rule: lines of different workers never mix. */
	write_all(fd, worker_linebuf, used);
	p->console_open[s] = !ends;
	console_open_proc = ends ? NULL : p;
	console_open_stream = s;
}

/* A piece of a line of stream `s` (0 stdout, 1 stderr): the new bytes go
 * to the log file as they came and to the console; whole lines to the
 * tail. */
static void proc_piece(struct worker_proc *p, int s, const char *line, size_t len, size_t shown,
		       bool ends)
{
	if (p->log_fd[s] >= 0) {
		size_t n = len - shown;

		memcpy(worker_linebuf, line + shown, n);
		if (ends)
			worker_linebuf[n++] = '\n';
		/* A lost log write is counted, not fatal: the job goes on and the
		 * agent reports the loss in its exit status. */
		int rc = write_all(p->log_fd[s], worker_linebuf, n);

		if (rc < 0) {
			p->log_lost[s] += n;
			if (!p->log_errno[s])
				p->log_errno[s] = -rc;
		}
	}
	if (p->console_fd[s] >= 0)
		console_piece(p, s, line + shown, len - shown, shown > 0, ends);
	if (ends)
		p->pending[s] = false; /* what is pending now is a new line */
	if (s == 1 && ends)
		tail_add(p, line, len);
}

static void emit_out(void *arg, const char *line, size_t len, size_t shown, bool ends)
{
	proc_piece(arg, 0, line, len, shown, ends);
}

static void emit_err(void *arg, const char *line, size_t len, size_t shown, bool ends)
{
	proc_piece(arg, 1, line, len, shown, ends);
}

static void emit_pid(void *arg, const char *line, size_t len, size_t shown, bool ends)
{
	struct worker_proc *p = arg;
	char buf[24];

	if (!ends || len == 0 || len >= sizeof(buf))
		return;
	memcpy(buf, line, len);
	buf[len] = '\0';
	p->pid = atoi(buf);
	/* A signal sent to the group before ddp-exec forked reached only
	 * ddp-exec (which leaves ddplaunch's signals to the group): the worker
	 * gets it now. */
	if (p->unsent_sig && p->running && p->shim_pid > 0)
		kill(-p->shim_pid, p->unsent_sig);
	p->unsent_sig = 0;
}

/* The one place that counts the run's open handles. */
static void handle_closed(uv_handle_t *h)
{
	struct worker_proc *p = h->data;

	if (--p->nhandles > 0)
		return;
	if (console_open_proc == p)
		console_open_proc = NULL;
	linebuf_release(&p->lb_out);
	linebuf_release(&p->lb_err);
	linebuf_release(&p->lb_pid);
	p->on_closed(p, p->arg);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	buf->base = worker_readbuf;
	buf->len = sizeof(worker_readbuf);
}

/* A worker that does not speak this version of the channel: said once,
 * and it stays not resizable (restarted with its group, as any program). */
static void chan_other_version(struct worker_proc *p, int version)
{
	if (p->chan_warned)
		return;
	p->chan_warned = true;
	if (version)
		log_warn("worker pid %d speaks version %d of the agent channel, this ddplaunch "
			 "version %d: it is restarted with its group instead of re-formed in place "
			 "(use the libddp or ddplaunch.torch of this ddplaunch)",
			 p->pid ? p->pid : p->shim_pid, version, AGENT_WIRE_VERSION);
	else
		log_warn("worker pid %d speaks the agent channel without a version (an older "
			 "libddp or ddplaunch.torch): it is restarted with its group instead of "
			 "re-formed in place (use the libddp or ddplaunch.torch of this ddplaunch)",
			 p->pid ? p->pid : p->shim_pid);
}

/* One line the worker wrote on the agent channel (common/agent_wire.h):
 * "hello V DECL" first (libddp's ddp_init, ddplaunch.torch), "resizable" or
 * "fixed" (ddp_set_resizable), "took R" (it took round R: ddp_next_round),
 * "numerics PROMISE TEXT" (ddp_say_numerics: kept for the summary),
 * "replica ..." (to on_replica: ddp_agent_replica), "straggler ..." (to
 * on_straggler: ddp_agent_straggler). Kinds this side does
 * not know are skipped. */
static void chan_line(struct worker_proc *p, int rc, const struct agent_wire_msg *m)
{
	if (rc < 0) {
		log_debug("worker pid %d: agent channel line refused: %s", p->shim_pid,
			  strerror(-rc));
		return;
	}
	if (m->kind == AGENT_WIRE_HELLO && p->chan_version == 0) {
		p->chan_version = m->version;
		if (m->version == AGENT_WIRE_VERSION)
			p->resizable = m->resizable;
		else
			chan_other_version(p, m->version);
		if (p->resizable && p->on_declare)
			p->on_declare(p, p->arg);
		return;
	}
	if (m->kind == AGENT_WIRE_UNKNOWN || m->kind == AGENT_WIRE_HELLO)
		return;
	if (p->chan_version != AGENT_WIRE_VERSION) {
		chan_other_version(p, p->chan_version);
		return;
	}
	if (m->kind == AGENT_WIRE_RESIZABLE || m->kind == AGENT_WIRE_FIXED) {
		bool was = p->resizable;

		p->resizable = m->kind == AGENT_WIRE_RESIZABLE;
		if (p->resizable && !was && p->on_declare)
			p->on_declare(p, p->arg);
	} else if (m->kind == AGENT_WIRE_TOOK && m->round == p->sent_round)
		p->took_round = m->round;
	else if (m->kind == AGENT_WIRE_NUMERICS) {
		p->numerics = (int)m->numerics;
		snprintf(p->numerics_text, sizeof(p->numerics_text), "%s", m->text);
	} else if (m->kind == AGENT_WIRE_TOOK)
		log_debug("worker pid %d: ignored a \"took %d\" (the round sent: %d)", p->shim_pid,
			  m->round, p->sent_round);
	else if (m->kind == AGENT_WIRE_REPLICA && p->on_replica)
		p->on_replica(p, &m->replica, p->arg);
	else if (m->kind == AGENT_WIRE_REPLICA)
		return;
	else if (m->kind == AGENT_WIRE_STRAGGLER && p->on_straggler)
		p->on_straggler(p, &m->straggler, p->arg);
	else if (m->kind == AGENT_WIRE_STRAGGLER)
		return;
	else
		log_debug("worker pid %d: ignored a \"round %d\" line (a round is the agent's to "
			  "send, not a worker's)",
			  p->shim_pid, m->r.round);
}

static void chan_feed(struct worker_proc *p, const char *data, size_t n)
{
	while (n > 0) {
		struct agent_wire_msg m;
		size_t used;
		int rc = agent_wire_read(&p->chan_rd, data, n, &used, &m);

		if (rc != 0)
			chan_line(p, rc < 0 ? rc : 0, &m);
		data += used;
		n -= used;
	}
}

/* Reads what waits unread on the channel, without blocking. */
static void chan_drain(struct worker_proc *p)
{
	uv_os_fd_t fd;
	char buf[AGENT_WIRE_MAX_LINE];
	ssize_t n;

	if (uv_is_closing((uv_handle_t *)&p->chan) || uv_fileno((uv_handle_t *)&p->chan, &fd))
		return;
	while ((n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0 || (n < 0 && errno == EINTR))
		if (n > 0)
			chan_feed(p, buf, (size_t)n);
}

static uv_pipe_t *proc_pipe(struct worker_proc *p, int i)
{
	return i == 0 ? &p->out : i == 1 ? &p->err : i == 2 ? &p->pidp : &p->chan;
}

/* The line buffers of the output streams and fd 3 (i < 3). */
static struct linebuf *proc_lb(struct worker_proc *p, int i)
{
	return i == 0 ? &p->lb_out : i == 1 ? &p->lb_err : &p->lb_pid;
}

static linebuf_emit_fn proc_emit(int i)
{
	return i == 0 ? emit_out : i == 1 ? emit_err : emit_pid;
}

static void quiet_arm(struct worker_proc *p, int s);

static void quiet_cb(uv_timer_t *t)
{
	struct worker_proc *p = t->data;
	int s = t == &p->quiet[1];
	uv_os_fd_t fd;
	ssize_t n = -1;

	/* Bytes may be waiting that the loop has not read yet (ddplaunch itself
	 * was not scheduled for a while): then the stream was not quiet. */
	if (uv_fileno((uv_handle_t *)proc_pipe(p, s), &fd) == 0)
		n = read(fd, worker_readbuf, sizeof(worker_readbuf));
	if (n > 0) {
		linebuf_feed(proc_lb(p, s), worker_readbuf, (size_t)n, proc_emit(s), p);
		/* Shown anyway once it waited WORKER_PROC_SHOW_MS. */
		if (!p->pending[s] || uv_now(t->loop) < p->pending_since[s] + WORKER_PROC_SHOW_MS) {
			quiet_arm(p, s);
			return;
		}
	}
	p->pending[s] = false;
	linebuf_show(proc_lb(p, s), proc_emit(s), p);
}

/* After new bytes on output stream s: a partial line is shown once the
 * stream was quiet for WORKER_PROC_QUIET_MS, and at the latest
 * WORKER_PROC_SHOW_MS after its first byte not shown yet. */
static void quiet_arm(struct worker_proc *p, int s)
{
	uint64_t now = uv_now(p->quiet[s].loop), due;

	if (!linebuf_unshown(proc_lb(p, s)) || (p->console_fd[s] < 0 && p->log_fd[s] < 0)) {
		p->pending[s] = false;
		uv_timer_stop(&p->quiet[s]);
		return;
	}
	if (!p->pending[s]) {
		p->pending[s] = true;
		p->pending_since[s] = now;
	}
	due = now + WORKER_PROC_QUIET_MS;
	if (due > p->pending_since[s] + WORKER_PROC_SHOW_MS)
		due = p->pending_since[s] + WORKER_PROC_SHOW_MS;
	uv_timer_start(&p->quiet[s], quiet_cb, due > now ? due - now : 0, 0);
}

/* Stream i is over (end of file, or closed by us): its last partial line
 * goes out as a line; its pipe and timer close. */
static void stream_end(struct worker_proc *p, int i)
{
	uv_pipe_t *pipe = proc_pipe(p, i);

	if (uv_is_closing((uv_handle_t *)pipe))
		return;
	/* A channel line without its '\n' is no line of the grammar. */
	if (i < 3)
		linebuf_flush(proc_lb(p, i), proc_emit(i), p);
	uv_close((uv_handle_t *)pipe, handle_closed);
	if (i < 2)
		uv_close((uv_handle_t *)&p->quiet[i], handle_closed);
}

static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
	struct worker_proc *p = st->data;
	int i = st == (uv_stream_t *)&p->out	? 0
		: st == (uv_stream_t *)&p->err	? 1
		: st == (uv_stream_t *)&p->pidp ? 2
						: 3;

	if (nread > 0 && i == 3) {
		chan_feed(p, buf->base, (size_t)nread);
		return;
	}
	if (nread > 0) {
		linebuf_feed(proc_lb(p, i), buf->base, (size_t)nread, proc_emit(i), p);
		if (i < 2)
			quiet_arm(p, i);
		return;
	}
	if (nread == 0)
		return;
	/* EOF or error: the stream is over. */
	stream_end(p, i);
}

static void exit_cb(uv_process_t *h, int64_t status, int term_signal)
{
	struct worker_proc *p = h->data;

	p->running = false;
	p->exit_code = (int)status;
	p->term_signal = term_signal;
	p->exit_time_ms = wall_ms();
	uv_close((uv_handle_t *)h, handle_closed);
	/* What it wrote on its channel before it exited ("took R" just before
	 * a collective error) decides how its end is taken: heard first. Then
	 * what else holds the channel (a grandchild) is not heard. */
	chan_drain(p);
	stream_end(p, 3);
	p->on_exit(p, p->arg);
}

void worker_proc_init(struct worker_proc *p)
{
	memset(p, 0, sizeof(*p));
	p->console_fd[0] = p->console_fd[1] = -1;
	p->log_fd[0] = p->log_fd[1] = -1;
	p->took_round = -1;
	p->sent_round = -1;
	p->numerics = -1;
	agent_wire_reader_init(&p->chan_rd);
}

static void proc_configure(struct worker_proc *p, const struct worker_proc_config *cfg)
{
	uv_pipe_t *pipes[4] = {&p->out, &p->err, &p->pidp, &p->chan};

	worker_proc_init(p);
	for (int s = 0; s < 2; s++) {
		p->console_fd[s] = cfg->console_fd[s];
		p->log_fd[s] = cfg->log_fd[s];
	}
	if (cfg->prefix)
		p->prefix_len = (size_t)snprintf(p->prefix, sizeof(p->prefix), "%s", cfg->prefix);
	if (p->prefix_len >= sizeof(p->prefix))
		p->prefix_len = sizeof(p->prefix) - 1;
	p->on_exit = cfg->on_exit;
	p->on_closed = cfg->on_closed;
	p->on_replica = cfg->on_replica;
	p->on_straggler = cfg->on_straggler;
	p->on_declare = cfg->on_declare;
	p->arg = cfg->arg;
	linebuf_init(&p->lb_out, WORKER_PROC_MAX_LINE);
	linebuf_init(&p->lb_err, WORKER_PROC_MAX_LINE);
	linebuf_init(&p->lb_pid, 32);
	for (int i = 0; i < 4; i++) {
		uv_pipe_init(cfg->loop, pipes[i], 0);
		pipes[i]->data = p;
	}
	for (int i = 0; i < 2; i++) {
		uv_timer_init(cfg->loop, &p->quiet[i]);
		p->quiet[i].data = p;
	}
	p->proc.data = p;
	p->nhandles = WORKER_PROC_NHANDLES;
}

/* The run's fresh progress page, or none (said once per failed run). */
static void progress_open(struct worker_proc *p, const char *path)
{
	int rc;

	if (!path)
		return;
	rc = progress_page_create(path, &p->progress);
	if (rc)
		log_warn("cannot make the progress page '%s' (%s): this worker's hangs will not be "
			 "named (free space in /dev/shm)",
			 path, strerror(-rc));
}

int worker_proc_spawn(struct worker_proc *p, const struct worker_proc_config *cfg)
{
	uv_stdio_container_t stdio[5];
	uv_process_options_t opt = {0};
	int rc;

	worker_proc_drop_progress(p);
	proc_configure(p, cfg);
	progress_open(p, cfg->progress_path);
	stdio[0].flags = UV_INHERIT_FD;
	stdio[0].data.fd = STDIN_FILENO;
	stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
	stdio[1].data.stream = (uv_stream_t *)&p->out;
	stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
	stdio[2].data.stream = (uv_stream_t *)&p->err;
	stdio[3].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
	stdio[3].data.stream = (uv_stream_t *)&p->pidp;
	/* A socket both ways: the agent channel (WORKER_PROC_CHAN_FD). */
	stdio[4].flags = UV_CREATE_PIPE | UV_READABLE_PIPE | UV_WRITABLE_PIPE;
	stdio[4].data.stream = (uv_stream_t *)&p->chan;
	opt.exit_cb = exit_cb;
	opt.file = cfg->file;
	opt.args = cfg->argv;
	opt.env = cfg->env;
	opt.flags = UV_PROCESS_DETACHED; /* setsid: its own session and process group */
	opt.stdio_count = 5;
	opt.stdio = stdio;
	rc = uv_spawn(cfg->loop, &p->proc, &opt);
	if (rc) {
		/* uv_spawn initialised the handle even though it failed. */
		uv_close((uv_handle_t *)&p->proc, handle_closed);
		worker_proc_close_pipes(p);
		return rc;
	}
	p->running = true;
	p->shim_pid = p->proc.pid;
	uv_read_start((uv_stream_t *)&p->out, alloc_cb, read_cb);
	uv_read_start((uv_stream_t *)&p->err, alloc_cb, read_cb);
	uv_read_start((uv_stream_t *)&p->pidp, alloc_cb, read_cb);
	uv_read_start((uv_stream_t *)&p->chan, alloc_cb, read_cb);
	return 0;
}

void worker_proc_set_prefix(struct worker_proc *p, const char *prefix)
{
	p->prefix_len = (size_t)snprintf(p->prefix, sizeof(p->prefix), "%s", prefix);
	if (p->prefix_len >= sizeof(p->prefix))
		p->prefix_len = sizeof(p->prefix) - 1;
}

int worker_proc_send(struct worker_proc *p, const char *msg, size_t len)
{
	uv_buf_t b = uv_buf_init((char *)msg, (unsigned)len);
	int n;

	if (!p->running || uv_is_closing((uv_handle_t *)&p->chan))
		return -EPIPE;
	n = uv_try_write((uv_stream_t *)&p->chan, &b, 1);
	if (n < 0)
		return n;
	return (size_t)n == len ? 0 : -EAGAIN;
}

int worker_proc_send_round(struct worker_proc *p, const struct agent_wire_round *r)
{
	struct agent_wire_msg m = {.kind = AGENT_WIRE_ROUND, .r = *r};
	char line[AGENT_WIRE_MAX_LINE];
	int n = agent_wire_format(&m, line, sizeof(line));

	if (n < 0)
		return n;
	p->sent_round = r->round;
	return worker_proc_send(p, line, (size_t)n);
}

void worker_proc_signal(struct worker_proc *p, int sig)
{
	if (!(p->running && p->shim_pid > 0))
		return;
	if (!p->pid && sig != SIGCONT)
		p->unsent_sig = sig;
	kill(-p->shim_pid, sig);
}

void worker_proc_kill_group(struct worker_proc *p)
{
	if (p->shim_pid > 0)
		kill(-p->shim_pid, SIGKILL);
}

void worker_proc_close_pipes(struct worker_proc *p)
{
	if (!worker_proc_busy(p))
		return;
	for (int i = 0; i < 4; i++)
		stream_end(p, i);
}

bool worker_proc_busy(const struct worker_proc *p)
{
	return p->nhandles > 0;
}

size_t worker_proc_tail(const struct worker_proc *p, char *buf, size_t len)
{
	size_t n = 0;

	if (len == 0)
		return 0;
	buf[0] = '\0';
	for (int i = 0; i < p->tail_n; i++) {
		int slot = (p->tail_next - p->tail_n + i + WORKER_PROC_TAIL_LINES) %
			   WORKER_PROC_TAIL_LINES;
		int k = snprintf(buf + n, len - n, "%s%s", i ? "\n" : "", p->tail[slot]);

		if (k < 0 || (size_t)k >= len - n) {
			buf[n] = '\0'; /* whole lines only */
			break;
		}
		n += (size_t)k;
	}
	return n;
}

int worker_proc_progress(const struct worker_proc *p, struct ddp_progress *out)
{
	return progress_page_read(p->progress, out);
}

void worker_proc_drop_progress(struct worker_proc *p)
{
	progress_page_unmap(p->progress);
	p->progress = NULL;
}
