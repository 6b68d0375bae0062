/*
 * slurm_probe - launcher/slurm as a command, for the tests that run it
 * under a real srun (tests/slurm).
 *
 *   slurm_probe [--port-range=LO-HI]
 *       reads this process's environment as a Slurm step; prints name=value
 *       lines (rc, nnodes, node_rank, master, master_addr, resolve_note,
 *       run_id, port, list_var, procid, localid, node_name, describe) and
 *       exits 0, or prints rc=<-errno> and error=<message> and exits 1;
 *   slurm_probe --expand LIST [MAX]
 *       prints LIST's host names, one a line (exit 0), or the error on
 *       stderr (exit 1).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostlist.h"
#include "slurm_env.h"
#include "slurm_resolve.h"

extern char **environ;

static int expand(const char *list, const char *max_text)
{
	size_t max = max_text ? strtoul(max_text, NULL, 10) : HOSTLIST_MAX_HOSTS;
	struct hostlist hl;
	char err[512];
	int rc = hostlist_expand(list, max, &hl, err, sizeof(err));

	if (rc) {
		fprintf(stderr, "slurm_probe: %s (%d)\n", err, rc);
		return 1;
	}
	for (size_t i = 0; i < hl.count; i++)
		printf("%s\n", hl.hosts[i]);
	hostlist_release(&hl);
	return 0;
}

static void print_step(const struct slurm_step *s)
{
	char addr[SLURM_ADDR_MAX] = "", note[512] = "", line[1024];
	int rc = slurm_resolve_host(s->master, addr, sizeof(addr), note, sizeof(note));

	slurm_step_describe(s, rc ? NULL : addr, line, sizeof(line));
	printf("rc=0\nnnodes=%u\nnode_rank=%u\nmaster=%s\nmaster_addr=%s\nresolve_rc=%d\n"
	       "resolve_note=%s\nrun_id=%s\nport=%u\nlist_var=%s\nprocid=%d\nlocalid=%d\n"
	       "node_name=%s\ndescribe=%s\n",
	       s->nnodes, s->node_rank, s->master, addr, rc, note, s->run_id, s->port, s->list_var,
	       s->procid, s->localid, s->node_name ? s->node_name : "", line);
}

int main(int argc, char **argv)
{
	unsigned lo = SLURM_PORT_LO, hi = SLURM_PORT_HI;
	struct slurm_step s;
	char err[1024];
	int rc;

	if (argc >= 3 && argc <= 4 && !strcmp(argv[1], "--expand"))
		return expand(argv[2], argc == 4 ? argv[3] : NULL);
	if (argc == 2 && !strncmp(argv[1], "--port-range=", 13)) {
		if (slurm_port_range_parse(argv[1] + 13, &lo, &hi, err, sizeof(err))) {
			fprintf(stderr, "slurm_probe: %s\n", err);
			return 2;
		}
	} else if (argc != 1) {
		fprintf(stderr, "usage: slurm_probe [--port-range=LO-HI] | --expand LIST [MAX]\n");
		return 2;
	}
	rc = slurm_step_read(&s, environ, lo, hi, err, sizeof(err));
	if (rc) {
		printf("rc=%d\nerror=%s\n", rc, err);
		return 1;
	}
	print_step(&s);
	slurm_step_release(&s);
	return 0;
}
