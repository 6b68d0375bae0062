/*
 * progress_page.h - libddp's writer of the process's progress page
 * (common/progress.h): what the worker is doing, for its agent, at no
 * system-call cost per collective (stores into a shared mapping and the
 * vDSO's clock).
 *
 * One page per process, mapped at the first progress_open (ddp_init) from
 * DDP_PROGRESS_FILE and kept for the life of the process; without the
 * variable, or when the mapping fails (a debug line says why), every
 * function here does nothing. Writers: the application thread (phases,
 * steps, rounds) and the communication thread (collectives, waits); a
 * spin lock in this process serialises them, so the page's sequence lock
 * sees one writer.
 *
 * Phases: the base phase is what the program (or libddp: STARTUP, REFORM,
 * HANDOVER, SHUTDOWN) says it does; COMPUTE once a communicator is built.
 * A collective entered while the base phase is COMPUTE shows as
 * COLLECTIVE until it leaves; one entered in another phase (a
 * checkpoint's barrier, a hand-over's broadcasts) keeps that phase, so a
 * reader's collective deadline never applies to a save or a hand-over,
 * while op, seq and the entered/left times still tell where it is. Not
 * installed.
 */
#ifndef DDP_WORKER_PROGRESS_PAGE_H
#define DDP_WORKER_PROGRESS_PAGE_H

#include <stdbool.h>
#include <stdint.h>

#include "progress.h"

/* Maps the page named by DDP_PROGRESS_FILE (a path, or a POSIX
 * shared-memory name such as "/ddp-TAG-progress-3") once per process,
 * then removes the variable from the environment (the program's children
 * never write the same page). A later call does nothing. Never fails. */
void progress_open(void);

/* true when a page is mapped (the rest writes). */
bool progress_on(void);

/* A communicator was built: round, rank and world of it; the collective
 * fields start again (seq 0: none yet), the base phase becomes COMPUTE. */
void progress_round(int round, int rank, int world);

/* The base phase (not COLLECTIVE: entered by progress_enter). */
void progress_phase(enum ddp_progress_phase phase);

/* Entering collective number seq of the round (the caller counts):
 * op, its payload in bytes, the gradient bucket or -1. */
void progress_enter(uint64_t seq, enum ddp_progress_op op, uint64_t bytes, int bucket);

/* The collective entered last has ended (successfully or not). */
void progress_leave(void);

/* Inside a collective: the job rank whose data it now waits for, -1 when
 * none is known. Writes only on a change, so a transport may call it
 * before every wait. */
void progress_waiting(int rank);

/* A committed training step (ddp_progress_step). */
void progress_step(uint64_t step, uint64_t step_ns, uint64_t compute_ns, uint64_t wait_ns,
		   uint32_t shards);

#endif
