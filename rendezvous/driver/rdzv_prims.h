/*
 * rdzv_prims.h - the store primitives the rendezvous machine runs over
 * (rendezvous/rdzv/rdzv_machine.h), as an ops table, so that one driver
 * (driver.h) runs the machine over any backend that has them: our
 * store through an agent session (rdzv_session.c), and etcd v3
 * (lease, watch, transaction: rdzv_etcd.c).
 *
 * A backend answers every request it accepted exactly once through the
 * sink, from the loop (never from inside the call that made the request),
 * and in the order the requests were made; writes reach the store in that
 * order. Views passed to the sink are valid during the call only. After
 * close() the sink is never called again.
 */
#ifndef DDP_RENDEZVOUS_RDZV_PRIMS_H
#define DDP_RENDEZVOUS_RDZV_PRIMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "rdzv_machine.h"

/* Messages given to the sink fit in this (etcd's name every endpoint tried,
 * each with its last error). */
#define RDZV_PRIMS_MSG_MAX 768

/* Where etcd's password comes from when only its user is given, for the
 * message that asks for it (the launcher reads it: launcher/job/opts_rdzv.h's
 * OPTS_ETCD_PASSWORD_ENV is the same name). */
#define RDZV_PRIMS_ETCD_PASSWORD_ENV "DDP_ETCD_PASSWORD"

/* What the driver hears; `drv` is the pointer given to open(). */
struct rdzv_prims_sink {
	/* The session is ready (status 0) or could not be opened (msg says why,
	 * naming host:port; nothing more follows). */
	void (*connected)(void *drv, int status, const char *msg);
	/* The open session ended by itself (the store's host died, froze or was
	 * cut off); every pending request failed before. msg names the peer. */
	void (*lost)(void *drv, int status, const char *msg);
	void (*got)(void *drv, uint64_t tag, int status, const struct rdzv_value *vals, size_t n);
	void (*cased)(void *drv, uint64_t tag, int status, bool swapped, struct rdzv_value cur);
	void (*added)(void *drv, uint64_t tag, int status, int64_t value);
	void (*done)(void *drv, uint64_t tag, int status);
	/* A watched key's value (first its current one); status < 0: the watch
	 * ended (then nothing more for it). */
	void (*event)(void *drv, uint64_t watch, int status, struct rdzv_value v);
};

struct rdzv_prims_config {
	uv_loop_t *loop;
	const char *host; /* the store: a name or a literal */
	uint16_t port;
	const void *token; /* the job's token, or NULL */
	size_t token_len;
	const char *bind_addr;	    /* connect from this literal, or NULL */
	int64_t connect_timeout_ms; /* keep trying this long */
	uint32_t idle_timeout_ms;   /* the keep-alive window: the store ends a session
				       silent this long (0: never); our store's
				       session is lost when a ping is unanswered
				       this long */
	uint32_t ping_interval_ms;  /* our store: a ping this often (0: the
				       session's default, with its deadline) */
	/* etcd only (NULL where not given): the endpoint list ("h1:2379,
	 * https://h2:2379"; host/port above are unused), TLS files and the
	 * user and password of etcd's authentication; each request's deadline
	 * over all endpoints (0: etcd_types.h's default) */
	const char *endpoints;
	const char *ca_file, *cert_file, *key_file, *user, *password;
	int64_t request_timeout_ms;
	/* The caller only reads (get; ddplaunch status): etcd grants no lease
	 * and writes nothing, connected(0) follows the endpoints' names'
	 * look-up without asking etcd (the first request tells whether it
	 * answers: when none does, that request and the session fail, and
	 * lost() names each endpoint with its error), and cas, add and set are
	 * refused (-EROFS). Our store: a session as any other (opening one
	 * writes nothing). */
	bool read_only;
};

/* Every request returns 0 (the sink will be called) or a negative errno
 * (-EINVAL, -ENOTCONN, -ENOMEM; the sink will not be called for it). */
struct rdzv_prims_ops {
	const char *name; /* for messages: "store", "etcd" */
	/* Starts opening a session; *be is the backend's handle. */
	int (*open)(const struct rdzv_prims_config *cfg, const struct rdzv_prims_sink *sink,
		    void *drv, void **be);
	/* The local address the session uses (a literal), for other nodes to
	 * reach this one. Valid after connected(0). */
	int (*local_addr)(void *be, char *buf, size_t len);
	/* "host:port" of the store, for messages. */
	const char *(*peer)(void *be);
	/* While the session is being opened: why the last attempt failed, or
	 * NULL (none yet). May be NULL (a backend that does not say). */
	const char *(*last_error)(void *be);
	/* While the session is being opened: whether the peer accepts
	 * connections but does not answer the handshake (now or in the last
	 * attempt). May be NULL (a backend that cannot tell). */
	bool (*peer_silent)(void *be);
	/* How long a dead or frozen node's session keys may outlive it, in ms:
	 * etcd, the lease's TTL; our store, its idle timeout (a dead process's
	 * connection closes at once, a frozen host's session only ends when it
	 * has been silent that long). Valid after connected(0). */
	int64_t (*death_delay_ms)(void *be);
	int (*get)(void *be, uint64_t tag, const struct byteview *keys, size_t n);
	int (*cas)(void *be, uint64_t tag, struct byteview key, bool has_expected,
		   struct byteview expected, struct byteview value);
	int (*add)(void *be, uint64_t tag, struct byteview key, int64_t delta);
	/* session: the key lives as long as this session (etcd: a lease). */
	int (*set)(void *be, uint64_t tag, struct byteview key, struct byteview value,
		   bool session);
	/* `watch` is the caller's id for it (events carry it). */
	int (*watch)(void *be, uint64_t watch, struct byteview key);
	void (*unwatch)(void *be, uint64_t watch);
	/* Ends the session (its session keys go) and frees the backend once
	 * its handles are closed (keep the loop running). NULL-safe. */
	void (*close)(void *be);
};

/* Our store, through an agent session (store_session.h). */
extern const struct rdzv_prims_ops rdzv_prims_session;
/* etcd v3 (etcd_async.h): a lease for the session, the client's requests
 * and watches on the loop (no thread). */
extern const struct rdzv_prims_ops rdzv_prims_etcd;

#endif
