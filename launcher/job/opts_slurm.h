/*
 * opts_slurm.h - under a Slurm step, the rendezvous options the command
 * line and the job file left out, taken from the step (launcher/slurm), so
 * that `srun ddplaunch --nproc_per_node=2 train.py` needs nothing else.
 *
 * Precedence, value by value: the command line, then the job file, then
 * torchrun's PET_* variables (opts_pet.h), then the Slurm step, then the
 * defaults. What the step gives:
 *   --nnodes        the step's node count (SLURM_STEP_NUM_NODES/SLURM_NNODES)
 *   --node_rank     this node's place in the step's host list (SLURM_NODEID),
 *                   where it is below --nnodes
 *   --master_addr   the first host of the step's list, resolved (static
 *                   backend, more than one node, no --rdzv_endpoint)
 *   --rdzv_endpoint that address and the port (c10d backend without one)
 *   --master_port   lo + (4 * job + step) mod (hi - lo + 1) in the range of
 *                   --slurm_port_range (29500-29999; not with --rdzv_endpoint)
 *   --rdzv_id       "slurm-JOB.STEP" ("slurm-JOB.batch" in a batch script)
 * One node (--nnodes=1, or a one-node step) keeps the store on loopback:
 * only the port and the run id come from Slurm then.
 *
 * Off with --no_slurm (flag or job file), DDPLAUNCH_SLURM=0 (also off, no,
 * false), and with --standalone. Without SLURM_JOB_ID nothing happens.
 */
#ifndef DDP_LAUNCHER_OPTS_SLURM_H
#define DDP_LAUNCHER_OPTS_SLURM_H

#include <stddef.h>
#include <stdio.h>

#include "opts.h"

#define OPTS_SLURM_ENV "DDPLAUNCH_SLURM"

/* Resolves a host name to one numeric address (slurm_resolve.h's
 * slurm_resolve_host contract: 0 or -ENOENT/-EAGAIN/-EIO; note gets a
 * line about the choice, or ""). */
typedef int (*opts_slurm_resolve_fn)(const char *host, char *addr, size_t addrlen, char *note,
				     size_t notelen);

/* Completes o from the Slurm step described by envp (name=value strings,
 * NULL-terminated; DDPLAUNCH_SLURM is read there too), resolving the master
 * with slurm_resolve_host. Values are set with OPTS_SRC_SLURM, never over
 * a value the command line, the job file or a PET_ variable gave.
 * o->slurm_used gets the one line that says what was taken ("" when Slurm
 * is off or absent); it names the job, the step, the values as flags, the
 * ones kept as given (as flags, or as PET_ variables), and the resolver's
 * note.
 * Returns 0 (also when Slurm is off or absent), or with err filled (one
 * lowercase line naming the fault and the fix, --no_slurm among them):
 *   -ENOTSUP  a step shape ddplaunch cannot run in: more than one task per
 *             node (each would start its own workers), a batch script or
 *             salloc shell of a multi-node job;
 *   -EINVAL   Slurm values that are missing or disagree, a bad
 *             DDPLAUNCH_SLURM;
 *   -ENOENT, -EAGAIN, -EIO  the master's name does not resolve;
 *   -ENOMEM. */
int opts_slurm_apply(struct launch_opts *o, char *const envp[], char *err, size_t errlen);

/* The same with the resolver given (tests). */
int opts_slurm_apply_with(struct launch_opts *o, char *const envp[], opts_slurm_resolve_fn resolve,
			  char *err, size_t errlen);

/* Prints, for --dry_run, "slurm = " and what came from Slurm or why nothing
 * did, and "slurm_port_range = LO-HI"; envp as for opts_slurm_apply(). */
void opts_slurm_print(const struct launch_opts *o, char *const envp[], FILE *out);

#endif
