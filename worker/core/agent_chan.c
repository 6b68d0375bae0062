/*
 * agent_chan.c - the worker's end of the launcher's agent channel
 * (DDP_AGENT_FD, a socket): ddp_init says "resizable" on it, and a reader
 * thread hears each new round the agent hands the surviving workers,
 * keeps the latest, and aborts the communicator so that a collective in
 * flight returns at once. ddp_next_round gives the round to the program.
 */
#include "agent_chan.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The channel's fd from DDP_AGENT_FD, or -1. Only a socket: a program
 * (a shell wrapper) that reused that number for a file or a pipe of its
 * own keeps it, and the worker is restarted as any program would be. */
static int chan_fd_from_env(void)
{
	const char *s = getenv("DDP_AGENT_FD");
	struct stat st;
	char *end;
	long fd;

	if (!s || !*s)
		return -1;
	fd = strtol(s, &end, 10);
	if (*end || fd < 3 || fd > 65535 || fstat((int)fd, &st) < 0 || !S_ISSOCK(st.st_mode))
		return -1;
	return (int)fd;
}

/* One round line: "round R RANK WORLD LOCAL_RANK LOCAL_WORLD ADDR PORT
 * GROUP_RANK GROUP_WORLD". Returns 0 or -EINVAL. */
static int chan_parse(const char *line, struct agent_round *r)
{
	int n = sscanf(line, "round %d %d %d %d %d %63s %d %d %d", &r->round, &r->rank,
		       &r->world_size, &r->local_rank, &r->local_world_size, r->master_addr,
		       &r->master_port, &r->group_rank, &r->group_world_size);

	return n == 9 ? 0 : -EINVAL;
}

static void chan_deliver(struct agent_chan *c, const struct agent_round *r)
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

static void *chan_reader(void *arg)
{
	struct agent_chan *c = arg;
	char buf[512];
	size_t used = 0;

	for (;;) {
		ssize_t n = read(c->fd, buf + used, sizeof(buf) - 1 - used);
		char *nl;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		used += (size_t)n;
		buf[used] = '\0';
		while ((nl = strchr(buf, '\n'))) {
			struct agent_round r;

			*nl = '\0';
			if (chan_parse(buf, &r) == 0)
				chan_deliver(c, &r);
			used -= (size_t)(nl + 1 - buf);
			memmove(buf, nl + 1, used);
			buf[used] = '\0';
		}
		if (used == sizeof(buf) - 1)
			used = 0; /* a line too long for any round: dropped */
	}
	pthread_mutex_lock(&c->lock);
	c->closed = true;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

void agent_chan_open(struct agent_chan *c, void (*abort)(void *arg), void *arg)
{
	int fd = chan_fd_from_env();

	c->fd = -1;
	c->abort = abort;
	c->abort_arg = arg;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);
	c->inited = true;
	if (fd < 0)
		return;
	/* The program's own children do not hold it. */
	fcntl(fd, F_SETFD, FD_CLOEXEC);
	if (write(fd, "resizable\n", 10) != 10)
		return;
	c->fd = fd;
	if (pthread_create(&c->thread, NULL, chan_reader, c) != 0) {
		c->fd = -1;
		return;
	}
	c->started = true;
}

void agent_chan_close(struct agent_chan *c)
{
	if (!c->inited)
		return;
	if (c->started) {
		/* Ends the reader's read; the agent hears the end of the worker
		 * by its exit, not by this. */
		shutdown(c->fd, SHUT_RDWR);
		pthread_join(c->thread, NULL);
		close(c->fd);
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
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += (time_t)(timeout_ms / 1000);
	ts->tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

int agent_chan_wait(struct agent_chan *c, struct agent_round *r, uint64_t timeout_ms)
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
	char line[32];
	int n = snprintf(line, sizeof(line), "took %d\n", round);

	if (write(c->fd, line, (size_t)n) != n)
		return;
}

int agent_chan_say(struct agent_chan *c, const char *line)
{
	size_t n = strlen(line);

	if (!c->started)
		return -ENOTSUP;
	return write(c->fd, line, n) == (ssize_t)n ? 0 : -EPIPE;
}
