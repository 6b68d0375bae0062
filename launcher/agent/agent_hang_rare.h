/*
 * agent_hang_rare.h - the hang watch's judge for a worker in a phase with
 * no learned deadline (the rule: hang_rare.h). It gathers the facts the
 * rule needs: the process's state (/proc/PID/task/\*\/stat), whether its
 * main thread slept and its process wrote since the last tick
 * (/proc/PID/task/PID/status voluntary_ctxt_switches, /proc/PID/io wchar
 * and write_bytes), and what the other workers of its node did (their
 * pages, their exits).
 *
 * Called on every tick for a worker judged fine by its deadline; reads
 * /proc only while the worker is in a long phase past the long floor, or
 * in the final save or shutdown (where the "still" measure must be
 * sampled from the phase's start).
 */
#ifndef DDP_LAUNCHER_AGENT_HANG_RARE_H
#define DDP_LAUNCHER_AGENT_HANG_RARE_H

#include <stdbool.h>
#include <stdint.h>

#include "hang_judge.h"

struct agent_hang;

/* Per worker: the last sample of its motion (part of agent_hang_track,
 * zeroed with it). */
struct hang_rare_track {
	int pid;	   /* the process sampled, 0: none yet */
	uint32_t phase;	   /* the phase it was sampled in */
	uint64_t wrote;	   /* wchar + write_bytes */
	uint64_t nvcsw;	   /* the main thread's voluntary context switches */
	uint64_t moved_ns; /* when either last changed (or sampling began) */
};

/* v: worker i's view, its deadline 0 (none learned, none fixed). Returns
 * true when the worker is hung by hang_rare.h's rule: then v->deadline_ns
 * is the long phases' floor (the measure it was judged by), v->ps its
 * process's state and v->why the reason in words (hang_rare_words). */
bool agent_hang_rare(struct agent_hang *h, int i, struct hang_view *v, uint64_t now);

/* Whether worker i, in shutdown (v), comes after a worker of its node and
 * round that finished it (exited 0 from shutdown): its own work was done. */
bool agent_hang_rare_finished(struct agent_hang *h, int i, const struct hang_view *v);

/* Fills v->ps and v->wchan from /proc for v->pid. */
void agent_hang_read_proc(struct hang_view *v);

#endif
