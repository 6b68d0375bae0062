#include "opts.h"
#include "opts_values.h"

#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum opts_kind {
	K_STR,
	K_INT,
	K_DBL,
	K_BOOL,
	K_NPROC,
	K_NNODES,
	K_STREAMS,
	K_FILTER,
	K_SIGNALS,
	K_BACKOFF
};

struct opts_def {
	const char *name;
	const char *alias; /* single-letter or older spelling, or NULL */
	enum opts_kind kind;
	size_t off;
	int min, max; /* K_INT range */
};

#define OFF(f) offsetof(struct launch_opts, f)

static const struct opts_def opts_table[] = {
    {"nproc_per_node", NULL, K_NPROC, OFF(nproc_spec), 0, 0},
    {"nnodes", NULL, K_NNODES, 0, 0, 0},
    {"node_rank", NULL, K_INT, OFF(node_rank), 0, 1 << 20},
    {"master_addr", NULL, K_STR, OFF(master_addr), 0, 0},
    {"master_port", NULL, K_INT, OFF(master_port), 0, 65535},
    {"standalone", NULL, K_BOOL, OFF(standalone), 0, 0},
    {"rdzv_backend", NULL, K_STR, OFF(rdzv_backend), 0, 0},
    {"rdzv_endpoint", NULL, K_STR, OFF(rdzv_endpoint), 0, 0},
    {"rdzv_id", "run_id", K_STR, OFF(rdzv_id), 0, 0},
    {"rdzv_conf", NULL, K_STR, OFF(rdzv_conf), 0, 0},
    {"max_restarts", NULL, K_INT, OFF(max_restarts), 0, 1 << 20},
    {"monitor_interval", NULL, K_DBL, OFF(monitor_interval), 0, 0},
    {"log_dir", NULL, K_STR, OFF(log_dir), 0, 0},
    {"redirects", "r", K_STREAMS, OFF(redirects), 0, 0},
    {"tee", "t", K_STREAMS, OFF(tee), 0, 0},
    {"local_ranks_filter", NULL, K_FILTER, OFF(local_ranks_filter), 0, 0},
    {"role", NULL, K_STR, OFF(role), 0, 0},
    {"no_python", NULL, K_BOOL, OFF(no_python), 0, 0},
    {"module", "m", K_BOOL, OFF(module), 0, 0},
    {"local_addr", NULL, K_STR, OFF(local_addr), 0, 0},
    {"start_method", NULL, K_STR, OFF(start_method), 0, 0},
    {"pass_local_rank", NULL, K_BOOL, OFF(pass_local_rank), 0, 0},
    {"use_env", NULL, K_BOOL, OFF(use_env), 0, 0},
    {"strict_port", NULL, K_BOOL, OFF(strict_port), 0, 0},
    {"grace_period", NULL, K_DBL, OFF(grace_period), 0, 0},
    {"signals", NULL, K_SIGNALS, 0, 0, 0},
    {"backoff", NULL, K_BACKOFF, 0, 0, 0},
    {"no_prefix", NULL, K_BOOL, OFF(no_prefix), 0, 0},
    {"prefix", NULL, K_STR, OFF(prefix), 0, 0},
    {"config", NULL, K_STR, OFF(config), 0, 0},
    {"dry_run", NULL, K_BOOL, OFF(dry_run), 0, 0},
};

#define OPTS_COUNT (sizeof(opts_table) / sizeof(opts_table[0]))

static void opts_err(char *err, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void opts_err(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!err || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
}

static int opts_setstr(char **field, const char *value)
{
	char *copy = strdup(value);

	if (!copy)
		return -ENOMEM;
	free(*field);
	*field = copy;
	return 0;
}

int opts_strv_push(struct opts_strv *v, const char *s)
{
	char **nv = realloc(v->v, (v->n + 2) * sizeof(*nv));

	if (!nv)
		return -ENOMEM;
	v->v = nv;
	nv[v->n] = strdup(s);
	if (!nv[v->n])
		return -ENOMEM;
	v->n++;
	nv[v->n] = NULL;
	return 0;
}

void opts_strv_clear(struct opts_strv *v)
{
	for (size_t i = 0; i < v->n; i++)
		free(v->v[i]);
	free(v->v);
	v->v = NULL;
	v->n = 0;
}

int opts_init(struct launch_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->nnodes_min = o->nnodes_max = 1;
	o->master_port = -1;
	o->monitor_interval = 5.0;
	o->grace_period = 30.0;
	o->redirects.all = -1;
	o->tee.all = -1;
	o->nsignals = 6;
	o->signals[0] = SIGTERM;
	o->signals[1] = SIGINT;
	o->signals[2] = SIGHUP;
	o->signals[3] = SIGQUIT;
	o->signals[4] = SIGUSR1;
	o->signals[5] = SIGUSR2;
	if (opts_setstr(&o->nproc_spec, "1") || opts_setstr(&o->master_addr, "127.0.0.1") ||
	    opts_setstr(&o->rdzv_backend, "static") || opts_setstr(&o->rdzv_id, "none") ||
	    opts_setstr(&o->role, "default") || opts_setstr(&o->start_method, "spawn") ||
	    opts_setstr(&o->prefix, "[rank %r]: ")) {
		opts_release(o);
		return -ENOMEM;
	}
	return 0;
}

void opts_release(struct launch_opts *o)
{
	char **strs[] = {&o->nproc_spec, &o->master_addr, &o->rdzv_backend, &o->rdzv_endpoint,
			 &o->rdzv_id,	 &o->rdzv_conf,	  &o->log_dir,	    &o->local_ranks_filter,
			 &o->role,	 &o->local_addr,  &o->start_method, &o->prefix,
			 &o->config,	 &o->program};

	for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
		free(*strs[i]);
		*strs[i] = NULL;
	}
	opts_strv_clear(&o->args);
	opts_strv_clear(&o->env);
}

/* Canonical table index for a name with dashes or underscores, or -1. */
static int opts_find(const char *name)
{
	char canon[64];
	size_t n = strlen(name);

	if (n == 0 || n >= sizeof(canon))
		return -1;
	for (size_t i = 0; i <= n; i++)
		canon[i] = name[i] == '-' ? '_' : name[i];
	for (size_t i = 0; i < OPTS_COUNT; i++)
		if (!strcmp(canon, opts_table[i].name) ||
		    (opts_table[i].alias && !strcmp(canon, opts_table[i].alias)))
			return (int)i;
	return -1;
}

int opts_takes_value(const char *name)
{
	int i = opts_find(name);

	if (i < 0)
		return -ENOENT;
	return opts_table[i].kind != K_BOOL;
}

static const char *opts_expect(enum opts_kind k)
{
	switch (k) {
	case K_INT:
		return "an integer in range";
	case K_DBL:
		return "a non-negative number";
	case K_BOOL:
		return "true or false";
	case K_NPROC:
		return "a positive number, gpu, cpu or auto";
	case K_NNODES:
		return "N or MIN:MAX";
	case K_STREAMS:
		return "0-3, or LOCAL_RANK:0-3 pairs like 0:1,1:2";
	case K_FILTER:
		return "local ranks like 0,2";
	case K_SIGNALS:
		return "signal names like TERM,INT,USR1";
	case K_BACKOFF:
		return "SECONDS or INITIAL:MAX seconds";
	default:
		return "a non-empty string";
	}
}

static int opts_apply(struct launch_opts *o, const struct opts_def *d, const char *value)
{
	char *base = (char *)o;
	long l;

	if (d->kind != K_BOOL && !value)
		return -EINVAL;
	switch (d->kind) {
	case K_STR:
		return *value ? opts_setstr((char **)(base + d->off), value) : -EINVAL;
	case K_INT:
		if (optval_long(value, d->min, d->max, &l))
			return -EINVAL;
		*(int *)(base + d->off) = (int)l;
		return 0;
	case K_DBL:
		return optval_double(value, (double *)(base + d->off));
	case K_BOOL:
		return optval_bool(value, (bool *)(base + d->off));
	case K_NPROC:
		return optval_nproc_spec(value) ? opts_setstr(&o->nproc_spec, value) : -EINVAL;
	case K_NNODES:
		return optval_nnodes(o, value);
	case K_STREAMS:
		return opts_parse_streams(value, (struct opts_streams *)(base + d->off));
	case K_FILTER:
		return optval_filter(value) ? -EINVAL : opts_setstr(&o->local_ranks_filter, value);
	case K_SIGNALS:
		return optval_signals(o, value);
	case K_BACKOFF:
		return optval_backoff(o, value);
	}
	return -EINVAL;
}

int opts_set(struct launch_opts *o, const char *name, const char *value, enum opts_source src,
	     char *err, size_t errlen)
{
	int i = opts_find(name);
	int rc;

	if (i < 0) {
		opts_err(err, errlen, "unknown option '%s'", name);
		return -ENOENT;
	}
	if (src == OPTS_SRC_FILE && (o->set_by_cli & (1ull << i)))
		return 0;
	rc = opts_apply(o, &opts_table[i], value);
	if (rc == -EINVAL)
		opts_err(err, errlen, "bad value '%s' for '%s' (expected %s)", value ? value : "",
			 opts_table[i].name, opts_expect(opts_table[i].kind));
	else if (rc == -ENOMEM)
		opts_err(err, errlen, "out of memory");
	if (rc == 0 && src == OPTS_SRC_CLI)
		o->set_by_cli |= 1ull << i;
	return rc;
}

int opts_nproc(const struct launch_opts *o, int ncpu, int ngpu, char *err, size_t errlen)
{
	const char *s = o->nproc_spec;
	long v;

	if (!strcmp(s, "cpu") || (!strcmp(s, "auto") && ngpu <= 0))
		return ncpu > 0 ? ncpu : 1;
	if (!strcmp(s, "gpu") || !strcmp(s, "auto")) {
		if (ngpu <= 0) {
			opts_err(
			    err, errlen,
			    "--nproc_per_node=gpu but no GPU is visible (use a number or cpu)");
			return -EINVAL;
		}
		return ngpu;
	}
	if (optval_long(s, 1, 4096, &v)) {
		opts_err(err, errlen, "bad --nproc_per_node '%s'", s);
		return -EINVAL;
	}
	return (int)v;
}

int opts_check(const struct launch_opts *o, char *err, size_t errlen)
{
	if (!o->program) {
		opts_err(err, errlen,
			 "no program to run (usage: ddplaunch [options] PROGRAM [ARGS...], "
			 "see --help)");
		return -EINVAL;
	}
	if (o->module && o->no_python) {
		opts_err(err, errlen, "--module and --no_python cannot be used together");
		return -EINVAL;
	}
	if (o->standalone && o->nnodes_max > 1) {
		opts_err(err, errlen, "--standalone runs one node; drop --nnodes or --standalone");
		return -EINVAL;
	}
	if (o->node_rank >= o->nnodes_max) {
		opts_err(err, errlen, "--node_rank=%d is not below --nnodes=%d", o->node_rank,
			 o->nnodes_max);
		return -EINVAL;
	}
	return 0;
}
