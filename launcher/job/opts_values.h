/*
 * opts_values.h - the value parsers behind the option table (opts.c):
 * numbers, booleans, N or MIN:MAX, stream masks, rank lists, signal lists,
 * backoff. Pure module; each returns 0 or -EINVAL and leaves its output
 * untouched on error.
 */
#ifndef DDP_LAUNCHER_OPTS_VALUES_H
#define DDP_LAUNCHER_OPTS_VALUES_H

#include <stdbool.h>

#include "opts.h"

/* A decimal integer in [min, max]. */
int optval_long(const char *s, long min, long max, long *out);
/* A finite number >= 0. */
int optval_double(const char *s, double *out);
/* 1/true/yes/on or 0/false/no/off; NULL (a bare flag) is true. */
int optval_bool(const char *s, bool *out);
/* Non-negative integers separated by commas: "0,2". */
int optval_filter(const char *s);
/* "TERM,INT,USR1" into o->signals (KILL and STOP refused). */
int optval_signals(struct launch_opts *o, const char *s);
/* "S" or "S:MAX" seconds into o->backoff_initial/max. */
int optval_backoff(struct launch_opts *o, const char *s);
/* "N" or "MIN:MAX" into o->nnodes_min/max. */
int optval_nnodes(struct launch_opts *o, const char *s);
/* A positive count, or gpu, cpu, auto. */
bool optval_nproc_spec(const char *s);

#endif
