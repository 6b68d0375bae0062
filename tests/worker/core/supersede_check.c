/*
 * supersede_check.c - a later round ends a ddp_reform in progress (started
 * by run_ranks.py as one rank, store in ddp-rdzvd, DDP_TIMEOUT_MS 10 s).
 *
 * The program plays its own agent: a socketpair's end is DDP_AGENT_FD (and
 * this process, the pair's creator, DDP_AGENT_PID), so ddp_init says
 * "hello 1 resizable" there and its reader thread hears the rounds
 * this program writes to the other end. Each case starts a ddp_reform
 * that would wait for its deadline (10 s) and sends a round 300 ms later:
 * the re-formation must return -ESTALE (not -ECANCELED, an abort), with
 * "superseded by round R" in its message for people, within
 * 0.5 s of the round (about 0.05 s here), whichever wait it was in:
 *   connect   the store's address refuses connections (a bound socket
 *             that does not listen)
 *   arrive    a world of 2 whose rank 1 never comes
 *   shm       rank 1 "arrived" (its key written here, white-box) but never
 *             maps the shared-memory segment
 *   ring      rank 1 arrived and published a ring address (a socket here
 *             that listens and never speaks), but never connects back
 *   pending   a round the program has not taken is already waiting when
 *             ddp_reform starts: it returns at once
 * After each, ddp_next_round hands the round over and the agent's end
 * reads "took R". Then a round that is not superseded re-forms (1 rank)
 * and an all-reduce works. Last, ddp_rejoin (rejoin_cases): superseded
 * rounds taken inside, after() run once per round that re-formed, and its
 * codes.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "agent_wire.h"
#include "ddp.h"
#include "kv.h"

#define LATE_LIMIT_S 0.5

struct agent {
	int fd;		/* our end of the channel */
	int round;	/* the round to send */
	int world;	/* its world size (0: 1) */
	long delay_ms;	/* after this long */
	double sent_at; /* when it was sent (monotonic seconds) */
	char port[16];	/* MASTER_PORT for the round line */
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void send_round(struct agent *a)
{
	int w = a->world ? a->world : 1;
	struct agent_wire_msg m = {.kind = AGENT_WIRE_ROUND};
	char line[AGENT_WIRE_MAX_LINE];
	int n;

	m.r = (struct agent_wire_round){.round = a->round,
					.world_size = w,
					.local_world_size = w,
					.master_port = atoi(a->port),
					.group_world_size = 1};
	agent_wire_round_set_addr(&m.r, "127.0.0.1");
	n = agent_wire_format(&m, line, sizeof(line));
	a->sent_at = now_s();
	if (n < 0 || write(a->fd, line, (size_t)n) != n)
		perror("agent: write");
}

static void *agent_main(void *arg)
{
	struct agent *a = arg;
	struct timespec ts = {a->delay_ms / 1000, (a->delay_ms % 1000) * 1000000};

	nanosleep(&ts, NULL);
	send_round(a);
	return NULL;
}

/* Reads the channel until `want` arrives (2 s at most). */
static int agent_expect(int fd, const char *want)
{
	static char seen[4096];
	static size_t used;
	double end = now_s() + 2.0;

	while (!strstr(seen, want) && now_s() < end && used < sizeof(seen) - 1) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		ssize_t n;

		if (poll(&pf, 1, 100) <= 0)
			continue;
		n = read(fd, seen + used, sizeof(seen) - 1 - used);
		if (n <= 0)
			break;
		used += (size_t)n;
		seen[used] = '\0';
	}
	if (strstr(seen, want)) {
		/* Consumed: a later case must see its own line. */
		memset(seen, 0, sizeof(seen));
		used = 0;
		return 0;
	}
	fprintf(stderr, "the agent's end never read '%s' (read: '%s')\n", want, seen);
	return -1;
}

/* Writes "<attempt prefix>/<key>" = value as rank 1 would (white-box). */
static int phantom_set(struct kv *kv, int attempt, const char *key, const char *value)
{
	char full[512];

	snprintf(full, sizeof(full), "/ddp/%s/attempt_%d/%s", getenv("TORCHELASTIC_RUN_ID"),
		 attempt, key);
	return kv_set(kv, full, value, strlen(value));
}

/* A TCP socket on 127.0.0.1, port 0; listening or not. Returns the fd and
 * its port in *port. */
static int local_socket(int listening, int *port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    (listening && listen(fd, 4) < 0) || getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
		return -1;
	*port = ntohs(sa.sin_port);
	return fd;
}

static void options(struct ddp_options *o, int world, int local_world, int attempt,
		    enum ddp_transport t)
{
	ddp_options_init(o);
	o->rank = 0;
	o->world_size = world;
	o->local_rank = 0;
	o->local_world_size = local_world;
	o->attempt = attempt;
	o->transport = t;
}

/* One case: ddp_reform(o) with round `round` sent after delay_ms. */
static int one_case(struct ddp_ctx *ctx, struct agent *a, const char *name,
		    const struct ddp_options *o, int round, long delay_ms)
{
	struct ddp_round r;
	char err[1024] = "", took[64];
	pthread_t t;
	double late;
	int rc, n;

	a->round = round;
	a->delay_ms = delay_ms;
	if (delay_ms < 0)
		send_round(a);
	else
		pthread_create(&t, NULL, agent_main, a);
	rc = ddp_reform(ctx, o, err, sizeof(err));
	late = now_s() - a->sent_at;
	if (delay_ms >= 0)
		pthread_join(t, NULL);
	printf("%s: ddp_reform returned %d %.3f s after round %d: %s\n", name, rc, late, round,
	       err);
	snprintf(took, sizeof(took), "superseded by round %d", round);
	if (rc != -ESTALE || !strstr(err, took) || late > LATE_LIMIT_S) {
		fprintf(stderr, "%s: expected -ESTALE saying '%s' within %.1f s of the round\n",
			name, took, LATE_LIMIT_S);
		return 1;
	}
	rc = ddp_next_round(ctx, &r, 2000);
	n = agent_wire_format(&(struct agent_wire_msg){.kind = AGENT_WIRE_TOOK, .round = round},
			      took, sizeof(took));
	if (n < 0)
		return 1;
	if (rc != 0 || r.round != round || agent_expect(a->fd, took) < 0) {
		fprintf(stderr, "%s: ddp_next_round gave %d, round %d (expected %d)\n", name, rc,
			r.round, round);
		return 1;
	}
	return 0;
}

/* The last round, not superseded: one rank on the real store. */
static int final_round(struct ddp_ctx *ctx, struct agent *a, int round)
{
	struct ddp_round r;
	char err[1024] = "";
	float v[4] = {1, 2, 3, 4};
	int rc;

	a->round = round;
	send_round(a);
	rc = ddp_next_round(ctx, &r, 2000);
	if (rc == 0)
		rc = ddp_reform(ctx, &r.opts, err, sizeof(err));
	if (rc == 0)
		rc = ddp_allreduce(ctx, v, 4, DDP_FLOAT32, DDP_SUM);
	if (rc != 0 || v[3] != 4.0f || agent_expect(a->fd, "took") < 0) {
		fprintf(stderr, "final round: %d: %s %s\n", rc, err, ddp_error(ctx));
		return 1;
	}
	printf("round %d: re-formed (%s), all-reduce correct\n", round, ddp_backend_name(ctx));
	/* run_ranks.py's "ok" expects a digest of the result. */
	printf("digest %08x\n", (unsigned)(v[0] * 1000.0f + v[3]));
	return 0;
}

/* ddp_rejoin's after(): counts its calls; the first `fail_collective` calls
 * end with a failed collective (the communicator aborted, as a round heard
 * meanwhile does), or all calls return `fatal` when it is set. */
struct after_state {
	int calls, fail_collective, fatal, world;
};

static int after_cb(struct ddp_ctx *ctx, void *arg)
{
	struct after_state *s = arg;
	float v = 1.0f;

	s->calls++;
	s->world = ddp_world_size(ctx);
	if (s->fatal)
		return s->fatal;
	if (s->calls <= s->fail_collective)
		ddp_abort(ctx);
	return ddp_allreduce(ctx, &v, 1, DDP_FLOAT32, DDP_SUM);
}

/* One ddp_rejoin case: rounds first..last are sent (first at once, each
 * later one delay_ms after the one before, from a thread); expects rc, the
 * round joined and after()'s calls. */
static int rejoin_case(struct ddp_ctx *ctx, struct agent *a, const char *name, int first,
		       int first_world, int last, struct after_state *st, uint64_t timeout_ms,
		       int want_rc, int want_calls)
{
	struct ddp_round r = {0};
	char err[1024] = "";
	pthread_t t;
	int rc;

	if (first > 0) {
		a->round = first;
		a->world = first_world;
		send_round(a);
		a->world = 1;
	}
	if (last > first) {
		a->round = last;
		a->delay_ms = 300;
		pthread_create(&t, NULL, agent_main, a);
	}
	rc = ddp_rejoin(ctx, &r, timeout_ms, after_cb, st, err, sizeof(err));
	if (last > first)
		pthread_join(t, NULL);
	printf("%s: ddp_rejoin returned %d, round %d, after() called %d time(s): %s\n", name, rc,
	       r.round, st->calls, err);
	if (rc != want_rc || st->calls != want_calls || (rc == 0 && r.round != last) ||
	    (rc == 0 && (ddp_world_size(ctx) != 1 || st->world != 1 ||
			 strcmp(r.opts.init_method, r.init_method) != 0))) {
		fprintf(stderr, "%s: expected %d after %d call(s) in round %d\n", name, want_rc,
			want_calls, last);
		return 1;
	}
	return 0;
}

/* ddp_rejoin: a superseded round is taken inside (round 17, a world of 2
 * whose rank 1 never comes, superseded by 18 after 300 ms: one after()
 * call, in 18); an after() whose collective fails waits for the next round
 * (19 fails, 20 joins); an after() failing by itself (-EPROTO) ends it;
 * then the codes: -ETIMEDOUT (no round), -ENOTSUP (ddp_set_resizable 0),
 * -EPIPE (the agent's end closed). */
static int rejoin_cases(struct ddp_ctx *ctx, struct agent *a)
{
	struct after_state s1 = {0}, s2 = {.fail_collective = 1}, s3 = {.fatal = -EPROTO};
	struct after_state s4 = {0};
	struct ddp_round r;
	char err[1024] = "";
	int fails = 0, rc;

	fails += rejoin_case(ctx, a, "rejoin superseded", 17, 2, 18, &s1, 0, 0, 1);
	fails += rejoin_case(ctx, a, "rejoin after() failed", 19, 1, 20, &s2, 0, 0, 2);
	fails += rejoin_case(ctx, a, "rejoin after() fatal", 21, 1, 21, &s3, 0, -EPROTO, 1);
	fails += rejoin_case(ctx, a, "rejoin no round", 0, 0, -1, &s4, 300, -ETIMEDOUT, 0);
	if (fails)
		return 1;
	ddp_set_resizable(ctx, 0);
	rc = ddp_rejoin(ctx, &r, 300, after_cb, &s4, err, sizeof(err));
	printf("rejoin fixed: %d: %s\n", rc, err);
	fails += rc != -ENOTSUP;
	ddp_set_resizable(ctx, 1);
	close(a->fd);
	a->fd = -1;
	rc = ddp_rejoin(ctx, &r, 5000, after_cb, &s4, err, sizeof(err));
	printf("rejoin agent gone: %d: %s\n", rc, err);
	fails += rc != -EPIPE || s4.calls != 0;
	return fails ? 1 : 0;
}

static int run_cases(struct ddp_ctx *ctx, struct agent *a, struct kv *kv)
{
	struct ddp_options o;
	char addr[64], url[64];
	int port, refuse = local_socket(0, &port), quiet, qport, fails = 0;

	quiet = local_socket(1, &qport);
	if (refuse < 0 || quiet < 0)
		return 1;
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
	options(&o, 1, 1, 10, DDP_TRANSPORT_AUTO);
	o.init_method = url;
	fails += one_case(ctx, a, "connect", &o, 11, 300);

	options(&o, 2, 2, 11, DDP_TRANSPORT_AUTO);
	fails += one_case(ctx, a, "arrive", &o, 12, 300);

	phantom_set(kv, 12, "arrive/1", "2 2");
	options(&o, 2, 2, 12, DDP_TRANSPORT_SHM);
	fails += one_case(ctx, a, "shm", &o, 13, 300);

	snprintf(addr, sizeof(addr), "127.0.0.1 %d", qport);
	phantom_set(kv, 13, "arrive/1", "2 1");
	phantom_set(kv, 13, "backend/ring_addr/1", addr);
	options(&o, 2, 1, 13, DDP_TRANSPORT_RING);
	fails += one_case(ctx, a, "ring", &o, 14, 300);

	options(&o, 2, 2, 14, DDP_TRANSPORT_AUTO);
	fails += one_case(ctx, a, "pending", &o, 15, -1);

	close(refuse);
	close(quiet);
	if (fails || final_round(ctx, a, 16))
		return 1;
	return rejoin_cases(ctx, a);
}

int main(void)
{
	struct agent a = {0};
	struct ddp_ctx *ctx = NULL;
	struct kv *kv = NULL;
	char err[1024], fdname[16];
	int sv[2], rc = 1;

	setvbuf(stdout, NULL, _IOLBF, 0);
	snprintf(a.port, sizeof(a.port), "%s", getenv("MASTER_PORT") ? getenv("MASTER_PORT") : "");
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		return 1;
	a.fd = sv[0];
	snprintf(fdname, sizeof(fdname), "%d", sv[1]);
	setenv("DDP_AGENT_FD", fdname, 1);
	/* The pair's creator, as ddplaunch is a worker's (ddp-exec says so). */
	snprintf(fdname, sizeof(fdname), "%d", (int)getpid());
	setenv("DDP_AGENT_PID", fdname, 1);
	if (ddp_init(NULL, &ctx, err, sizeof(err)) < 0) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	if (!ddp_resizable(ctx) || agent_expect(a.fd, "hello 1 resizable\n") < 0) {
		fprintf(stderr, "ddp_init did not say 'hello 1 resizable' on the agent channel\n");
		goto out;
	}
	if (kv_tcp_new("127.0.0.1", atoi(a.port), 5000, &kv, err, sizeof(err)) < 0) {
		fprintf(stderr, "%s\n", err);
		goto out;
	}
	rc = run_cases(ctx, &a, kv);
out:
	kv_free(kv);
	ddp_free(ctx);
	if (a.fd >= 0)
		close(sv[0]);
	return rc;
}
