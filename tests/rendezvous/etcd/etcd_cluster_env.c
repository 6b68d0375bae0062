/* The cluster test_etcd.py started, from the environment (see the header). */
#include "etcd_cluster_env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void etcd_cluster_env_read(struct etcd_cluster_env *env, const char *prog)
{
	const char *p = getenv("ETCD_PIDS"), *l = getenv("ETCD_LEADER");
	char *copy, *tok, *save;
	int i = 0;

	memset(env, 0, sizeof(*env));
	env->endpoints = getenv("ETCD_ENDPOINTS");
	if (!env->endpoints) {
		fprintf(stderr, "%s: set ETCD_ENDPOINTS (test_etcd.py does)\n", prog);
		exit(2);
	}
	copy = strdup(env->endpoints);
	for (tok = strtok_r(copy, ",", &save); tok && i < ETCD_CLUSTER_MAX;
	     tok = strtok_r(NULL, ",", &save))
		env->member_ep[i++] = strdup(tok);
	free(copy);
	copy = p ? strdup(p) : NULL;
	i = 0;
	for (tok = copy ? strtok_r(copy, ",", &save) : NULL; tok && i < ETCD_CLUSTER_MAX;
	     tok = strtok_r(NULL, ",", &save))
		env->member_pid[i++] = (pid_t)atoi(tok);
	free(copy);
	env->leader_index = l ? atoi(l) : -1;
}
