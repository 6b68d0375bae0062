/*
 * session_bench.c - what agent sessions cost against a real ddp-rdzvd on
 * loopback: the round trip of a CAS (one at a time, and pipelined), and how
 * fast N sessions connect, authenticate, write a session key and hear a
 * change of a key they all watch (one loop drives all N sessions, as a
 * benchmark driver simulating N agents would).
 *
 * usage: session_bench DDP_RDZVD [N...]   (default N: 64 512 4000)
 * Prints one line per figure. Not a test: the 'bench' suite runs it.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "store_session.h"

#define TOKEN "bench-token-0123456789abcdef"

static uint64_t now_ns(void)
{
	return uv_hrtime();
}

static pid_t spawn_rdzvd(const char *bin, const char *token_file, int *port)
{
	int fds[2];
	if (pipe(fds) < 0)
		exit(2);
	pid_t pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGTERM); /* never outlives the bench */
		dup2(fds[1], 1);
		close(fds[0]);
		close(fds[1]);
		if (token_file)
			execl(bin, bin, "--port", "0", "--token-file", token_file, (char *)NULL);
		else
			execl(bin, bin, "--port", "0", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	char line[32] = {0};
	size_t n = 0;
	while (n < sizeof(line) - 1 && read(fds[0], line + n, 1) == 1 && line[n] != '\n')
		n++;
	close(fds[0]);
	*port = atoi(line);
	if (*port <= 0) {
		fprintf(stderr, "session_bench: ddp-rdzvd did not start\n");
		exit(2);
	}
	return pid;
}

static void stop_rdzvd(pid_t pid)
{
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
}

/* ---- one session: CAS round trips ---- */

struct rtt {
	struct store_session *s;
	int connected;
	int n, total;
	uint64_t t0;
	uint64_t *lat;
	char cur[32];
	bool inflight_mode;
	int done;
};

static void rtt_connect(struct store_session *s, void *arg, int status, const char *msg)
{
	struct rtt *r = arg;
	if (status < 0) {
		fprintf(stderr, "session_bench: %s\n", msg);
		exit(1);
	}
	r->connected = 1;
}

static void rtt_next(struct rtt *r);

static void rtt_cas_done(void *arg, uint64_t tag, int status, bool swapped,
			 struct store_session_value cur)
{
	struct rtt *r = arg;
	if (status < 0 || (!r->inflight_mode && !swapped)) {
		fprintf(stderr, "session_bench: cas failed (%d)\n", status);
		exit(1);
	}
	if (!r->inflight_mode) {
		r->lat[r->n] = now_ns() - r->t0;
		snprintf(r->cur, sizeof(r->cur), "%d", r->n + 1);
	}
	r->n++;
	if (r->n == r->total)
		r->done = 1;
	else if (!r->inflight_mode)
		rtt_next(r);
}

static void rtt_next(struct rtt *r)
{
	char next[32];
	snprintf(next, sizeof(next), "%d", r->n + 1);
	struct byteview k = {(const uint8_t *)"cas", 3};
	struct byteview e = {(const uint8_t *)r->cur, strlen(r->cur)};
	struct byteview v = {(const uint8_t *)next, strlen(next)};
	r->t0 = now_ns();
	store_session_cas(r->s, k, r->n > 0, e, v, rtt_cas_done, r, 0);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void bench_rtt(uv_loop_t *loop, int port)
{
	struct rtt r = {0};
	struct store_session_opts o;
	store_session_opts_default(&o);
	o.host = "127.0.0.1";
	o.port = (uint16_t)port;
	o.token = TOKEN;
	o.token_len = strlen(TOKEN);
	if (store_session_connect(loop, &o, rtt_connect, NULL, &r, &r.s) < 0)
		exit(1);
	while (!r.connected)
		uv_run(loop, UV_RUN_ONCE);
	r.total = 20000;
	r.lat = calloc((size_t)r.total, sizeof(*r.lat));
	rtt_next(&r);
	while (!r.done)
		uv_run(loop, UV_RUN_ONCE);
	qsort(r.lat, (size_t)r.total, sizeof(*r.lat), cmp_u64);
	double sum = 0;
	for (int i = 0; i < r.total; i++)
		sum += (double)r.lat[i];
	printf("cas round trip, one at a time (%d): mean %.1f us, p50 %.1f us, p99 %.1f us\n",
	       r.total, sum / r.total / 1e3, r.lat[r.total / 2] / 1e3,
	       r.lat[r.total * 99 / 100] / 1e3);
	/* Pipelined: all issued at once (they fail to swap after the first;
	 * what counts is the store's rate). */
	r.inflight_mode = true;
	r.n = 0;
	r.done = 0;
	r.total = 100000;
	uint64_t t0 = now_ns();
	struct byteview k = {(const uint8_t *)"cas2", 4};
	struct byteview v = {(const uint8_t *)"x", 1};
	for (int i = 0; i < r.total; i++)
		store_session_cas(r.s, k, false, v, v, rtt_cas_done, &r, 0);
	while (!r.done)
		uv_run(loop, UV_RUN_ONCE);
	double secs = (double)(now_ns() - t0) / 1e9;
	printf("cas pipelined on one session: %d in %.3f s = %.0f/s\n", r.total, secs,
	       r.total / secs);
	free(r.lat);
	store_session_close(r.s);
	uv_run(loop, UV_RUN_NOWAIT);
}

/* ---- N sessions: a round's worth of agents ---- */

struct agent {
	struct store_session *s;
	struct crowd *c;
	int idx;
	uint64_t watch;
};

struct crowd {
	int n;
	int connected, written, watching, heard;
	bool expect_change;
	uint64_t t_connected, t_written, t_heard;
	uint64_t t0;
};

static void agent_written(void *arg, uint64_t tag, int status)
{
	struct agent *a = arg;
	if (status < 0) {
		fprintf(stderr, "session_bench: set_session failed (%d)\n", status);
		exit(1);
	}
	if (++a->c->written == a->c->n)
		a->c->t_written = now_ns();
}

static void agent_connected(struct store_session *s, void *arg, int status, const char *msg)
{
	struct agent *a = arg;
	if (status < 0) {
		fprintf(stderr, "session_bench: agent %d: %s\n", a->idx, msg);
		exit(1);
	}
	if (++a->c->connected == a->c->n)
		a->c->t_connected = now_ns();
	char key[32];
	snprintf(key, sizeof(key), "m/%d", a->idx);
	struct byteview k = {(const uint8_t *)key, strlen(key)};
	struct byteview v = {(const uint8_t *)"alive", 5};
	store_session_set_session(s, k, v, agent_written, a, 0);
}

static void agent_event(void *arg, uint64_t id, int status, struct store_session_value v)
{
	struct agent *a = arg;
	if (status < 0)
		return;
	if (!a->c->expect_change) {
		a->c->watching++;
		return;
	}
	if (v.present && ++a->c->heard == a->c->n)
		a->c->t_heard = now_ns();
}

static void set_done(void *arg, uint64_t tag, int status)
{
}

static void bench_crowd(uv_loop_t *loop, int port, int n, bool token)
{
	struct crowd c = {.n = n};
	struct agent *agents = calloc((size_t)n, sizeof(*agents));
	struct store_session_opts o;
	store_session_opts_default(&o);
	o.host = "127.0.0.1";
	o.port = (uint16_t)port;
	if (token) {
		o.token = TOKEN;
		o.token_len = strlen(TOKEN);
	}
	o.ping_interval_ms = 0; /* one loop for thousands: measure the protocol */
	c.t0 = now_ns();
	for (int i = 0; i < n; i++) {
		agents[i].c = &c;
		agents[i].idx = i;
		if (store_session_connect(loop, &o, agent_connected, NULL, &agents[i],
					  &agents[i].s) < 0)
			exit(1);
	}
	while (c.written < n)
		uv_run(loop, UV_RUN_ONCE);
	struct byteview k = {(const uint8_t *)"state", 5};
	for (int i = 0; i < n; i++)
		store_session_watch(agents[i].s, k, agent_event, &agents[i], &agents[i].watch);
	while (c.watching < n)
		uv_run(loop, UV_RUN_ONCE);
	c.expect_change = true;
	uint64_t t1 = now_ns();
	struct byteview v = {(const uint8_t *)"closed", 6};
	store_session_set(agents[0].s, k, v, set_done, NULL, 0);
	while (c.heard < n)
		uv_run(loop, UV_RUN_ONCE);
	double tc = (double)(c.t_connected - c.t0) / 1e9, tw = (double)(c.t_written - c.t0) / 1e9;
	printf("%d sessions (%s): all connected in %.3f s (%.0f/s), all session keys written "
	       "in %.3f s (%.0f/s); a change heard by all %d watchers in %.1f ms\n",
	       n, token ? "token handshake" : "no token", tc, n / tc, tw, n / tw, n,
	       (double)(c.t_heard - t1) / 1e6);
	for (int i = 0; i < n; i++)
		store_session_close(agents[i].s);
	uv_run(loop, UV_RUN_NOWAIT);
	free(agents);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: session_bench DDP_RDZVD [N...]\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		printf("open files: %llu\n", (unsigned long long)rl.rlim_cur);
	}
	char tf[] = "/tmp/session-bench-XXXXXX";
	int fd = mkstemp(tf);
	if (fd < 0 || write(fd, TOKEN, strlen(TOKEN)) < 0)
		return 2;
	close(fd);
	uv_loop_t *loop = uv_default_loop();
	int port;
	pid_t pid = spawn_rdzvd(argv[1], tf, &port);
	bench_rtt(loop, port);
	int sizes[] = {64, 512, 4000};
	int nsizes = 3;
	for (int i = 0; i < (argc > 2 ? argc - 2 : nsizes); i++) {
		int n = argc > 2 ? atoi(argv[i + 2]) : sizes[i];
		bench_crowd(loop, port, n, true);
	}
	stop_rdzvd(pid);
	pid = spawn_rdzvd(argv[1], NULL, &port);
	for (int i = 0; i < (argc > 2 ? argc - 2 : nsizes); i++) {
		int n = argc > 2 ? atoi(argv[i + 2]) : sizes[i];
		bench_crowd(loop, port, n, false);
	}
	stop_rdzvd(pid);
	unlink(tf);
	uv_run(loop, UV_RUN_DEFAULT);
	return 0;
}
