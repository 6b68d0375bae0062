/* The agent's rendezvous seam (rdzv.h): picks the backend, one node
 * (rdzv_one.c) or many (rdzv_many.c), and calls its operations. */
#include "rdzv.h"
#include "envp.h"
#include "exit_status.h"
#include "opts.h"
#include "opts_rdzv.h"

#include <errno.h>
#include <log.h>

/* In the order of rdzv_codec.h's enum rdzv_reason, from RDZV_WHY_START. */
const char *const rdzv_reasons[RDZV_REASONS] = {"start",   "join",   "dead",   "left",
						"restart", "reform", "replace"};

int rdzv_new(const struct launch_opts *o, char **environ_in, int nproc, struct rdzv **out,
	     char *err, size_t errlen)
{
	struct opts_rdzv res;
	int rc = opts_rdzv_resolve(o, envp_get(environ_in, OPTS_RDZV_TOKEN_ENV), &res, err, errlen);

	if (rc < 0)
		return rc;
	if (res.token_env_ignored)
		log_warn("%s", OPTS_RDZV_TOKEN_IGNORED);
	if (res.mode == OPTS_RDZV_LOCAL)
		return rdzv_one_new(o, nproc, out);
	return rdzv_many_new(&res, nproc, o->max_restarts, out, err, errlen);
}

int rdzv_check(const struct launch_opts *o, char **environ_in, int nproc, char *err, size_t errlen)
{
	struct opts_rdzv res;
	struct rdzv *r = NULL;
	int rc = opts_rdzv_resolve(o, envp_get(environ_in, OPTS_RDZV_TOKEN_ENV), &res, err, errlen);

	if (rc < 0)
		return rc;
	if (res.mode == OPTS_RDZV_LOCAL)
		return rdzv_one_check_port(o, err, errlen);
	rc = rdzv_many_new(&res, nproc, o->max_restarts, &r, err, errlen);
	rdzv_free(r);
	return rc;
}

int rdzv_attach(struct rdzv *r, uv_loop_t *loop, const struct rdzv_events *ev, void *arg)
{
	return r->ops->attach(r, loop, ev, arg);
}

int rdzv_join(struct rdzv *r, rdzv_joined_fn done, void *arg)
{
	return r->ops->join(r, done, arg);
}

bool rdzv_group_ended(struct rdzv *r, const struct rdzv_group_end *g)
{
	return r->ops->group_ended(r, g);
}

void rdzv_signal(struct rdzv *r, int sig)
{
	r->ops->signal(r, sig);
}

void rdzv_shutdown(struct rdzv *r, int exit_status)
{
	if (r)
		r->ops->shutdown(r, exit_status);
}

void rdzv_free(struct rdzv *r)
{
	if (r)
		r->ops->free(r);
}

int rdzv_publish(struct rdzv *r, const void *rec, size_t len)
{
	return r && r->ops->publish ? r->ops->publish(r, rec, len) : -ENOTSUP;
}

struct store_server *rdzv_hosted_store(struct rdzv *r)
{
	return r && r->ops->hosted_store ? r->ops->hosted_store(r) : NULL;
}

int rdzv_renew(struct rdzv *r)
{
	return r->ops->renew ? r->ops->renew(r) : -ENOTSUP;
}

int rdzv_set_nproc(struct rdzv *r, int nproc)
{
	return r->ops->set_nproc ? r->ops->set_nproc(r, nproc) : -ENOTSUP;
}

int rdzv_grow(struct rdzv *r)
{
	return r->ops->grow ? r->ops->grow(r) : -ENOTSUP;
}

int rdzv_node_of(struct rdzv *r, int rank)
{
	return r->ops->node_of ? r->ops->node_of(r, rank) : 0;
}

int rdzv_post(struct rdzv *r, const char *text)
{
	return r->ops->post ? r->ops->post(r, text) : -ENOTSUP;
}

int rdzv_put(struct rdzv *r, const char *name, const char *value)
{
	return r->ops->put ? r->ops->put(r, name, value) : -ENOTSUP;
}

int rdzv_get(struct rdzv *r, const char *name, void (*got)(void *arg, const char *value), void *arg)
{
	return r->ops->get ? r->ops->get(r, name, got, arg) : -ENOTSUP;
}

void rdzv_evict(struct rdzv *r, int node)
{
	if (r->ops->evict)
		r->ops->evict(r, node);
}

int rdzv_exit_status(enum rdzv_outcome how, int stop_signal, bool permanent, int fail_status)
{
	switch (how) {
	case RDZV_OUT_FINISHED:
		return 0;
	case RDZV_OUT_REFUSED:
		return 2;
	case RDZV_OUT_PERMANENT:
		return DDP_EXIT_PERMANENT;
	case RDZV_OUT_STOPPED:
		return 128 + stop_signal;
	case RDZV_OUT_LEFT:
		if (stop_signal > 0)
			return 128 + stop_signal;
		return permanent ? DDP_EXIT_PERMANENT : 0;
	case RDZV_OUT_FAILED:
	default:
		if (stop_signal > 0)
			return 128 + stop_signal;
		return fail_status ? fail_status : 1;
	}
}
