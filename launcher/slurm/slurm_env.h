/*
 * slurm_env.h - what a Slurm step tells ddplaunch about the job's shape:
 * node count, this node's rank, the master host, a run id and a port that
 * every node derives alike without talking. Pure module: the environment is
 * passed in as an envp array (name=value strings, NULL-terminated), never
 * read with getenv(), and nothing is resolved (see slurm_resolve.h).
 *
 * What it reads (Slurm 22.05's names; checked against a real cluster):
 *   SLURM_JOB_ID, SLURM_STEP_ID             run id "slurm-<job>.<step>"
 *   SLURM_STEP_NUM_NODES, else SLURM_NNODES  node count
 *   SLURM_NODEID                            node rank
 *   SLURM_STEP_NODELIST, else SLURM_JOB_NODELIST, else SLURM_NODELIST
 *                                           the hosts; the master is the first
 *   SLURMD_NODENAME                         this node's name in that list
 *   SLURM_STEP_TASKS_PER_NODE, else SLURM_STEP_NUM_TASKS or SLURM_NTASKS
 *   against the node count, and SLURM_LOCALID: one task per node or a refusal
 *   SLURM_PROCID                            reported only
 *
 * The node rank is this node's position in the host list when SLURMD_NODENAME
 * is found there, so that rank 0 is always the master; Slurm numbers
 * SLURM_NODEID the same way (checked with nodes configured out of order), and
 * where the two ever differ, `rank_from_list` says so.
 *
 * Port: lo + (4 * job_id + step_id) mod (hi - lo + 1). Consecutive jobs are
 * 4 ports apart, so four concurrent steps of a job, and (with the default
 * range) 125 consecutive jobs sharing a node, never get the same port. The
 * default range 29500-29999 starts at torchrun's default port, stays below
 * Linux's ephemeral ports (32768-60999), and is where clusters that run
 * torchrun already allow traffic between nodes.
 */
#ifndef DDP_LAUNCHER_SLURM_ENV_H
#define DDP_LAUNCHER_SLURM_ENV_H

#include <stddef.h>

#include "hostlist.h"

#define SLURM_PORT_LO 29500
#define SLURM_PORT_HI 29999

/* step_id of a batch script (no SLURM_STEP_ID, one node): Slurm's "batch". */
#define SLURM_STEP_BATCH (~0UL)

struct slurm_step {
	unsigned long job_id;
	unsigned long step_id; /* SLURM_STEP_BATCH in a one-node batch script */
	unsigned nnodes;
	unsigned node_rank;
	int procid, localid;   /* -1 where Slurm did not set them */
	int rank_from_list;    /* node_rank is the list position, not SLURM_NODEID */
	unsigned slurm_nodeid; /* SLURM_NODEID as Slurm gave it */
	const char *list_var;  /* the variable the host list came from (static) */
	char *nodelist;	       /* that list, compressed, as Slurm gave it (owned) */
	struct hostlist hosts; /* expanded; nnodes names */
	const char *master;    /* hosts.hosts[0] */
	const char *node_name; /* SLURMD_NODENAME's value in envp, or NULL */
	char run_id[48];       /* "slurm-<job>.<step>" or "slurm-<job>.batch" */
	unsigned port;
};

/* Reads the step from envp into s, which the caller releases with
 * slurm_step_release() after success. port_lo..port_hi is the port range
 * (1 <= lo <= hi <= 65535; SLURM_PORT_LO, SLURM_PORT_HI by default).
 * Returns 0, or (s left empty, err filled with one lowercase line that
 * names the fault and the fix):
 *   -ENOENT   not inside a Slurm job (no SLURM_JOB_ID): use no Slurm values;
 *   -ENOTSUP  inside a job in a shape ddplaunch cannot run in: more than one
 *             task on a node (each would start its own workers), or the
 *             batch script / salloc shell of a job rather than an srun step
 *             on every node; the message gives the srun line to use;
 *   -EINVAL   values that are missing, not numbers, or disagree (a host
 *             list that is not one, or with another count than the nodes),
 *             or a bad port range;
 *   -E2BIG    a host list of more than HOSTLIST_MAX_HOSTS names;
 *   -ENOMEM   out of memory.
 * s->node_name points into envp: keep envp alive while s is used. */
int slurm_step_read(struct slurm_step *s, char *const envp[], unsigned port_lo, unsigned port_hi,
		    char *err, size_t errlen);

/* Frees what slurm_step_read() allocated; accepts a zeroed or released s. */
void slurm_step_release(struct slurm_step *s);

/* The port of a job's step in lo..hi (see the top of this file). */
unsigned slurm_port(unsigned long job_id, unsigned long step_id, unsigned lo, unsigned hi);

/* Parses "LO-HI" or "PORT" (1..65535, LO <= HI). Returns 0 or -EINVAL with
 * err filled. */
int slurm_port_range_parse(const char *text, unsigned *lo, unsigned *hi, char *err, size_t errlen);

/* Writes the one line that says what was taken from Slurm, e.g.
 *   from slurm: job 42 step 0, 2 nodes (n[1-2]), this is node 1 (n2),
 *   master n1 (127.0.0.11), port 29668
 * (one line; wrapped here). master_addr is the master's resolved address,
 * or NULL to leave it out. No program name and no '\n'. Returns the length
 * it needed, as snprintf does. */
int slurm_step_describe(const struct slurm_step *s, const char *master_addr, char *out,
			size_t outlen);

#endif
