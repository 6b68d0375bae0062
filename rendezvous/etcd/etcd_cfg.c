/*
 * etcd_cfg.c - the client's options (endpoint list, TLS files, credentials),
 * the per-thread error message, and libcurl's one-time set-up.
 */
#include "etcd_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_curl.h"

static _Thread_local char etcd_errmsg[2048];

int etcd_fail(int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(etcd_errmsg, sizeof(etcd_errmsg), fmt, ap);
	va_end(ap);
	return rc;
}

void etcd_error_clear(void)
{
	etcd_errmsg[0] = '\0';
}

const char *etcd_error(void)
{
	return etcd_errmsg;
}

int etcd_global_init(void)
{
	char err[384];
	int rc = etcd_curl_load(err, sizeof(err));

	return rc < 0 ? etcd_fail(rc, "%s", err) : 0;
}

static int dup_opt(const char *s, char **out)
{
	*out = NULL;
	if (!s || !*s)
		return 0;
	*out = strdup(s);
	return *out ? 0 : -ENOMEM;
}

/* One entry of the list, trimmed: "host:port", "http://host:port" or
 * "https://host:port". */
static int add_endpoint(struct etcd_cfg *cfg, const char *s, size_t len, bool tls)
{
	const char *rest = s;
	char *name, *url;
	if (len >= 7 && !strncmp(s, "http://", 7))
		rest = s + 7;
	else if (len >= 8 && !strncmp(s, "https://", 8))
		rest = s + 8;
	if (rest == s + len || memchr(rest, '/', len - (size_t)(rest - s)) ||
	    !memchr(rest, ':', len - (size_t)(rest - s)))
		return etcd_fail(-EINVAL, "etcd: bad endpoint '%.*s': give host:port", (int)len, s);
	name = strndup(s, len);
	if (!name)
		return -ENOMEM;
	if (rest == s && asprintf(&url, "%s://%s", tls ? "https" : "http", name) < 0)
		url = NULL;
	else if (rest != s)
		url = strdup(name);
	if (!url) {
		free(name);
		return -ENOMEM;
	}
	cfg->names[cfg->n] = name;
	cfg->urls[cfg->n++] = url;
	return 0;
}

static int parse_endpoints(struct etcd_cfg *cfg, const char *list, bool tls)
{
	size_t max = 1;
	for (const char *p = list; *p; p++)
		max += *p == ',';
	cfg->names = calloc(max, sizeof(char *));
	cfg->urls = calloc(max, sizeof(char *));
	if (!cfg->names || !cfg->urls)
		return -ENOMEM;
	for (const char *p = list; *p;) {
		size_t len = strcspn(p, ",");
		const char *s = p;
		size_t n = len;
		while (n && (*s == ' ' || *s == '\t'))
			s++, n--;
		while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
			n--;
		if (n) {
			int rc = add_endpoint(cfg, s, n, tls);
			if (rc < 0)
				return rc;
		}
		p += len + (p[len] == ',');
	}
	if (!cfg->n)
		return etcd_fail(-EINVAL, "etcd: no endpoint given: list host:port[,host:port...]");
	return 0;
}

static int check_creds(const struct etcd_options *opt)
{
	bool user = opt->user && *opt->user, pw = opt->password && *opt->password;
	bool cert = opt->cert_file && *opt->cert_file, key = opt->key_file && *opt->key_file;
	if (user != pw)
		return etcd_fail(-EINVAL, "etcd: a user needs a password and a password a user");
	if (cert != key)
		return etcd_fail(-EINVAL,
				 "etcd: a client certificate needs its key file and a key its "
				 "certificate");
	return 0;
}

int etcd_cfg_parse(const struct etcd_options *opt, struct etcd_cfg *cfg)
{
	bool tls = (opt->ca_file && *opt->ca_file) || (opt->cert_file && *opt->cert_file);
	int rc;
	memset(cfg, 0, sizeof(*cfg));
	if (!opt->endpoints)
		return etcd_fail(-EINVAL, "etcd: no endpoint given: list host:port[,host:port...]");
	rc = check_creds(opt);
	if (!rc)
		rc = parse_endpoints(cfg, opt->endpoints, tls);
	if (!rc)
		rc = dup_opt(opt->ca_file, &cfg->ca_file) |
		     dup_opt(opt->cert_file, &cfg->cert_file) |
		     dup_opt(opt->key_file, &cfg->key_file) | dup_opt(opt->user, &cfg->user) |
		     dup_opt(opt->password, &cfg->password);
	cfg->timeout_ms = opt->timeout_ms > 0 ? (uint64_t)opt->timeout_ms : ETCD_DEFAULT_TIMEOUT_MS;
	if (rc < 0) {
		etcd_cfg_release(cfg);
		return rc == -ENOMEM ? etcd_fail(rc, "etcd: out of memory") : rc;
	}
	return 0;
}

void etcd_cfg_release(struct etcd_cfg *cfg)
{
	for (size_t i = 0; i < cfg->n; i++) {
		free(cfg->names[i]);
		free(cfg->urls[i]);
	}
	free(cfg->names);
	free(cfg->urls);
	free(cfg->ca_file);
	free(cfg->cert_file);
	free(cfg->key_file);
	free(cfg->user);
	if (cfg->password)
		explicit_bzero(cfg->password, strlen(cfg->password));
	free(cfg->password);
	memset(cfg, 0, sizeof(*cfg));
}
