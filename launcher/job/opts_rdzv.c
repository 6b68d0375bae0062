/*
 * opts_rdzv.c - the rendezvous options resolved (opts_rdzv.h): --rdzv_conf
 * through a small settings table of its own (so its keys get the same
 * messages and "did you mean" as flags), endpoints, the mode.
 */
#include "opts_rdzv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opts_host.h"
#include "settings.h"

void opts_rdzv_conf_defaults(struct opts_rdzv_conf *c)
{
	c->join_timeout = 600;
	c->last_call_timeout = 30;
	c->close_timeout = 30;
	c->keep_alive_interval = 5;
	c->keep_alive_max_attempt = 3;
	c->is_host = -1;
	c->protocol[0] = c->cacert[0] = c->cert[0] = c->key[0] = '\0';
	c->user[0] = c->password[0] = '\0';
	c->read_timeout = 0;
}

/* Seconds, at least a millisecond (the rendezvous counts in them: less
 * would be a timer of 0, firing before anything happens), at most 30 days. */
static int conf_seconds(void *obj, const struct settings_def *def, const char *s)
{
	double v;

	if (settings_parse_real(s, &v) || v < 0.001 || v > OPTS_RDZV_SECONDS_MAX)
		return -EINVAL;
	*(double *)((char *)obj + def->offset) = v;
	return 0;
}

/* last_call_timeout may be 0: close as soon as MIN nodes are in. */
static int conf_seconds0(void *obj, const struct settings_def *def, const char *s)
{
	double v;

	if (settings_parse_real(s, &v) || v < 0 || v > OPTS_RDZV_SECONDS_MAX)
		return -EINVAL;
	*(double *)((char *)obj + def->offset) = v;
	return 0;
}

static int conf_bool(void *obj, const struct settings_def *def, const char *s)
{
	bool b;

	if (settings_parse_bool(s, &b))
		return -EINVAL;
	*(int *)((char *)obj + def->offset) = b;
	return 0;
}

/* etcd's protocol: http or https. */
static int conf_protocol(void *obj, const struct settings_def *def, const char *s)
{
	if (strcmp(s, "http") && strcmp(s, "https"))
		return -EINVAL;
	strcpy((char *)obj + def->offset, s);
	return 0;
}

/* torchrun's keys that mean nothing here: checked for a value only. */
static int conf_ignored(void *obj, const struct settings_def *def, const char *s)
{
	return *s ? 0 : -EINVAL;
}

#define CONF_OFF(f) offsetof(struct opts_rdzv_conf, f)
#define CONF_SECS(n, a, f, fn, what)                                                               \
	{                                                                                          \
		.name = n, .alias = a, .type = SETTINGS_CUSTOM, .offset = CONF_OFF(f),             \
		.parse = fn, .expect = what                                                        \
	}

#define CONF_STR(n, a, f)                                                                          \
	{                                                                                          \
		.name = n, .alias = a, .type = SETTINGS_BUF, .offset = CONF_OFF(f),                \
		.size = OPTS_RDZV_CONF_STR_MAX                                                     \
	}

static const struct settings_def conf_defs[] = {
    CONF_SECS("join_timeout", "timeout", join_timeout, conf_seconds, "seconds, at least 0.001"),
    CONF_SECS("last_call_timeout", NULL, last_call_timeout, conf_seconds0, "seconds, 0 or more"),
    CONF_SECS("close_timeout", NULL, close_timeout, conf_seconds, "seconds, at least 0.001"),
    CONF_SECS("keep_alive_interval", NULL, keep_alive_interval, conf_seconds,
	      "seconds, at least 0.001"),
    {.name = "keep_alive_max_attempt",
     .type = SETTINGS_INT,
     .offset = CONF_OFF(keep_alive_max_attempt),
     .min = 1,
     .max = 1000},
    CONF_SECS("is_host", NULL, is_host, conf_bool, "true or false"),
    CONF_SECS("read_timeout", NULL, read_timeout, conf_seconds, "seconds, at least 0.001"),
    CONF_SECS("use_libuv", NULL, is_host, conf_ignored, "true or false"),
    CONF_SECS("protocol", NULL, protocol, conf_protocol, "http or https"),
    CONF_STR("cacert", "ca_cert", cacert),
    CONF_STR("cert", "ssl_cert", cert),
    CONF_STR("key", "ssl_cert_key", key),
    CONF_STR("user", NULL, user),
    CONF_STR("password", NULL, password),
};

static const struct settings_table conf_table = {conf_defs,
						 sizeof(conf_defs) / sizeof(conf_defs[0])};

/* One "k=v" item (len bytes at p, trimmed) into c. */
static int conf_item(const char *p, size_t len, struct opts_rdzv_conf *c, char *err, size_t errlen)
{
	char item[256], msg[256];
	char *eq, *val;
	int i;

	if (len >= sizeof(item)) {
		snprintf(err, errlen, "--rdzv_conf: the item '%.40s...' is too long", p);
		return -EINVAL;
	}
	memcpy(item, p, len);
	item[len] = '\0';
	eq = strchr(item, '=');
	if (!eq || eq == item) {
		snprintf(err, errlen, "--rdzv_conf: '%s' is not KEY=VALUE (e.g. join_timeout=60)",
			 item);
		return -EINVAL;
	}
	*eq = '\0';
	val = eq + 1;
	while (eq > item && eq[-1] == ' ')
		*--eq = '\0';
	while (*val == ' ')
		val++;
	i = settings_find(&conf_table, item);
	if (i < 0) {
		settings_unknown(&conf_table, "key", item, " in --rdzv_conf", err, errlen);
		return -EINVAL;
	}
	if (settings_apply(&conf_table, (size_t)i, c, val, msg, sizeof(msg))) {
		snprintf(err, errlen, "--rdzv_conf: %s", msg);
		return -EINVAL;
	}
	return 0;
}

int opts_rdzv_conf_parse(const char *text, struct opts_rdzv_conf *c, char *err, size_t errlen)
{
	const char *p = text ? text : "";

	while (*p) {
		size_t len;

		p += strspn(p, " ");
		len = strcspn(p, ",");
		while (len && p[len - 1] == ' ')
			len--;
		if (len && conf_item(p, len, c, err, errlen))
			return -EINVAL;
		p += strcspn(p, ",");
		if (*p == ',')
			p++;
	}
	return 0;
}

/* A port: 1 to 5 digits (no sign, no space), 0..65535. */
static int port_parse(const char *s, long long *v)
{
	size_t n = strspn(s, "0123456789");

	return n == 0 || n > 5 || s[n] ? -EINVAL : settings_parse_ll(s, 0, 65535, v);
}

/* The host of an endpoint must be one (opts_host.h): why not, into err. */
static int endpoint_host_check(const char *text, const char *host, char *err, size_t errlen)
{
	char why[128];

	if (!opts_host_parses(host, why, sizeof(why))) {
		snprintf(err, errlen,
			 "bad --rdzv_endpoint '%s': '%s' is not a host name or address (%s); "
			 "give HOST:PORT",
			 text, host, why);
		return -EINVAL;
	}
	if (opts_host_not_unicast(host)) {
		snprintf(
		    err, errlen,
		    "bad --rdzv_endpoint '%s': '%s' is a multicast or broadcast address, where "
		    "no store can be: give the store's own address",
		    text, host);
		return -EINVAL;
	}
	return 0;
}

int opts_endpoint_parse(const char *text, int default_port, char *host, size_t hostlen, int *port,
			char *err, size_t errlen)
{
	const char *h = text, *end, *colon;
	unsigned char v6[16];
	size_t n;
	long long v = default_port;

	if (!text || !*text)
		goto bad;
	if (*h == '[') {
		end = strchr(h, ']');
		if (!end || end == h + 1)
			goto bad;
		n = (size_t)(end - h - 1);
		h++;
		colon = end[1] == ':' ? end + 1 : NULL;
		if (end[1] && !colon)
			goto bad;
	} else {
		colon = strrchr(h, ':');
		if (colon && strchr(h, ':') != colon) {
			/* Several ':': a bare IPv6 address (the whole text), or a
			 * mistake such as host:1:2, never a host and a port. */
			if (!opts_host_ipv6(h, v6)) {
				snprintf(err, errlen,
					 "bad --rdzv_endpoint '%s': a host has no ':' (give "
					 "HOST:PORT; an IPv6 address goes in brackets: "
					 "[ADDRESS]:PORT)",
					 text);
				return -EINVAL;
			}
			colon = NULL;
		}
		n = colon ? (size_t)(colon - h) : strlen(h);
	}
	if (n == 0 || n >= hostlen || memchr(h, ' ', n))
		goto bad;
	if (colon && port_parse(colon + 1, &v))
		goto bad;
	memcpy(host, h, n);
	host[n] = '\0';
	*port = (int)v;
	return endpoint_host_check(text, host, err, errlen);
bad:
	snprintf(err, errlen, "bad --rdzv_endpoint '%s' (expected HOST, HOST:PORT or [IPV6]:PORT)",
		 text ? text : "");
	return -EINVAL;
}

const char *opts_rdzv_mode_name(enum opts_rdzv_mode mode)
{
	switch (mode) {
	case OPTS_RDZV_STATIC:
		return "static";
	case OPTS_RDZV_C10D:
		return "c10d";
	case OPTS_RDZV_ETCD:
		return "etcd";
	default:
		return "local";
	}
}

/* Printable ASCII without spaces or '/', 1..max bytes (the rendezvous'
 * keys are made of it). */
static bool word_ok(const char *s, size_t max)
{
	size_t n = 0;

	for (; s[n]; n++)
		if (s[n] <= ' ' || s[n] > '~' || s[n] == '/')
			return false;
	return n >= 1 && n <= max && strcmp(s, "-") != 0;
}

/* A store endpoint of c10d or the static rendezvous is one HOST[:PORT]: a
 * URL or a list (etcd's forms) would only fail to resolve, join_timeout
 * later. */
static int check_store_endpoint(const char *what, const char *text, char *err, size_t errlen)
{
	if (strstr(text, "://"))
		snprintf(err, errlen,
			 "%s '%s' is a URL: give HOST:PORT (http:// and https:// are for "
			 "--rdzv_backend=etcd)",
			 what, text);
	else if (strchr(text, ','))
		snprintf(err, errlen,
			 "%s '%s' is a list: give one HOST:PORT, the store's (a list of "
			 "endpoints is for --rdzv_backend=etcd)",
			 what, text);
	else if (strchr(text, '/') || strchr(text, ' '))
		snprintf(err, errlen, "%s '%s' is not HOST, HOST:PORT or [IPV6]:PORT", what, text);
	else
		return 0;
	return -EINVAL;
}

/* An address other nodes cannot reach this node at: the unspecified
 * address, a multicast or broadcast one. Names are checked by rdzv_new. */
static bool addr_unreachable(const char *a)
{
	unsigned char b[16];

	if (inet_pton(AF_INET, a, b) == 1)
		return (b[0] | b[1] | b[2] | b[3]) == 0 || b[0] >= 224;
	if (opts_host_ipv6(a, b)) {
		static const unsigned char zero[16];

		return !memcmp(b, zero, 16) || b[0] == 0xff;
	}
	return false;
}

static int check_local_addr(const struct opts_rdzv *r, char *err, size_t errlen)
{
	if (!r->local_addr)
		return 0;
	char why[128];

	if (!word_ok(r->local_addr, OPTS_RDZV_HOST_MAX) ||
	    !opts_host_parses(r->local_addr, why, sizeof(why))) {
		if (!word_ok(r->local_addr, OPTS_RDZV_HOST_MAX))
			snprintf(why, sizeof(why), "spaces or control characters");
		snprintf(err, errlen,
			 "--local_addr '%s' is not an address or host name (%s): give this "
			 "node's address (no brackets, no port), or leave --local_addr out",
			 r->local_addr, why);
		return -EINVAL;
	}
	if (addr_unreachable(r->local_addr)) {
		snprintf(err, errlen,
			 "--local_addr '%s' is not an address other nodes can reach this one at "
			 "(it is the unspecified, a multicast or the broadcast address): give "
			 "this node's own address, or leave --local_addr out",
			 r->local_addr);
		return -EINVAL;
	}
	return 0;
}

/* What the rendezvous itself would refuse after connecting: too many nodes,
 * a keep-alive window that its millisecond counters cannot hold. */
static int check_limits(const struct opts_rdzv *r, char *err, size_t errlen)
{
	double window = r->conf.keep_alive_interval * (double)r->conf.keep_alive_max_attempt;

	if (r->max_nodes > OPTS_RDZV_NODES_MAX) {
		snprintf(err, errlen, "--nnodes=%d:%d is more than the %d nodes a job can have",
			 r->min_nodes, r->max_nodes, OPTS_RDZV_NODES_MAX);
		return -EINVAL;
	}
	if (window > OPTS_RDZV_SECONDS_MAX) {
		snprintf(err, errlen,
			 "--rdzv_conf: keep_alive_interval x keep_alive_max_attempt is %g s, over "
			 "the %g s (30 days) a node may stay silent; lower one of them",
			 window, OPTS_RDZV_SECONDS_MAX);
		return -EINVAL;
	}
	return 0;
}

static int check_backend(const struct launch_opts *o, char *err, size_t errlen)
{
	const char *b = o->rdzv_backend;

	/* torchrun's two etcd backends (both etcd's v2 API) are one here,
	 * on etcd's v3 API. */
	if (!strcmp(b, "static") || !strcmp(b, "c10d") || !strcmp(b, "etcd") ||
	    !strcmp(b, "etcd-v2"))
		return 0;
	snprintf(err, errlen, "unknown --rdzv_backend '%s' (use c10d, etcd or static)", b);
	return -EINVAL;
}

/* --master_addr is one host (opts_host.h), not an endpoint: no port. */
static int check_master_addr(const char *a, char *err, size_t errlen)
{
	char why[128];

	if (!opts_host_parses(a, why, sizeof(why)))
		snprintf(err, errlen,
			 "--master_addr '%s' is not a host name or address (%s): give node 0's "
			 "address, and its port in --master_port",
			 a, why);
	else if (opts_host_not_unicast(a))
		snprintf(err, errlen,
			 "--master_addr '%s' is a multicast or broadcast address: give node 0's "
			 "own address",
			 a);
	else
		return 0;
	return -EINVAL;
}

static int resolve_static(const struct launch_opts *o, struct opts_rdzv *r, char *err,
			  size_t errlen)
{
	r->mode = OPTS_RDZV_STATIC;
	if (o->nnodes_min != o->nnodes_max) {
		snprintf(err, errlen,
			 "--nnodes=%d:%d needs --rdzv_backend=c10d and --rdzv_endpoint (the "
			 "static rendezvous has a fixed node count: use --nnodes=N)",
			 o->nnodes_min, o->nnodes_max);
		return -EINVAL;
	}
	if (r->node_rank < 0)
		r->node_rank = 0; /* torchrun's default */
	if (o->rdzv_endpoint) {
		if (check_store_endpoint("--rdzv_endpoint", o->rdzv_endpoint, err, errlen) ||
		    opts_endpoint_parse(o->rdzv_endpoint, OPTS_STATIC_PORT, r->host,
					sizeof(r->host), &r->port, err, errlen))
			return -EINVAL;
	} else {
		if (strlen(o->master_addr) >= sizeof(r->host) || !*o->master_addr) {
			snprintf(err, errlen, "--master_addr '%.40s' is too long", o->master_addr);
			return -EINVAL;
		}
		if (check_store_endpoint("--master_addr", o->master_addr, err, errlen) ||
		    check_master_addr(o->master_addr, err, errlen))
			return -EINVAL;
		strcpy(r->host, o->master_addr);
		r->port = o->master_port >= 0 ? o->master_port : OPTS_STATIC_PORT;
	}
	if (r->port == 0 && r->node_rank != 0) {
		snprintf(err, errlen,
			 "port 0 lets node 0 pick the store's port; node %d must be given the port "
			 "node 0 reported (--master_port or --rdzv_endpoint)",
			 r->node_rank);
		return -EINVAL;
	}
	return 0;
}

static int resolve_c10d(const struct launch_opts *o, struct opts_rdzv *r, char *err, size_t errlen)
{
	r->mode = OPTS_RDZV_C10D;
	if (!o->rdzv_endpoint) {
		snprintf(err, errlen,
			 "--rdzv_backend=c10d needs --rdzv_endpoint=HOST:PORT (where the "
			 "rendezvous store runs: one of the nodes, or a ddp-rdzvd)");
		return -EINVAL;
	}
	if (check_store_endpoint("--rdzv_endpoint", o->rdzv_endpoint, err, errlen))
		return -EINVAL;
	return opts_endpoint_parse(o->rdzv_endpoint, OPTS_C10D_PORT, r->host, sizeof(r->host),
				   &r->port, err, errlen);
}

static bool is_etcd(const char *backend)
{
	return !strcmp(backend, "etcd") || !strcmp(backend, "etcd-v2");
}

/* The etcd keys of --rdzv_conf only make sense with etcd. */
static int check_etcd_keys(const struct opts_rdzv *r, char *err, size_t errlen)
{
	const struct opts_rdzv_conf *c = &r->conf;
	const char *k = c->protocol[0]	 ? "protocol"
			: c->cacert[0]	 ? "cacert"
			: c->cert[0]	 ? "cert"
			: c->key[0]	 ? "key"
			: c->user[0]	 ? "user"
			: c->password[0] ? "password"
					 : NULL;

	if (!k)
		return 0;
	snprintf(err, errlen,
		 "--rdzv_conf: '%s' is for --rdzv_backend=etcd (the %s rendezvous does not use "
		 "it)",
		 k, opts_rdzv_mode_name(r->mode));
	return -EINVAL;
}

static int etcd_conf_check(const struct opts_rdzv_conf *c, char *err, size_t errlen)
{
	if (!strcmp(c->protocol, "http") && (c->cacert[0] || c->cert[0])) {
		snprintf(err, errlen,
			 "--rdzv_conf: protocol=http with %s (TLS): use protocol=https, or leave "
			 "it out",
			 c->cacert[0] ? "cacert" : "cert");
		return -EINVAL;
	}
	if (!c->cert[0] != !c->key[0]) {
		snprintf(err, errlen,
			 "--rdzv_conf: %s (the client certificate and its private key go "
			 "together)",
			 c->cert[0] ? "cert needs key" : "key needs cert");
		return -EINVAL;
	}
	if (c->password[0] && !c->user[0]) {
		snprintf(err, errlen, "--rdzv_conf: password needs user (etcd's user name)");
		return -EINVAL;
	}
	return 0;
}

/* One entry of an etcd endpoint list (len bytes at p, trimmed) appended to
 * r->endpoints with its port; the first one also sets r->host/port. */
static int etcd_entry(const char *p, size_t len, const char *protocol, struct opts_rdzv *r,
		      size_t *off, char *err, size_t errlen)
{
	const char *scheme = !strcmp(protocol, "https") ? "https://" : "";
	char item[OPTS_RDZV_HOST_MAX + 16], host[OPTS_RDZV_HOST_MAX + 1];
	const char *rest = item;
	int port, n;

	if (len == 0 || len >= sizeof(item)) {
		snprintf(err, errlen,
			 "bad --rdzv_endpoint entry '%.*s' (expected HOST[:PORT], "
			 "e.g. etcd1:2379,etcd2:2379)",
			 (int)(len > 60 ? 60 : len), p);
		return -EINVAL;
	}
	memcpy(item, p, len);
	item[len] = '\0';
	if (!strncmp(item, "http://", 7) || !strncmp(item, "https://", 8)) {
		scheme = item[4] == 's' ? "https://" : "http://";
		rest = item + strlen(scheme);
		/* the whole scheme: https:// is not protocol=http */
		if (protocol[0] && (strncmp(scheme, protocol, strlen(protocol)) ||
				    strcmp(scheme + strlen(protocol), "://"))) {
			snprintf(err, errlen,
				 "--rdzv_endpoint entry '%s' says %.*s but --rdzv_conf says "
				 "protocol=%s: drop one of them",
				 item, (int)strlen(scheme) - 3, scheme, protocol);
			return -EINVAL;
		}
	} else if (strstr(item, "://")) {
		snprintf(err, errlen,
			 "bad --rdzv_endpoint entry '%s': etcd speaks http:// or https:// "
			 "(give HOST:PORT, http://HOST:PORT or https://HOST:PORT)",
			 item);
		return -EINVAL;
	}
	if (opts_endpoint_parse(rest, OPTS_ETCD_PORT, host, sizeof(host), &port, err, errlen))
		return -EINVAL;
	if (*off == 0) {
		strcpy(r->host, host);
		r->port = port;
	}
	n = snprintf(r->endpoints + *off, sizeof(r->endpoints) - *off, "%s%s%s%s%s:%d",
		     *off ? "," : "", scheme, strchr(host, ':') ? "[" : "", host,
		     strchr(host, ':') ? "]" : "", port);
	if (n < 0 || (size_t)n >= sizeof(r->endpoints) - *off) {
		snprintf(err, errlen,
			 "--rdzv_endpoint: the etcd endpoint list is longer than %d "
			 "bytes",
			 OPTS_RDZV_ENDPOINTS_MAX);
		return -EINVAL;
	}
	*off += (size_t)n;
	return 0;
}

static int resolve_etcd(const struct launch_opts *o, struct opts_rdzv *r, char *err, size_t errlen)
{
	const char *protocol = r->conf.protocol;
	const char *p = o->rdzv_endpoint;
	size_t off = 0;

	r->mode = OPTS_RDZV_ETCD;
	if (!p) {
		snprintf(err, errlen,
			 "--rdzv_backend=etcd needs --rdzv_endpoint=HOST:PORT[,HOST:PORT...] "
			 "(the etcd cluster's client endpoints, e.g. "
			 "--rdzv_endpoint=etcd1:2379,etcd2:2379,etcd3:2379)");
		return -EINVAL;
	}
	if (etcd_conf_check(&r->conf, err, errlen))
		return -EINVAL;
	while (*p) {
		size_t len = strcspn(p, ","), n = len;
		const char *s = p;

		while (n && *s == ' ')
			s++, n--;
		while (n && s[n - 1] == ' ')
			n--;
		if (etcd_entry(s, n, protocol, r, &off, err, errlen))
			return -EINVAL;
		p += len + (p[len] == ',');
	}
	if (!off)
		return etcd_entry(p, 0, protocol, r, &off, err, errlen);
	return 0;
}

int opts_rdzv_token_check(const char *token, const char *from, char *err, size_t errlen)
{
	if (strlen(token) < OPTS_RDZV_TOKEN_MIN) {
		snprintf(err, errlen,
			 "the token from %s is %zu bytes; it must be at least %d, because whoever "
			 "records one handshake can test guesses of a short token offline (use a "
			 "random one: head -c 32 /dev/urandom | base64)",
			 from, strlen(token), OPTS_RDZV_TOKEN_MIN);
		return -EINVAL;
	}
	if (strlen(token) > OPTS_RDZV_TOKEN_MAX) {
		snprintf(err, errlen, "the token from %s is longer than %d bytes", from,
			 OPTS_RDZV_TOKEN_MAX);
		return -EINVAL;
	}
	return 0;
}

static int resolve_token(const struct launch_opts *o, const char *env_token, struct opts_rdzv *r,
			 char *err, size_t errlen)
{
	r->token = o->rdzv_token;
	r->token_from = "--rdzv_token";
	/* etcd ignores DDP_RDZV_TOKEN (check_token_use) */
	if (!r->token && env_token && *env_token && !is_etcd(o->rdzv_backend)) {
		r->token = env_token;
		r->token_from = OPTS_RDZV_TOKEN_ENV;
	}
	if (!r->token) {
		r->token_from = NULL;
		return 0;
	}
	return opts_rdzv_token_check(r->token, r->token_from, err, errlen);
}

/* Across nodes: a DDP_RDZV_TOKEN set to "" ran without a token and said
 * nothing; etcd has no use for the job's token (its own users guard it):
 * one given for this job is refused, one from the environment (sites
 * export it everywhere) ignored with a warning. */
static int check_token_use(const struct launch_opts *o, const char *env_token, struct opts_rdzv *r,
			   char *err, size_t errlen)
{
	if (is_etcd(o->rdzv_backend) && !o->rdzv_token && env_token) {
		r->token_env_ignored = true;
		return 0;
	}
	if (!o->rdzv_token && env_token && !*env_token) {
		snprintf(err, errlen,
			 "%s is set but empty, which would run the job without a token: unset it "
			 "to run without one, or set it on every node to a random one (head -c 32 "
			 "/dev/urandom | base64)",
			 OPTS_RDZV_TOKEN_ENV);
		return -EINVAL;
	}
	if (r->token && is_etcd(o->rdzv_backend)) {
		snprintf(err, errlen,
			 "the token from %s is for the c10d and static stores; etcd does not use "
			 "it (give etcd's user= in --rdzv_conf and its password in %s), so unset "
			 "it or leave it out",
			 r->token_from, OPTS_ETCD_PASSWORD_ENV);
		return -EINVAL;
	}
	return 0;
}

/* is_host picks who hosts a c10d store; etcd is the store, and node 0
 * hosts the static one. */
static int check_is_host(const struct launch_opts *o, const struct opts_rdzv *r, char *err,
			 size_t errlen)
{
	if (r->conf.is_host < 0 || !strcmp(o->rdzv_backend, "c10d"))
		return 0;
	snprintf(err, errlen,
		 "--rdzv_conf: 'is_host' is for --rdzv_backend=c10d (%s): leave it out",
		 is_etcd(o->rdzv_backend) ? "etcd is the store; no agent hosts one"
					  : "the static rendezvous' store is node 0's");
	return -EINVAL;
}

int opts_rdzv_resolve(const struct launch_opts *o, const char *env_token, struct opts_rdzv *r,
		      char *err, size_t errlen)
{
	int rc;

	memset(r, 0, sizeof(*r));
	r->min_nodes = o->nnodes_min;
	r->max_nodes = o->nnodes_max;
	r->node_rank = o->node_rank;
	r->run_id = o->rdzv_id;
	r->local_addr = o->local_addr;
	r->lost_nodes_final = o->slurm_used[0] != '\0';
	r->host_is_node0 = o->slurm_endpoint;
	opts_rdzv_conf_defaults(&r->conf);
	if ((rc = check_backend(o, err, errlen)) < 0)
		return rc;
	if ((rc = opts_rdzv_conf_parse(o->rdzv_conf, &r->conf, err, errlen)) < 0)
		return rc;
	if ((rc = resolve_token(o, env_token, r, err, errlen)) < 0)
		return rc;
	if (r->node_rank >= r->max_nodes) {
		snprintf(err, errlen,
			 "--node_rank=%d is out of range for --nnodes=%d (use 0 to %d)",
			 r->node_rank, r->max_nodes, r->max_nodes - 1);
		return -EINVAL;
	}
	/* One node needs no rendezvous, unless c10d is asked for with an
	 * endpoint (a one-node job that meets through a shared store). */
	if (o->standalone || (o->nnodes_max == 1 &&
			      ((strcmp(o->rdzv_backend, "c10d") && !is_etcd(o->rdzv_backend)) ||
			       !o->rdzv_endpoint))) {
		r->mode = OPTS_RDZV_LOCAL;
		return check_etcd_keys(r, err, errlen);
	}
	if ((rc = check_token_use(o, env_token, r, err, errlen)) < 0 ||
	    (rc = check_is_host(o, r, err, errlen)) < 0)
		return rc;
	if (!word_ok(r->run_id, 128)) {
		snprintf(err, errlen,
			 "--rdzv_id '%s' must be 1 to 128 printable characters without spaces or "
			 "'/'",
			 r->run_id);
		return -EINVAL;
	}
	if ((rc = check_local_addr(r, err, errlen)) < 0 || (rc = check_limits(r, err, errlen)) < 0)
		return rc;
	if (is_etcd(o->rdzv_backend))
		rc = resolve_etcd(o, r, err, errlen);
	else if (!strcmp(o->rdzv_backend, "c10d"))
		rc = resolve_c10d(o, r, err, errlen);
	else
		rc = resolve_static(o, r, err, errlen);
	if (rc == 0 && r->mode != OPTS_RDZV_ETCD)
		rc = check_etcd_keys(r, err, errlen);
	if (rc == 0)
		identity_make(o, opts_rdzv_mode_name(r->mode), r->job, r->cmd, r->job_text);
	return rc;
}

int opts_rdzv_resolve_reader(const char *backend, const char *endpoint, const char *conf,
			     struct opts_rdzv *r, char *err, size_t errlen)
{
	struct launch_opts o = {.rdzv_backend = (char *)(backend ? backend : "c10d"),
				.rdzv_endpoint = (char *)endpoint};
	int rc;

	memset(r, 0, sizeof(*r));
	r->node_rank = -1;
	opts_rdzv_conf_defaults(&r->conf);
	if ((rc = check_backend(&o, err, errlen)) < 0 ||
	    (rc = opts_rdzv_conf_parse(conf ? conf : "", &r->conf, err, errlen)) < 0)
		return rc;
	if (is_etcd(o.rdzv_backend))
		return resolve_etcd(&o, r, err, errlen);
	r->mode = !strcmp(o.rdzv_backend, "static") ? OPTS_RDZV_STATIC : OPTS_RDZV_C10D;
	if (!endpoint) {
		snprintf(err, errlen, "give the job's store as --rdzv_endpoint=HOST[:PORT]");
		return -EINVAL;
	}
	if (check_store_endpoint("--rdzv_endpoint", endpoint, err, errlen) ||
	    opts_endpoint_parse(endpoint,
				r->mode == OPTS_RDZV_STATIC ? OPTS_STATIC_PORT : OPTS_C10D_PORT,
				r->host, sizeof(r->host), &r->port, err, errlen))
		return -EINVAL;
	return check_etcd_keys(r, err, errlen);
}

/* --dry_run's etcd lines; the password is never shown. */
static void etcd_print(const struct opts_rdzv *r, FILE *out)
{
	const struct opts_rdzv_conf *c = &r->conf;
	bool tls = !strcmp(c->protocol, "https") || c->cacert[0] || c->cert[0] ||
		   strstr(r->endpoints, "https://");

	fprintf(out, "rdzv_store = etcd at %s (no agent hosts a store)\n", r->endpoints);
	fprintf(out, "rdzv_etcd_timeout = %g s per request\n",
		c->read_timeout > 0 ? c->read_timeout : 5.0);
	if (tls)
		fprintf(out, "rdzv_etcd_tls = https (ca: %s; client certificate: %s)\n",
			c->cacert[0] ? c->cacert : "the system's", c->cert[0] ? c->cert : "none");
	else
		fprintf(out, "rdzv_etcd_tls = none\n");
	if (c->user[0])
		fprintf(out, "rdzv_etcd_user = %s (password from %s; not shown)\n", c->user,
			c->password[0] ? "--rdzv_conf" : OPTS_ETCD_PASSWORD_ENV);
	else
		fprintf(out, "rdzv_etcd_user = none\n");
}

/* Who hosts the store of a static or c10d job (the rule: rendezvous/driver/driver.h). */
static const char *store_host_text(const struct opts_rdzv *r)
{
	if (r->mode == OPTS_RDZV_STATIC)
		return "hosted by node 0";
	if (r->conf.is_host >= 0)
		return r->conf.is_host ? "hosted by this node"
				       : "hosted by another node or ddp-rdzvd";
	if (r->host_is_node0)
		return "hosted by node 0, the endpoint's node in slurm's step";
	return "hosted by the first agent on the endpoint's machine, or ddp-rdzvd";
}

void opts_rdzv_print(const struct opts_rdzv *r, FILE *out)
{
	const struct opts_rdzv_conf *c = &r->conf;

	fprintf(out, "rdzv = %s\n", opts_rdzv_mode_name(r->mode));
	if (r->mode == OPTS_RDZV_LOCAL)
		return;
	if (r->mode == OPTS_RDZV_ETCD)
		etcd_print(r, out);
	else
		fprintf(out, "rdzv_store = %s%s%s:%d (%s)\n", strchr(r->host, ':') ? "[" : "",
			r->host, strchr(r->host, ':') ? "]" : "", r->port, store_host_text(r));
	fprintf(out, "rdzv_nodes = %d:%d\n", r->min_nodes, r->max_nodes);
	fprintf(out,
		"rdzv_job = %s, the same on every node of the job (the program's name, "
		"--nnodes, the rendezvous): %s\n",
		r->job, r->job_text);
	fprintf(out,
		"rdzv_command = %s (nodes of one --rdzv_id may differ here, each its own "
		"paths: said in one line)\n",
		r->cmd);
	if (!strncmp(r->run_id, IDENTITY_RUN_ID_PREFIX, strlen(IDENTITY_RUN_ID_PREFIX)) &&
	    !strcmp(r->run_id + strlen(IDENTITY_RUN_ID_PREFIX), r->cmd))
		fprintf(out,
			"rdzv_run_id = %s (the default, from the command line's fingerprint: "
			"the same command line on every node; --rdzv_id to choose one)\n",
			r->run_id);
	else
		fprintf(out, "rdzv_run_id = %s\n", r->run_id);
	if (r->node_rank >= 0)
		fprintf(out, "rdzv_node_rank = %d\n", r->node_rank);
	else
		fprintf(out, "rdzv_node_rank = any\n");
	fprintf(out, "rdzv_local_addr = %s\n",
		r->local_addr ? r->local_addr : "the interface that reaches the store");
	fprintf(out,
		"rdzv_conf = join_timeout=%g,last_call_timeout=%g,close_timeout=%g,"
		"keep_alive_interval=%g,keep_alive_max_attempt=%d\n",
		c->join_timeout, c->last_call_timeout, c->close_timeout, c->keep_alive_interval,
		c->keep_alive_max_attempt);
	if (r->token)
		fprintf(out, "rdzv_token = set (from %s; not shown)\n", r->token_from);
	else if (r->token_env_ignored)
		fprintf(out, "rdzv_token = none (%s ignored: etcd does not use it)\n",
			OPTS_RDZV_TOKEN_ENV);
	else
		fprintf(out, "rdzv_token = none\n");
	if (r->lost_nodes_final)
		fprintf(out,
			"rdzv_lost_node = ends the job when fewer than %d nodes are left (a "
			"slurm step does not restart it)\n",
			r->min_nodes);
}

/* Whether any source (flags, job file, PET_*, Slurm) set option `name`. */
static bool opts_given(const struct launch_opts *o, const char *name)
{
	int i = settings_find(&opts_settings, name);

	return i >= 0 && opts_source_of(o, (size_t)i) != OPTS_SRC_DEFAULT;
}

int opts_rdzv_default_run_id(struct launch_opts *o)
{
	char id[sizeof(IDENTITY_RUN_ID_PREFIX) + IDENTITY_JOB_LEN], err[OPTS_ERR_LEN];
	struct opts_rdzv r;

	if (opts_given(o, "rdzv_id") || !o->rdzv_id || strcmp(o->rdzv_id, "none") != 0)
		return 0;
	if (opts_rdzv_resolve(o, NULL, &r, err, sizeof(err)) < 0 || r.mode == OPTS_RDZV_LOCAL)
		return 0;
	snprintf(id, sizeof(id), "%s%s", IDENTITY_RUN_ID_PREFIX, r.cmd);
	return opts_set(o, "rdzv_id", id, OPTS_SRC_DEFAULT, err, sizeof(err)) < 0 ? -ENOMEM : 0;
}
