/*
 * rdzv_many.c - the many-nodes backend of the rendezvous seam (rdzv.h): the
 * multi-node driver (rendezvous/driver/, through rdzv_nodes.c) runs the
 * rendezvous; the job's restart budget is its machine's, for all nodes.
 * This node hands it its group's end, and leaves the job on a stop signal
 * or a failure that would repeat in every round.
 */
#include "exit_status.h"
#include "rdzv.h"
#include "rdzv_int.h"
#include "signames.h"

#include <errno.h>
#include <log.h>
#include <stdlib.h>

struct rdzv_many {
	struct rdzv base;
	struct rdzv_nodes *d;
};

static struct rdzv_nodes *many_driver(struct rdzv *r)
{
	return ((struct rdzv_many *)r)->d;
}

static int many_attach(struct rdzv *r, uv_loop_t *loop, const struct rdzv_events *ev, void *arg)
{
	return rdzv_nodes_attach(many_driver(r), loop, ev, arg);
}

static int many_join(struct rdzv *r, rdzv_joined_fn done, void *arg)
{
	return rdzv_nodes_join(many_driver(r), done, arg);
}

static bool many_group_ended(struct rdzv *r, const struct rdzv_group_end *g)
{
	if (g->stop_signal > 0)
		return false; /* left at the signal: LEFT follows */
	if (g->permanent && !g->round_over) {
		/* This node would fail the same way in every round: it leaves,
		 * and the others go on without it if the job allows. */
		g->show_summary(g->arg);
		log_error("leaving the job: the failure above will repeat at every restart "
			  "(exit status %d: fix the cause, then run again)",
			  DDP_EXIT_PERMANENT);
		rdzv_nodes_leave_permanent(many_driver(r), g->cause);
		return false; /* LEFT follows */
	}
	/* Waiting for the rendezvous from now on: an end it reports at once
	 * (the job finished, the budget is spent) is heard during this call. */
	if (!g->round_over)
		rdzv_nodes_group_exited(many_driver(r), !g->failed);
	return true;
}

static int many_renew(struct rdzv *r)
{
	rdzv_nodes_renew(many_driver(r));
	return 0;
}

static int many_set_nproc(struct rdzv *r, int nproc)
{
	return rdzv_nodes_set_nproc(many_driver(r), nproc);
}

static int many_grow(struct rdzv *r)
{
	rdzv_nodes_grow(many_driver(r));
	return 0;
}

static int many_node_of(struct rdzv *r, int rank)
{
	return rdzv_nodes_node_of(many_driver(r), rank);
}

static int many_publish(struct rdzv *r, const void *rec, size_t len)
{
	return rdzv_nodes_publish(many_driver(r), rec, len);
}

static struct store_server *many_hosted_store(struct rdzv *r)
{
	return rdzv_nodes_hosted_store(many_driver(r));
}

static int many_post(struct rdzv *r, const char *text)
{
	return rdzv_nodes_post(many_driver(r), text);
}

static int many_put(struct rdzv *r, const char *name, const char *value)
{
	return rdzv_nodes_put(many_driver(r), name, value);
}

static int many_get(struct rdzv *r, const char *name, void (*got)(void *arg, const char *value),
		    void *arg)
{
	return rdzv_nodes_get(many_driver(r), name, got, arg);
}

static void many_evict(struct rdzv *r, int node)
{
	rdzv_nodes_evict(many_driver(r), node);
}

static void many_signal(struct rdzv *r, int sig)
{
	log_warn("got %s; leaving the job and stopping the workers", signame_name(sig));
	rdzv_nodes_leave(many_driver(r));
}

static void many_shutdown(struct rdzv *r, int exit_status)
{
	rdzv_nodes_shutdown(many_driver(r), exit_status);
}

static void many_free(struct rdzv *r)
{
	rdzv_nodes_free(many_driver(r));
	free(r);
}

static const struct rdzv_ops many_ops = {
    .attach = many_attach,
    .join = many_join,
    .group_ended = many_group_ended,
    .renew = many_renew,
    .set_nproc = many_set_nproc,
    .grow = many_grow,
    .node_of = many_node_of,
    .publish = many_publish,
    .hosted_store = many_hosted_store,
    .post = many_post,
    .put = many_put,
    .get = many_get,
    .evict = many_evict,
    .signal = many_signal,
    .shutdown = many_shutdown,
    .free = many_free,
};

int rdzv_many_new(const struct opts_rdzv *cfg, int nproc, int max_restarts, struct rdzv **out,
		  char *err, size_t errlen)
{
	struct rdzv_many *r = calloc(1, sizeof(*r));
	int rc;

	if (!r)
		return -ENOMEM;
	r->base.ops = &many_ops;
	rc = rdzv_nodes_new(cfg, nproc, max_restarts, &r->d, err, errlen);
	if (rc < 0) {
		free(r);
		return rc;
	}
	*out = &r->base;
	return 0;
}
