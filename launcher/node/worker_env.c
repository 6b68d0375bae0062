#include "worker_env.h"

#include "progress.h"
#include "envp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct env_vec {
	char **v;
	size_t n, cap;
};

static size_t env_name_len(const char *kv)
{
	const char *eq = strchr(kv, '=');

	return eq ? (size_t)(eq - kv) : strlen(kv);
}

/* Replaces the entry with the same name or appends; takes ownership of kv. */
static int env_put_owned(struct env_vec *e, char *kv)
{
	size_t len = env_name_len(kv);

	for (size_t i = 0; i < e->n; i++)
		if (env_name_len(e->v[i]) == len && !strncmp(e->v[i], kv, len)) {
			free(e->v[i]);
			e->v[i] = kv;
			return 0;
		}
	if (e->n + 1 >= e->cap) {
		size_t cap = e->cap ? e->cap * 2 : 64;
		char **nv = realloc(e->v, cap * sizeof(*nv));

		if (!nv) {
			free(kv);
			return -ENOMEM;
		}
		e->v = nv;
		e->cap = cap;
	}
	e->v[e->n++] = kv;
	e->v[e->n] = NULL;
	return 0;
}

static int env_put(struct env_vec *e, const char *name, const char *value)
{
	size_t n = strlen(name) + strlen(value) + 2;
	char *kv = malloc(n);

	if (!kv)
		return -ENOMEM;
	snprintf(kv, n, "%s=%s", name, value);
	return env_put_owned(e, kv);
}

static int env_put_int(struct env_vec *e, const char *name, int value)
{
	char buf[16];

	snprintf(buf, sizeof(buf), "%d", value);
	return env_put(e, name, buf);
}

static bool env_is(const char *kv, const char *name)
{
	size_t n = strlen(name);

	return env_name_len(kv) == n && !strncmp(kv, name, n);
}

/* Variables that must not reach the workers from ddplaunch's own
 * environment: the token the agent reads, a progress page an outer
 * launcher named (this agent names its own, or none), and an outer
 * launcher's DDP_AWAIT_ROUND (this agent gives it to its replacements
 * started outside the rounds only). */
static bool env_secret(const char *kv)
{
	return env_is(kv, "DDP_RDZV_TOKEN") || env_is(kv, DDP_PROGRESS_ENV) ||
	       env_is(kv, "DDP_AWAIT_ROUND");
}

static int env_copy(struct env_vec *e, const char *kv)
{
	char *copy;

	if (!strchr(kv, '=') || env_secret(kv))
		return 0;
	copy = strdup(kv);
	return copy ? env_put_owned(e, copy) : -ENOMEM;
}

bool worker_env_needs_omp(char *const *base, char *const *extra, size_t nextra, int nproc)
{
	if (nproc <= 1 || envp_get(base, "OMP_NUM_THREADS"))
		return false;
	for (size_t i = 0; i < nextra; i++)
		if (env_name_len(extra[i]) == 15 && !strncmp(extra[i], "OMP_NUM_THREADS", 15))
			return false;
	return true;
}

/* torchrun's variables; the NCCL ones keep a value the user already set. */
static int env_torchrun(struct env_vec *e, const struct worker_env_spec *s)
{
	int rc = 0;

	rc |= env_put_int(e, "RANK", s->rank);
	rc |= env_put_int(e, "LOCAL_RANK", s->local_rank);
	rc |= env_put_int(e, "WORLD_SIZE", s->world_size);
	rc |= env_put_int(e, "LOCAL_WORLD_SIZE", s->local_world_size);
	rc |= env_put_int(e, "GROUP_RANK", s->group_rank);
	rc |= env_put_int(e, "GROUP_WORLD_SIZE", s->group_world_size);
	rc |= env_put_int(e, "ROLE_RANK", s->role_rank);
	rc |= env_put_int(e, "ROLE_WORLD_SIZE", s->role_world_size);
	rc |= env_put(e, "ROLE_NAME", s->role_name);
	rc |= env_put(e, "MASTER_ADDR", s->master_addr);
	rc |= env_put_int(e, "MASTER_PORT", s->master_port);
	rc |= env_put_int(e, "TORCHELASTIC_RESTART_COUNT", s->restart_count);
	rc |= env_put_int(e, "TORCHELASTIC_MAX_RESTARTS", s->max_restarts);
	rc |= env_put(e, "TORCHELASTIC_RUN_ID", s->run_id);
	rc |= env_put(e, "TORCHELASTIC_USE_AGENT_STORE", "True");
	rc |= env_put(e, "TORCHELASTIC_ERROR_FILE", s->error_file);
	if (s->job_tag)
		rc |= env_put(e, "DDP_JOB_TAG", s->job_tag);
	if (s->progress_file)
		rc |= env_put(e, DDP_PROGRESS_ENV, s->progress_file);
	/* libddp's TCP transports publish this address to the other nodes. */
	if (s->local_addr)
		rc |= env_put(e, "DDP_LOCAL_ADDR", s->local_addr);
	/* The agent channel (worker_proc.h): libddp says it can be resized
	 * in place there and hears the next round. */
	rc |= env_put(e, "DDP_AGENT_FD", "4");
	/* Every round re-forms the group: libddp counts it as an attempt. */
	if (s->round > 0)
		rc |= env_put_int(e, "DDP_ROUND", s->round);
	/* A worker started outside any round (it replaces one that died while
	 * the others re-form without it): its round comes on the channel once
	 * it says it can re-form. */
	if (s->await_round)
		rc |= env_put(e, "DDP_AWAIT_ROUND", "1");
	if (!envp_get(e->v, "NCCL_ASYNC_ERROR_HANDLING"))
		rc |= env_put(e, "NCCL_ASYNC_ERROR_HANDLING", "1");
	if (!envp_get(e->v, "TORCH_NCCL_ASYNC_ERROR_HANDLING"))
		rc |= env_put(e, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
	if (s->set_omp)
		rc |= env_put(e, "OMP_NUM_THREADS", "1");
	return rc ? -ENOMEM : 0;
}

int worker_env_build(char *const *base, const struct worker_env_spec *s, char ***out)
{
	struct env_vec e = {0};
	int rc = env_put(&e, "RANK", "0"); /* allocates the array early */

	for (char *const *p = base; !rc && p && *p; p++)
		rc = env_copy(&e, *p);
	for (size_t i = 0; !rc && i < s->nextra; i++)
		rc = env_copy(&e, s->extra[i]);
	if (!rc)
		rc = env_torchrun(&e, s);
	if (rc) {
		worker_env_free(e.v);
		return rc;
	}
	*out = e.v;
	return 0;
}

void worker_env_free(char **env)
{
	for (char **p = env; p && *p; p++)
		free(*p);
	free(env);
}
