/*
 * command.h - the worker's command line: PROGRAM ending in .py runs as
 * "PYTHON -u PROGRAM ARGS", -m as "PYTHON -u -m MODULE ARGS", anything else
 * (or with --no_python) as "PROGRAM ARGS". Pure module.
 */
#ifndef DDP_LAUNCHER_COMMAND_H
#define DDP_LAUNCHER_COMMAND_H

#include <stddef.h>

#include "opts.h"

/* Builds a NULL-terminated argv (the array is malloc'ed; its strings point
 * into `o` and `python`, which must outlive it). `python`: $PYTHON_EXEC,
 * NULL or "" for "python3". Returns 0 or -ENOMEM. */
int command_build(const struct launch_opts *o, const char *python, char ***argv, size_t *argc);

#endif
