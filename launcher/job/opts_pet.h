/*
 * opts_pet.h - torchrun's environment: every option the command line and
 * the job file left out, taken from PET_<NAME> (upper case, underscores:
 * PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR,
 * PET_MASTER_PORT, PET_RDZV_BACKEND, PET_RDZV_ENDPOINT, PET_RDZV_ID,
 * PET_RDZV_CONF, PET_MAX_RESTARTS, PET_STANDALONE, ...), as torchrun reads
 * them, so that a Kubeflow PyTorchJob pod that runs `ddplaunch train.py`
 * with nothing else gets the job the operator described.
 *
 * Which variables: PET_<NAME> for every option of the table (opts_values.c),
 * ddplaunch's own included (PET_GRACE_PERIOD, PET_STRICT_PORT, ...), and
 * PET_<ALIAS> for its long aliases (PET_RUN_ID, PET_SHUTDOWN_TIMEOUT,
 * PET_SIGNALS_TO_HANDLE) when PET_<NAME> is absent; never config, dry_run
 * (an environment must not turn a run into a no-op) or rdzv_token (the
 * secret has its own variable, DDP_RDZV_TOKEN). An empty variable counts
 * as absent. A boolean option follows torchrun's rule for flags: an
 * integer, non-zero is true (PET_STANDALONE=1); true/false/yes/no/on/off
 * are accepted too.
 *
 * Precedence, value by value: the command line, the job file, PET_*, the
 * Slurm step (opts_slurm.h), the defaults.
 */
#ifndef DDP_LAUNCHER_OPTS_PET_H
#define DDP_LAUNCHER_OPTS_PET_H

#include <stddef.h>

#include "opts.h"

#define OPTS_PET_PREFIX "PET_"

/* Sets every option not given by the command line or the job file from its
 * PET_ variable in envp (name=value strings, NULL-terminated), with
 * OPTS_SRC_PET. o->pet_used gets the one line that says what was taken,
 * which PET_ variables the flags or the job file overrode and which name
 * no option ("" when no PET_ variable is set). Returns 0, or -EINVAL with
 * err naming the variable, its value, what is expected and the fix; or
 * -ENOMEM. */
int opts_pet_apply(struct launch_opts *o, char *const envp[], char *err, size_t errlen);

/* The variable that entry `i` of opts_settings was (or would be) read from
 * for o: "PET_NODE_RANK", or "PET_RUN_ID" when taken from the alias. */
void opts_pet_name(const struct launch_opts *o, size_t i, char *buf, size_t len);

/* After a later check failed with err (opts_check, opts_rdzv_resolve, ...):
 * appends to err which of the flags it names came from PET_ variables and
 * their values ("; from the environment: PET_NODE_RANK=3 (--node_rank);
 * fix or unset it, or give the flag"), so that the message names what the
 * user set, not a flag never typed. Leaves err as is when none. */
void opts_pet_explain(const struct launch_opts *o, char *const envp[], char *err, size_t errlen);

#endif
