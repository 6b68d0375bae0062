/*
 * opts_slurm.c - the options a Slurm step gives (opts_slurm.h): each value
 * the command line and the job file left out, set as a default, and the
 * one line that says what was taken.
 */
#include "opts_slurm.h"
#include "envp.h"
#include "opts_pet.h"
#include "slurm_env.h"
#include "slurm_resolve.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* What the line says: the values taken, as flags, and the flags kept. */
struct slurm_used {
	char taken[512];
	char kept[192];
};

/* Whether the command line, the job file or a PET_ variable set option
 * `name`. */
static bool given(const struct launch_opts *o, const char *name)
{
	int i = settings_find(&opts_settings, name);

	return i >= 0 && opts_source_of(o, (size_t)i) > OPTS_SRC_SLURM;
}

/* Adds option `name` (given) to the kept list: "--name", or its PET_ variable. */
static void keep(struct slurm_used *u, const struct launch_opts *o, const char *name)
{
	int i = settings_find(&opts_settings, name);
	char var[SETTINGS_NAME_MAX + 8];

	if (i >= 0 && opts_source_of(o, (size_t)i) == OPTS_SRC_PET) {
		opts_pet_name(o, (size_t)i, var, sizeof(var));
		opts_line_add(u->kept, sizeof(u->kept), ", %s", var);
	} else {
		opts_line_add(u->kept, sizeof(u->kept), ", --%s", name);
	}
}

/* Sets option `name` to the printed value, as Slurm's. */
static int set(struct launch_opts *o, const char *name, char *err, size_t errlen, const char *fmt,
	       ...)
{
	char value[128];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(value, sizeof(value), fmt, ap);
	va_end(ap);
	return opts_set(o, name, value, OPTS_SRC_SLURM, err, errlen);
}

/* Whether Slurm is wanted: not --no_slurm, --standalone or
 * DDPLAUNCH_SLURM=0. Returns 0 or -EINVAL for a DDPLAUNCH_SLURM that is
 * no boolean. */
static int wanted(const struct launch_opts *o, char *const envp[], bool *want, char *err,
		  size_t errlen)
{
	const char *v = envp_get(envp, OPTS_SLURM_ENV);
	bool on = true;

	if (v && settings_parse_bool(v, &on)) {
		snprintf(err, errlen,
			 "%s=\"%s\" is not a boolean (use 0 to leave slurm out, 1 to use it)",
			 OPTS_SLURM_ENV, v);
		return -EINVAL;
	}
	*want = on && !o->no_slurm && !o->standalone;
	return 0;
}

/* --node_rank from the step, where it is not given: a rank at or past a
 * given --nnodes (N > 1) would leave this node without one. */
static int take_rank(struct launch_opts *o, const struct slurm_step *s, struct slurm_used *u,
		     char *err, size_t errlen)
{
	int rc;

	if (given(o, "node_rank")) {
		keep(u, o, "node_rank");
		return 0;
	}
	if (o->nnodes_max == 1)
		return 0;
	if (s->node_rank >= (unsigned)o->nnodes_max) {
		snprintf(
		    err, errlen,
		    "--nnodes=%d is below the %u nodes of slurm's step, so this node (%s%snode "
		    "%u) has no rank; give --nnodes=%u, or run the step on %d nodes (srun "
		    "--nodes=%d)",
		    o->nnodes_max, s->nnodes, s->node_name ? s->node_name : "",
		    s->node_name ? ", " : "", s->node_rank, s->nnodes, o->nnodes_max,
		    o->nnodes_max);
		return -EINVAL;
	}
	rc = set(o, "node_rank", err, errlen, "%u", s->node_rank);
	if (rc)
		return rc;
	opts_line_add(u->taken, sizeof(u->taken), " --node_rank=%u", s->node_rank);
	if (s->node_name && s->rank_from_list)
		opts_line_add(u->taken, sizeof(u->taken),
			      " (%s, its place in %s; SLURM_NODEID is %u)", s->node_name,
			      s->list_var, s->slurm_nodeid);
	else if (s->node_name)
		opts_line_add(u->taken, sizeof(u->taken), " (%s)", s->node_name);
	return 0;
}

/* The master's address: the first host of the step's list, resolved. */
static int resolve_master(const struct slurm_step *s, opts_slurm_resolve_fn resolve, char *addr,
			  char *note, size_t notelen, char *err, size_t errlen)
{
	int rc = resolve(s->master, addr, SLURM_ADDR_MAX, note, notelen);

	if (rc)
		snprintf(err, errlen,
			 "cannot resolve slurm's master host '%s' (the first of %s=%s): %s; give "
			 "--master_addr=ADDR (an address of %s the other nodes reach)",
			 s->master, s->list_var, s->nodelist, note[0] ? note : "no address",
			 s->master);
	return rc;
}

/* c10d without an endpoint: the master's address and the port. */
static int take_endpoint(struct launch_opts *o, const struct slurm_step *s, const char *addr,
			 struct slurm_used *u, char *err, size_t errlen)
{
	const char *lb = strchr(addr, ':') ? "[" : "", *rb = *lb ? "]" : "";

	opts_line_add(u->taken, sizeof(u->taken), " --rdzv_endpoint=%s%s%s:%u", lb, addr, rb,
		      s->port);
	o->slurm_endpoint = true;
	if (strcmp(addr, s->master))
		opts_line_add(u->taken, sizeof(u->taken), " (%s)", s->master);
	return set(o, "rdzv_endpoint", err, errlen, "%s%s%s:%u", lb, addr, rb, s->port);
}

/* Across nodes without --rdzv_endpoint: the store's address and port
 * (static: --master_addr and --master_port, each where not given; c10d:
 * --rdzv_endpoint). */
static int take_master(struct launch_opts *o, const struct slurm_step *s,
		       opts_slurm_resolve_fn resolve, struct slurm_used *u, char *note,
		       size_t notelen, char *err, size_t errlen)
{
	bool c10d = !strcmp(o->rdzv_backend, "c10d");
	bool need_addr = c10d || !given(o, "master_addr");
	char addr[SLURM_ADDR_MAX] = "";
	int rc;

	if (need_addr && (rc = resolve_master(s, resolve, addr, note, notelen, err, errlen)))
		return rc;
	if (note[0])
		opts_line_add(note, notelen, " (give --%s to choose another)",
			      c10d ? "rdzv_endpoint" : "master_addr");
	if (c10d)
		return take_endpoint(o, s, addr, u, err, errlen);
	if (!need_addr) {
		keep(u, o, "master_addr");
	} else {
		if ((rc = set(o, "master_addr", err, errlen, "%s", addr)))
			return rc;
		opts_line_add(u->taken, sizeof(u->taken), " --master_addr=%s", addr);
		if (strcmp(addr, s->master))
			opts_line_add(u->taken, sizeof(u->taken), " (%s)", s->master);
	}
	if (given(o, "master_port")) {
		keep(u, o, "master_port");
		return 0;
	}
	opts_line_add(u->taken, sizeof(u->taken), " --master_port=%u", s->port);
	return set(o, "master_port", err, errlen, "%u", s->port);
}

/* One node: the store stays on loopback; the port (so that the steps of
 * jobs sharing a node do not meet at 29500) where not given. */
static int take_port(struct launch_opts *o, const struct slurm_step *s, struct slurm_used *u,
		     char *err, size_t errlen)
{
	if (given(o, "master_port") || given(o, "rdzv_endpoint")) {
		keep(u, o, given(o, "master_port") ? "master_port" : "rdzv_endpoint");
		return 0;
	}
	opts_line_add(u->taken, sizeof(u->taken), " --master_port=%u", s->port);
	return set(o, "master_port", err, errlen, "%u", s->port);
}

static int take_values(struct launch_opts *o, const struct slurm_step *s,
		       opts_slurm_resolve_fn resolve, struct slurm_used *u, char *note,
		       size_t notelen, char *err, size_t errlen)
{
	int rc = 0;

	if (given(o, "nnodes"))
		keep(u, o, "nnodes");
	else if (!(rc = set(o, "nnodes", err, errlen, "%u", s->nnodes)))
		opts_line_add(u->taken, sizeof(u->taken), " --nnodes=%u", s->nnodes);
	if (!rc)
		rc = take_rank(o, s, u, err, errlen);
	if (!rc && o->nnodes_max > 1 && given(o, "rdzv_endpoint"))
		keep(u, o, "rdzv_endpoint");
	else if (!rc && o->nnodes_max > 1)
		rc = take_master(o, s, resolve, u, note, notelen, err, errlen);
	else if (!rc)
		rc = take_port(o, s, u, err, errlen);
	if (rc)
		return rc;
	if (given(o, "rdzv_id")) {
		keep(u, o, "rdzv_id");
		return 0;
	}
	opts_line_add(u->taken, sizeof(u->taken), " --rdzv_id=%s", s->run_id);
	return set(o, "rdzv_id", err, errlen, "%s", s->run_id);
}

static void describe(struct launch_opts *o, const struct slurm_step *s, const struct slurm_used *u,
		     const char *note)
{
	char *line = o->slurm_used;
	size_t len = sizeof(o->slurm_used);
	size_t listlen = strlen(s->nodelist);

	line[0] = '\0';
	if (s->step_id == SLURM_STEP_BATCH)
		opts_line_add(line, len, "from slurm job %lu's batch script", s->job_id);
	else
		opts_line_add(line, len, "from slurm job %lu step %lu", s->job_id, s->step_id);
	opts_line_add(line, len, " (%u node%s: %.48s%s):%s", s->nnodes, s->nnodes == 1 ? "" : "s",
		      s->nodelist, listlen > 48 ? "..." : "", u->taken[0] ? u->taken : " nothing");
	if (u->kept[0])
		opts_line_add(line, len, "; kept as given: %s", u->kept + 2);
	if (note[0])
		opts_line_add(line, len, "; %s", note);
}

int opts_slurm_apply_with(struct launch_opts *o, char *const envp[], opts_slurm_resolve_fn resolve,
			  char *err, size_t errlen)
{
	unsigned lo = o->slurm_port_range[0] ? o->slurm_port_range[0] : SLURM_PORT_LO;
	unsigned hi = o->slurm_port_range[0] ? o->slurm_port_range[1] : SLURM_PORT_HI;
	struct slurm_used u = {"", ""};
	struct slurm_step s;
	char note[320] = "";
	bool want;
	int rc;

	o->slurm_used[0] = '\0';
	rc = wanted(o, envp, &want, err, errlen);
	if (rc || !want)
		return rc;
	rc = slurm_step_read(&s, envp, lo, hi, err, errlen);
	if (rc == -ENOENT)
		return 0;
	if (rc) {
		opts_line_add(err, errlen, " (--no_slurm or %s=0 leaves slurm out)",
			      OPTS_SLURM_ENV);
		return rc;
	}
	rc = take_values(o, &s, resolve, &u, note, sizeof(note), err, errlen);
	if (!rc)
		describe(o, &s, &u, note);
	slurm_step_release(&s);
	return rc;
}

int opts_slurm_apply(struct launch_opts *o, char *const envp[], char *err, size_t errlen)
{
	return opts_slurm_apply_with(o, envp, slurm_resolve_host, err, errlen);
}

void opts_slurm_print(const struct launch_opts *o, char *const envp[], FILE *out)
{
	const char *v = envp_get(envp, OPTS_SLURM_ENV);
	bool on = true;

	if (o->slurm_used[0])
		fprintf(out, "slurm = %s\n", o->slurm_used);
	else if (o->no_slurm)
		fprintf(out, "slurm = off (--no_slurm)\n");
	else if (v && !settings_parse_bool(v, &on) && !on)
		fprintf(out, "slurm = off (%s=%s)\n", OPTS_SLURM_ENV, v);
	else if (o->standalone)
		fprintf(out, "slurm = not used (--standalone)\n");
	else
		fprintf(out, "slurm = not in a slurm job\n");
	fprintf(out, "slurm_port_range = %u-%u\n",
		o->slurm_port_range[0] ? o->slurm_port_range[0] : SLURM_PORT_LO,
		o->slurm_port_range[0] ? o->slurm_port_range[1] : SLURM_PORT_HI);
}
