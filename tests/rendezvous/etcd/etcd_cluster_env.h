/*
 * etcd_cluster_env.h - what test_etcd.py tells the etcd client tests about
 * the cluster it started: ETCD_ENDPOINTS (comma-separated), ETCD_PIDS (the
 * members' pids, in the same order) and ETCD_LEADER (the leader's index).
 */
#ifndef DDP_TESTS_ETCD_CLUSTER_ENV_H
#define DDP_TESTS_ETCD_CLUSTER_ENV_H

#include <sys/types.h>

#define ETCD_CLUSTER_MAX 3

struct etcd_cluster_env {
	const char *endpoints;		    /* as given */
	char *member_ep[ETCD_CLUSTER_MAX];  /* each member's endpoint, or NULL */
	pid_t member_pid[ETCD_CLUSTER_MAX]; /* each member's pid, or 0 */
	int leader_index;		    /* -1: not given */
};

/* Reads the variables; without ETCD_ENDPOINTS says so (naming `prog`) and
 * exits 2. */
void etcd_cluster_env_read(struct etcd_cluster_env *env, const char *prog);

#endif
