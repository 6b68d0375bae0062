/*
 * etcd_client.c - the client object and its unary operations: leases, put,
 * get, compare-and-set, delete. Each one builds its JSON body (etcd_codec.c),
 * sends it with failover (etcd_http.c) and parses the answer (etcd_parse.c),
 * under the client's mutex.
 */
#include "etcd_client.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_codec.h"
#include "etcd_int.h"
#include "timeutil.h"

struct etcd_client {
	struct etcd_cfg cfg;
	pthread_mutex_t mu;
	struct etcd_conn conn;
	_Atomic size_t last_ep; /* conn.cur, readable without the mutex */
};

int etcd_client_new(const struct etcd_options *opt, struct etcd_client **out)
{
	struct etcd_client *c;
	int rc = etcd_global_init();
	*out = NULL;
	etcd_error_clear();
	if (rc < 0)
		return rc;
	c = calloc(1, sizeof(*c));
	if (!c)
		return etcd_fail(-ENOMEM, "etcd: out of memory");
	rc = etcd_cfg_parse(opt, &c->cfg);
	if (rc < 0) {
		free(c);
		return rc;
	}
	rc = etcd_conn_init(&c->conn, &c->cfg);
	if (rc < 0) {
		etcd_cfg_release(&c->cfg);
		free(c);
		return rc;
	}
	pthread_mutex_init(&c->mu, NULL);
	*out = c;
	return 0;
}

void etcd_client_free(struct etcd_client *c)
{
	if (!c)
		return;
	etcd_conn_release(&c->conn);
	etcd_cfg_release(&c->cfg);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

const char *etcd_client_endpoint(const struct etcd_client *c)
{
	return c->cfg.names[atomic_load(&c->last_ep)];
}

const struct etcd_cfg *etcd_client_cfg(const struct etcd_client *c)
{
	return &c->cfg;
}

size_t etcd_client_last_ep(const struct etcd_client *c)
{
	return atomic_load(&c->last_ep);
}

/* The answer parser of one operation: body, its length, and the operation's
 * own output. */
typedef int (*parse_fn)(const char *body, size_t len, void *out);

/* Sends body (owned; freed here) to path and parses the answer with parse,
 * under the mutex. */
static int call(struct etcd_client *c, const char *path, char *body, parse_fn parse, void *out)
{
	int rc;
	if (!body)
		return etcd_fail(-ENOMEM, "etcd: out of memory");
	pthread_mutex_lock(&c->mu);
	rc = etcd_conn_call(&c->conn, path, body, time_now_ms() + c->cfg.timeout_ms);
	atomic_store(&c->last_ep, c->conn.cur);
	if (rc >= 0) {
		rc = parse(c->conn.rx.data ? c->conn.rx.data : "", c->conn.rx.len, out);
		if (rc < 0)
			etcd_fail(rc, "etcd %s: unexpected answer to %s: %.200s",
				  c->cfg.names[c->conn.cur], path,
				  c->conn.rx.data ? c->conn.rx.data : "");
	}
	pthread_mutex_unlock(&c->mu);
	free(body);
	return rc;
}

static int key_ok(const char *key)
{
	return key && *key ? 0 : etcd_fail(-EINVAL, "etcd: empty key");
}

/* ---- leases ---- */

struct grant_out {
	int64_t id, ttl;
};

static int parse_grant(const char *body, size_t len, void *out)
{
	struct grant_out *g = out;
	return etcd_parse_lease_grant(body, len, &g->id, &g->ttl);
}

int etcd_lease_grant(struct etcd_client *c, int64_t ttl_s, int64_t *id, int64_t *granted_ttl)
{
	struct grant_out g = {0, 0};
	int rc;
	if (ttl_s < 1)
		return etcd_fail(-EINVAL, "etcd: a lease needs a TTL of at least 1 s");
	rc = call(c, "/v3/lease/grant", etcd_req_lease_grant(ttl_s), parse_grant, &g);
	if (rc < 0)
		return rc;
	*id = g.id;
	if (granted_ttl)
		*granted_ttl = g.ttl;
	return 0;
}

static int parse_keepalive(const char *body, size_t len, void *out)
{
	return etcd_parse_keepalive(body, len, out);
}

int etcd_lease_keepalive(struct etcd_client *c, int64_t id, int64_t *ttl)
{
	int64_t t = 0;
	int rc = call(c, "/v3/lease/keepalive", etcd_req_lease_id(id), parse_keepalive, &t);
	if (rc < 0)
		return rc;
	if (t <= 0)
		return etcd_fail(-ENOENT, "etcd: lease %llx has expired", (unsigned long long)id);
	if (ttl)
		*ttl = t;
	return 0;
}

static int parse_nothing(const char *body, size_t len, void *out)
{
	int64_t rev;
	return etcd_parse_revision(body, len, &rev);
}

int etcd_lease_revoke(struct etcd_client *c, int64_t id)
{
	return call(c, "/v3/lease/revoke", etcd_req_lease_id(id), parse_nothing, NULL);
}

/* ---- keys ---- */

static int parse_rev(const char *body, size_t len, void *out)
{
	return etcd_parse_revision(body, len, out);
}

int etcd_put(struct etcd_client *c, const char *key, const void *value, size_t len, int64_t lease,
	     int64_t *revision)
{
	int64_t rev = 0;
	int rc = key_ok(key);
	if (!rc)
		rc = call(c, "/v3/kv/put", etcd_req_put(key, value, len, lease), parse_rev, &rev);
	if (!rc && revision)
		*revision = rev;
	return rc;
}

struct range_out {
	struct etcd_kv *kvs;
	size_t n;
	int64_t revision;
};

static int parse_range(const char *body, size_t len, void *out)
{
	struct range_out *r = out;
	return etcd_parse_range(body, len, &r->kvs, &r->n, &r->revision);
}

int etcd_get(struct etcd_client *c, const char *key, struct etcd_kv *kv, int64_t *revision)
{
	struct range_out r = {NULL, 0, 0};
	int rc = key_ok(key);
	memset(kv, 0, sizeof(*kv));
	if (!rc)
		rc = call(c, "/v3/kv/range", etcd_req_range(key, false), parse_range, &r);
	if (rc < 0)
		return rc;
	if (revision)
		*revision = r.revision;
	if (r.n)
		*kv = r.kvs[0];
	for (size_t i = 1; i < r.n; i++)
		etcd_kv_release(&r.kvs[i]);
	free(r.kvs);
	return r.n ? 1 : 0;
}

int etcd_get_prefix(struct etcd_client *c, const char *prefix, struct etcd_kv **kvs, size_t *n,
		    int64_t *revision)
{
	struct range_out r = {NULL, 0, 0};
	int rc = key_ok(prefix);
	*kvs = NULL;
	*n = 0;
	if (!rc)
		rc = call(c, "/v3/kv/range", etcd_req_range(prefix, true), parse_range, &r);
	if (rc < 0)
		return rc;
	*kvs = r.kvs;
	*n = r.n;
	if (revision)
		*revision = r.revision;
	return 0;
}

static int parse_deleted(const char *body, size_t len, void *out)
{
	return etcd_parse_deleted(body, len, out);
}

int etcd_delete(struct etcd_client *c, const char *key)
{
	int64_t deleted = 0;
	int rc = key_ok(key);
	if (!rc)
		rc = call(c, "/v3/kv/deleterange", etcd_req_delete(key), parse_deleted, &deleted);
	return rc < 0 ? rc : deleted > 0;
}

struct cas_out {
	bool succeeded;
	int64_t revision;
	struct etcd_kv cur;
};

static int parse_cas(const char *body, size_t len, void *out)
{
	struct cas_out *o = out;
	return etcd_parse_cas(body, len, &o->succeeded, &o->revision, &o->cur);
}

int etcd_cas(struct etcd_client *c, const char *key, const struct etcd_cmp *cmp, const void *value,
	     size_t len, int64_t lease, struct etcd_kv *cur)
{
	struct cas_out o;
	int rc = key_ok(key);
	memset(&o, 0, sizeof(o));
	if (cur)
		memset(cur, 0, sizeof(*cur));
	if (!rc && (!cmp || cmp->kind > ETCD_CMP_VALUE))
		rc = etcd_fail(-EINVAL, "etcd: bad compare-and-set condition");
	if (!rc)
		rc =
		    call(c, "/v3/kv/txn", etcd_req_cas(key, cmp, value, len, lease), parse_cas, &o);
	if (rc < 0)
		return rc;
	if (o.succeeded)
		o.cur.mod_revision = o.revision;
	if (cur)
		*cur = o.cur;
	else
		etcd_kv_release(&o.cur);
	return o.succeeded ? 1 : 0;
}
