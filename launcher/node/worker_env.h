/*
 * worker_env.h - builds one worker's environment: the launcher's own
 * environment, then the job file's [env], then torchrun's variables
 * (RANK, LOCAL_RANK, WORLD_SIZE, ..., TORCHELASTIC_*) and DDP_JOB_TAG,
 * which always win.
 * Pure module.
 */
#ifndef DDP_LAUNCHER_WORKER_ENV_H
#define DDP_LAUNCHER_WORKER_ENV_H

#include <stdbool.h>
#include <stddef.h>

struct worker_env_spec {
	int rank, local_rank, world_size, local_world_size;
	int group_rank, group_world_size;
	int role_rank, role_world_size;
	const char *role_name;
	const char *master_addr;
	int master_port;
	int restart_count, max_restarts;
	const char *run_id;
	int round;		/* DDP_ROUND: the rendezvous round across nodes (1, 2, ...), or 0 */
	const char *local_addr; /* DDP_LOCAL_ADDR: this node's address for the other
				   nodes (multi-node), or NULL */
	const char *error_file;
	const char *job_tag;	   /* DDP_JOB_TAG (see footprint.h), or NULL */
	const char *progress_file; /* DDP_PROGRESS_FILE: the worker's progress page
				      (progress_page.h), or NULL */
	bool set_omp;		   /* add OMP_NUM_THREADS=1 (see worker_env_needs_omp) */
	/* DDP_AWAIT_ROUND=1: the worker starts outside any round and waits
	 * for its round on the agent channel (libddp's ddp_init and
	 * ddplaunch.torch's Elastic do; the other variables then describe the
	 * round it was started after, not one it is in) */
	bool await_round;
	char *const *extra; /* "NAME=VALUE" from the job file, may be NULL */
	size_t nextra;
};

/* Whether OMP_NUM_THREADS=1 must be added: nproc > 1 and neither `base`
 * nor `extra` sets it. */
bool worker_env_needs_omp(char *const *base, char *const *extra, size_t nextra, int nproc);

/* Builds a NULL-terminated environment array (array and strings malloc'ed;
 * free with worker_env_free): `base`, then `extra`, then torchrun's
 * variables and DDP_AGENT_FD=4 (the agent channel, worker_proc.h's
 * WORKER_PROC_CHAN_FD). The rendezvous token (DDP_RDZV_TOKEN) is left out whatever
 * its source: workers never need it, and a worker's environment is
 * readable in /proc/PID/environ by its user. DDP_PROGRESS_FILE is left out of
 * `base` (an outer launcher's page) and set from s->progress_file. `base` may be NULL. Returns 0
 * or -ENOMEM. */
int worker_env_build(char *const *base, const struct worker_env_spec *s, char ***out);

void worker_env_free(char **env);

#endif
