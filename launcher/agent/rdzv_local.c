/* The single-node rendezvous: every round has this node alone. */
#include "rdzv.h"
#include "opts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rdzv {
	int nproc;
	char *master_addr;
	int master_port;
};

int rdzv_new(const struct launch_opts *o, int nproc, const char *master_addr, int master_port,
	     struct rdzv **out, char *err, size_t errlen)
{
	struct rdzv *r;

	if (o->nnodes_max > 1) {
		snprintf(err, errlen,
			 "multi-node jobs (--nnodes=%d:%d) need a rendezvous that this ddplaunch "
			 "does not have yet; run one node (--nnodes=1) per launcher",
			 o->nnodes_min, o->nnodes_max);
		return -ENOTSUP;
	}
	r = calloc(1, sizeof(*r));
	if (!r || !(r->master_addr = strdup(master_addr))) {
		free(r);
		return -ENOMEM;
	}
	r->nproc = nproc;
	r->master_port = master_port;
	*out = r;
	return 0;
}

int rdzv_join(struct rdzv *r, int round, rdzv_joined_fn done, void *arg)
{
	struct rdzv_round res = {
	    .round = round,
	    .group_rank = 0,
	    .group_world_size = 1,
	    .rank_base = 0,
	    .world_size = r->nproc,
	    .master_addr = r->master_addr,
	    .master_port = r->master_port,
	};

	done(arg, 0, &res);
	return 0;
}

void rdzv_free(struct rdzv *r)
{
	if (!r)
		return;
	free(r->master_addr);
	free(r);
}
