/*
 * rdzv_swarm.c - the rendezvous at scale: N simulated agents, each the real
 * rendezvous machine (rendezvous/rdzv/) over its own agent session (the
 * launcher's rdzv_prims_session backend, as the agent uses it) to one
 * ddp-rdzvd, all on one libuv loop of this process. For each N:
 *   form   start -> every agent has the first round (N nodes; --nnodes is
 *          N-1:N, so the round closes at MAX, without a last-call wait)
 *   death  one agent's session closed -> every survivor has round 2 (N-1)
 *   join   a new agent starts -> every agent has round 3 (N again: MAX)
 * and one table row. Targets (issue 11): forming 512 in under 2 s, 4,000 in
 * under 5 s.
 *
 *   rdzv_swarm --rdzvd PATH [--agents 64,512,4000] [--keep-alive SECONDS]
 *
 * Exit 0, 1 when a phase failed or timed out, 2 for bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "rdzv_machine.h"
#include "rdzv_prims.h"

#define SWARM_MAX	 20000
#define PHASE_TIMEOUT_MS 120000

enum phase { PH_FORM, PH_DEATH, PH_JOIN, PH_DONE };

struct swarm;

struct sim {
	struct swarm *sw;
	int i;
	void *be;
	struct rdzv_machine *m;
	uv_timer_t timer;
	bool live, draining, counted;
	uint32_t round, size;
	char id[32];
};

struct swarm {
	uv_loop_t loop;
	int port, n;
	double keep_alive;
	struct sim *s; /* n + 1: the last one is the joiner */
	enum phase phase;
	uint32_t want_round, want_size;
	int want, reached;
	double t_phase, took[3];
	const char *failed;
	uv_timer_t next, deadline;
};

static int64_t now_ms(void)
{
	return (int64_t)(uv_hrtime() / 1000000u);
}

static double now_s(void)
{
	return (double)uv_hrtime() / 1e9;
}

static void sim_drain(struct sim *x);
static void phase_start(struct swarm *sw);

static void swarm_fail(struct swarm *sw, const char *why)
{
	if (!sw->failed)
		sw->failed = why;
	uv_stop(&sw->loop);
}

static void on_next(uv_timer_t *t)
{
	phase_start(t->data);
}

/* A sim reached the phase's round: the phase ends with the last one. */
static void sim_count(struct sim *x)
{
	struct swarm *sw = x->sw;

	if (x->counted || !x->live || x->round != sw->want_round || x->size != sw->want_size)
		return;
	x->counted = true;
	if (++sw->reached < sw->want)
		return;
	sw->took[sw->phase] = now_s() - sw->t_phase;
	sw->phase++;
	uv_timer_start(&sw->next, on_next, 0, 0);
}

static void sim_after(struct sim *x, int rc)
{
	if (rc < 0)
		swarm_fail(x->sw, "out of memory in the machine");
	else
		sim_drain(x);
}

static void on_timer(uv_timer_t *t)
{
	struct sim *x = t->data;

	sim_after(x, rdzv_on_timer(x->m, now_ms()));
}

static void sim_action(struct sim *x, const struct rdzv_action *a)
{
	const struct rdzv_prims_ops *ops = &rdzv_prims_session;
	const struct rdzv_world *w;
	int rc = 0;
	int64_t d;

	switch (a->kind) {
	case RDZV_ACT_GET:
		rc = ops->get(x->be, a->id, a->keys, a->nkeys);
		break;
	case RDZV_ACT_CAS:
		rc = ops->cas(x->be, a->id, a->key, a->has_expected, a->expected, a->value);
		break;
	case RDZV_ACT_ADD:
		rc = ops->add(x->be, a->id, a->key, a->delta);
		break;
	case RDZV_ACT_SET:
	case RDZV_ACT_SET_SESSION:
		rc = ops->set(x->be, a->id, a->key, a->value, a->kind == RDZV_ACT_SET_SESSION);
		break;
	case RDZV_ACT_WATCH:
		rc = ops->watch(x->be, a->id, a->key);
		break;
	case RDZV_ACT_UNWATCH:
		ops->unwatch(x->be, a->watch);
		break;
	case RDZV_ACT_TIMER:
		uv_timer_stop(&x->timer);
		d = a->at_ms - now_ms();
		if (a->at_ms >= 0)
			uv_timer_start(&x->timer, on_timer, (uint64_t)(d > 1 ? d : 1), 0);
		break;
	case RDZV_ACT_ROUND:
		w = rdzv_machine_world(x->m);
		x->round = w->round;
		x->size = w->size;
		x->counted = false;
		sim_count(x);
		break;
	case RDZV_ACT_ROUND_OVER:
		break;
	default: /* LEFT, FINISHED, FAILED */
		fprintf(stderr, "rdzv_swarm: agent %d: %s\n", x->i, a->text);
		swarm_fail(x->sw, "an agent's rendezvous ended");
	}
	if (rc < 0)
		swarm_fail(x->sw, "a request could not be made");
}

static void sim_drain(struct sim *x)
{
	struct rdzv_action a;

	if (x->draining)
		return;
	x->draining = true;
	while (x->live && rdzv_next_action(x->m, &a))
		sim_action(x, &a);
	x->draining = false;
}

static void s_connected(void *p, int status, const char *msg)
{
	struct sim *x = p;

	if (status < 0) {
		fprintf(stderr, "rdzv_swarm: agent %d: %s\n", x->i, msg);
		x->be = NULL;
		swarm_fail(x->sw, "an agent could not connect");
		return;
	}
	sim_after(x, rdzv_start(x->m, now_ms()));
}

static void s_lost(void *p, int status, const char *msg)
{
	struct sim *x = p;

	x->be = NULL;
	if (x->live) {
		fprintf(stderr, "rdzv_swarm: agent %d: %s\n", x->i, msg);
		swarm_fail(x->sw, "an agent lost the store");
	}
}

static void s_got(void *p, uint64_t tag, int st, const struct rdzv_value *v, size_t n)
{
	struct sim *x = p;

	sim_after(x, rdzv_on_get(x->m, now_ms(), tag, st, v, n));
}

static void s_cased(void *p, uint64_t tag, int st, bool swapped, struct rdzv_value cur)
{
	struct sim *x = p;

	sim_after(x, rdzv_on_cas(x->m, now_ms(), tag, st, swapped, cur));
}

static void s_added(void *p, uint64_t tag, int st, int64_t value)
{
	struct sim *x = p;

	sim_after(x, rdzv_on_add(x->m, now_ms(), tag, st, value));
}

static void s_done(void *p, uint64_t tag, int st)
{
	struct sim *x = p;

	sim_after(x, rdzv_on_done(x->m, now_ms(), tag, st));
}

static void s_event(void *p, uint64_t watch, int st, struct rdzv_value v)
{
	struct sim *x = p;

	if (st < 0)
		swarm_fail(x->sw, "a watch failed");
	else
		sim_after(x, rdzv_on_key(x->m, now_ms(), watch, v));
}

static const struct rdzv_prims_sink swarm_sink = {s_connected, s_lost, s_got,  s_cased,
						  s_added,     s_done, s_event};

static int sim_start(struct swarm *sw, int i)
{
	struct sim *x = &sw->s[i];
	struct rdzv_config cfg;
	struct rdzv_prims_config pc = {
	    .loop = &sw->loop,
	    .host = "127.0.0.1",
	    .port = (uint16_t)sw->port,
	    .connect_timeout_ms = 60000,
	};
	int rc;

	x->sw = sw;
	x->i = i;
	snprintf(x->id, sizeof(x->id), "sim%d", i);
	rdzv_config_defaults(&cfg);
	cfg.run_id = "swarm";
	cfg.node_id = x->id;
	cfg.addr = "127.0.0.1";
	cfg.port = (uint16_t)(20000 + i % 40000);
	cfg.min_nodes = (uint32_t)sw->n - 1;
	cfg.max_nodes = (uint32_t)sw->n;
	cfg.join_timeout_ms = PHASE_TIMEOUT_MS;
	cfg.keep_alive_interval_ms = (int64_t)(sw->keep_alive * 1000);
	if ((rc = rdzv_machine_new(&cfg, &x->m)) < 0)
		return rc;
	uv_timer_init(&sw->loop, &x->timer);
	x->timer.data = x;
	x->live = true;
	return rdzv_prims_session.open(&pc, &swarm_sink, x, &x->be);
}

static void phase_start(struct swarm *sw)
{
	struct sim *victim = &sw->s[sw->n - 1];
	int i;

	sw->reached = 0;
	for (i = 0; i <= sw->n; i++)
		sw->s[i].counted = false;
	sw->t_phase = now_s();
	switch (sw->phase) {
	case PH_FORM:
		sw->want_round = 1, sw->want_size = (uint32_t)sw->n, sw->want = sw->n;
		for (i = 0; i < sw->n; i++)
			if (sim_start(sw, i) < 0)
				swarm_fail(sw, "cannot start an agent");
		break;
	case PH_DEATH:
		/* Its connection closes: the store drops its session keys. */
		sw->want_round = 2, sw->want_size = (uint32_t)sw->n - 1, sw->want = sw->n - 1;
		victim->live = false;
		uv_timer_stop(&victim->timer);
		rdzv_prims_session.close(victim->be);
		victim->be = NULL;
		break;
	case PH_JOIN:
		sw->want_round = 3, sw->want_size = (uint32_t)sw->n, sw->want = sw->n;
		if (sim_start(sw, sw->n) < 0)
			swarm_fail(sw, "cannot start the joiner");
		break;
	default:
		uv_stop(&sw->loop);
		return;
	}
	/* A survivor may be there already (its ROUND came before this ran). */
	for (i = 0; i <= sw->n; i++)
		if (sw->s[i].m)
			sim_count(&sw->s[i]);
}

static void on_deadline(uv_timer_t *t)
{
	struct swarm *sw = t->data;
	static const char *const names[] = {"forming", "the death", "the join"};

	fprintf(stderr, "rdzv_swarm: %d agents: %s took over %d s (%d of %d there)\n", sw->n,
		names[sw->phase < 3 ? sw->phase : 0], PHASE_TIMEOUT_MS / 1000, sw->reached,
		sw->want);
	swarm_fail(sw, "timed out");
}

static void close_cb(uv_handle_t *h)
{
}

static void swarm_release(struct swarm *sw)
{
	for (int i = 0; i <= sw->n; i++) {
		struct sim *x = &sw->s[i];

		if (!x->m)
			continue;
		x->live = false;
		rdzv_prims_session.close(x->be);
		uv_close((uv_handle_t *)&x->timer, close_cb);
	}
	uv_close((uv_handle_t *)&sw->next, close_cb);
	uv_close((uv_handle_t *)&sw->deadline, close_cb);
	uv_run(&sw->loop, UV_RUN_DEFAULT);
	for (int i = 0; i <= sw->n; i++)
		rdzv_machine_free(sw->s[i].m);
	uv_loop_close(&sw->loop);
	free(sw->s);
}

/* ddp-rdzvd on loopback, port 0; its port from its first stdout line. */
static pid_t start_rdzvd(const char *path, int *port)
{
	int fds[2];
	char buf[64] = "";
	pid_t pid;
	FILE *f;

	if (pipe(fds) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		dup2(fds[1], STDOUT_FILENO);
		close(fds[0]);
		close(fds[1]);
		execl(path, path, "--host", "127.0.0.1", "--port", "0", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	f = fdopen(fds[0], "r");
	if (pid < 0 || !f || !fgets(buf, sizeof(buf), f) || (*port = atoi(buf)) <= 0) {
		if (pid > 0)
			kill(pid, SIGKILL);
		return -1;
	}
	fclose(f);
	return pid;
}

static int run_size(const char *rdzvd, int n, double keep_alive)
{
	struct swarm sw = {.n = n, .keep_alive = keep_alive};
	struct rusage ru0, ru1;
	pid_t pid = start_rdzvd(rdzvd, &sw.port);
	int status;

	if (pid < 0) {
		fprintf(stderr, "rdzv_swarm: cannot start %s\n", rdzvd);
		return 1;
	}
	uv_loop_init(&sw.loop);
	sw.s = calloc((size_t)n + 1, sizeof(*sw.s));
	uv_timer_init(&sw.loop, &sw.next);
	uv_timer_init(&sw.loop, &sw.deadline);
	sw.next.data = sw.deadline.data = &sw;
	getrusage(RUSAGE_SELF, &ru0);
	phase_start(&sw);
	while (!sw.failed && sw.phase != PH_DONE) {
		uv_timer_start(&sw.deadline, on_deadline, PHASE_TIMEOUT_MS, 0);
		enum phase before = sw.phase;
		while (!sw.failed && sw.phase == before)
			uv_run(&sw.loop, UV_RUN_ONCE);
	}
	getrusage(RUSAGE_SELF, &ru1);
	if (!sw.failed)
		printf("| %5d | %8.3f | %8.3f | %8.3f | %6.2f |\n", n, sw.took[0], sw.took[1],
		       sw.took[2],
		       (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec + ru1.ru_stime.tv_sec -
				ru0.ru_stime.tv_sec) +
			   (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec +
				    ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) /
			       1e6);
	else
		printf("| %5d | failed: %s |\n", n, sw.failed);
	fflush(stdout);
	swarm_release(&sw);
	kill(pid, SIGTERM);
	waitpid(pid, &status, 0);
	return sw.failed ? 1 : 0;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {{"rdzvd", required_argument, NULL, 'r'},
						 {"agents", required_argument, NULL, 'a'},
						 {"keep-alive", required_argument, NULL, 'k'},
						 {NULL, 0, NULL, 0}};
	const char *rdzvd = NULL, *sizes = "64,512,4000";
	double keep_alive = 5;
	struct rlimit rl;
	int c, rc = 0;

	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		if (c == 'r')
			rdzvd = optarg;
		else if (c == 'a')
			sizes = optarg;
		else if (c == 'k')
			keep_alive = atof(optarg);
		else
			return 2;
	}
	if (!rdzvd || keep_alive <= 0) {
		fprintf(stderr, "usage: rdzv_swarm --rdzvd PATH [--agents 64,512,4000] "
				"[--keep-alive SECONDS]\n");
		return 2;
	}
	/* One descriptor per agent here, and one per agent in the daemon. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	signal(SIGPIPE, SIG_IGN);
	printf("rendezvous swarm: N agents (real machines over agent sessions) on one loop, "
	       "one ddp-rdzvd; seconds\n\n");
	printf("| agents | form | death -> N-1 running | join -> N running | CPU s (agents) |\n");
	printf("|---:|---:|---:|---:|---:|\n");
	for (const char *p = sizes; *p;) {
		int n = atoi(p);

		if (n < 2 || n > SWARM_MAX) {
			fprintf(stderr, "rdzv_swarm: --agents: each size is 2 to %d\n", SWARM_MAX);
			return 2;
		}
		rc |= run_size(rdzvd, n, keep_alive);
		p += strcspn(p, ",");
		p += *p == ',';
	}
	return rc;
}
