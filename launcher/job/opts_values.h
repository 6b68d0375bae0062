/*
 * opts_values.h - the launcher's own value types behind the option table
 * (opts.c): N or MIN:MAX, stream masks, rank lists, signal lists, backoff,
 * the process count. Each is a SETTINGS_CUSTOM parser (common/settings.h):
 * `obj` is the struct launch_opts, `def` the table entry; it returns 0,
 * -EINVAL (leaving the settings untouched) or -ENOMEM.
 */
#ifndef DDP_LAUNCHER_OPTS_VALUES_H
#define DDP_LAUNCHER_OPTS_VALUES_H

#include "opts.h"

#define OPTVAL_STREAMS_EXPECT "0-3, or LOCAL_RANK:0-3 pairs like 0:1,1:2"

/* A positive count, or gpu, cpu, auto, into o->nproc_spec. */
int optval_nproc(void *obj, const struct settings_def *def, const char *s);
/* "N" or "MIN:MAX" into o->nnodes_min/max. */
int optval_nnodes(void *obj, const struct settings_def *def, const char *s);
/* opts_parse_streams() into the struct opts_streams at def->offset. */
int optval_streams(void *obj, const struct settings_def *def, const char *s);
/* Non-negative integers separated by commas ("0,2") into
 * o->local_ranks_filter. */
int optval_filter(void *obj, const struct settings_def *def, const char *s);
/* "TERM,INT,USR1" into o->signals (KILL and STOP refused). */
int optval_signals(void *obj, const struct settings_def *def, const char *s);
/* "S" or "S:MAX" seconds into o->backoff_initial/max. */
int optval_backoff(void *obj, const struct settings_def *def, const char *s);

#endif
