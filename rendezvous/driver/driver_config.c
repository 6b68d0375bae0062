/*
 * driver_config.c - the driver's configuration (driver_int.h): its copy,
 * what can never work refused up front, and what the machine and the
 * backend are given of it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver_int.h"
#include "rdzv_host.h"

void rdzv_driver_config_defaults(struct rdzv_driver_config *c)
{
	*c = (struct rdzv_driver_config){
	    .mode = RDZV_DRIVER_C10D,
	    .min_nodes = 1,
	    .max_nodes = 1,
	    .node_rank = -1,
	    .nproc = 1,
	    .is_host = -1,
	    .join_timeout = 600,
	    .last_call_timeout = 30,
	    .close_timeout = 30,
	    .keep_alive_interval = 5,
	    .keep_alive_max_attempt = 3,
	    .fail_slack_ms = 2000,
	};
}

static const char *dup_or_null(const char *s, bool *oom)
{
	char *c = s ? strdup(s) : NULL;

	if (s && !c)
		*oom = true;
	return c;
}

/* The strings a secret may be in are wiped before they are freed. */
static void free_wiped(const char *s)
{
	if (!s)
		return;
	explicit_bzero((char *)s, strlen(s));
	free((char *)s);
}

int drv_config_copy(struct rdzv_driver *d, const struct rdzv_driver_config *cfg)
{
	struct rdzv_driver_config *c = &d->c;
	bool oom = false;

	*c = *cfg;
	c->host = dup_or_null(cfg->host ? cfg->host : "", &oom);
	c->endpoints = dup_or_null(cfg->endpoints, &oom);
	c->run_id = dup_or_null(cfg->run_id, &oom);
	c->job = dup_or_null(cfg->job, &oom);
	c->job_text = dup_or_null(cfg->job_text, &oom);
	c->cmd = dup_or_null(cfg->cmd, &oom);
	c->local_addr = dup_or_null(cfg->local_addr, &oom);
	c->token = dup_or_null(cfg->token, &oom);
	c->ca_file = dup_or_null(cfg->ca_file, &oom);
	c->cert_file = dup_or_null(cfg->cert_file, &oom);
	c->key_file = dup_or_null(cfg->key_file, &oom);
	c->user = dup_or_null(cfg->user, &oom);
	c->password = dup_or_null(cfg->password, &oom);
	d->run_id = c->run_id;
	d->token = c->token;
	d->local_addr = c->local_addr;
	if (oom)
		return -ENOMEM;
	return strlen(c->host) > RDZV_DRIVER_HOST_MAX ? -EINVAL : 0;
}

void drv_config_release(struct rdzv_driver *d)
{
	struct rdzv_driver_config *c = &d->c;

	free((char *)c->host);
	free((char *)c->endpoints);
	free((char *)c->run_id);
	free((char *)c->job);
	free((char *)c->job_text);
	free((char *)c->cmd);
	free((char *)c->local_addr);
	free_wiped(c->token);
	free((char *)c->ca_file);
	free((char *)c->cert_file);
	free((char *)c->key_file);
	free((char *)c->user);
	free_wiped(c->password);
}

static int64_t ms_of(double s)
{
	return (int64_t)(s * 1000.0 + 0.5);
}

void drv_machine_config(const struct rdzv_driver *d, struct rdzv_config *cfg_out)
{
	const struct rdzv_driver_config *c = &d->c;
	struct rdzv_config cfg;

	rdzv_config_defaults(&cfg);
	cfg.run_id = d->run_id;
	cfg.nproc = (uint32_t)c->nproc;
	cfg.min_nodes = (uint32_t)c->min_nodes;
	cfg.max_nodes = (uint32_t)c->max_nodes;
	cfg.node_rank = c->node_rank;
	cfg.max_restarts = (uint32_t)c->max_restarts;
	cfg.job = c->job;
	cfg.job_text = c->job_text;
	cfg.cmd = c->cmd;
	/* A static job's store is its node 0's alone: node 0 names its job
	 * there, the others check that name before joining. */
	if (c->mode == RDZV_DRIVER_STATIC)
		cfg.store_role = d->is_host ? RDZV_STORE_OWN : RDZV_STORE_OWNED;
	cfg.join_timeout_ms = ms_of(c->join_timeout);
	cfg.last_call_timeout_ms = ms_of(c->last_call_timeout);
	cfg.close_timeout_ms = ms_of(c->close_timeout);
	cfg.keep_alive_interval_ms = ms_of(c->keep_alive_interval);
	cfg.keep_alive_max_attempt = (uint32_t)c->keep_alive_max_attempt;
	/* A node that waits for others says for whom, as one waiting for the
	 * store does (DRV_WAIT_FIRST_MS). */
	cfg.report_first_ms = DRV_WAIT_FIRST_MS;
	*cfg_out = cfg;
}

/* What the machine would refuse once connected, refused before: with
 * stand-ins for what only the connection tells. */
static int drv_config_check(const struct rdzv_driver *d, char *err, size_t errlen)
{
	struct rdzv_config cfg;

	drv_machine_config(d, &cfg);
	cfg.node_id = "node:1";
	cfg.addr = d->local_addr ? d->local_addr : "127.0.0.1";
	return rdzv_config_check(&cfg, err, errlen);
}

/* etcd's TLS files must be readable: curl would refuse each request. */
static int drv_tls_files_check(const struct rdzv_driver *d, char *err, size_t errlen)
{
	const struct {
		const char *key, *path;
	} files[] = {{"cacert", d->c.ca_file}, {"cert", d->c.cert_file}, {"key", d->c.key_file}};

	if (d->c.mode != RDZV_DRIVER_ETCD)
		return 0;
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		int fd = files[i].path ? open(files[i].path, O_RDONLY | O_CLOEXEC) : -2;

		if (fd >= 0)
			close(fd);
		if (fd != -1)
			continue;
		snprintf(err, errlen,
			 "--rdzv_conf: %s '%s' cannot be read (%s): give the path of a readable "
			 "PEM file",
			 files[i].key, files[i].path, strerror(errno));
		return -EINVAL;
	}
	return 0;
}

/* A --local_addr not of this machine, a port 0 that only the store's host
 * may choose, etcd's TLS files that cannot be read, what the machine
 * refuses. */
int drv_check(const struct rdzv_driver *d, char *err, size_t errlen)
{
	int rc;

	if ((rc = drv_tls_files_check(d, err, errlen)) < 0)
		return rc;

	if (d->local_addr &&
	    (rc = rdzv_host_local_check(
		 d->local_addr, d->c.mode == RDZV_DRIVER_ETCD ? "" : d->bind_lit, err, errlen)) < 0)
		return rc;
	if (d->c.port == 0 && !d->is_host) {
		snprintf(err, errlen,
			 "the rendezvous store's port is 0 but this node does not host it: only "
			 "its host may let the kernel choose one; give the port the host "
			 "reported in --rdzv_endpoint");
		return -EINVAL;
	}
	return drv_config_check(d, err, errlen);
}

/* etcd: the endpoints, TLS files, user and password, each request's
 * deadline. */
static void drv_etcd_config(struct rdzv_driver *d, struct rdzv_prims_config *pc)
{
	const struct rdzv_driver_config *c = &d->c;

	pc->endpoints = c->endpoints;
	pc->ca_file = c->ca_file;
	pc->cert_file = c->cert_file;
	pc->key_file = c->key_file;
	pc->user = c->user;
	pc->password = c->password;
	pc->request_timeout_ms = ms_of(c->read_timeout);
	snprintf(d->peer, sizeof(d->peer), "%.*s", (int)sizeof(d->peer) - 1,
		 c->endpoints ? c->endpoints : "");
}

/* Liveness, on both sides, is the keep-alive window: the store ends a
 * session silent that long, and the session is lost when a ping waits that
 * long; a ping each keep_alive_interval, at least two within the window. */
void drv_prims_config(struct rdzv_driver *d, struct rdzv_prims_config *pc)
{
	const struct rdzv_driver_config *c = &d->c;
	uint32_t every = (uint32_t)(c->keep_alive_interval * 1000.0 + 0.5);
	uint32_t window =
	    (uint32_t)(c->keep_alive_interval * 1000.0 * (double)c->keep_alive_max_attempt + 0.5);

	pc->token = d->token;
	pc->token_len = d->token ? strlen(d->token) : 0;
	pc->idle_timeout_ms = window;
	pc->ping_interval_ms = every < window / 2 ? every : window / 2;
	pc->port = (uint16_t)c->port;
	pc->bind_addr = d->local_addr && rdzv_host_is_literal(d->local_addr) ? d->local_addr : NULL;
	if (c->mode == RDZV_DRIVER_ETCD)
		drv_etcd_config(d, pc);
}
