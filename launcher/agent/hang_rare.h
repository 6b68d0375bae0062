/*
 * hang_rare.h - a worker in a phase too rare to learn a deadline: pure.
 *
 * The final save and shutdown happen once a run, after the job's last
 * training collective: the watch never sees them the 3 times a deadline
 * needs (hang_deadline.h), and no peer waits on a worker there to say it
 * is late. Time alone judges nothing there (a save of a large model is
 * slow, and rank 0 may write it while the others have left), but facts do,
 * each for longer than the long phases' floor (10 s by default):
 *
 *   - stopped: its process is stopped (SIGSTOP, a debugger): no progress
 *     whatever its phase (any phase without a deadline, not only these);
 *   - shutdown after its peers ended: shutdown comes after the last step
 *     was committed and the model saved; a worker of this node, of the
 *     same round, that reached shutdown too has exited 0 for longer than
 *     the floor, and this one is still in it, and for the floor it has
 *     written nothing and its main thread has not woken once (spinning, or
 *     asleep in one wait that never ends): hung (its peers' own teardown
 *     took less). A script's own work after its shutdown (a save, an
 *     upload: writes, or sleeps and wakes) is left alone, and so is a wait
 *     on the disk (D state);
 *   - a final save (or shutdown) that spins: its main thread runs on a CPU without
 *     sleeping once (no voluntary context switch) and its process writes
 *     nothing (/proc/PID/io wchar and write_bytes unchanged) for the floor.
 *     A save that writes is never cut, however slow; nor one blocked in the
 *     kernel (a slow disk, rank 0's write that a collective waits on, an
 *     upload): blocked, only a stop is judged. Inside the save's collective
 *     (the others wait on rank 0's write there) it is judged only when a
 *     rank of its node has already left that collective.
 *
 * Shutdown is judged by the same spin rule (then too it neither writes
 * nor sleeps): a node of one worker, with no peer to compare, names a
 * worker stopped or spinning there, not one blocked.
 */
#ifndef DDP_LAUNCHER_HANG_RARE_H
#define DDP_LAUNCHER_HANG_RARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hang_judge.h"

/* What the watch knows of one worker in a phase with no deadline. */
struct hang_rare_facts {
	uint32_t phase;	 /* its page's phase (enum ddp_progress_phase) */
	bool inside;	 /* its page says it is inside a collective */
	bool peer_left;	 /* ... and a rank of its node has left that one */
	uint64_t age_ns; /* in that phase for this long */
	enum hang_pstate ps;
	bool disk_wait;	       /* its main thread sleeps uninterruptibly (D: I/O) */
	uint64_t still_ns;     /* its main thread has run without a voluntary
				  switch, and its process written nothing, for
				  this long (0: it moved at the last read) */
	uint64_t peer_done_ns; /* a worker of its node and round exited 0 from
				  shutdown this long ago (0: none) */
	int peer_rank;	       /* ... that worker's rank */
};

enum hang_rare_why {
	HANG_RARE_NONE = 0,
	HANG_RARE_STOPPED,
	HANG_RARE_PEER_DONE,
	HANG_RARE_SPINNING,
};

/* The verdict with floor_ns (the long phases' floor) as the measure. */
enum hang_rare_why hang_rare_judge(const struct hang_rare_facts *f, uint64_t floor_ns);

/* The reason in words, for the hang line's end ("" for NONE and STOPPED,
 * which the line's process state says): "rank 3 of this node left
 * shutdown 12.1 s ago (exited 0)", "nothing written and no sleep for
 * 10.3 s". Returns snprintf's length. */
int hang_rare_words(enum hang_rare_why why, const struct hang_rare_facts *f, char *buf, size_t len);

/* Per worker: the last sample of its motion (part of the agent's agent_hang_track,
 * zeroed with it; sampled by agent_hang_rare.c). */
struct hang_rare_track {
	int pid;	   /* the process sampled, 0: none yet */
	uint32_t phase;	   /* the phase it was sampled in */
	uint64_t wrote;	   /* wchar + write_bytes */
	uint64_t nvcsw;	   /* the main thread's voluntary context switches */
	uint64_t moved_ns; /* when either last changed (or sampling began) */
};

#endif
