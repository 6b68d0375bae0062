/* The agent's rendezvous seam (rdzv.h): one node alone answers each round at
 * once; across nodes every call goes to the many-nodes backend
 * (rdzv_int.h). */
#include "rdzv.h"
#include "opts.h"
#include "opts_rdzv.h"
#include "rdzv_int.h"
#include "worker_env.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rdzv {
	struct rdzv_nodes *multi; /* NULL: one node */
	int nproc;
	char *master_addr;
	int master_port;
};

int rdzv_new(const struct launch_opts *o, char **environ_in, int nproc, const char *master_addr,
	     int master_port, struct rdzv **out, char *err, size_t errlen)
{
	struct opts_rdzv res;
	struct rdzv *r;
	int rc = opts_rdzv_resolve(o, worker_env_get(environ_in, OPTS_RDZV_TOKEN_ENV), &res, err,
				   errlen);

	if (rc < 0)
		return rc;
	r = calloc(1, sizeof(*r));
	if (!r || !(r->master_addr = strdup(master_addr))) {
		free(r);
		return -ENOMEM;
	}
	r->nproc = nproc;
	r->master_port = master_port;
	if (res.mode != OPTS_RDZV_LOCAL &&
	    (rc = rdzv_nodes_new(&res, nproc, o->max_restarts, &r->multi, err, errlen)) < 0) {
		rdzv_free(r);
		return rc;
	}
	*out = r;
	return 0;
}

bool rdzv_multinode(const struct rdzv *r)
{
	return r && r->multi;
}

int rdzv_attach(struct rdzv *r, uv_loop_t *loop, const struct rdzv_events *ev, void *arg)
{
	return r->multi ? rdzv_nodes_attach(r->multi, loop, ev, arg) : 0;
}

int rdzv_join(struct rdzv *r, int round, rdzv_joined_fn done, void *arg)
{
	struct rdzv_round res = {
	    .round = round,
	    .restart_count = round,
	    .group_rank = 0,
	    .group_world_size = 1,
	    .rank_base = 0,
	    .world_size = r->nproc,
	    .master_addr = r->master_addr,
	    .master_port = r->master_port,
	};

	if (r->multi)
		return rdzv_nodes_join(r->multi, done, arg);
	done(arg, 0, &res);
	return 0;
}

void rdzv_group_exited(struct rdzv *r, bool success)
{
	if (r->multi)
		rdzv_nodes_group_exited(r->multi, success);
}

void rdzv_leave(struct rdzv *r)
{
	if (r->multi)
		rdzv_nodes_leave(r->multi);
}

void rdzv_shutdown(struct rdzv *r, int exit_status)
{
	if (r && r->multi)
		rdzv_nodes_shutdown(r->multi, exit_status);
}

void rdzv_free(struct rdzv *r)
{
	if (!r)
		return;
	rdzv_nodes_free(r->multi);
	free(r->master_addr);
	free(r);
}
