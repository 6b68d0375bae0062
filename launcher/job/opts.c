/*
 * opts.c - the launcher's settings: defaults, setting by name through the
 * option table (opts_values.c) with the command line's precedence, string
 * lists, the process count and the final checks.
 */
#include "opts.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "linebuf.h"

/* The string defaults, through the table like any other value. */
static const char *const opts_default_strs[][2] = {
    {"nproc_per_node", "1"},   {"master_addr", "127.0.0.1"}, {"rdzv_backend", "static"},
    {"rdzv_id", "none"},       {"role", "default"},	     {"start_method", "spawn"},
    {"prefix", "[rank %r]: "},
};

void opts_line_add(char *buf, size_t len, const char *fmt, ...)
{
	size_t n = strlen(buf);
	va_list ap;

	if (n + 1 >= len)
		return;
	va_start(ap, fmt);
	vsnprintf(buf + n, len - n, fmt, ap);
	va_end(ap);
}

int opts_strv_push(struct opts_strv *v, const char *s)
{
	char *copy = strdup(s);

	if (!copy)
		return -ENOMEM;
	/* Doubling keeps a 100,000-line job file linear. */
	if (v->n + 2 > v->cap) {
		size_t cap = v->cap ? 2 * v->cap : 8;
		char **nv = realloc(v->v, cap * sizeof(*nv));

		if (!nv) {
			free(copy);
			return -ENOMEM;
		}
		v->v = nv;
		v->cap = cap;
	}
	v->v[v->n++] = copy;
	v->v[v->n] = NULL;
	return 0;
}

void opts_strv_clear(struct opts_strv *v)
{
	for (size_t i = 0; i < v->n; i++)
		free(v->v[i]);
	free(v->v);
	v->v = NULL;
	v->n = 0;
	v->cap = 0;
}

int opts_init(struct launch_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->nnodes_min = o->nnodes_max = 1;
	o->node_rank = -1;
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
	/* Slurm's --signal=USR1@T and checkpoint-on-signal handlers expect the
	 * job to go on after USR1/USR2. */
	o->nforward = 2;
	o->forward_signals[0] = SIGUSR1;
	o->forward_signals[1] = SIGUSR2;
	o->use_env = -1;
	o->metrics.port = -1;
	for (size_t i = 0; i < sizeof(opts_default_strs) / sizeof(opts_default_strs[0]); i++)
		if (opts_set(o, opts_default_strs[i][0], opts_default_strs[i][1], OPTS_SRC_DEFAULT,
			     NULL, 0)) {
			opts_release(o);
			return -ENOMEM;
		}
	return 0;
}

void opts_release(struct launch_opts *o)
{
	char **strs[] = {&o->nproc_spec,    &o->master_addr, &o->rdzv_backend,
			 &o->rdzv_endpoint, &o->rdzv_id,     &o->rdzv_conf,
			 &o->rdzv_token,    &o->log_dir,     &o->local_ranks_filter,
			 &o->role,	    &o->local_addr,  &o->start_method,
			 &o->prefix,	    &o->config,	     &o->program};

	/* The job's secret does not linger in freed memory. */
	if (o->rdzv_token)
		explicit_bzero(o->rdzv_token, strlen(o->rdzv_token));
	for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
		free(*strs[i]);
		*strs[i] = NULL;
	}
	opts_strv_clear(&o->args);
	opts_strv_clear(&o->env);
}

int opts_takes_value(const char *name)
{
	int i = settings_find(&opts_settings, name);

	if (i < 0)
		return -ENOENT;
	return opts_settings.defs[i].type != SETTINGS_BOOL;
}

enum opts_source opts_source_of(const struct launch_opts *o, size_t i)
{
	for (int s = OPTS_SRC_CLI; s > OPTS_SRC_DEFAULT; s--)
		if ((o->set_by[s] >> i) & 1)
			return (enum opts_source)s;
	return OPTS_SRC_DEFAULT;
}

int opts_set(struct launch_opts *o, const char *name, const char *value, enum opts_source src,
	     char *err, size_t errlen)
{
	int i = settings_find(&opts_settings, name);
	int rc;

	if (i < 0) {
		snprintf(err, errlen, "unknown option '%s'", name);
		return -ENOENT;
	}
	if (src != OPTS_SRC_DEFAULT && opts_source_of(o, (size_t)i) > src)
		return 0;
	rc = settings_apply(&opts_settings, (size_t)i, o, value, err, errlen);
	if (rc == 0 && src != OPTS_SRC_DEFAULT)
		o->set_by[src] |= 1ull << i;
	return rc;
}

int opts_nproc(const struct launch_opts *o, int ncpu, int ngpu, char *err, size_t errlen)
{
	const char *s = o->nproc_spec;
	long long v;

	if (!strcmp(s, "cpu") || (!strcmp(s, "auto") && ngpu <= 0))
		return ncpu > 0 ? ncpu : 1;
	if (!strcmp(s, "gpu") || !strcmp(s, "auto")) {
		if (ngpu <= 0) {
			snprintf(
			    err, errlen,
			    "--nproc_per_node=gpu but no GPU is visible (use a number or cpu)");
			return -EINVAL;
		}
		return ngpu;
	}
	if (settings_parse_ll(s, 1, 4096, &v)) {
		snprintf(err, errlen, "bad --nproc_per_node '%s'", s);
		return -EINVAL;
	}
	return (int)v;
}

const char *opts_local_rank_arg(const struct launch_opts *o)
{
	if (o->pass_local_rank == OPTS_LOCAL_RANK_DASH)
		return "--local-rank";
	if (o->pass_local_rank == OPTS_LOCAL_RANK_UNDERSCORE || o->use_env == 0)
		return "--local_rank";
	return NULL;
}

bool opts_forward_only(const struct launch_opts *o, int sig)
{
	for (int i = 0; i < o->nforward; i++)
		if (o->forward_signals[i] == sig)
			return true;
	return false;
}

int opts_check(const struct launch_opts *o, char *err, size_t errlen)
{
	if (!o->program) {
		snprintf(err, errlen,
			 "no program to run (usage: ddplaunch [options] PROGRAM [ARGS...], "
			 "see --help)");
		return -EINVAL;
	}
	if (o->use_env == 1 && o->pass_local_rank != OPTS_LOCAL_RANK_NONE) {
		snprintf(err, errlen,
			 "--use_env and --pass_local_rank contradict each other (with --use_env "
			 "the workers read LOCAL_RANK only); drop one");
		return -EINVAL;
	}
	if (o->module && o->no_python) {
		snprintf(err, errlen, "--module and --no_python cannot be used together");
		return -EINVAL;
	}
	if (o->standalone && o->nnodes_max > 1) {
		snprintf(err, errlen, "--standalone runs one node; drop --nnodes or --standalone");
		return -EINVAL;
	}
	if (!o->no_prefix && o->prefix && linebuf_prefix_max(o->prefix) > LINEBUF_PREFIX_MAX) {
		snprintf(
		    err, errlen,
		    "--prefix is too long: it can make a prefix of %zu characters (%%r and %%l "
		    "count as 10), over the %d a line can have; shorten it",
		    linebuf_prefix_max(o->prefix), LINEBUF_PREFIX_MAX);
		return -EINVAL;
	}
	if (o->node_rank >= o->nnodes_max) {
		snprintf(err, errlen, "--node_rank=%d is not below --nnodes=%d", o->node_rank,
			 o->nnodes_max);
		return -EINVAL;
	}
	return 0;
}
