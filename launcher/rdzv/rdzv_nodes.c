/*
 * rdzv_nodes.c - the many-nodes backend of the rendezvous seam
 * (rdzv_int.h): the options become the driver's config, the driver's
 * rounds and events become rdzv.h's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "driver.h"
#include "rdzv_int.h"

struct rdzv_nodes {
	struct rdzv_driver *d;
	const struct rdzv_events *ev;
	void *ev_arg;
	rdzv_joined_fn done;
	void *done_arg;
	/* the last round delivered: each node's workers in it, by node rank */
	uint32_t *procs;
	uint32_t nprocs, procs_cap;
};

static const char *or_null(const char *s)
{
	return s && *s ? s : NULL;
}

static enum rdzv_driver_mode nodes_mode(enum opts_rdzv_mode m)
{
	return m == OPTS_RDZV_STATIC ? RDZV_DRIVER_STATIC
	       : m == OPTS_RDZV_ETCD ? RDZV_DRIVER_ETCD
				     : RDZV_DRIVER_C10D;
}

/* etcd's TLS files and user ("" when not given), and its password:
 * --rdzv_conf's, else OPTS_ETCD_PASSWORD_ENV's when a user is given. */
static void nodes_etcd(const struct opts_rdzv_conf *c, struct rdzv_driver_config *dc)
{
	const char *pw = getenv(OPTS_ETCD_PASSWORD_ENV);

	dc->ca_file = or_null(c->cacert);
	dc->cert_file = or_null(c->cert);
	dc->key_file = or_null(c->key);
	dc->user = or_null(c->user);
	dc->password = c->password[0] ? c->password : dc->user ? or_null(pw) : NULL;
	dc->read_timeout = c->read_timeout;
}

static void nodes_config(const struct opts_rdzv *o, int nproc, int max_restarts,
			 struct rdzv_driver_config *dc)
{
	rdzv_driver_config_defaults(dc);
	dc->mode = nodes_mode(o->mode);
	dc->host = o->host;
	dc->port = o->port;
	dc->endpoints = o->endpoints;
	dc->run_id = o->run_id;
	dc->job = o->job;
	dc->job_text = o->job_text;
	dc->cmd = o->cmd;
	dc->min_nodes = o->min_nodes;
	dc->max_nodes = o->max_nodes;
	dc->node_rank = o->node_rank;
	dc->nproc = nproc;
	dc->max_restarts = max_restarts;
	dc->local_addr = o->local_addr;
	dc->token = o->token;
	dc->is_host = o->conf.is_host;
	dc->host_is_node0 = o->host_is_node0;
	dc->lost_nodes_final = o->lost_nodes_final;
	dc->join_timeout = o->conf.join_timeout;
	dc->last_call_timeout = o->conf.last_call_timeout;
	dc->close_timeout = o->conf.close_timeout;
	dc->keep_alive_interval = o->conf.keep_alive_interval;
	dc->keep_alive_max_attempt = o->conf.keep_alive_max_attempt;
	nodes_etcd(&o->conf, dc);
}

int rdzv_nodes_new(const struct opts_rdzv *cfg, int nproc, int max_restarts,
		   struct rdzv_nodes **out, char *err, size_t errlen)
{
	struct rdzv_driver_config dc;
	struct rdzv_nodes *n = calloc(1, sizeof(*n));
	int rc;

	if (!n)
		return -ENOMEM;
	nodes_config(cfg, nproc, max_restarts, &dc);
	rc = rdzv_driver_new(&dc, &n->d, err, errlen);
	if (rc < 0) {
		free(n);
		return rc;
	}
	*out = n;
	return 0;
}

static void nodes_round_over(void *arg, const char *why)
{
	struct rdzv_nodes *n = arg;

	n->ev->round_over(n->ev_arg, why);
}

static void nodes_ended(void *arg, enum rdzv_driver_outcome how, const char *msg)
{
	struct rdzv_nodes *n = arg;
	enum rdzv_outcome out = how == RDZV_DRIVER_LEFT	       ? RDZV_OUT_LEFT
				: how == RDZV_DRIVER_FAILED    ? RDZV_OUT_FAILED
				: how == RDZV_DRIVER_REFUSED   ? RDZV_OUT_REFUSED
				: how == RDZV_DRIVER_PERMANENT ? RDZV_OUT_PERMANENT
							       : RDZV_OUT_FINISHED;

	n->ev->ended(n->ev_arg, out, msg);
}

static void nodes_notice(void *arg, const char *text)
{
	struct rdzv_nodes *n = arg;

	if (n->ev->notice)
		n->ev->notice(n->ev_arg, text);
}

static void nodes_where(void *arg, char *buf, size_t len)
{
	struct rdzv_nodes *n = arg;

	if (n->ev->where)
		n->ev->where(n->ev_arg, buf, len);
	else if (len)
		snprintf(buf, len, "an unknown phase");
}

static const struct rdzv_driver_events nodes_events = {
    .round_over = nodes_round_over,
    .ended = nodes_ended,
    .notice = nodes_notice,
    .where = nodes_where,
};

int rdzv_nodes_post(struct rdzv_nodes *n, const char *text)
{
	return rdzv_driver_post(n->d, text);
}

int rdzv_nodes_put(struct rdzv_nodes *n, const char *name, const char *value)
{
	return rdzv_driver_put(n->d, name, value);
}

int rdzv_nodes_get(struct rdzv_nodes *n, const char *name,
		   void (*got)(void *arg, const char *value), void *arg)
{
	return rdzv_driver_get(n->d, name, got, arg);
}

void rdzv_nodes_evict(struct rdzv_nodes *n, int node)
{
	if (node >= 0)
		rdzv_driver_evict(n->d, (uint32_t)node);
}

int rdzv_nodes_attach(struct rdzv_nodes *n, uv_loop_t *loop, const struct rdzv_events *ev,
		      void *arg)
{
	n->ev = ev;
	n->ev_arg = arg;
	return rdzv_driver_attach(n->d, loop, &nodes_events, n);
}

/* Each node's workers in round dr, for rdzv_nodes_node_of (none kept when
 * out of memory: ranks are then on no node, and a hang on another node is
 * left to the keep-alive window). */
static void nodes_keep_procs(struct rdzv_nodes *n, const struct rdzv_driver_round *dr)
{
	if (dr->size > n->procs_cap) {
		uint32_t *p = realloc(n->procs, dr->size * sizeof(*p));

		if (!p) {
			n->nprocs = 0;
			return;
		}
		n->procs = p;
		n->procs_cap = dr->size;
	}
	for (uint32_t i = 0; i < dr->size; i++)
		n->procs[i] = dr->members[i].nproc;
	n->nprocs = dr->size;
}

static void nodes_joined(void *arg, int status, const struct rdzv_driver_round *dr)
{
	struct rdzv_nodes *n = arg;
	rdzv_joined_fn done = n->done;
	struct rdzv_round r = {
	    .round = (int)dr->round,
	    .restart_count = (int)dr->restarts,
	    .group_rank = (int)dr->rank,
	    .group_world_size = (int)dr->size,
	    .rank_base = (int)dr->first_proc,
	    .local_procs =
		dr->members && dr->rank < dr->size ? (int)dr->members[dr->rank].nproc : 0,
	    .world_size = (int)dr->world_procs,
	    .master_addr = dr->master_addr,
	    .master_port = dr->master_port,
	    .local_addr = dr->local_addr,
	    .reason = dr->reason >= RDZV_WHY_START && dr->reason <= RDZV_WHY_REPLACE
			  ? rdzv_reasons[dr->reason - RDZV_WHY_START]
			  : "start",
	    .subject = dr->subject,
	};

	n->done = NULL;
	if (!status && dr->members)
		nodes_keep_procs(n, dr);
	done(n->done_arg, status, &r);
}

int rdzv_nodes_node_of(const struct rdzv_nodes *n, int rank)
{
	uint64_t first = 0;

	for (uint32_t i = 0; rank >= 0 && i < n->nprocs; i++) {
		first += n->procs[i];
		if ((uint64_t)rank < first)
			return (int)i;
	}
	return -1;
}

int rdzv_nodes_join(struct rdzv_nodes *n, rdzv_joined_fn done, void *arg)
{
	n->done = done;
	n->done_arg = arg;
	return rdzv_driver_join(n->d, nodes_joined, n);
}

void rdzv_nodes_group_exited(struct rdzv_nodes *n, bool success)
{
	rdzv_driver_group_exited(n->d, success);
}

void rdzv_nodes_renew(struct rdzv_nodes *n)
{
	rdzv_driver_renew(n->d);
}

void rdzv_nodes_grow(struct rdzv_nodes *n)
{
	rdzv_driver_grow(n->d);
}

int rdzv_nodes_set_nproc(struct rdzv_nodes *n, int nproc)
{
	return rdzv_driver_set_nproc(n->d, nproc);
}

_Static_assert(RDZV_PUBLISH_MAX == RDZV_STATUS_MAX, "rdzv.h and driver.h agree");

int rdzv_nodes_publish(struct rdzv_nodes *n, const void *rec, size_t len)
{
	return rdzv_driver_publish(n->d, rec, len);
}

struct store_server *rdzv_nodes_hosted_store(struct rdzv_nodes *n)
{
	return rdzv_driver_hosted_store(n->d);
}

void rdzv_nodes_leave(struct rdzv_nodes *n)
{
	rdzv_driver_leave(n->d);
}

void rdzv_nodes_leave_permanent(struct rdzv_nodes *n, const char *cause)
{
	rdzv_driver_leave_permanent(n->d, cause);
}

void rdzv_nodes_shutdown(struct rdzv_nodes *n, int exit_status)
{
	rdzv_driver_shutdown(n->d, exit_status);
}

void rdzv_nodes_free(struct rdzv_nodes *n)
{
	if (!n)
		return;
	rdzv_driver_free(n->d);
	free(n->procs);
	free(n);
}
