/*
 * fuzz_slurm.c - libFuzzer target over what a Slurm step tells ddplaunch
 * (launcher/slurm/): compressed host lists (hostlist_expand), the SLURM_*
 * reader (slurm_step_read, then slurm_step_describe) and port ranges.
 *
 * The input's first byte picks the mode: 0 -> the rest is one host list;
 * 1 -> the rest is a port range; otherwise the rest is an environment of
 * lines separated by '\n', each line's first byte naming one of the
 * variables Slurm sets (or, when it is '=', the line is taken as it stands)
 * and the rest of the line its value, so that values, not names, are what
 * the fuzzer explores. Invariants: no crash, leak or undefined behaviour; a
 * list that expands has at most the hosts asked for, each named by a
 * non-empty printable string of at most HOSTLIST_NAME_MAX characters; a
 * step that is read has one host per node, its node rank among them, its
 * master first and its port in the range.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostlist.h"
#include "slurm_env.h"

#define FUZZ_HOSTS_MAX 4096
#define FUZZ_VARS_MAX  32

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const names[] = {
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "SLURM_STEP_NUM_NODES",
    "SLURM_NNODES",
    "SLURM_JOB_NUM_NODES",
    "SLURM_NODEID",
    "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "SLURMD_NODENAME",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_PROCID",
};

static char *text_of(const uint8_t *data, size_t size)
{
	char *t = malloc(size + 1);
	if (!t)
		abort();
	memcpy(t, data, size);
	t[size] = '\0';
	return t;
}

static void check_names(const struct hostlist *hl, size_t max)
{
	if (hl->count > max)
		abort();
	for (size_t i = 0; i < hl->count; i++) {
		size_t n = strlen(hl->hosts[i]);
		if (n == 0 || n > HOSTLIST_NAME_MAX)
			abort();
		for (size_t j = 0; j < n; j++)
			if (hl->hosts[i][j] <= ' ' || hl->hosts[i][j] > '~')
				abort();
	}
}

static void fuzz_hostlist(const uint8_t *data, size_t size)
{
	char *expr = text_of(data, size), err[256];
	struct hostlist hl;
	memset(&hl, 0, sizeof(hl));
	size_t max = size ? 1 + data[0] * 16u : FUZZ_HOSTS_MAX;
	if (hostlist_expand(expr, max, &hl, err, sizeof(err)) == 0) {
		check_names(&hl, max);
		hostlist_release(&hl);
	} else if (hl.count || hl.hosts || !err[0]) {
		abort(); /* a failure leaves the list empty and says why */
	}
	free(expr);
}

static void fuzz_ports(const uint8_t *data, size_t size)
{
	char *text = text_of(data, size), err[256];
	unsigned lo = 0, hi = 0;
	if (slurm_port_range_parse(text, &lo, &hi, err, sizeof(err)) == 0 &&
	    (lo < 1 || lo > hi || hi > 65535 || slurm_port(4294967295UL, 7, lo, hi) < lo ||
	     slurm_port(4294967295UL, 7, lo, hi) > hi))
		abort();
	free(text);
}

static void check_step(const struct slurm_step *s, unsigned lo, unsigned hi)
{
	char line[512];
	if (s->hosts.count != s->nnodes || s->node_rank >= s->nnodes || !s->master ||
	    strcmp(s->master, s->hosts.hosts[0]) != 0 || s->port < lo || s->port > hi ||
	    !s->run_id[0] || strlen(s->run_id) >= sizeof(s->run_id))
		abort();
	check_names(&s->hosts, HOSTLIST_MAX_HOSTS);
	int n = slurm_step_describe(s, "127.0.0.11", line, sizeof(line));
	if (n < 0 || (size_t)n < strlen(line))
		abort();
}

/* Builds envp from the input's lines (see the top of this file). */
static void fuzz_env(const uint8_t *data, size_t size)
{
	char *text = text_of(data, size), *envp[FUZZ_VARS_MAX + 1], err[256];
	int n = 0;
	for (char *line = text, *next; line && n < FUZZ_VARS_MAX; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		if (!*line)
			continue;
		size_t len = strlen(line + 1);
		char *var = *line == '=' ? strdup(line + 1) : malloc(len + 64);
		if (!var)
			abort();
		if (*line != '=')
			snprintf(var, len + 64, "%s=%s",
				 names[(uint8_t)*line % (sizeof(names) / sizeof(names[0]))],
				 line + 1);
		envp[n++] = var;
	}
	envp[n] = NULL;
	unsigned lo = size && data[0] & 1 ? 29500 : 1000, hi = lo + (size ? data[0] : 0);
	struct slurm_step s;
	memset(&s, 0, sizeof(s));
	if (slurm_step_read(&s, envp, lo, hi, err, sizeof(err)) == 0) {
		check_step(&s, lo, hi);
		slurm_step_release(&s);
	}
	for (int i = 0; i < n; i++)
		free(envp[i]);
	free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if (data[0] == 0)
		fuzz_hostlist(data + 1, size - 1);
	else if (data[0] == 1)
		fuzz_ports(data + 1, size - 1);
	else
		fuzz_env(data + 1, size - 1);
	return 0;
}
