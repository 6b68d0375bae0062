/*
 * mn_inplace - a libddp worker for the in-place tests (test_inplace.py):
 *
 *   mn_inplace STEPS STEP_MS
 *
 * Runs STEPS steps, each STEP_MS of "compute" then two all-reduces (the
 * world's size, which must come back as the world size, and the step, by
 * MAX, so that ranks of a re-formed group agree on where they are). On a
 * collective error it takes the launcher's next round (ddp_next_round),
 * re-forms in place (ddp_reform) and redoes the step. Lines, on stdout:
 *   INPLACE start pid=P rank=R world=W resizable=0|1
 *   INPLACE progress pid=P step=S          (once, at step STEPS/8)
 *   INPLACE reformed pid=P rank=R world=W round=N step=S
 *   INPLACE done pid=P rank=R world=W steps=S reforms=K
 * With MN_INPLACE_PLAIN=N the worker of local rank N hides the agent
 * channel from libddp (unsets DDP_AGENT_FD before ddp_init): a program
 * the agent must restart. With MN_INPLACE_EXIT set, every worker exits 6
 * on a collective error instead of re-forming: a libddp program written
 * without ddp_next_round, which the agent starts again in the next round.
 * With MN_INPLACE_BOGUS_TOOK set, every worker says "took 2147483647" on
 * the agent channel right after ddp_init (a round never sent, which the
 * agent must not believe).
 * With MN_INPLACE_PERMANENT=R, rank R exits 78 (a failure that repeats) at
 * step STEPS/4 of its first round.
 * With MN_INPLACE_DIE=L:SIG and MN_INPLACE_ONCE=FILE, the worker of local
 * rank L dies by signal SIG at its first collective error, before it takes
 * the next round (a death that overlaps a round being handed out), if it
 * is the first to create FILE (so its replacement does not die again).
 * With MN_INPLACE_SLOW=FILE:MS, a process that finds FILE at its start
 * waits MS ms before ddp_init (a replacement slow to say "resizable").
 * Exits 3 when no round comes, 4 when a re-formation fails, 5 on a wrong
 * sum, 1 when ddp_init fails.
 */
#include "agent_wire.h"

#include <ddp.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void pause_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* One step's collectives: 0, a negative errno, or 5 on a wrong sum. */
static int step_once(struct ddp_ctx *ctx, long *step)
{
	float one = 1.0f;
	double s = (double)*step;
	int rc = ddp_allreduce(ctx, &one, 1, DDP_FLOAT32, DDP_SUM);

	if (rc == 0)
		rc = ddp_allreduce(ctx, &s, 1, DDP_FLOAT64, DDP_MAX);
	if (rc < 0)
		return rc;
	if ((int)one != ddp_world_size(ctx)) {
		fprintf(stderr, "mn_inplace: sum %g, world %d\n", one, ddp_world_size(ctx));
		return 5;
	}
	*step = (long)s + 1;
	return 0;
}

/* Whether this rank is MN_INPLACE_PERMANENT's. */
static int permanent(struct ddp_ctx *ctx)
{
	const char *r = getenv("MN_INPLACE_PERMANENT");

	return r && atoi(r) == ddp_rank(ctx);
}

/* MN_INPLACE_DIE: dies by its signal when this is its worker, once. */
static void die_if_asked(void)
{
	const char *die = getenv("MN_INPLACE_DIE"), *once = getenv("MN_INPLACE_ONCE");
	const char *lr = getenv("LOCAL_RANK");
	int fd;

	if (!die || !once || !lr || !strchr(die, ':') || atoi(die) != atoi(lr))
		return;
	fd = open(once, O_CREAT | O_EXCL | O_WRONLY, 0600);
	if (fd < 0)
		return; /* died once already: this is its replacement */
	close(fd);
	printf("INPLACE dies pid=%d signal=%d\n", (int)getpid(), atoi(strchr(die, ':') + 1));
	fflush(stdout);
	setrlimit(RLIMIT_CORE, &(struct rlimit){0, 0}); /* a SIGSEGV leaves no core */
	signal(atoi(strchr(die, ':') + 1), SIG_DFL);
	raise(atoi(strchr(die, ':') + 1));
}

/* MN_INPLACE_SLOW: waits before ddp_init when its file exists. */
static void slow_if_asked(void)
{
	const char *slow = getenv("MN_INPLACE_SLOW");
	char path[512];
	const char *colon = slow ? strrchr(slow, ':') : NULL;

	if (!colon || (size_t)(colon - slow) >= sizeof(path))
		return;
	memcpy(path, slow, (size_t)(colon - slow));
	path[colon - slow] = '\0';
	if (access(path, F_OK) == 0)
		pause_ms(atol(colon + 1));
}

/* "took 2147483647" on the channel (fd, libddp's since ddp_init), written
 * with the codec as any line of the channel. */
static void say_bogus_took(int fd)
{
	struct agent_wire_msg m = {.kind = AGENT_WIRE_TOOK, .round = 2147483647};
	char line[64];
	int n = agent_wire_format(&m, line, sizeof(line));

	if (fd < 0 || n < 0 || send(fd, line, (size_t)n, MSG_NOSIGNAL) != n)
		fprintf(stderr, "mn_inplace: cannot say the bogus took on fd %d\n", fd);
}

/* Takes the next round and re-forms (ddp_rejoin: superseded rounds and
 * re-formations that fail because the membership changed again are taken
 * inside): 0, or the exit status (4: not resizable, 3: no round). */
static int reform(struct ddp_ctx *ctx, long step)
{
	struct ddp_round r;
	char err[1600];
	int rc = ddp_rejoin(ctx, &r, 60000, NULL, NULL, err, sizeof(err));

	if (rc < 0) {
		fprintf(stderr, "mn_inplace: %s\n", err);
		return rc == -ENOTSUP ? 4 : 3;
	}
	printf("INPLACE reformed pid=%d rank=%d world=%d round=%d step=%ld\n", (int)getpid(),
	       ddp_rank(ctx), ddp_world_size(ctx), r.round, step);
	fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	long steps = argc > 1 ? atol(argv[1]) : 100, step_ms = argc > 2 ? atol(argv[2]) : 20;
	long step = 0;
	int reforms = 0, rc;
	struct ddp_ctx *ctx;
	char err[512];

	const char *plain = getenv("MN_INPLACE_PLAIN"), *lr = getenv("LOCAL_RANK");
	const char *chan = getenv("DDP_AGENT_FD");
	int chan_fd = chan ? atoi(chan) : -1; /* ddp_init removes the variable */

	if (plain && lr && atoi(plain) == atoi(lr))
		unsetenv("DDP_AGENT_FD");
	slow_if_asked();
	if (ddp_init(NULL, &ctx, err, sizeof(err))) {
		fprintf(stderr, "mn_inplace: %s\n", err);
		return 1;
	}
	if (getenv("MN_INPLACE_BOGUS_TOOK"))
		say_bogus_took(chan_fd);
	printf("INPLACE start pid=%d rank=%d world=%d resizable=%d\n", (int)getpid(), ddp_rank(ctx),
	       ddp_world_size(ctx), ddp_resizable(ctx));
	fflush(stdout);
	while (step < steps) {
		pause_ms(step_ms);
		rc = step_once(ctx, &step);
		if (rc > 0)
			return rc;
		if (rc == 0 && step == steps / 4 && reforms == 0 && permanent(ctx))
			return 78;
		if (rc == 0 && step == steps / 8) {
			printf("INPLACE progress pid=%d step=%ld\n", (int)getpid(), step);
			fflush(stdout);
		}
		if (rc == 0)
			continue;
		if (getenv("MN_INPLACE_EXIT")) {
			fprintf(stderr, "mn_inplace: collective failed at step %ld; exiting\n",
				step);
			return 6;
		}
		die_if_asked();
		rc = reform(ctx, step);
		if (rc)
			return rc;
		reforms++;
	}
	printf("INPLACE done pid=%d rank=%d world=%d steps=%ld reforms=%d\n", (int)getpid(),
	       ddp_rank(ctx), ddp_world_size(ctx), step, reforms);
	fflush(stdout);
	ddp_free(ctx);
	return 0;
}
