/*
 * store_client_int.h - internals shared by store_client.c (connection, reply
 * reading) and store_client_ops.c (the operations).
 */
#ifndef DDP_RENDEZVOUS_STORE_CLIENT_INT_H
#define DDP_RENDEZVOUS_STORE_CLIENT_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "bytes.h"
#include "proto.h"
#include "store_client.h"

/* The largest reply value accepted (a server may be configured up to it). */
#define CLIENT_MAX_VALUE ((size_t)1 << 30)
/* How long a cancelled wait may take to be acknowledged. */
#define CLIENT_CANCEL_GRACE_MS 10000

/* What a query is about, kept for the messages of a closed connection. */
struct client_query {
	enum proto_op op;
	size_t nkeys;	  /* keys named so far */
	size_t key_len;	  /* the first key's length */
	size_t value_len; /* its value's (set, append, queue_push, compare_set) */
	char key[48];	  /* the first key, printable and shortened */
};

struct store_client {
	int fd;
	enum proto_gen gen;	     /* framing spoken: PROTO_GEN_V2, or V1 for torch 1.13 */
	bool broken;		     /* V1 after a timed-out wait: replies out of step */
	bool bad_op;		     /* the request being built has no code in gen */
	uint64_t rcvtimeo_ms;	     /* SO_RCVTIMEO set on fd (0: none yet) */
	struct bytebuf tx;	     /* the request being built */
	struct bytebuf rx;	     /* reply bytes received, not yet consumed */
	struct client_query cur;     /* the query being sent or answered */
	struct client_query written; /* the last reply-less write not yet confirmed */
	size_t unconfirmed;	     /* reply-less writes sent since the last answer */
	char addr[280];		     /* "host:port", for messages */
	char err[512];
};

/* Formats c->err and returns rc. */
int client_fail(struct store_client *c, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A deadline timeout_ms from now (0: the default). */
uint64_t client_op_deadline(uint64_t timeout_ms);

/* Starts a request of type op in c->tx (clears c->err). */
void client_req_begin(struct store_client *c, enum proto_op op);
/* Appends a key; -EINVAL for NULL. */
int client_req_key(struct store_client *c, const char *key);
/* Appends a value (NULL allowed when len is 0, else -EINVAL) and notes its
 * size for messages. */
int client_req_value(struct store_client *c, const void *value, size_t len);
/* Sends c->tx unless rc < 0 (bad arguments). Returns 0 or -errno. A query
 * that has no reply (set, append, multi_set, queue_push) is remembered as
 * unconfirmed until a reply arrives: the server runs a connection's queries
 * in order and closes it at one it refuses, so any later answer confirms it,
 * and a close before that answer is reported as that write's refusal. */
int client_req_send(struct store_client *c, int rc);

/* Reply readers: wait for and consume one field, parsed with the codec's
 * proto_take_*(). 0 or -errno (-ETIMEDOUT when the deadline passed; nothing
 * consumed then). */
int client_rx_u8(struct store_client *c, uint8_t *v, uint64_t deadline);
int client_rx_u32(struct store_client *c, uint32_t *v, uint64_t deadline);
int client_rx_i64(struct store_client *c, int64_t *v, uint64_t deadline);
/* A byte string as a malloc'ed, NUL-terminated copy. */
int client_rx_bytes(struct store_client *c, void **value, size_t *len, uint64_t deadline);

#endif
