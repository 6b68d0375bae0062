/* One supervised process: spawn, its three pipes, output lines, exit, close. */
#include "worker_proc.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WORKER_PROC_NHANDLES 4 /* the process and its three pipes */

/* One read buffer for every pipe: the loop is single-threaded and each
 * read is consumed before the next allocation. */
static char worker_readbuf[65536];
/* prefix + longest line + '\n' */
static char worker_linebuf[WORKER_PROC_PREFIX_LEN + WORKER_PROC_MAX_LINE + 1];

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

/* A whole line of stream `s` (0 stdout, 1 stderr): log file, console, tail. */
static void proc_line(struct worker_proc *p, int s, const char *line, size_t len)
{
	size_t n = 0;

	if (p->log_fd[s] >= 0) {
		memcpy(worker_linebuf, line, len);
		worker_linebuf[len] = '\n';
		write_all(p->log_fd[s], worker_linebuf, len + 1);
	}
	if (p->console_fd[s] >= 0) {
		memcpy(worker_linebuf, p->prefix, p->prefix_len);
		n = p->prefix_len;
		memcpy(worker_linebuf + n, line, len);
		n += len;
		worker_linebuf[n++] = '\n';
		/* One write per line: lines of different workers never mix. */
		write_all(p->console_fd[s], worker_linebuf, n);
	}
	if (s == 1)
		tail_add(p, line, len);
}

static void emit_out(void *arg, const char *line, size_t len)
{
	proc_line(arg, 0, line, len);
}

static void emit_err(void *arg, const char *line, size_t len)
{
	proc_line(arg, 1, line, len);
}

static void emit_pid(void *arg, const char *line, size_t len)
{
	struct worker_proc *p = arg;
	char buf[24];

	if (len == 0 || len >= sizeof(buf))
		return;
	memcpy(buf, line, len);
	buf[len] = '\0';
	p->pid = atoi(buf);
}

/* The one place that counts the run's open handles. */
static void handle_closed(uv_handle_t *h)
{
	struct worker_proc *p = h->data;

	if (--p->nhandles > 0)
		return;
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

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct worker_proc *p = s->data;
	struct linebuf *lb = s == (uv_stream_t *)&p->out   ? &p->lb_out
			     : s == (uv_stream_t *)&p->err ? &p->lb_err
							   : &p->lb_pid;
	linebuf_emit_fn emit = lb == &p->lb_out ? emit_out : lb == &p->lb_err ? emit_err : emit_pid;

	if (nread > 0) {
		linebuf_feed(lb, buf->base, (size_t)nread, emit, p);
		return;
	}
	if (nread == 0)
		return;
	/* EOF or error: the stream is over. */
	linebuf_flush(lb, emit, p);
	if (!uv_is_closing((uv_handle_t *)s))
		uv_close((uv_handle_t *)s, handle_closed);
}

static void exit_cb(uv_process_t *h, int64_t status, int term_signal)
{
	struct worker_proc *p = h->data;

	p->running = false;
	p->exit_code = (int)status;
	p->term_signal = term_signal;
	p->exit_time_ms = wall_ms();
	uv_close((uv_handle_t *)h, handle_closed);
	p->on_exit(p, p->arg);
}

void worker_proc_init(struct worker_proc *p)
{
	memset(p, 0, sizeof(*p));
	p->console_fd[0] = p->console_fd[1] = -1;
	p->log_fd[0] = p->log_fd[1] = -1;
}

static void proc_configure(struct worker_proc *p, const struct worker_proc_config *cfg)
{
	uv_pipe_t *pipes[3] = {&p->out, &p->err, &p->pidp};

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
	p->arg = cfg->arg;
	linebuf_init(&p->lb_out, WORKER_PROC_MAX_LINE);
	linebuf_init(&p->lb_err, WORKER_PROC_MAX_LINE);
	linebuf_init(&p->lb_pid, 32);
	for (int i = 0; i < 3; i++) {
		uv_pipe_init(cfg->loop, pipes[i], 0);
		pipes[i]->data = p;
	}
	p->proc.data = p;
	p->nhandles = WORKER_PROC_NHANDLES;
}

int worker_proc_spawn(struct worker_proc *p, const struct worker_proc_config *cfg)
{
	uv_stdio_container_t stdio[4];
	uv_process_options_t opt = {0};
	int rc;

	proc_configure(p, cfg);
	stdio[0].flags = UV_INHERIT_FD;
	stdio[0].data.fd = STDIN_FILENO;
	stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
	stdio[1].data.stream = (uv_stream_t *)&p->out;
	stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
	stdio[2].data.stream = (uv_stream_t *)&p->err;
	stdio[3].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
	stdio[3].data.stream = (uv_stream_t *)&p->pidp;
	opt.exit_cb = exit_cb;
	opt.file = cfg->file;
	opt.args = cfg->argv;
	opt.env = cfg->env;
	opt.flags = UV_PROCESS_DETACHED; /* setsid: its own session and process group */
	opt.stdio_count = 4;
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
	return 0;
}

void worker_proc_signal(struct worker_proc *p, int sig)
{
	if (p->running && p->shim_pid > 0)
		kill(-p->shim_pid, sig);
}

void worker_proc_kill_group(struct worker_proc *p)
{
	if (p->shim_pid > 0)
		kill(-p->shim_pid, SIGKILL);
}

void worker_proc_close_pipes(struct worker_proc *p)
{
	uv_pipe_t *pipes[3] = {&p->out, &p->err, &p->pidp};
	linebuf_emit_fn emits[3] = {emit_out, emit_err, emit_pid};
	struct linebuf *lbs[3] = {&p->lb_out, &p->lb_err, &p->lb_pid};

	if (!worker_proc_busy(p))
		return;
	for (int i = 0; i < 3; i++)
		if (!uv_is_closing((uv_handle_t *)pipes[i])) {
			linebuf_flush(lbs[i], emits[i], p);
			uv_close((uv_handle_t *)pipes[i], handle_closed);
		}
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
