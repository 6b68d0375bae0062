/*
 * dryrun.h - --dry_run: the resolved job (every setting, the worker
 * command line, the extra environment) as "key = value" lines, so a job
 * file can be checked without starting anything. "from = " says where each
 * value that is not a default came from (flag, job file, PET_<NAME>,
 * slurm), "pet = " what PET_* gave (opts_pet.h).
 */
#ifndef DDP_LAUNCHER_DRYRUN_H
#define DDP_LAUNCHER_DRYRUN_H

#include <stdio.h>

#include "opts.h"

/* Writes the job to `out`. `python`: $PYTHON_EXEC or NULL. Returns 0 or
 * -ENOMEM. */
int dryrun_print(const struct launch_opts *o, const char *python, FILE *out);

#endif
