/*
 * opts_values.c - the launcher's option table (a settings_table,
 * common/settings.h) and the value types of its own behind it: N or
 * MIN:MAX, stream masks, rank lists, signal lists, backoff, the process
 * count. Each custom parser gets the struct launch_opts as `obj` and
 * returns 0, -EINVAL (leaving it untouched) or -ENOMEM.
 */
#include "metrics_spec.h"
#include "opts.h"
#include "signames.h"
#include "slurm_env.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Replaces the string *field with a copy of s. */
static int optval_keep(char **field, const char *s)
{
	char *copy = strdup(s);

	if (!copy)
		return -ENOMEM;
	free(*field);
	*field = copy;
	return 0;
}

/* "A" or "A:B" into two strings of up to 63 characters (b = a without B). */
static int optval_pair(const char *s, char *a, char *b)
{
	const char *colon = strchr(s, ':');
	size_t n = colon ? (size_t)(colon - s) : strlen(s);

	if (n >= 64 || (colon && strlen(colon + 1) >= 64))
		return -EINVAL;
	memcpy(a, s, n);
	a[n] = '\0';
	strcpy(b, colon ? colon + 1 : a);
	return 0;
}

int opts_parse_streams(const char *text, struct opts_streams *s)
{
	struct opts_streams r = {.all = -1};
	const char *p = text;
	long long mask;
	long rank;
	char *end;

	if (!text || !*text)
		return -EINVAL;
	if (!strchr(text, ':')) {
		if (settings_parse_ll(text, 0, 3, &mask))
			return -EINVAL;
		r.all = (int)mask;
		*s = r;
		return 0;
	}
	while (*p) {
		rank = strtol(p, &end, 10);
		if (end == p || *end != ':' || rank < 0 || r.n >= 64)
			return -EINVAL;
		p = end + 1;
		mask = strtol(p, &end, 10);
		if (end == p || mask < 0 || mask > 3 || (*end && *end != ','))
			return -EINVAL;
		r.rank[r.n] = (int)rank;
		r.mask[r.n++] = (int)mask;
		p = *end ? end + 1 : end;
	}
	*s = r;
	return 0;
}

int opts_streams_mask(const struct opts_streams *s, int lr)
{
	for (int i = 0; i < s->n; i++)
		if (s->rank[i] == lr)
			return s->mask[i];
	return s->all < 0 ? 0 : s->all;
}

static int optval_streams(void *obj, const struct settings_def *def, const char *s)
{
	return opts_parse_streams(s, (struct opts_streams *)((char *)obj + def->offset));
}

static int optval_filter(void *obj, const struct settings_def *def, const char *s)
{
	struct launch_opts *o = obj;
	const char *p = s;
	char *end;

	if (!*s)
		return -EINVAL;
	for (;;) {
		long v = strtol(p, &end, 10);

		if (end == p || v < 0 || !isdigit((unsigned char)*p))
			return -EINVAL;
		if (!*end)
			return optval_keep(&o->local_ranks_filter, s);
		if (*end != ',')
			return -EINVAL;
		p = end + 1;
	}
}

bool opts_rank_shown(const struct launch_opts *o, int lr)
{
	const char *p = o->local_ranks_filter;
	char *end;

	if (!p)
		return true;
	while (*p) {
		if (strtol(p, &end, 10) == lr)
			return true;
		p = *end ? end + 1 : end;
	}
	return false;
}

/* "TERM,INT,USR1" into sigs (KILL and STOP refused); *n their number. */
static int optval_signal_list(const char *s, int *sigs, int *n)
{
	char name[32];

	*n = 0;
	while (*s) {
		size_t len = strcspn(s, ", ");

		if (len == 0 || len >= sizeof(name) || *n >= OPTS_MAX_SIGNALS)
			return -EINVAL;
		memcpy(name, s, len);
		name[len] = '\0';
		sigs[*n] = signame_parse(name);
		if (sigs[*n] <= 0 || sigs[*n] == SIGKILL || sigs[*n] == SIGSTOP)
			return -EINVAL;
		(*n)++;
		s += len;
		s += strspn(s, ", ");
	}
	return 0;
}

static int optval_signals(void *obj, const struct settings_def *def, const char *s)
{
	struct launch_opts *o = obj;
	int sigs[OPTS_MAX_SIGNALS], n;

	if (!*s || optval_signal_list(s, sigs, &n))
		return -EINVAL;
	memcpy(o->signals, sigs, sizeof(sigs[0]) * (size_t)n);
	o->nsignals = n;
	return 0;
}

/* A list as for --signals, or "none". */
static int optval_forward(void *obj, const struct settings_def *def, const char *s)
{
	struct launch_opts *o = obj;
	int sigs[OPTS_MAX_SIGNALS], n = 0;

	if (!*s || (strcmp(s, "none") && optval_signal_list(s, sigs, &n)))
		return -EINVAL;
	memcpy(o->forward_signals, sigs, sizeof(sigs[0]) * (size_t)n);
	o->nforward = n;
	return 0;
}

/* A boolean, or which spelling of the argument; bare: --local_rank. */
static int optval_local_rank(void *obj, const struct settings_def *def, const char *s)
{
	struct launch_opts *o = obj;
	bool b;

	if (!s || !strcmp(s, "underscore"))
		o->pass_local_rank = OPTS_LOCAL_RANK_UNDERSCORE;
	else if (!strcmp(s, "dash"))
		o->pass_local_rank = OPTS_LOCAL_RANK_DASH;
	else if (settings_parse_bool(s, &b) == 0)
		o->pass_local_rank = b ? OPTS_LOCAL_RANK_UNDERSCORE : OPTS_LOCAL_RANK_NONE;
	else
		return -EINVAL;
	return 0;
}

/* A boolean that remembers it was given (bare: true). */
static int optval_use_env(void *obj, const struct settings_def *def, const char *s)
{
	struct launch_opts *o = obj;
	bool b = true;

	if (s && settings_parse_bool(s, &b))
		return -EINVAL;
	o->use_env = b;
	return 0;
}

static int optval_backoff(void *obj, const struct settings_def *def, const char *s)
{
	struct launch_opts *o = obj;
	char a[64], b[64];
	double lo, hi;

	if (optval_pair(s, a, b) || settings_parse_real(a, &lo) || settings_parse_real(b, &hi) ||
	    hi < lo)
		return -EINVAL;
	o->backoff_initial = lo;
	o->backoff_max = hi;
	return 0;
}

static int optval_nnodes(void *obj, const struct settings_def *def, const char *s)
{
	struct launch_opts *o = obj;
	char a[64], b[64];
	long long lo, hi;

	if (optval_pair(s, a, b) || settings_parse_ll(a, 1, 1 << 20, &lo) ||
	    settings_parse_ll(b, 1, 1 << 20, &hi) || hi < lo)
		return -EINVAL;
	o->nnodes_min = (int)lo;
	o->nnodes_max = (int)hi;
	return 0;
}

static int optval_nproc(void *obj, const struct settings_def *def, const char *s)
{
	struct launch_opts *o = obj;
	long long v;

	if (strcmp(s, "gpu") && strcmp(s, "cpu") && strcmp(s, "auto") &&
	    settings_parse_ll(s, 1, 4096, &v))
		return -EINVAL;
	return optval_keep(&o->nproc_spec, s);
}

/* --slurm_port_range: "LO-HI" or "PORT" (slurm_port_range_parse). */
static int optval_port_range(void *obj, const struct settings_def *def, const char *s)
{
	unsigned *range = (unsigned *)((char *)obj + def->offset);
	unsigned lo, hi;

	if (!s || slurm_port_range_parse(s, &lo, &hi, NULL, 0))
		return -EINVAL;
	range[0] = lo;
	range[1] = hi;
	return 0;
}

/* --metrics_port [ADDR:]PORT (metrics_spec.h's grammar); "" or "none": off. */
static int optval_metrics(void *obj, const struct settings_def *def, const char *s)
{
	struct opts_metrics *m = (struct opts_metrics *)((char *)obj + def->offset);
	char addr[sizeof(m->addr)];
	int port;

	if (!s)
		return -EINVAL;
	if (!*s || !strcmp(s, "none")) {
		m->port = -1;
		m->addr[0] = '\0';
		return 0;
	}
	if (metrics_spec_parse(s, addr, sizeof(addr), &port, NULL, 0))
		return -EINVAL;
	memcpy(m->addr, addr, sizeof(addr));
	m->port = port;
	return 0;
}

int opts_visible_gpus(const char *cvd, int ndev)
{
	int n = 0;

	if (!cvd)
		return ndev;
	while (*cvd == ' ')
		cvd++;
	if (!*cvd || *cvd == '-')
		return 0;
	for (const char *p = cvd; *p; p++)
		if (*p == ',' && p[1] && p[1] != ',')
			n++;
	return n + 1 < ndev ? n + 1 : ndev;
}

#define OFF(f) offsetof(struct launch_opts, f)
/* --hang_timeout: SECONDS (at least HANG_TIMEOUT_MIN), "auto" (learned,
 * OPTS_HANG_AUTO) or "off" (OPTS_HANG_OFF). */
static int optval_hang(void *obj, const struct settings_def *def, const char *s)
{
	struct launch_opts *o = obj;
	double v;

	if (!strcmp(s, "auto")) {
		o->hang_timeout = OPTS_HANG_AUTO;
		return 0;
	}
	if (!strcmp(s, "off")) {
		o->hang_timeout = OPTS_HANG_OFF;
		return 0;
	}
	if (settings_parse_real(s, &v) || !(v >= OPTS_HANG_MIN) || v > 1e6)
		return -EINVAL;
	o->hang_timeout = v;
	return 0;
}

#define OPT_STR(n, a, f)                                                                           \
	{                                                                                          \
		.name = n, .alias = a, .type = SETTINGS_STR, .offset = OFF(f)                      \
	}
#define OPT_BOOL(n, a, f)                                                                          \
	{                                                                                          \
		.name = n, .alias = a, .type = SETTINGS_BOOL, .offset = OFF(f)                     \
	}
#define OPT_INT(n, f, lo, hi)                                                                      \
	{                                                                                          \
		.name = n, .type = SETTINGS_INT, .offset = OFF(f), .min = lo, .max = hi            \
	}
#define OPT_REAL(n, f)                                                                             \
	{                                                                                          \
		.name = n, .type = SETTINGS_REAL, .offset = OFF(f)                                 \
	}
#define OPT_BARE(n, f, fn, what)                                                                   \
	{                                                                                          \
		.name = n, .type = SETTINGS_CUSTOM, .offset = OFF(f), .parse = fn, .expect = what, \
		.flags = SETTINGS_F_BARE                                                           \
	}
#define OPT_CUSTOM(n, a, f, fn, what)                                                              \
	{                                                                                          \
		.name = n, .alias = a, .type = SETTINGS_CUSTOM, .offset = OFF(f), .parse = fn,     \
		.expect = what                                                                     \
	}

static const struct settings_def opts_defs[] = {
    OPT_CUSTOM("nproc_per_node", NULL, nproc_spec, optval_nproc,
	       "a positive number, gpu, cpu or auto"),
    OPT_CUSTOM("nnodes", NULL, nnodes_min, optval_nnodes, "N or MIN:MAX"),
    OPT_INT("node_rank", node_rank, 0, 1 << 20),
    OPT_STR("master_addr", NULL, master_addr),
    OPT_INT("master_port", master_port, 0, 65535),
    OPT_BOOL("standalone", NULL, standalone),
    OPT_STR("rdzv_backend", NULL, rdzv_backend),
    OPT_STR("rdzv_endpoint", NULL, rdzv_endpoint),
    OPT_STR("rdzv_id", "run_id", rdzv_id),
    OPT_STR("rdzv_conf", NULL, rdzv_conf),
    OPT_STR("rdzv_token", NULL, rdzv_token),
    OPT_INT("max_restarts", max_restarts, 0, 1 << 20),
    OPT_REAL("monitor_interval", monitor_interval),
    OPT_STR("log_dir", NULL, log_dir),
    OPT_CUSTOM("redirects", "r", redirects, optval_streams,
	       "0-3, or LOCAL_RANK:0-3 pairs like 0:1,1:2"),
    OPT_CUSTOM("tee", "t", tee, optval_streams, "0-3, or LOCAL_RANK:0-3 pairs like 0:1,1:2"),
    OPT_CUSTOM("local_ranks_filter", NULL, local_ranks_filter, optval_filter,
	       "local ranks like 0,2"),
    OPT_STR("role", NULL, role),
    OPT_BOOL("no_python", NULL, no_python),
    OPT_BOOL("module", "m", module),
    OPT_STR("local_addr", NULL, local_addr),
    OPT_STR("start_method", NULL, start_method),
    OPT_BARE("pass_local_rank", pass_local_rank, optval_local_rank,
	     "true, false, underscore (--local_rank=N) or dash (--local-rank=N)"),
    OPT_BARE("use_env", use_env, optval_use_env, "true or false"),
    OPT_BOOL("strict_port", NULL, strict_port),
    /* torchrun's names, so PET_SHUTDOWN_TIMEOUT and PET_SIGNALS_TO_HANDLE
     * are read too (opts_pet.h) */
    {.name = "grace_period",
     .alias = "shutdown_timeout",
     .type = SETTINGS_REAL,
     .offset = OFF(grace_period)},
    OPT_CUSTOM("signals", "signals_to_handle", signals, optval_signals,
	       "signal names like TERM,INT,USR1"),
    OPT_CUSTOM("forward_signals", NULL, forward_signals, optval_forward,
	       "signal names like USR1,USR2, or none"),
    OPT_CUSTOM("backoff", NULL, backoff_initial, optval_backoff, "SECONDS or INITIAL:MAX seconds"),
    OPT_BOOL("no_prefix", NULL, no_prefix),
    OPT_CUSTOM("hang_timeout", NULL, hang_timeout, optval_hang,
	       "auto, off, or SECONDS of at least 0.5"),
    OPT_STR("prefix", NULL, prefix),
    OPT_STR("config", NULL, config),
    OPT_BOOL("dry_run", NULL, dry_run),
    OPT_BOOL("no_slurm", NULL, no_slurm),
    OPT_CUSTOM("slurm_port_range", NULL, slurm_port_range, optval_port_range,
	       "LO-HI or PORT with 1 <= LO <= HI <= 65535"),
    OPT_CUSTOM("metrics_port", NULL, metrics, optval_metrics,
	       "[ADDR:]PORT or none; PORT 0-65535, ADDR a literal (127.0.0.1, [::1]), no host "
	       "name"),
};

#define OPTS_COUNT (sizeof(opts_defs) / sizeof(opts_defs[0]))

/* set_by[] has one bit per entry. */
_Static_assert(OPTS_COUNT <= 64, "struct launch_opts.set_by holds 64 options");

const struct settings_table opts_settings = {opts_defs, OPTS_COUNT};
