/*
 * slurm_env.c - a Slurm step's shape from its environment (see slurm_env.h).
 */
#include "slurm_env.h"
#include "envp.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLURM_ID_MAX 4294967295UL /* job and step ids are 32-bit in Slurm */
#define LIST_QUOTE   48		  /* how much of a host list the line quotes */

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	va_list ap;

	if (errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return rc;
}

/* Strict decimal: digits only, no sign or space, at most max. */
static int parse_ulong(const char *text, unsigned long max, unsigned long *v)
{
	unsigned long x = 0;
	const char *p = text;

	if (!*p)
		return -EINVAL;
	for (; *p; p++) {
		unsigned long d = (unsigned long)(*p - '0');

		if (*p < '0' || *p > '9' || d > max || x > (max - d) / 10)
			return -EINVAL;
		x = x * 10 + d;
	}
	*v = x;
	return 0;
}

/* Reads the number in variable `name` (absent: *present = 0, returns 0). */
static int env_number(char *const envp[], const char *name, unsigned long max, unsigned long *v,
		      int *present, char *err, size_t errlen)
{
	const char *text = envp_get(envp, name);

	*present = text != NULL;
	if (!text)
		return 0;
	if (parse_ulong(text, max, v))
		return fail(err, errlen, -EINVAL, "%s=\"%s\" from slurm is not a number up to %lu",
			    name, text, max);
	return 0;
}

/* The largest count in a tasks-per-node value: "1(x2)", "2,1", "2(x3),1". */
static int tasks_per_node_max(const char *text, unsigned long *max)
{
	const char *p = text;
	unsigned long n, reps;
	char *end;

	*max = 0;
	for (;;) {
		if (*p < '0' || *p > '9')
			return -EINVAL;
		n = strtoul(p, &end, 10);
		p = end;
		if (!strncmp(p, "(x", 2)) {
			if (p[2] < '0' || p[2] > '9')
				return -EINVAL;
			reps = strtoul(p + 2, &end, 10);
			if (*end != ')' || reps == 0)
				return -EINVAL;
			p = end + 1;
		}
		if (n > *max)
			*max = n;
		if (*p == '\0')
			return 0;
		if (*p++ != ',')
			return -EINVAL;
	}
}

static const char *srun_fix_fmt = "start one per node: srun --nodes=%u --ntasks=%u "
				  "--ntasks-per-node=1 ddplaunch ... (inside sbatch, srun takes "
				  "--ntasks from the job unless it is given)";

/* One task per node, or -ENOTSUP with the fix. */
static int check_one_task_per_node(char *const envp[], unsigned nnodes, char *err, size_t errlen)
{
	const char *tpn = envp_get(envp, "SLURM_STEP_TASKS_PER_NODE");
	unsigned long max, ntasks, localid;
	char fix[256];
	int present, rc;

	snprintf(fix, sizeof(fix), srun_fix_fmt, nnodes, nnodes);
	if (tpn) {
		if (tasks_per_node_max(tpn, &max))
			return fail(
			    err, errlen, -EINVAL,
			    "SLURM_STEP_TASKS_PER_NODE=\"%s\" from slurm is not a task count", tpn);
		if (max > 1)
			return fail(
			    err, errlen, -ENOTSUP,
			    "slurm started %lu tasks on a node (SLURM_STEP_TASKS_PER_NODE=%s): "
			    "each would run its own ddplaunch with its own workers; %s",
			    max, tpn, fix);
	} else {
		const char *var = envp_get(envp, "SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS"
									 : "SLURM_NTASKS";

		rc = env_number(envp, var, SLURM_ID_MAX, &ntasks, &present, err, errlen);
		if (rc)
			return rc;
		if (present && ntasks > nnodes)
			return fail(err, errlen, -ENOTSUP,
				    "slurm started %lu tasks on %u nodes (%s=%lu): each would run "
				    "its own ddplaunch with its own workers; %s",
				    ntasks, nnodes, var, ntasks, fix);
	}
	rc = env_number(envp, "SLURM_LOCALID", SLURM_ID_MAX, &localid, &present, err, errlen);
	if (rc)
		return rc;
	if (present && localid > 0)
		return fail(err, errlen, -ENOTSUP,
			    "this is task %lu on its node (SLURM_LOCALID=%lu): each task would run "
			    "its own ddplaunch with its own workers; %s",
			    localid, localid, fix);
	return 0;
}

/* The node count: the step's where there is a step. */
static int read_nnodes(struct slurm_step *s, char *const envp[], int in_step, char *err,
		       size_t errlen)
{
	static const char *const vars[] = {"SLURM_STEP_NUM_NODES", "SLURM_NNODES",
					   "SLURM_JOB_NUM_NODES"};
	unsigned long n;
	int present, rc;

	for (size_t i = in_step ? 0 : 1; i < sizeof(vars) / sizeof(vars[0]); i++) {
		rc = env_number(envp, vars[i], HOSTLIST_MAX_HOSTS, &n, &present, err, errlen);
		if (rc)
			return rc;
		if (present && n == 0)
			return fail(err, errlen, -EINVAL, "%s=0 from slurm: a job has nodes",
				    vars[i]);
		if (present) {
			s->nnodes = (unsigned)n;
			return 0;
		}
	}
	return fail(err, errlen, -EINVAL,
		    "slurm job %lu gives no node count (SLURM_NNODES is unset)", s->job_id);
}

/* Outside a step: only a one-node batch script can run ddplaunch itself. */
static int check_not_step(const struct slurm_step *s, char *err, size_t errlen)
{
	char fix[256];

	snprintf(fix, sizeof(fix), srun_fix_fmt, s->nnodes, s->nnodes);
	if (s->nnodes > 1)
		return fail(
		    err, errlen, -ENOTSUP,
		    "this is the batch script or salloc shell of slurm job %lu on %u nodes, "
		    "not a step: ddplaunch would run on one node only; %s",
		    s->job_id, s->nnodes, fix);
	if (!s->node_name)
		return fail(
		    err, errlen, -ENOTSUP,
		    "this is the salloc shell of slurm job %lu, on the submit host rather "
		    "than on the job's node; run ddplaunch there: srun --ntasks=1 ddplaunch ...",
		    s->job_id);
	return 0;
}

static int read_hosts(struct slurm_step *s, char *const envp[], int in_step, char *err,
		      size_t errlen)
{
	static const char *const vars[] = {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
					   "SLURM_NODELIST"};
	const char *text = NULL;
	char why[256];
	int rc;

	for (size_t i = in_step ? 0 : 1; !text && i < sizeof(vars) / sizeof(vars[0]); i++) {
		text = envp_get(envp, vars[i]);
		s->list_var = vars[i];
	}
	if (!text)
		return fail(err, errlen, -EINVAL, "slurm job %lu gives no host list (%s is unset)",
			    s->job_id, in_step ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST");
	s->nodelist = strdup(text);
	if (!s->nodelist)
		return fail(err, errlen, -ENOMEM, "out of memory");
	rc = hostlist_expand(text, HOSTLIST_MAX_HOSTS, &s->hosts, why, sizeof(why));
	if (rc)
		return fail(err, errlen, rc, "%s from slurm: %s", s->list_var, why);
	if (s->hosts.count != s->nnodes)
		return fail(err, errlen, -EINVAL,
			    "%s=%s from slurm names %zu hosts, but the job has %u nodes",
			    s->list_var, text, s->hosts.count, s->nnodes);
	s->master = s->hosts.hosts[0];
	return 0;
}

/* This node's rank: its place in the host list (so rank 0 is the master),
 * else SLURM_NODEID. */
static int read_rank(struct slurm_step *s, char *const envp[], char *err, size_t errlen)
{
	unsigned long id;
	int present, rc;

	rc = env_number(envp, "SLURM_NODEID", s->nnodes - 1, &id, &present, err, errlen);
	if (rc == -EINVAL && envp_get(envp, "SLURM_NODEID"))
		return fail(err, errlen, -EINVAL,
			    "SLURM_NODEID=%s from slurm is not a node of the %u in %s",
			    envp_get(envp, "SLURM_NODEID"), s->nnodes, s->list_var);
	if (rc)
		return rc;
	s->slurm_nodeid = (unsigned)id;
	for (size_t i = 0; s->node_name && i < s->hosts.count; i++) {
		if (!strcmp(s->hosts.hosts[i], s->node_name)) {
			s->node_rank = (unsigned)i;
			s->rank_from_list = present && id != i;
			return 0;
		}
	}
	if (!present)
		return fail(err, errlen, -EINVAL,
			    "slurm gives no node rank: SLURM_NODEID is unset and SLURMD_NODENAME "
			    "(%s) is not in %s",
			    s->node_name ? s->node_name : "unset", s->list_var);
	s->node_rank = (unsigned)id;
	return 0;
}

static int read_ids(struct slurm_step *s, char *const envp[], int *in_step, char *err,
		    size_t errlen)
{
	unsigned long v;
	int present, rc;

	if (!envp_get(envp, "SLURM_JOB_ID"))
		return fail(err, errlen, -ENOENT, "not inside a slurm job (SLURM_JOB_ID is unset)");
	rc = env_number(envp, "SLURM_JOB_ID", SLURM_ID_MAX, &s->job_id, &present, err, errlen);
	if (rc)
		return rc;
	rc = env_number(envp, "SLURM_STEP_ID", SLURM_ID_MAX, &v, in_step, err, errlen);
	if (rc)
		return rc;
	s->step_id = *in_step ? v : SLURM_STEP_BATCH;
	rc = env_number(envp, "SLURM_PROCID", SLURM_ID_MAX, &v, &present, err, errlen);
	if (rc)
		return rc;
	s->procid = present ? (int)v : -1;
	rc = env_number(envp, "SLURM_LOCALID", SLURM_ID_MAX, &v, &present, err, errlen);
	if (rc)
		return rc;
	s->localid = present ? (int)v : -1;
	return 0;
}

int slurm_step_read(struct slurm_step *s, char *const envp[], unsigned port_lo, unsigned port_hi,
		    char *err, size_t errlen)
{
	int in_step = 0, rc;

	memset(s, 0, sizeof(*s));
	s->procid = s->localid = -1;
	if (errlen)
		err[0] = '\0';
	if (port_lo < 1 || port_lo > port_hi || port_hi > 65535)
		return fail(err, errlen, -EINVAL, "port range %u-%u is not inside 1-65535", port_lo,
			    port_hi);
	rc = read_ids(s, envp, &in_step, err, errlen);
	if (!rc)
		rc = read_nnodes(s, envp, in_step, err, errlen);
	s->node_name = envp_get(envp, "SLURMD_NODENAME");
	if (!rc)
		rc = in_step ? check_one_task_per_node(envp, s->nnodes, err, errlen)
			     : check_not_step(s, err, errlen);
	if (!rc)
		rc = read_hosts(s, envp, in_step, err, errlen);
	if (!rc)
		rc = read_rank(s, envp, err, errlen);
	if (rc) {
		slurm_step_release(s);
		return rc;
	}
	if (in_step)
		snprintf(s->run_id, sizeof(s->run_id), "slurm-%lu.%lu", s->job_id, s->step_id);
	else
		snprintf(s->run_id, sizeof(s->run_id), "slurm-%lu.batch", s->job_id);
	s->port = slurm_port(s->job_id, s->step_id, port_lo, port_hi);
	return 0;
}

void slurm_step_release(struct slurm_step *s)
{
	hostlist_release(&s->hosts);
	free(s->nodelist);
	s->nodelist = NULL;
	s->master = NULL;
}

unsigned slurm_port(unsigned long job_id, unsigned long step_id, unsigned lo, unsigned hi)
{
	unsigned long long span = (unsigned long long)hi - lo + 1;
	unsigned long long step = step_id == SLURM_STEP_BATCH ? 0 : step_id;

	return lo + (unsigned)((4ULL * job_id + step) % span);
}

int slurm_port_range_parse(const char *text, unsigned *lo, unsigned *hi, char *err, size_t errlen)
{
	const char *dash = strchr(text, '-');
	unsigned long a, b;
	char first[8];

	if (!dash) {
		if (parse_ulong(text, 65535, &a) || a == 0)
			goto bad;
		*lo = *hi = (unsigned)a;
		return 0;
	}
	if ((size_t)(dash - text) >= sizeof(first))
		goto bad;
	memcpy(first, text, (size_t)(dash - text));
	first[dash - text] = '\0';
	if (parse_ulong(first, 65535, &a) || parse_ulong(dash + 1, 65535, &b) || a == 0 || a > b)
		goto bad;
	*lo = (unsigned)a;
	*hi = (unsigned)b;
	return 0;
bad:
	return fail(err, errlen, -EINVAL,
		    "port range \"%s\" is not LO-HI or PORT with 1 <= LO <= HI <= 65535", text);
}

int slurm_step_describe(const struct slurm_step *s, const char *master_addr, char *out,
			size_t outlen)
{
	char step[32], node[300], master[320];
	size_t listlen = strlen(s->nodelist);

	if (s->step_id == SLURM_STEP_BATCH)
		snprintf(step, sizeof(step), "batch script");
	else
		snprintf(step, sizeof(step), "step %lu", s->step_id);
	if (s->node_name && s->rank_from_list)
		snprintf(node, sizeof(node), " (%s, by its place in %s; SLURM_NODEID is %u)",
			 s->node_name, s->list_var, s->slurm_nodeid);
	else if (s->node_name)
		snprintf(node, sizeof(node), " (%s)", s->node_name);
	else
		node[0] = '\0';
	if (master_addr && strcmp(master_addr, s->master))
		snprintf(master, sizeof(master), "%s (%s)", s->master, master_addr);
	else
		snprintf(master, sizeof(master), "%s", s->master);
	return snprintf(out, outlen,
			"from slurm: job %lu %s, %u node%s (%.*s%s), this is node %u%s, master %s, "
			"port %u",
			s->job_id, step, s->nnodes, s->nnodes == 1 ? "" : "s", LIST_QUOTE,
			s->nodelist, listlen > LIST_QUOTE ? "..." : "", s->node_rank, node, master,
			s->port);
}
