/*
 * hang_judge.h - who is hung, and who only waits on it. Pure: the caller
 * gives what it sees of each worker (its progress page, how long it has
 * not moved, its deadline, its process's state from /proc), and gets a
 * verdict per worker and the words that name a hang.
 *
 * The rule, per worker:
 *   - not past its deadline (or none applies): fine;
 *   - past it outside a collective (COMPUTE: it has not entered the next
 *     collective; or a long phase past its own measure): the culprit;
 *   - past it inside a collective: the culprit when its process is stopped;
 *     else a victim that waits on the rank its transport names (waiting_on),
 *     or on an unknown rank.
 * A ring's neighbours all wait inside the collective the culprit has not
 * entered (or is stopped in), so the culprit is the one rank named, never
 * its neighbours.
 */
#ifndef DDP_LAUNCHER_HANG_JUDGE_H
#define DDP_LAUNCHER_HANG_JUDGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "progress.h"

/* What its process does, from /proc (the worker's threads together). */
enum hang_pstate {
	HANG_PS_UNKNOWN = 0, /* not read */
	HANG_PS_STOPPED,     /* a thread is stopped (SIGSTOP, a debugger) */
	HANG_PS_RUNNING,     /* a thread runs on a CPU (spinning) */
	HANG_PS_BLOCKED,     /* every thread sleeps in the kernel (wchan) */
	HANG_PS_GONE,	     /* no such process */
};

struct hang_view {
	int node;		  /* the node's group rank */
	int rank, pid;		  /* the worker's global rank and pid */
	struct ddp_progress page; /* its last consistent copy (page.magic 0: none) */
	uint64_t age_ns;	  /* how long it has been where the page says */
	uint64_t deadline_ns;	  /* hang_deadline_get for that place, 0: none */
	enum hang_pstate ps;
	char wchan[32]; /* the main thread's wait channel, or "" */
	bool behind;	/* another rank of its node in the same round has left
			   this collective (it is in a later one) */
	char why[160];	/* why it is judged where no deadline is learned
			   (hang_rare.h), for the line's end; "" none */
};

enum hang_verdict {
	HANG_FINE = 0,
	HANG_CULPRIT, /* not progressing by its own fault */
	HANG_VICTIM,  /* waits inside a collective on another rank */
};

struct hang_judgement {
	enum hang_verdict verdict;
	int waits_on;	  /* a victim's: the rank it waits on, -1 unknown */
	uint64_t late_ns; /* past the deadline by this much */
};

/* The verdict on one worker. */
struct hang_judgement hang_judge(const struct hang_view *v);

/* The op's name: "allreduce", "broadcast", ... ("collective" for NONE or
 * an unknown op). */
const char *hang_op_name(uint32_t op);
/* The phase's name: "compute", "start-up", ... */
const char *hang_phase_name(uint32_t phase);
/* The process state in words: "stopped", "running on a CPU (spinning)",
 * "blocked in the kernel (futex_wait_queue)", "gone", "unknown". */
int hang_pstate_words(enum hang_pstate ps, const char *wchan, char *buf, size_t len);

/* What the culprit has not done, in words: "has not entered allreduce #813"
 * (COMPUTE: the collective after the one it left; `next_op` is what the
 * others are in, DDP_OP_NONE when unknown: then its last op), "has not left
 * allreduce #812", or "has been in checkpoint for ..." (a long phase). */
int hang_what(const struct hang_view *v, uint32_t next_op, char *buf, size_t len);

/* The line every node prints for a hang:
 *   "hang: node N rank R pid P WHAT: S s past its deadline of D s (step T);
 *    its process is STATE[; WHY]"
 * Returns the length (snprintf's), the line without '\n'. */
int hang_line(const struct hang_view *v, const struct hang_judgement *j, uint32_t next_op,
	      char *buf, size_t len);

#endif
