/*
 * etcd_int.h - internals shared by the etcd client's files: the parsed
 * options, curl's multi handle on a libuv loop, and the pieces of the HTTP
 * requests (headers, errors) that the requests and the watches share.
 */
#ifndef DDP_RENDEZVOUS_ETCD_INT_H
#define DDP_RENDEZVOUS_ETCD_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>
#include <uv.h>

#include "etcd_async.h"

/* The longest answer or watch message accepted (etcd's own request limit is
 * 1.5 MiB by default; a prefix read may be larger). */
#define ETCD_MAX_BODY (64u << 20)

/* The longest first attempt of a request on one endpoint (see
 * etcd_types.h). */
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

/* One transfer on a multi handle: the easy handle (its CURLOPT_PRIVATE is
 * the xfer) and what to call when it ends. */
struct etcd_xfer {
	CURL *easy;
	void (*done)(struct etcd_xfer *x, CURLcode code);
	bool running; /* added to the multi handle */
};

/* curl's multi-socket interface on a libuv loop (etcd_multi_uv.c): a uv_poll
 * per socket curl asks for, one uv_timer for curl's timeout; no thread.
 * after() (may be NULL) runs after each round of curl's work, outside every
 * curl callback: where what a write callback queued is handed on. */
struct etcd_sock;
struct etcd_multi {
	uv_loop_t *loop;
	CURLM *multi; /* NULL once closing */
	uv_timer_t timer;
	struct etcd_sock *socks;
	int handles; /* uv handles not yet closed */
	void (*after)(struct etcd_multi *m);
	void (*closed)(struct etcd_multi *m);
};

/* 0, or -ENOMEM. */
int etcd_multi_init(struct etcd_multi *m, uv_loop_t *loop);
/* Starts x (x->easy set up); x->done() is called from the loop when it ends,
 * never from inside this call. 0, or -ENOMEM. */
int etcd_multi_start(struct etcd_multi *m, struct etcd_xfer *x);
/* Stops x if it runs; x->done() is not called. Never from a curl callback. */
void etcd_multi_stop(struct etcd_multi *m, struct etcd_xfer *x);
/* Stops the transfers that run (without their done()), frees the multi
 * handle and closes the uv handles; closed() once the last is closed. */
void etcd_multi_close(struct etcd_multi *m, void (*closed)(struct etcd_multi *m));

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

/* Connection-level failures, TLS handshakes and "unavailable" answers are
 * worth another endpoint; a certificate that does not verify is not. */
bool etcd_curl_retryable(CURLcode code);

/* Sets easy up to POST body to url (resetting it first): the common
 * options, the headers, the answer appended to rx (emptied), and
 * timeout_ms for the whole transfer. */
void etcd_easy_post(CURL *easy, const struct etcd_cfg *cfg, char *errbuf, const char *url,
		    struct curl_slist *hdrs, const char *body, struct etcd_rxbuf *rx,
		    uint64_t timeout_ms);

/* A finished POST to path: 0 for HTTP 200; otherwise the errno, with err
 * set, *retry telling whether another endpoint may do better, and
 * *grpc_code the gRPC status of an error answer (0 if none). */
int etcd_post_result(CURL *easy, CURLcode code, const char *curl_err, const struct etcd_rxbuf *rx,
		     const char *path, uint64_t attempt_ms, char *err, size_t errlen, bool *retry,
		     int *grpc_code);

/* The end of an /v3/auth/authenticate POST (rc: etcd_post_result()'s): 0
 * and *token (malloc'ed; "" when the cluster has no auth), or the errno
 * with err saying so. */
int etcd_auth_result(int rc, const struct etcd_rxbuf *rx, const char *user, char *err,
		     size_t errlen, char **token);

/* Whether an error answer says the token is expired or unknown. */
bool etcd_token_rejected(const char *msg, int grpc_code);

/* Wake-ups on the client's one timer (etcd_async.c), for the failover's
 * backoff and the watches' deadlines and probes. */
struct etcd_wake {
	uint64_t at; /* time_now_ms(); 0: not armed */
	void (*fn)(struct etcd_wake *wk);
	struct etcd_wake *prev, *next;
};
void etcd_async_wake(struct etcd_async *c, struct etcd_wake *wk, uint64_t at);
void etcd_async_unwake(struct etcd_async *c, struct etcd_wake *wk);

/* The watches of a client (etcd_awatch.c): the list, handing on what the
 * streams queued (after each round of curl's work, outside curl's
 * callbacks), and the end. A watch freed while they are handed on is only
 * marked (dead) and freed after. */
struct etcd_awatch_list {
	struct etcd_awatch *head;
	bool delivering;
};
struct etcd_awatch_list *etcd_async_watches(struct etcd_async *c);
void etcd_awatch_deliver(struct etcd_async *c);
void etcd_awatch_drop_all(struct etcd_async *c);

/* The client (etcd_async.c), its requests (etcd_request.c). */
struct etcd_op;
struct etcd_async {
	uv_loop_t *loop;
	struct etcd_cfg cfg;
	struct etcd_multi m;
	uv_timer_t tick; /* the wake-ups */
	struct etcd_wake *wakes;
	struct etcd_op *ops;
	struct etcd_awatch_list watches;
	char *token;
	size_t cur;	      /* the endpoint that answered last */
	char (*ep_fail)[160]; /* each endpoint's last failed attempt ("": none
				 since its last answer) */
	bool closing;
	int handles;
	void (*closed)(void *arg);
	void *closed_arg;
};
/* Frees every request without its callback (the client closes). */
void etcd_request_drop_all(struct etcd_async *c);

/* The message when every endpoint failed: what, each endpoint's name with
 * its last error (errs[i][0] == 0: not tried), via etcd_fail(rc, ...). */
int etcd_fail_all(int rc, const struct etcd_cfg *cfg, char (*errs)[160], const char *what);

/* The options that the async client and its watches share. */
const struct etcd_cfg *etcd_async_cfg(const struct etcd_async *c);
struct etcd_multi *etcd_async_multi(struct etcd_async *c);
size_t etcd_async_last_ep(const struct etcd_async *c);
/* The token (NULL: none yet; "": auth not enabled), and its replacement. */
const char *etcd_async_token(const struct etcd_async *c);
void etcd_async_set_token(struct etcd_async *c, char *token);

/* Loads libcurl and runs its global init, once per process (etcd_curl.h);
 * returns 0 or its error, with etcd_error() set. */
int etcd_global_init(void);

#endif
