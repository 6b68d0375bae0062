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
 * Exits 3 when no round comes, 4 when a re-formation fails, 5 on a wrong
 * sum, 1 when ddp_init fails.
 */
#include <ddp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "agent_wire.h"

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

/* Takes the next round and re-forms: 0, or the exit status. */
static int reform(struct ddp_ctx *ctx, long step)
{
	struct ddp_round r;
	char err[512];

	for (;;) {
		if (ddp_next_round(ctx, &r, 60000) < 0) {
			fprintf(stderr, "mn_inplace: no next round: %s\n", ddp_error(ctx));
			return 3;
		}
		if (ddp_reform(ctx, &r.opts, err, sizeof(err)) == 0)
			break;
		fprintf(stderr, "mn_inplace: %s\n", err);
		if (!ddp_resizable(ctx))
			return 4;
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
