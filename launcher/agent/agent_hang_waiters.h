/*
 * agent_hang_waiters.h - the hang watch's word on who waits on whom. When
 * a hang is named (by this node's watch, or heard from another node's),
 * this node's agent says what each of its own workers does with respect
 * to it (hang_waiters.h: waits on rank Q in OP #SEQ for T s, waits without
 * knowing on whom, computes before it, is done with it ...): one line,
 * printed here after the hang's own line, added to the hang's record in
 * the summary ("waiters"), and posted on the job's notice board ("wait1",
 * docs/rendezvous.md), so every node prints every node's line.
 *
 * Bounded: no node waits for another. A frozen node says nothing; the
 * others print what they have, and a line that comes later is printed
 * and recorded when it comes (while the agent runs). Each (hang, node) is
 * printed once: this node's own line, posted, comes back and is dropped.
 *
 * Called by the watch (agent_hang.c) only; it reads the watch's tracks
 * and host, and changes nothing of them but `waiters`.
 */
#ifndef DDP_LAUNCHER_AGENT_HANG_WAITERS_H
#define DDP_LAUNCHER_AGENT_HANG_WAITERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AGENT_HANG_WAITERS_SEEN 64 /* (hang, node)s remembered as printed */

struct agent_hang;
struct summary_hang;

/* The watch's memory of the waiters lines it printed (in struct agent_hang,
 * zeroed with it). */
struct agent_hang_waiters {
	struct {
		int round, rank, node;
		uint64_t seq;
	} seen[AGENT_HANG_WAITERS_SEEN];
	int n;
};

/* Hang sh was named here or heard (after its line was printed and
 * recorded): this node's workers' states with respect to it, printed,
 * recorded and posted. The culprit itself is not its own waiter. Nothing
 * when the node has no other worker. */
void agent_hang_waiters_tell(struct agent_hang *h, const struct summary_hang *sh);

/* A notice heard (rdzv_events.notice): when it is a "wait1", printed and
 * recorded (once per hang and node), and true; false for another kind. */
bool agent_hang_waiters_heard(struct agent_hang *h, const char *text);

/* What the local workers inside a collective wait on, appended to the
 * culprit's line (worker `except` is the culprit): "; rank R waits on rank
 * Q in OP #SEQ for T s" or "; rank R waits in OP #SEQ for T s". */
void agent_hang_waiters_append(struct agent_hang *h, uint64_t now, int except, char *line,
			       size_t len);

#endif
