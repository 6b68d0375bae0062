/*
 * store_session_int.h - the agent session client's internals, shared by
 * store_session.c (requests, watches), store_session_reply.c (the store's
 * replies and events) and store_session_conn.c (connecting, the handshake,
 * reading and writing, pings, closing).
 */
#ifndef DDP_RENDEZVOUS_SESSION_INT_H
#define DDP_RENDEZVOUS_SESSION_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "bytes.h"
#include "proto.h"
#include "store_session.h"

enum sess_phase {
	SESS_CONNECTING, /* resolving, connecting, or waiting to retry */
	SESS_HELLO,	 /* HELLO sent */
	SESS_AUTH,	 /* AUTH sent */
	SESS_READY,	 /* on_connect(0) ran; requests flow */
	SESS_DEAD,	 /* failed, lost or closed: only freeing is left */
};

/* One request awaiting its reply (FIFO: replies come in order). Internal
 * ones (pings, unwatches) have no callback. */
struct sess_req {
	struct sess_req *next;
	enum proto_op op;
	void *fn; /* the callback, cast by op (NULL: internal) */
	void *arg;
	uint64_t tag;
	size_t nkeys;		  /* S_GET */
	struct sess_watch *watch; /* S_WATCH */
};

/* One connection attempt's handles (freed in the TCP close callback, which
 * libuv runs after any write callback of the handle). */
struct sess_link {
	uv_tcp_t tcp;
	uv_connect_t creq;
	uv_write_t wreq;
	struct store_session *s;
	struct bytebuf wbuf; /* bytes in the uv_write in progress */
	bool writing;
	bool connected;
};

/* One watch; several may share a key (the store registers the key once). */
struct sess_watch {
	struct sess_watch *prev;
	struct sess_watch *next;
	uint64_t id;
	store_session_event_fn fn;
	void *arg;
	bool live;    /* not unwatched, not failed */
	bool started; /* its first value was delivered */
	bool waiting; /* its S_WATCH reply is still due */
	size_t key_len;
	uint8_t key[];
};

struct store_session {
	uv_loop_t *loop;
	struct store_session_opts opts; /* strings point into this struct */
	char host[256];
	char bind[64];
	char peer[300]; /* "host:port" */
	char local[64];
	uint8_t *token; /* a copy of opts->token (malloc'ed), or NULL */
	store_session_connect_fn on_connect;
	store_session_close_fn on_close;
	void *arg;
	enum sess_phase phase;

	/* connecting */
	uint64_t deadline; /* uv_now() when retrying stops */
	uint64_t backoff;  /* ms before the next attempt */
	char last_error[320];
	bool silent_peer;      /* the last attempt's peer accepted but never answered */
	uv_getaddrinfo_t *gai; /* the current attempt's lookup, or NULL */
	int gai_pending;       /* lookups whose callback is still due */
	struct sockaddr_storage addr;
	uint8_t client_nonce[PROTO_SESSION_NONCE_LEN];
	uint8_t server_nonce[PROTO_SESSION_NONCE_LEN]; /* the challenge, kept for its proof */
	int init_error; /* proto_auth_init() failed: reported by the first attempt */

	/* handles: the current link, timer (first attempt, retry, attempt
	 * deadline), ping timer; `handles` counts those not yet closed */
	struct sess_link *link;
	uv_timer_t timer;
	uv_timer_t ping;
	int handles;
	bool timers_closed;
	struct bytebuf out;    /* encoded, not yet handed to the kernel */
	struct bytebuf queued; /* encoded before READY, sent once ready */
	struct bytebuf in;     /* received, not yet parsed */

	/* requests and watches */
	struct sess_req *head;
	struct sess_req *tail;
	size_t pending;	 /* requests in the FIFO */
	size_t internal; /* of which pings and unwatches */
	struct sess_watch *watches;
	uint64_t next_watch_id;
	struct store_session_value *scratch; /* S_GET results */
	size_t scratch_cap;

	/* pings */
	bool ping_out;	     /* one ping awaits its answer */
	uint64_t ping_sent;  /* when it was sent */
	uint64_t last_heard; /* when bytes last came from the store */
	uint64_t ping_due;   /* when the ping timer should fire */
	uint64_t resumed;    /* when a pause of this process last ended */
	uint32_t ping_nonce;

	int dispatching; /* > 0 while callbacks run: freeing waits */
	bool free_me;	 /* closed while dispatching */
};

/* store_session_conn.c */

/* Starts the first connection attempt. */
void sess_conn_start(struct store_session *s);

/* Hands s->out to the kernel (and libuv). */
void sess_flush(struct store_session *s);

/* The established connection ended (status -ECONNRESET, -ETIMEDOUT,
 * -EPROTO): fails everything, runs on_close, frees. */
void sess_lost(struct store_session *s, int status, const char *why);

/* Connecting failed for good: fails everything with status, runs
 * on_connect(status, msg), frees. */
void sess_connect_failed(struct store_session *s, int status, const char *msg);

/* Closes the handles; frees once they are closed and no callback runs. */
void sess_release(struct store_session *s);

/* Frees the session if it is dead, no handle is open and no callback runs.
 * After it, s may be gone: callers return at once. */
void sess_maybe_free(struct store_session *s);

/* Deadlines use the real clock (ms): the loop's cached time may be old
 * when a call comes from outside a callback. */
uint64_t sess_now_ms(void);

/* "1.5 s", "60 s". */
void sess_seconds_text(uint64_t ms, char *buf, size_t len);

/* store_session_hello.c */

/* Sends VALIDATE and HELLO on a fresh connection. 0 or -ENOMEM. */
int sess_send_hello(struct store_session *s);

/* Bytes arrived: the handshake's replies, then (READY) everything else. */
void sess_on_bytes(struct store_session *s);

/* The ping's answer arrived. */
void sess_ping_answered(struct store_session *s);

/* store_session.c */

/* The buffer a request frame goes to: out (READY) or queued (before). */
struct bytebuf *sess_outbuf(struct store_session *s);

/* Sends a ping (s->ping_nonce) as an internal request. 0 or -ENOMEM. */
int sess_push_ping(struct store_session *s);

/* Pings and unwatches: the session's own requests, not the caller's. */
bool sess_req_internal(enum proto_op op);

/* Whether w watches key. */
bool sess_watch_is(const struct sess_watch *w, const uint8_t *key, size_t len);

/* Frees watches that can no longer be told anything (not while callbacks
 * run: a caller may be walking the list). */
void sess_watch_gc(struct store_session *s);

/* store_session_reply.c */

/* Parses and dispatches every whole message in s->in (READY). Returns 0,
 * or -EPROTO for bytes that make no sense (the caller ends the session). */
int sess_parse(struct store_session *s);

/* Fails every pending request and watch with status (from the loop). */
void sess_fail_all(struct store_session *s, int status);

#endif
