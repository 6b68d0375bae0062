/*
 * jobfile.h - INI job files (inih):
 *
 *   [launch]   any ddplaunch flag by its long name: nproc_per_node = 4
 *   [program]  program = train.py
 *              arg = --epochs       (repeatable: appended in order)
 *              args = --lr 0.1      (repeatable: split on blanks, appended)
 *   [env]      NAME = VALUE         (extra worker environment)
 *   [train]    belongs to ddp-train; skipped entirely
 *
 * Flags set on the command line win over the file; a program given on the
 * command line replaces the file's program and arguments. A line holds at
 * most JOBFILE_MAX_LINE characters besides its line ending (Debian's inih
 * keeps 200 bytes: the line, its newline and a terminator), so long
 * argument lists are written as several arg/args lines; a longer line is an
 * error, never silently cut. So is a NUL byte.
 */
#ifndef DDP_LAUNCHER_JOBFILE_H
#define DDP_LAUNCHER_JOBFILE_H

#include <stdio.h>

#include "opts.h"
#include "settings_ini.h"

/* Longest line accepted, without its line ending. */
#define JOBFILE_MAX_LINE SETTINGS_INI_MAX_LINE

/* Applies the job file at `path` to `o` with OPTS_SRC_FILE. Returns 0, or
 * -ENOENT/-EACCES/... (cannot open), -EISDIR/-EINVAL (not a regular file),
 * -EINVAL for the first problem, with err = "PATH:LINE: message naming the
 * key and the fix", or -EIO/-ENOMEM. */
int jobfile_load(struct launch_opts *o, const char *path, char *err, size_t errlen);

/* The same on an open stream; `name` is used in messages. */
int jobfile_load_stream(struct launch_opts *o, FILE *f, const char *name, char *err, size_t errlen);

#endif
