/*
 * args.h - the ddplaunch command line (torchrun's flags, both spellings).
 *
 *   ddplaunch [OPTIONS] [--config JOB.ini] [--] PROGRAM [ARGS...]
 *
 * Options come before the program; the first word that is not an option is
 * the program and everything after it goes to the worker unchanged. Pure
 * module: no I/O.
 */
#ifndef DDP_LAUNCHER_ARGS_H
#define DDP_LAUNCHER_ARGS_H

#include "opts.h"

enum args_result {
	ARGS_OK = 0,
	ARGS_HELP = 1,	  /* -h/--help: print args_help_text(), exit 0 */
	ARGS_VERSION = 2, /* --version */
};

/* Applies argv[1..argc-1] to `o` with OPTS_SRC_CLI. Returns an
 * enum args_result, or -EINVAL (err names the flag and the fix) or -ENOMEM.
 * A program given here replaces one from a job file. */
int args_parse(struct launch_opts *o, int argc, char *const argv[], char *err, size_t errlen);

/* The --help text. */
const char *args_help_text(void);

#endif
