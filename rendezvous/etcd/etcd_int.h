/*
 * etcd_int.h - internals shared by the etcd client's files: the parsed
 * options, and the HTTP transport over libcurl with its endpoint failover.
 */
#ifndef DDP_RENDEZVOUS_ETCD_INT_H
#define DDP_RENDEZVOUS_ETCD_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "etcd_client.h"

/* The longest answer or watch message accepted (etcd's own request limit is
 * 1.5 MiB by default; a prefix read may be larger). */
#define ETCD_MAX_BODY (64u << 20)

/* The longest first attempt of a request on one endpoint (see
 * etcd_conn_call()). */
#define ETCD_FIRST_ATTEMPT_MS 1000u

/* The options, copied and checked. */
struct etcd_cfg {
	size_t n;
	char **names; /* the endpoints as given */
	char **urls;  /* "http[s]://host:port" */
	char *ca_file, *cert_file, *key_file;
	char *user, *password;
	uint64_t timeout_ms;
};

int etcd_cfg_parse(const struct etcd_options *opt, struct etcd_cfg *cfg);
void etcd_cfg_release(struct etcd_cfg *cfg);

struct etcd_rxbuf {
	char *data; /* NUL-terminated */
	size_t len;
	size_t cap;
};

/* One HTTP connection (a curl easy handle) and the state of the failover:
 * which endpoint to try first, the auth token, the last error per endpoint.
 * Used by one thread at a time. */
struct etcd_conn {
	const struct etcd_cfg *cfg;
	CURL *easy;
	size_t cur;
	char *token;	     /* NULL: none yet; "": auth not enabled */
	char (*ep_err)[160]; /* per endpoint, for the message when all fail */
	struct etcd_rxbuf rx;
	char curl_err[CURL_ERROR_SIZE];
	/* Runs one transfer; curl_easy_perform() unless the owner (a watch
	 * thread) runs them through its multi handle to stay interruptible. */
	CURLcode (*perform)(CURL *easy, void *arg);
	void *perform_arg;
};

int etcd_conn_init(struct etcd_conn *c, const struct etcd_cfg *cfg);
void etcd_conn_release(struct etcd_conn *c);

/* POSTs body to path (e.g. "/v3/kv/put"), failing over between endpoints
 * until deadline_ms (a time_now_ms() value), as etcd_client.h describes. On
 * success (0) the answer is in c->rx. On failure, etcd_error() says why. */
int etcd_conn_call(struct etcd_conn *c, const char *path, const char *body, uint64_t deadline_ms);

/* Makes sure c holds a token for endpoint ep when the options have a user
 * (authenticating there if not), within attempt_ms. On failure, sets
 * c->ep_err[ep] and *retry (whether another endpoint may do better). */
int etcd_conn_auth(struct etcd_conn *c, size_t ep, uint64_t attempt_ms, bool *retry);

/* The options every request of ours has: TLS files, no signals, no proxy
 * from the environment, TCP keep-alive. */
void etcd_easy_common(CURL *easy, const struct etcd_cfg *cfg, char *errbuf);

/* A curl_slist with the JSON content type, no "Expect:", etcd's
 * require-leader, and the token (may be NULL). NULL when out of memory. */
struct curl_slist *etcd_headers(const char *token);

/* Describes a failed transfer in msg (lowercase, no endpoint name) and
 * returns its errno. */
int etcd_curl_errno(CURL *easy, CURLcode code, const char *errbuf, uint64_t attempt_ms, char *msg,
		    size_t msglen);

/* "url" + path, malloc'ed. */
char *etcd_url(const char *base, const char *path);

/* The libcurl write callback appending to a struct etcd_rxbuf (userdata). */
size_t etcd_rx_write(char *p, size_t size, size_t n, void *userdata);

/* Sets the calling thread's message (see etcd_error()) and returns rc. */
int etcd_fail(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Clears the calling thread's message. */
void etcd_error_clear(void);

/* For etcd_watch.c: the client's options, and the endpoint that answered
 * last (where a watch starts). */
const struct etcd_cfg *etcd_client_cfg(const struct etcd_client *c);
size_t etcd_client_last_ep(const struct etcd_client *c);

/* Loads libcurl and runs its global init, once per process (etcd_curl.h);
 * returns 0 or its error, with etcd_error() set. */
int etcd_global_init(void);

#endif
