/*
 * identity.h - a job's identity across nodes: the fingerprint of what every
 * node of one job must agree on, the fingerprint of the whole command line
 * (from which the default run id is derived), and the job's description for
 * messages. Pure module: no I/O.
 *
 * The job's fingerprint covers the rendezvous mode (static, c10d or etcd),
 * --nnodes (MIN:MAX), --no_python, -m and the program's name: the last part
 * of its path (or the module's name), not its directory, not its arguments.
 * The name is what tells one program from another (train.py, eval.py) and
 * is the same on every node however the path is written there: relative
 * from another directory, absolute, a per-node copy (a container image, a
 * node's scratch directory). Comparing the path as typed, or the file
 * itself (inode, contents), would refuse exactly those nodes, and would
 * need I/O at every start; two different programs of one name under one
 * --rdzv_id still meet, and the line below says how their command lines
 * differ. With --no_python the program is the interpreter: its script is
 * an argument.
 *
 * The command line's fingerprint covers the same and the program as typed
 * with its arguments. The nodes of one job may differ there (each its own
 * --checkpoint_dir or log path on a shared filesystem, $SLURM_NODEID in a
 * file name): the rendezvous says so in one line on the node that notices
 * and goes on (rdzv_machine.h, "Job identity"). Without --rdzv_id the run
 * id is derived from it, so two different command lines are two jobs that
 * never share keys, and two identical ones are one job (a run id reused
 * after its job ended starts the next one).
 *
 * Both leave out what nodes of one job may give differently: --node_rank,
 * --local_addr, the address they reach the store by, log directories and
 * output options, --rdzv_conf's timeouts, the token (the store checks it),
 * --max_restarts (the job's budget is its first node's) and
 * --nproc_per_node (hosts with different GPU counts; each node's count is
 * in the world every round).
 *
 * The rendezvous refuses a node whose job fingerprint differs from the job
 * it reaches.
 */
#ifndef DDP_LAUNCHER_IDENTITY_H
#define DDP_LAUNCHER_IDENTITY_H

#include <stddef.h>

#include "opts.h"

#define IDENTITY_JOB_LEN       16  /* hex digits of the fingerprint */
#define IDENTITY_TEXT_MAX      200 /* the description (rdzv_codec.h's RDZV_JOB_MAX) */
#define IDENTITY_RUN_ID_PREFIX "job-"

/* Writes the job's fingerprint and the command line's (each
 * IDENTITY_JOB_LEN hex digits and a NUL) into job and cmd, and the
 * description ("'PROGRAM ARGS' on --nnodes=N --nproc_per_node=P (MODE)":
 * printable ASCII, the command shortened from its start to fit) into text
 * (IDENTITY_TEXT_MAX + 1 bytes). `mode` is opts_rdzv_mode_name()'s word. */
void identity_make(const struct launch_opts *o, const char *mode, char job[IDENTITY_JOB_LEN + 1],
		   char cmd[IDENTITY_JOB_LEN + 1], char text[IDENTITY_TEXT_MAX + 1]);

#endif
