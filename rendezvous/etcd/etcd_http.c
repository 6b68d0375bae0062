/*
 * etcd_http.c - the pieces of a request to etcd's JSON gateway that the
 * requests (etcd_async.c) and the watches (etcd_awatch.c) share: the easy
 * handle's options, the headers, the answer's status and error, the auth
 * answer, and the messages.
 */
#include "etcd_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Where a transfer that ran out of time stood: never connected (nothing
 * accepted the connection), connected with no answer, or an answer that
 * stopped after its headers. */
static void timeout_text(CURL *easy, uint64_t attempt_ms, char *msg, size_t msglen)
{
	curl_off_t connected = 0, got = 0, length = -1;
	long status = 0;
	unsigned long long ms = (unsigned long long)attempt_ms;

	etcd_curl.easy_getinfo(easy, CURLINFO_CONNECT_TIME_T, &connected);
	etcd_curl.easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
	etcd_curl.easy_getinfo(easy, CURLINFO_SIZE_DOWNLOAD_T, &got);
	etcd_curl.easy_getinfo(easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
	if (status > 0 && length >= 0)
		snprintf(msg, msglen,
			 "its answer stalled: HTTP %ld headers, then %lld of %lld body bytes "
			 "within %llu ms",
			 status, (long long)got, (long long)length, ms);
	else if (status > 0)
		snprintf(
		    msg, msglen,
		    "its answer stalled: HTTP %ld headers, then %lld body bytes within %llu ms",
		    status, (long long)got, ms);
	else if (connected > 0)
		snprintf(msg, msglen,
			 "it accepted the connection but sent no answer within %llu ms: not an "
			 "etcd client port, or a frozen member",
			 ms);
	else
		snprintf(msg, msglen,
			 "nothing accepted the connection within %llu ms: a host that is down or "
			 "cut off, or a listener that does not accept",
			 ms);
}

int etcd_curl_errno(CURL *easy, CURLcode code, const char *errbuf, uint64_t attempt_ms, char *msg,
		    size_t msglen)
{
	long os_err = 0, status = 0;
	etcd_curl.easy_getinfo(easy, CURLINFO_OS_ERRNO, &os_err);
	switch (code) {
	case CURLE_OPERATION_TIMEDOUT:
		timeout_text(easy, attempt_ms, msg, msglen);
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
		etcd_curl.easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
		if (status <= 0)
			snprintf(msg, msglen,
				 "it accepted the connection and closed it without an answer: not "
				 "an etcd client port, or a member going down");
		else
			snprintf(msg, msglen, "connection lost (%s)",
				 etcd_curl.easy_strerror(code));
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

/* Connection-level failures, TLS handshakes and "unavailable" answers are
 * worth another endpoint; a certificate that does not verify is not. */
bool etcd_curl_retryable(CURLcode code)
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

void etcd_easy_post(CURL *easy, const struct etcd_cfg *cfg, char *errbuf, const char *url,
		    struct curl_slist *hdrs, const char *body, struct etcd_rxbuf *rx,
		    uint64_t timeout_ms)
{
	if (!timeout_ms)
		timeout_ms = 1; /* 0 would mean no timeout to curl */
	rx->len = 0;
	errbuf[0] = '\0';
	etcd_curl.easy_reset(easy);
	etcd_easy_common(easy, cfg, errbuf);
	etcd_curl.easy_setopt(easy, CURLOPT_URL, url);
	etcd_curl.easy_setopt(easy, CURLOPT_HTTPHEADER, hdrs);
	etcd_curl.easy_setopt(easy, CURLOPT_POSTFIELDS, body);
	etcd_curl.easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
	etcd_curl.easy_setopt(easy, CURLOPT_WRITEFUNCTION, etcd_rx_write);
	etcd_curl.easy_setopt(easy, CURLOPT_WRITEDATA, rx);
	etcd_curl.easy_setopt(easy, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
	etcd_curl.easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, (long)timeout_ms);
}

int etcd_post_result(CURL *easy, CURLcode code, const char *curl_err, const struct etcd_rxbuf *rx,
		     const char *path, uint64_t attempt_ms, char *err, size_t errlen, bool *retry,
		     int *grpc_code)
{
	long status = 0;
	char msg[160];
	*retry = false;
	*grpc_code = 0;
	if (code != CURLE_OK) {
		*retry = etcd_curl_retryable(code);
		return etcd_curl_errno(easy, code, curl_err, attempt_ms, err, errlen);
	}
	etcd_curl.easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
	if (status == 200)
		return 0;
	if (etcd_parse_error(rx->data, rx->len, grpc_code, msg, sizeof(msg))) {
		snprintf(err, errlen, "%s", msg);
		*retry = etcd_grpc_retryable(*grpc_code, msg);
		return etcd_grpc_errno(*grpc_code, msg);
	}
	snprintf(err, errlen, "HTTP %ld on %s (not etcd 3.4 or later with its v3 gateway?)", status,
		 path);
	*retry = true;
	return -EPROTO;
}

int etcd_auth_result(int rc, const struct etcd_rxbuf *rx, const char *user, char *err,
		     size_t errlen, char **token)
{
	*token = NULL;
	if (rc < 0 && strstr(err, "authentication is not enabled")) {
		/* Credentials given to a cluster without auth: go on without. */
		*token = strdup("");
		return *token ? 0 : -ENOMEM;
	}
	if (rc < 0) {
		char why[160];
		snprintf(why, sizeof(why), "%s", err);
		snprintf(err, errlen, "authentication as '%.40s': %.90s", user, why);
		return rc;
	}
	rc = etcd_parse_auth(rx->data, rx->len, token);
	if (rc < 0)
		snprintf(err, errlen, "bad authenticate answer");
	return rc;
}

bool etcd_token_rejected(const char *msg, int grpc_code)
{
	return grpc_code == 16 || strstr(msg, "invalid auth token") ||
	       strstr(msg, "user name is empty");
}

int etcd_fail_all(int rc, const struct etcd_cfg *cfg, char (*errs)[160], const char *what)
{
	char list[1700];
	size_t off = 0;
	list[0] = '\0';
	for (size_t i = 0; i < cfg->n && off < sizeof(list); i++) {
		if (!errs[i][0])
			continue;
		off += (size_t)snprintf(list + off, sizeof(list) - off, "%s%s (%s)",
					off ? ", " : "", cfg->names[i], errs[i]);
	}
	return etcd_fail(rc, "etcd: %s within %llu ms: %s", what,
			 (unsigned long long)cfg->timeout_ms, list);
}
