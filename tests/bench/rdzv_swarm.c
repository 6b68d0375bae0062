/*
 * rdzv_swarm.c - the rendezvous at scale: N simulated agents, each the real
 * rendezvous driver (rendezvous/driver/driver.h: the machine over its own
 * agent session, a workers' store per round on its own loopback address,
 * as the agent runs it) to one ddp-rdzvd, all on one libuv loop of this
 * process. For each N:
 *   form   start -> every agent has the first round (N nodes; --nnodes is
 *          N-1:N, so the round closes at MAX, without a last-call wait)
 *   death  one agent killed (its session closes) -> every survivor has
 *          round 2 (N-1)
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
#include <log.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "driver.h"

#define SWARM_MAX	 20000
#define PHASE_TIMEOUT_MS 120000

enum phase { PH_FORM, PH_DEATH, PH_JOIN, PH_DONE };

struct swarm;

struct sim {
	struct swarm *sw;
	int i;
	struct rdzv_driver *d;
	bool live, counted;
	uint32_t round, size;
	char addr[32];
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

static double now_s(void)
{
	return (double)uv_hrtime() / 1e9;
}

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

static void on_joined(void *arg, int status, const struct rdzv_driver_round *r)
{
	struct sim *x = arg;

	x->round = r->round;
	x->size = r->size;
	x->counted = false;
	sim_count(x);
}

/* As the agent does: its workers stop, and it joins the next round. */
static void on_round_over(void *arg, const char *why)
{
	struct sim *x = arg;

	if (rdzv_driver_join(x->d, on_joined, x) < 0)
		swarm_fail(x->sw, "an agent could not join again");
}

static void on_ended(void *arg, enum rdzv_driver_outcome how, const char *msg)
{
	struct sim *x = arg;

	fprintf(stderr, "rdzv_swarm: agent %d: %s\n", x->i, msg);
	swarm_fail(x->sw, "an agent's rendezvous ended");
}

static const struct rdzv_driver_events swarm_events = {on_round_over, on_ended, NULL, NULL};

/* Agent i on 127.1.(i / 250).(i % 250 + 1): its own node id and workers'
 * store address, as on a machine of its own. */
static int sim_start(struct swarm *sw, int i)
{
	struct sim *x = &sw->s[i];
	struct rdzv_driver_config c;
	char err[512];
	int rc;

	x->sw = sw;
	x->i = i;
	snprintf(x->addr, sizeof(x->addr), "127.1.%d.%d", i / 250, i % 250 + 1);
	rdzv_driver_config_defaults(&c);
	c.mode = RDZV_DRIVER_C10D;
	c.host = "127.0.0.1";
	c.port = sw->port;
	c.is_host = 0;
	c.run_id = "swarm";
	c.local_addr = x->addr;
	c.min_nodes = sw->n - 1;
	c.max_nodes = sw->n;
	c.join_timeout = PHASE_TIMEOUT_MS / 1000.0;
	c.keep_alive_interval = sw->keep_alive;
	if ((rc = rdzv_driver_new(&c, &x->d, err, sizeof(err))) < 0) {
		fprintf(stderr, "rdzv_swarm: agent %d: %s\n", i, err);
		return rc;
	}
	x->live = true;
	if ((rc = rdzv_driver_attach(x->d, &sw->loop, &swarm_events, x)) < 0)
		return rc;
	return rdzv_driver_join(x->d, on_joined, x);
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
		rdzv_driver_kill(victim->d);
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
	/* A survivor may be there already (its round came before this ran). */
	for (i = 0; i <= sw->n; i++)
		if (sw->s[i].d)
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

		x->live = false;
		if (x->d)
			rdzv_driver_kill(x->d);
	}
	uv_close((uv_handle_t *)&sw->next, close_cb);
	uv_close((uv_handle_t *)&sw->deadline, close_cb);
	uv_run(&sw->loop, UV_RUN_DEFAULT);
	for (int i = 0; i <= sw->n; i++)
		rdzv_driver_free(sw->s[i].d);
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
	log_init("rdzv_swarm", LOG_WARN); /* not a line per agent and round */
	printf("rendezvous swarm: N agents (real drivers over agent sessions) on one loop, "
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
