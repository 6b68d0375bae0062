/*
 * agent_chan.c - the worker's end of the launcher's agent channel
 * (DDP_AGENT_FD, a socket; its lines are common/agent_wire.h's): ddp_init
 * says "hello 1 resizable" on it, and a reader thread hears each new round
 * the agent hands the surviving workers, keeps the latest, and aborts the
 * communicator so that a collective in flight returns at once.
 * ddp_next_round gives the round to the program.
 *
 * The fd is the process's, taken once and kept (chan_proc below); a
 * context holds it from ddp_init to ddp_free, one context at a time.
 */
#include "agent_chan.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

/* The process's channel: looked for once, kept for the life of the
 * process. The partial line the last reader left is kept too, so a round
 * split across two contexts' readers is still read whole. */
static struct {
	pthread_mutex_t lock;
	bool looked; /* the environment was read (and cleared) */
	pid_t pid;   /* ...by this process: a forked child is not the worker */
	int fd;	     /* the channel, or -1 */
	bool said;   /* the "hello" line was written */
	bool held;   /* a context's reader runs on it */
	struct agent_wire_reader rd;
} chan_proc = {PTHREAD_MUTEX_INITIALIZER, false, 0, -1, false, false, {{0}, 0, false}};

static long env_long(const char *name, long lo, long hi)
{
	const char *s = getenv(name);
	char *end;
	long v;

	if (!s || !*s)
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	return *end || errno || v < lo || v > hi ? -1 : v;
}

/* The channel's fd from DDP_AGENT_FD, or -1. Only a socket whose peer is
 * the agent named in DDP_AGENT_PID (the process that made the socket
 * pair): a program (a shell wrapper, a server) that has a socket, file or
 * pipe of its own on that number keeps it, and the worker is restarted as
 * any program would be. */
static int chan_fd_from_env(void)
{
	long fd = env_long("DDP_AGENT_FD", 3, 65535);
	long pid = env_long("DDP_AGENT_PID", 1, 0x7fffffff);
	struct ucred cr;
	socklen_t len = sizeof(cr);
	struct stat st;

	if (fd < 0)
		return -1;
	if (pid < 0) {
		log_debug("DDP_AGENT_FD without DDP_AGENT_PID: no agent channel");
		return -1;
	}
	if (fstat((int)fd, &st) < 0 || !S_ISSOCK(st.st_mode) ||
	    getsockopt((int)fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 || cr.pid != (pid_t)pid) {
		log_debug("fd %ld is not a socket to the agent (pid %ld): no agent channel", fd,
			  pid);
		return -1;
	}
	return (int)fd;
}

/* Once per process: the fd, close-on-exec, and the variables gone from the
 * environment, so that no child (a data loader, a shell) takes the channel
 * for its own. With chan_proc.lock held. */
static void chan_proc_look(void)
{
	if (chan_proc.looked)
		return;
	chan_proc.looked = true;
	chan_proc.pid = getpid();
	chan_proc.fd = chan_fd_from_env();
	unsetenv("DDP_AGENT_FD");
	unsetenv("DDP_AGENT_PID");
	agent_wire_reader_init(&chan_proc.rd);
	if (chan_proc.fd >= 0)
		fcntl(chan_proc.fd, F_SETFD, FD_CLOEXEC);
}

/* Writes one whole line; never raises SIGPIPE. Returns 0 or -EPIPE. */
static int chan_send(int fd, const char *line, size_t n)
{
	while (n > 0) {
		ssize_t w = send(fd, line, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -EPIPE;
		line += w;
		n -= (size_t)w;
	}
	return 0;
}

static int chan_send_msg(int fd, const struct agent_wire_msg *m)
{
	char line[AGENT_WIRE_MAX_LINE];
	int n = agent_wire_format(m, line, sizeof(line));

	return n < 0 ? n : chan_send(fd, line, (size_t)n);
}

static void chan_deliver(struct agent_chan *c, const struct agent_wire_round *r)
{
	pthread_mutex_lock(&c->lock);
	c->next = *r;
	c->seq++;
	/* Not while the communicator is rebuilt (ddp_abort's contract): that
	 * re-formation's waits see the flag and end instead. */
	if (c->reforming) {
		c->superseded_round = r->round;
		atomic_store(&c->superseded, 1);
	} else {
		c->abort(c->abort_arg);
	}
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

/* The lines in buf[0..n): rounds are delivered; other kinds (the agent's
 * lines to come) and refused lines are skipped. */
static void chan_lines(struct agent_chan *c, const char *buf, size_t n)
{
	while (n > 0) {
		struct agent_wire_msg m;
		size_t used;
		int rc = agent_wire_read(&chan_proc.rd, buf, n, &used, &m);

		if (rc == 1 && m.kind == AGENT_WIRE_ROUND)
			chan_deliver(c, &m.r);
		else if (rc < 0)
			log_debug("agent channel: a line refused (%s)", strerror(-rc));
		buf += used;
		n -= used;
	}
}

/* Until stop_fd is signalled (agent_chan_close) or the agent's end
 * closes. Only this thread touches chan_proc.rd while it runs. */
static void *chan_reader(void *arg)
{
	struct agent_chan *c = arg;
	char buf[4096];

	for (;;) {
		struct pollfd pfd[2] = {{c->fd, POLLIN, 0}, {c->stop_fd, POLLIN, 0}};
		ssize_t n;

		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pfd[1].revents)
			return NULL; /* stopped: the channel stays open for later */
		n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			break;
		chan_lines(c, buf, (size_t)n);
	}
	pthread_mutex_lock(&c->lock);
	c->closed = true;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* Ends the reader's wait, not the channel: the fd stays open (a later
 * ddp_init holds it again). Joins the reader and closes its stop. */
static void chan_reader_stop(struct agent_chan *c)
{
	uint64_t one = 1;

	if (write(c->stop_fd, &one, sizeof(one)) != sizeof(one))
		log_debug("agent channel: cannot stop the reader: %s", strerror(errno));
	pthread_join(c->thread, NULL);
	close(c->stop_fd);
}

/* The lock and a condition variable on the monotonic clock (a wall clock
 * set back must not stretch a wait). */
static void chan_sync_init(struct agent_chan *c)
{
	pthread_condattr_t ca;

	pthread_mutex_init(&c->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cond, &ca);
	pthread_condattr_destroy(&ca);
	c->inited = true;
}

/* Takes the process's channel for c and says so to the agent. With
 * chan_proc.lock held. Returns 0 or a negative errno (no channel). */
static int chan_hold(struct agent_chan *c)
{
	struct agent_wire_msg m = {.kind = AGENT_WIRE_RESIZABLE};

	chan_proc_look();
	/* A child forked by the worker (a data loader) inherits the fd and
	 * this state, not the channel: the rounds are its parent's. */
	if (chan_proc.fd < 0 || chan_proc.held || chan_proc.pid != getpid())
		return -ENOTSUP;
	if (!chan_proc.said)
		m = (struct agent_wire_msg){
		    .kind = AGENT_WIRE_HELLO, .version = AGENT_WIRE_VERSION, .resizable = true};
	/* The reader and its stop first, the word to the agent last: the
	 * agent must not count on a worker that has no reader, and sends no
	 * round before the word. */
	c->stop_fd = eventfd(0, EFD_CLOEXEC);
	if (c->stop_fd < 0)
		return -errno;
	c->fd = chan_proc.fd;
	if (pthread_create(&c->thread, NULL, chan_reader, c) != 0) {
		close(c->stop_fd);
		c->fd = c->stop_fd = -1;
		return -EAGAIN;
	}
	if (chan_send_msg(chan_proc.fd, &m) < 0) {
		chan_reader_stop(c);
		c->fd = c->stop_fd = -1;
		return -EPIPE;
	}
	chan_proc.said = true;
	chan_proc.held = true;
	return 0;
}

void agent_chan_open(struct agent_chan *c, void (*abort)(void *arg), void *arg)
{
	c->fd = c->stop_fd = -1;
	c->abort = abort;
	c->abort_arg = arg;
	chan_sync_init(c);
	pthread_mutex_lock(&chan_proc.lock);
	c->started = chan_hold(c) == 0;
	pthread_mutex_unlock(&chan_proc.lock);
}

void agent_chan_close(struct agent_chan *c)
{
	if (!c->inited)
		return;
	if (c->started) {
		/* The agent hears the end of the worker by its exit. */
		chan_reader_stop(c);
		pthread_mutex_lock(&chan_proc.lock);
		chan_proc.held = false;
		pthread_mutex_unlock(&chan_proc.lock);
		c->started = false;
	}
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->cond);
	c->inited = false;
}

int agent_chan_reforming(struct agent_chan *c, bool on)
{
	int by = 0;

	if (!c->inited)
		return 0;
	pthread_mutex_lock(&c->lock);
	c->reforming = on;
	if (on && c->seq != c->taken) {
		/* A later round than the one being formed already waits. */
		c->superseded_round = c->next.round;
		atomic_store(&c->superseded, 1);
	} else if (on) {
		atomic_store(&c->superseded, 0);
	} else {
		by = atomic_load(&c->superseded) ? c->superseded_round : 0;
		atomic_store(&c->superseded, 0);
	}
	pthread_mutex_unlock(&c->lock);
	return by;
}

static void chan_deadline(struct timespec *ts, uint64_t timeout_ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += (time_t)(timeout_ms / 1000);
	ts->tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

int agent_chan_wait(struct agent_chan *c, struct agent_wire_round *r, uint64_t timeout_ms)
{
	struct timespec ts;
	int rc = 0;

	if (!c->started || c->fixed)
		return -ENOTSUP;
	chan_deadline(&ts, timeout_ms);
	pthread_mutex_lock(&c->lock);
	while (c->seq == c->taken && !c->closed && rc == 0)
		rc = pthread_cond_timedwait(&c->cond, &c->lock, &ts);
	if (c->seq != c->taken) {
		*r = c->next;
		c->taken = c->seq;
		rc = 0;
	} else {
		rc = c->closed ? -EPIPE : -ETIMEDOUT;
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

void agent_chan_took(struct agent_chan *c, int round)
{
	struct agent_wire_msg m = {.kind = AGENT_WIRE_TOOK, .round = round};

	if (c->started && chan_send_msg(c->fd, &m) < 0)
		log_debug("agent channel: cannot say \"took %d\": the agent is gone", round);
}

int agent_chan_declare(struct agent_chan *c, bool resizable)
{
	struct agent_wire_msg m = {.kind = resizable ? AGENT_WIRE_RESIZABLE : AGENT_WIRE_FIXED};

	if (!c->started)
		return -ENOTSUP;
	return chan_send_msg(c->fd, &m) < 0 ? -EPIPE : 0;
}

int agent_chan_replica(struct agent_chan *c, const struct agent_wire_replica *r)
{
	struct agent_wire_msg m = {.kind = AGENT_WIRE_REPLICA, .replica = *r};
	int rc;

	if (!c->started)
		return -ENOTSUP;
	rc = chan_send_msg(c->fd, &m);
	return rc == -ERANGE ? rc : rc < 0 ? -EPIPE : 0;
}
