/*
 * identity.h - a job's identity across nodes: the fingerprint of what every
 * node of one job must agree on, its description for messages, and the
 * default run id derived from it. Pure module: no I/O.
 *
 * The fingerprint covers the rendezvous mode (static, c10d or etcd),
 * --nnodes (MIN:MAX), --no_python, -m and the program with its arguments,
 * as typed. It leaves out what nodes of one job may give differently:
 * --node_rank, --local_addr, the address they reach the store by, log
 * directories and output options, --rdzv_conf's timeouts, the token (the
 * store checks it), --max_restarts (the job's budget is its first node's)
 * and --nproc_per_node (hosts with different GPU counts; each node's count
 * is in the world every round).
 *
 * The rendezvous refuses a node whose fingerprint differs from the job it
 * reaches (rdzv_machine.h, "Job identity"). Two identical command lines are
 * one job: without --rdzv_id both derive the same run id (and a run id
 * reused after its job ended starts the next one); different ones derive
 * different run ids and never share keys.
 */
#ifndef DDP_LAUNCHER_IDENTITY_H
#define DDP_LAUNCHER_IDENTITY_H

#include <stddef.h>

#include "opts.h"

#define IDENTITY_JOB_LEN       16  /* hex digits of the fingerprint */
#define IDENTITY_TEXT_MAX      200 /* the description (rdzv_codec.h's RDZV_JOB_MAX) */
#define IDENTITY_RUN_ID_PREFIX "job-"

/* Writes the fingerprint (IDENTITY_JOB_LEN hex digits and a NUL) into job
 * and the description ("'PROGRAM ARGS' on --nnodes=N --nproc_per_node=P
 * (MODE)": printable ASCII, the command shortened from its start to fit)
 * into text (IDENTITY_TEXT_MAX + 1 bytes). `mode` is
 * opts_rdzv_mode_name()'s word. */
void identity_make(const struct launch_opts *o, const char *mode, char job[IDENTITY_JOB_LEN + 1],
		   char text[IDENTITY_TEXT_MAX + 1]);

#endif
