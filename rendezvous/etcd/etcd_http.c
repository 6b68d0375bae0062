/*
 * etcd_http.c - unary requests to etcd's JSON gateway over libcurl, with the
 * per-operation deadline, the endpoint failover and the auth token.
 */
#include "etcd_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "etcd_codec.h"
#include "etcd_curl.h"
#include "timeutil.h"

size_t etcd_rx_write(char *p, size_t size, size_t n, void *userdata)
{
	struct etcd_rxbuf *b = userdata;
	size_t len = size * n;
	if (b->len + len + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		char *d;
		if (b->len + len + 1 > ETCD_MAX_BODY)
			return 0; /* curl fails the transfer with CURLE_WRITE_ERROR */
		while (cap < b->len + len + 1)
			cap *= 2;
		d = realloc(b->data, cap);
		if (!d)
			return 0;
		b->data = d;
		b->cap = cap;
	}
	memcpy(b->data + b->len, p, len);
	b->len += len;
	b->data[b->len] = '\0';
	return len;
}

char *etcd_url(const char *base, const char *path)
{
	char *u;
	return asprintf(&u, "%s%s", base, path) < 0 ? NULL : u;
}

void etcd_easy_common(CURL *easy, const struct etcd_cfg *cfg, char *errbuf)
{
	etcd_curl.easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
	/* Members are reached directly: an http_proxy in the environment must
	 * not route them. */
	etcd_curl.easy_setopt(easy, CURLOPT_PROXY, "");
	etcd_curl.easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
	etcd_curl.easy_setopt(easy, CURLOPT_TCP_KEEPIDLE, 2L);
	etcd_curl.easy_setopt(easy, CURLOPT_TCP_KEEPINTVL, 1L);
	etcd_curl.easy_setopt(easy, CURLOPT_ERRORBUFFER, errbuf);
	if (cfg->ca_file)
		etcd_curl.easy_setopt(easy, CURLOPT_CAINFO, cfg->ca_file);
	if (cfg->cert_file) {
		etcd_curl.easy_setopt(easy, CURLOPT_SSLCERT, cfg->cert_file);
		etcd_curl.easy_setopt(easy, CURLOPT_SSLKEY, cfg->key_file);
	}
}

struct curl_slist *etcd_headers(const char *token)
{
	/* hasleader (gRPC metadata through the gateway, etcd's require-leader):
	 * a member that has lost its leader answers "no leader" at once, and
	 * cancels its watches, instead of holding a request until etcd's own
	 * timeout of seven seconds. */
	static const char *const fixed[] = {"Content-Type: application/json",
					    "Expect:", "Grpc-Metadata-hasleader: true"};
	struct curl_slist *h = NULL, *t = NULL;
	char *auth = NULL;
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
		t = etcd_curl.slist_append(h, fixed[i]);
		if (!t)
			goto fail;
		h = t;
	}
	if (token && *token) {
		if (asprintf(&auth, "Authorization: %s", token) < 0)
			goto fail;
		if (!etcd_curl.slist_append(h, auth))
			goto fail;
	}
	free(auth);
	return h;
fail:
	free(auth);
	etcd_curl.slist_free_all(h);
	return NULL;
}

static void lower_first(char *s)
{
	if (s[0] && isupper((unsigned char)s[0]) && !isupper((unsigned char)s[1]))
		s[0] = (char)tolower((unsigned char)s[0]);
}

int etcd_curl_errno(CURL *easy, CURLcode code, const char *errbuf, uint64_t attempt_ms, char *msg,
		    size_t msglen)
{
	long os_err = 0;
	etcd_curl.easy_getinfo(easy, CURLINFO_OS_ERRNO, &os_err);
	switch (code) {
	case CURLE_OPERATION_TIMEDOUT:
		snprintf(msg, msglen, "no answer within %llu ms", (unsigned long long)attempt_ms);
		return -ETIMEDOUT;
	case CURLE_COULDNT_RESOLVE_HOST:
		snprintf(msg, msglen, "cannot resolve the host name");
		return -EHOSTUNREACH;
	case CURLE_COULDNT_CONNECT:
		snprintf(msg, msglen, "%s", os_err ? strerror((int)os_err) : "cannot connect");
		lower_first(msg);
		return os_err ? -(int)os_err : -ECONNREFUSED;
	case CURLE_GOT_NOTHING:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_PARTIAL_FILE:
		snprintf(msg, msglen, "connection lost (%s)", etcd_curl.easy_strerror(code));
		return -ECONNRESET;
	case CURLE_WRITE_ERROR:
		snprintf(msg, msglen, "answer over %u bytes, or out of memory", ETCD_MAX_BODY);
		return -EMSGSIZE;
	default:
		snprintf(msg, msglen, "%s",
			 errbuf && *errbuf ? errbuf : etcd_curl.easy_strerror(code));
		lower_first(msg);
		return code == CURLE_OUT_OF_MEMORY ? -ENOMEM : -EPROTO;
	}
}

int etcd_conn_init(struct etcd_conn *c, const struct etcd_cfg *cfg)
{
	memset(c, 0, sizeof(*c));
	c->cfg = cfg;
	c->ep_err = calloc(cfg->n, sizeof(*c->ep_err));
	c->easy = etcd_curl.easy_init();
	if (!c->ep_err || !c->easy) {
		etcd_conn_release(c);
		return etcd_fail(-ENOMEM, "etcd: out of memory");
	}
	return 0;
}

void etcd_conn_release(struct etcd_conn *c)
{
	if (c->easy)
		etcd_curl.easy_cleanup(c->easy);
	free(c->ep_err);
	free(c->token);
	free(c->rx.data);
	memset(c, 0, sizeof(*c));
}

/* Connection-level failures, TLS handshakes and "unavailable" answers are
 * worth another endpoint; a certificate that does not verify is not. */
static bool curl_retryable(CURLcode code)
{
	switch (code) {
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_CIPHER:
	case CURLE_OUT_OF_MEMORY:
	case CURLE_WRITE_ERROR:
		return false;
	default:
		return true;
	}
}

/* One POST to one endpoint within attempt_ms; the answer lands in c->rx.
 * Returns 0 for HTTP 200; otherwise the errno, with c->ep_err[ep] set,
 * *retry telling whether another endpoint may do better, and *grpc_code the
 * gRPC status of an error answer (0 if none). */
static int post_once(struct etcd_conn *c, size_t ep, const char *path, const char *body,
		     const char *token, uint64_t attempt_ms, bool *retry, int *grpc_code)
{
	struct curl_slist *hdrs = etcd_headers(token);
	char *url = etcd_url(c->cfg->urls[ep], path);
	long status = 0;
	CURLcode code;
	int rc = 0;
	*retry = false;
	*grpc_code = 0;
	c->rx.len = 0;
	if (!attempt_ms)
		attempt_ms = 1; /* 0 would mean no timeout to curl */
	c->curl_err[0] = '\0';
	if (!hdrs || !url) {
		snprintf(c->ep_err[ep], sizeof(c->ep_err[ep]), "out of memory");
		rc = -ENOMEM;
		goto out;
	}
	etcd_curl.easy_reset(c->easy);
	etcd_easy_common(c->easy, c->cfg, c->curl_err);
	etcd_curl.easy_setopt(c->easy, CURLOPT_URL, url);
	etcd_curl.easy_setopt(c->easy, CURLOPT_HTTPHEADER, hdrs);
	etcd_curl.easy_setopt(c->easy, CURLOPT_POSTFIELDS, body);
	etcd_curl.easy_setopt(c->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
	etcd_curl.easy_setopt(c->easy, CURLOPT_WRITEFUNCTION, etcd_rx_write);
	etcd_curl.easy_setopt(c->easy, CURLOPT_WRITEDATA, &c->rx);
	etcd_curl.easy_setopt(c->easy, CURLOPT_TIMEOUT_MS, (long)attempt_ms);
	etcd_curl.easy_setopt(c->easy, CURLOPT_CONNECTTIMEOUT_MS, (long)attempt_ms);
	code = c->perform ? c->perform(c->easy, c->perform_arg) : etcd_curl.easy_perform(c->easy);
	if (code != CURLE_OK) {
		rc = etcd_curl_errno(c->easy, code, c->curl_err, attempt_ms, c->ep_err[ep],
				     sizeof(c->ep_err[ep]));
		*retry = curl_retryable(code);
		goto out;
	}
	etcd_curl.easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &status);
	if (status != 200) {
		char msg[sizeof(c->ep_err[ep])];
		if (etcd_parse_error(c->rx.data, c->rx.len, grpc_code, msg, sizeof(msg))) {
			snprintf(c->ep_err[ep], sizeof(c->ep_err[ep]), "%s", msg);
			rc = etcd_grpc_errno(*grpc_code, msg);
			*retry = etcd_grpc_retryable(*grpc_code, msg);
		} else {
			snprintf(c->ep_err[ep], sizeof(c->ep_err[ep]),
				 "HTTP %ld on %s (not etcd 3.4 or later with its v3 gateway?)",
				 status, path);
			rc = -EPROTO;
			*retry = true;
		}
	}
out:
	etcd_curl.slist_free_all(hdrs);
	free(url);
	return rc;
}

int etcd_conn_auth(struct etcd_conn *c, size_t ep, uint64_t attempt_ms, bool *retry)
{
	char *body, *token = NULL;
	int code, rc;
	*retry = false;
	if (!c->cfg->user || c->token)
		return 0;
	body = etcd_req_auth(c->cfg->user, c->cfg->password);
	if (!body) {
		snprintf(c->ep_err[ep], sizeof(c->ep_err[ep]), "out of memory");
		return -ENOMEM;
	}
	rc = post_once(c, ep, "/v3/auth/authenticate", body, NULL, attempt_ms, retry, &code);
	explicit_bzero(body, strlen(body));
	free(body);
	if (rc < 0 && strstr(c->ep_err[ep], "authentication is not enabled")) {
		/* Credentials given to a cluster without auth: go on without. */
		c->token = strdup("");
		return c->token ? 0 : -ENOMEM;
	}
	if (rc < 0) {
		char why[sizeof(c->ep_err[ep])];
		snprintf(why, sizeof(why), "%s", c->ep_err[ep]);
		snprintf(c->ep_err[ep], sizeof(c->ep_err[ep]), "authentication as '%.40s': %.90s",
			 c->cfg->user, why);
		return rc;
	}
	rc = etcd_parse_auth(c->rx.data, c->rx.len, &token);
	if (rc < 0) {
		snprintf(c->ep_err[ep], sizeof(c->ep_err[ep]), "bad authenticate answer");
		return rc;
	}
	c->token = token;
	return 0;
}

static bool token_rejected(const char *msg, int code)
{
	return code == 16 || strstr(msg, "invalid auth token") || strstr(msg, "user name is empty");
}

/* One attempt on endpoint ep: authenticate if needed, post, and renew a
 * rejected token once. */
static int attempt(struct etcd_conn *c, size_t ep, const char *path, const char *body,
		   uint64_t attempt_ms, bool *retry)
{
	uint64_t deadline = time_now_ms() + attempt_ms;
	int code = 0, rc = 0;
	for (int round = 0; round < 2 && time_left_ms(deadline); round++) {
		rc = etcd_conn_auth(c, ep, time_left_ms(deadline), retry);
		if (!rc)
			rc = post_once(c, ep, path, body, c->token, time_left_ms(deadline), retry,
				       &code);
		if (rc >= 0 || !c->cfg->user || !token_rejected(c->ep_err[ep], code))
			return rc;
		free(c->token);
		c->token = NULL;
	}
	*retry = true;
	return rc;
}

static void backoff(uint64_t *delay_ms, uint64_t deadline_ms)
{
	uint64_t left = time_left_ms(deadline_ms);
	uint64_t d = *delay_ms < left ? *delay_ms : left;
	struct timespec ts = {(time_t)(d / 1000), (long)(d % 1000) * 1000000L};
	nanosleep(&ts, NULL);
	*delay_ms = *delay_ms * 2 > 250 ? 250 : *delay_ms * 2;
}

/* The message when every endpoint failed: each with its last error. */
static int all_failed(struct etcd_conn *c, int rc, const char *path)
{
	char list[1800];
	size_t off = 0;
	list[0] = '\0';
	for (size_t i = 0; i < c->cfg->n && off < sizeof(list); i++) {
		if (!c->ep_err[i][0])
			continue;
		off += (size_t)snprintf(list + off, sizeof(list) - off, "%s%s (%s)",
					off ? ", " : "", c->cfg->names[i], c->ep_err[i]);
	}
	return etcd_fail(rc, "etcd: no endpoint answered %s within %llu ms: %s", path,
			 (unsigned long long)c->cfg->timeout_ms, list);
}

int etcd_conn_call(struct etcd_conn *c, const char *path, const char *body, uint64_t deadline_ms)
{
	/* No attempt of the first round takes more than a second: a follower
	 * that has not yet noticed its leader died holds a write until etcd's
	 * request timeout (7 s), while the election is over in about one. Later
	 * rounds double it, so a slow but working cluster still gets its time. */
	uint64_t delay = 10, cap = ETCD_FIRST_ATTEMPT_MS;
	size_t n = c->cfg->n;
	int rc = -ETIMEDOUT;
	etcd_error_clear();
	for (size_t i = 0; i < n; i++)
		c->ep_err[i][0] = '\0';
	for (;;) {
		for (size_t k = 0; k < n; k++) {
			size_t ep = (c->cur + k) % n;
			uint64_t left = time_left_ms(deadline_ms);
			/* Share what is left among the endpoints not yet tried this
			 * round, so one that hangs cannot take it all. */
			uint64_t slice = left / (n - k), floor = left < 50 ? left : 50;
			if (slice > cap)
				slice = cap;
			bool retry;
			if (!left)
				return all_failed(c, rc, path);
			rc = attempt(c, ep, path, body, slice > floor ? slice : floor, &retry);
			if (rc >= 0) {
				c->cur = ep;
				return 0;
			}
			if (!retry)
				return etcd_fail(rc, "etcd %s: %s: %s", c->cfg->names[ep], path,
						 c->ep_err[ep]);
		}
		if (!time_left_ms(deadline_ms))
			return all_failed(c, rc, path);
		backoff(&delay, deadline_ms);
		cap *= 2;
	}
}
