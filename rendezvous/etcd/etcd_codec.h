/*
 * etcd_codec.h - the pure half of the etcd client: base64 (RFC 4648, with
 * padding), the JSON bodies of the gateway's requests, the parsing of its
 * answers and of the watch stream, and the mapping of gRPC status codes.
 * No I/O, so it is unit-tested whole.
 *
 * Builders return malloc'ed NUL-terminated JSON text (the caller frees it),
 * or NULL when out of memory. Parsers take the body as received (not
 * necessarily NUL-terminated), return 0 or -EPROTO for anything that is not
 * the expected JSON, and never keep pointers into it.
 */
#ifndef DDP_RENDEZVOUS_ETCD_CODEC_H
#define DDP_RENDEZVOUS_ETCD_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "etcd_types.h"

/* ---- base64 ---- */

/* Length of the encoding of n bytes, without the NUL. */
size_t etcd_b64_len(size_t n);

/* Writes the encoding of src[0..n) and a NUL to dst (etcd_b64_len(n) + 1
 * bytes). */
void etcd_b64_encode(const void *src, size_t n, char *dst);

/* Decodes src[0..n) (padded, n a multiple of 4) into dst, which has room for
 * n / 4 * 3 bytes; *out_len receives the decoded length. -EINVAL for a
 * character outside the alphabet, misplaced padding or a bad length. */
int etcd_b64_decode(const char *src, size_t n, void *dst, size_t *out_len);

/* ---- requests ---- */

/* The range_end that makes [key, range_end) the keys starting with prefix:
 * prefix with its last byte below 0xff incremented and what follows dropped;
 * "\0" (every key >= prefix) when there is none. Writes into end (room for
 * plen bytes, at least 1) and returns its length. */
size_t etcd_prefix_end(const char *prefix, size_t plen, char *end);

char *etcd_req_put(const char *key, const void *value, size_t len, int64_t lease);
char *etcd_req_range(const char *key, bool prefix);
char *etcd_req_delete(const char *key);
char *etcd_req_count(const char *key); /* a range that only counts */
char *etcd_req_cas(const char *key, const struct etcd_cmp *cmp, const void *value, size_t len,
		   int64_t lease);
char *etcd_req_lease_grant(int64_t ttl_s);
char *etcd_req_lease_id(int64_t id); /* keep-alive and revoke */
char *etcd_req_auth(const char *user, const char *password);
char *etcd_req_watch(const char *key, bool prefix, int64_t start_revision);

/* ---- answers ---- */

/* An error answer of the gateway: {"error": "...", "code": N, "message":
 * "..."} (unary) or {"error": {"grpc_code": N, "message": "..."}} (in a
 * stream). Returns true and fills *code and msg (always NUL-terminated,
 * truncated to msglen) when body is one. */
bool etcd_parse_error(const char *body, size_t len, int *code, char *msg, size_t msglen);

/* The errno for a gRPC status code and message (see etcd_types.h). */
int etcd_grpc_errno(int code, const char *msg);

/* True when a gRPC error is worth trying on another endpoint (the member has
 * no leader, is overloaded, or timed out). */
bool etcd_grpc_retryable(int code, const char *msg);

/* header.revision of a unary answer. */
int etcd_parse_revision(const char *body, size_t len, int64_t *revision);

/* A range answer: its kvs (malloc'ed array, *n entries; NULL when none) and
 * the header revision. */
int etcd_parse_range(const char *body, size_t len, struct etcd_kv **kvs, size_t *n,
		     int64_t *revision);

/* A delete answer: the number of keys deleted. */
int etcd_parse_deleted(const char *body, size_t len, int64_t *deleted);

/* A compare-and-set transaction answer: *succeeded, the header revision, and
 * on failure the key read by the failure branch in *cur (zeroed when
 * absent). */
int etcd_parse_cas(const char *body, size_t len, bool *succeeded, int64_t *revision,
		   struct etcd_kv *cur);

/* A lease grant answer: ID and TTL. */
int etcd_parse_lease_grant(const char *body, size_t len, int64_t *id, int64_t *ttl);

/* A keep-alive answer ({"result": {...}}): the TTL (0 when the lease is
 * gone). */
int etcd_parse_keepalive(const char *body, size_t len, int64_t *ttl);

/* An authenticate answer: the token, malloc'ed. */
int etcd_parse_auth(const char *body, size_t len, char **token);

/* One message of the watch stream. */
struct etcd_watch_msg {
	bool created;
	bool canceled;
	int64_t revision;	  /* header.revision */
	int64_t compact_revision; /* > 0: the start revision was compacted */
	char reason[256];	  /* cancel_reason, or a stream error's message */
	int error_code;		  /* a stream error: its gRPC code (else 0) */
	struct etcd_event *events;
	size_t nevents;
};

/* Parses one message; the events are the caller's (etcd_watch_msg_release()).
 * A stream error ({"error": ...}) parses as canceled with error_code set. */
int etcd_parse_watch_msg(const char *line, size_t len, struct etcd_watch_msg *m);
void etcd_watch_msg_release(struct etcd_watch_msg *m);

/* ---- the watch stream's framing ---- */

/* The gateway writes one JSON message per line. linebuf collects received
 * bytes and hands out whole lines. */
struct etcd_linebuf {
	char *data;
	size_t len; /* bytes held */
	size_t cap;
	size_t scan;  /* bytes of data already known to hold no newline */
	size_t taken; /* the line handed out by peek, with its newline */
	size_t max;   /* the longest line accepted */
};

/* Appends n bytes. -EMSGSIZE when a line would exceed max, -ENOMEM. */
int etcd_linebuf_add(struct etcd_linebuf *b, const void *p, size_t n);

/* Returns the length of the first whole line (without its newline) and
 * points *line at it, or 0 with *line NULL when none is complete. Empty lines
 * are skipped. The line stays valid until etcd_linebuf_pop(). */
size_t etcd_linebuf_peek(struct etcd_linebuf *b, const char **line);

/* Drops the line etcd_linebuf_peek() returned. */
void etcd_linebuf_pop(struct etcd_linebuf *b);

void etcd_linebuf_release(struct etcd_linebuf *b);

#endif
