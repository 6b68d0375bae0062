/*
 * proto.h - the TCPStore wire codec (pure, no I/O).
 *
 * Two generations of torch clients speak the same field encoding (1-byte
 * query type; byte strings as u64 length + bytes; integers as 64-bit; all
 * little-endian) but number their query types differently and never
 * negotiate:
 *   PROTO_GEN_V1  torch 1.13: SET=0 ... DELETE_KEY=8, plus the numbering of
 *                 early 2.x clients that kept it and added APPEND=9,
 *                 MULTI_GET=10, MULTI_SET=11, CANCEL_WAIT=12;
 *   PROTO_GEN_V2  torch 2.x: VALIDATE=0 ... QUEUE_LEN=16, LIST_KEYS=17,
 *                 BARRIER=18; such a client always opens with VALIDATE
 *                 (00 CE F7 85 3C).
 * Agent sessions (our own extension, never sent by torch) use the V2
 * numbering plus the codes PROTO_SESSION_CODE_FIRST.. (PROTO_OP_S_*), and
 * their replies are framed (a tag byte, then an i64 status); see
 * docs/protocol.md, "Agent sessions".
 * The decoder tells a connection's generation from its first bytes: a first
 * byte other than 0, or a 0 not followed by the magic, is V1 (a V1 SET whose
 * key length starts CE F7 85 3C would announce a key of over 1 GB, far over
 * any key limit). docs/protocol.md describes every frame.
 */
#ifndef DDP_RENDEZVOUS_PROTO_H
#define DDP_RENDEZVOUS_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bytes.h"

#define PROTO_VALIDATE_MAGIC 0x3C85F7CEu

enum proto_gen {
	PROTO_GEN_UNKNOWN = 0, /* nothing decoded yet */
	PROTO_GEN_V1 = 1,      /* torch 1.13 numbering */
	PROTO_GEN_V2 = 2,      /* torch 2.x numbering, validate handshake */
};

/* Query types, independent of the generation's numbering. */
enum proto_op {
	PROTO_OP_VALIDATE,    /* u32 magic; no reply */
	PROTO_OP_SET,	      /* key, value; no reply */
	PROTO_OP_COMPARE_SET, /* key, expected, desired; reply bytes */
	PROTO_OP_GET,	      /* key; reply bytes */
	PROTO_OP_ADD,	      /* key, i64 delta; reply i64 */
	PROTO_OP_CHECK,	      /* u64 n, n keys; reply u8 READY/NOT_READY */
	PROTO_OP_WAIT,	      /* u64 n, n keys; reply u8 STOP_WAITING when all exist */
	PROTO_OP_NUM_KEYS,    /* nothing; reply i64 */
	PROTO_OP_WATCH_KEY,   /* key; reply u8 KEY_CALLBACK_REGISTERED (V1 only) */
	PROTO_OP_DELETE_KEY,  /* key; reply i64 (0 or 1) */
	PROTO_OP_APPEND,      /* key, value; no reply */
	PROTO_OP_MULTI_GET,   /* u64 n, n keys; reply n byte strings */
	PROTO_OP_MULTI_SET,   /* u64 n, n (key, value); no reply */
	PROTO_OP_CANCEL_WAIT, /* nothing; reply u8 WAIT_CANCELED */
	PROTO_OP_PING,	      /* u32 nonce; reply the same u32 */
	PROTO_OP_QUEUE_PUSH,  /* key, value; no reply (V2 only) */
	PROTO_OP_QUEUE_POP,   /* key; reply i64 length before, then bytes if > 0 */
	PROTO_OP_QUEUE_LEN,   /* key; reply i64 */
	PROTO_OP_LIST_KEYS,   /* nothing; reply i64 n, then n keys (V2 only) */
	PROTO_OP_BARRIER,     /* key, i64 world size; reply u8 STOP_WAITING (V2 only) */
	/* Agent sessions (V2 numbering only; replies: docs/protocol.md). */
	PROTO_OP_S_HELLO,	/* i64 server idle timeout (ms), client nonce */
	PROTO_OP_S_AUTH,	/* client proof */
	PROTO_OP_S_GET,		/* u64 n, n keys */
	PROTO_OP_S_CAS,		/* key, i64 has_expected, expected, desired */
	PROTO_OP_S_ADD,		/* key, i64 delta */
	PROTO_OP_S_SET,		/* key, value */
	PROTO_OP_S_SET_SESSION, /* key, value: deleted when the session ends */
	PROTO_OP_S_WATCH,	/* key */
	PROTO_OP_S_UNWATCH,	/* key */
	PROTO_OP_S_PING,	/* u32 nonce */
	PROTO_OP_COUNT,
};

/* Reply bytes. */
#define PROTO_CHECK_READY		0
#define PROTO_CHECK_NOT_READY		1
#define PROTO_WAIT_STOP_WAITING		0
#define PROTO_WAIT_CANCELED		1
#define PROTO_WATCH_KEY_UPDATED		0
#define PROTO_WATCH_KEY_CREATED		1
#define PROTO_WATCH_KEY_DELETED		2
#define PROTO_WATCH_CALLBACK_REGISTERED 3

/* Agent sessions: the wire code of PROTO_OP_S_HELLO (the others follow in
 * enum order), the tag byte before each server message, the handshake's
 * sizes and the HELLO reply's auth byte. */
#define PROTO_SESSION_CODE_FIRST 0xA0
#define PROTO_SESSION_REPLY	 0
#define PROTO_SESSION_EVENT	 1
#define PROTO_SESSION_NONCE_LEN	 32
#define PROTO_SESSION_PROOF_LEN	 32
#define PROTO_SESSION_AUTH_NONE	 0 /* the store has no token */
#define PROTO_SESSION_AUTH_TOKEN 1 /* a challenge follows */

/* Limits checked against every announced length before allocating. */
struct proto_limits {
	size_t max_key_len;	     /* one key */
	size_t max_value_len;	     /* one value (also expected/desired) */
	size_t max_keys_per_request; /* n of CHECK/WAIT/MULTI_GET/MULTI_SET */
	size_t max_request_bytes;    /* all byte fields of one request together */
};

/* The wire byte of `op` in generation `gen`, or -1 if that generation has no
 * such query. */
int proto_op_code(enum proto_gen gen, enum proto_op op);

/* The op a wire byte means in `gen`, or -1 for an unknown query type. */
int proto_op_from_code(enum proto_gen gen, uint8_t code);

/* A short lowercase name ("set", "multi_get", ...) for logs. */
const char *proto_op_name(enum proto_op op);

/* A decoded request. Valid until the next proto_decoder_feed() or
 * proto_decoder_release() on the decoder that returned it. */
struct proto_request {
	enum proto_op op;
	int64_t integer;	 /* ADD: the delta; BARRIER: the world size */
	uint32_t u32;		 /* VALIDATE: the magic; PING: the nonce */
	size_t nfields;		 /* byte fields, in wire order */
	struct byteview *fields; /* keys and values; MULTI_SET: k0 v0 k1 v1 ... */
};

/* Incremental decoder: keeps its position between feeds, so bytes may arrive
 * in any split, and one feed may hold several requests. One per connection.
 * Holds no heap memory while between requests after proto_decoder_trim(). */
struct proto_decoder {
	const struct proto_limits *limits; /* borrowed; must outlive the decoder */
	enum proto_gen gen;
	uint8_t stage;	  /* internal: what the next bytes are */
	uint8_t numfill;  /* bytes of the current integer read so far */
	uint8_t numlen;	  /* its size: 4 or 8 */
	uint8_t item;	  /* position in the op's field pattern */
	uint8_t num[8];	  /* the integer being read */
	uint64_t count;	  /* MULTI/CHECK/WAIT key count */
	uint64_t need;	  /* bytes still to read of the current field */
	size_t nexpected; /* byte fields expected in total */
	size_t data_len;  /* bytes used in data */
	size_t data_cap;
	size_t fields_cap;
	uint8_t *data;		 /* the byte fields, back to back */
	struct byteview *fields; /* heap, or inline_fields */
	struct proto_request req;
	struct byteview inline_fields[3];
};

/* Starts a decoder with no generation known yet. */
void proto_decoder_init(struct proto_decoder *dec, const struct proto_limits *limits);

/* Feeds bytes. Returns:
 *   1  a whole request was decoded: *req points at it, *used says how many
 *      bytes of buf were consumed (the rest must be fed again afterwards);
 *   0  all len bytes were consumed (*used == len); more are needed;
 *   -EMSGSIZE  a length or count over a limit (nothing was allocated for it);
 *   -EPROTO    an unknown query type or a bad validate magic;
 *   -ENOMEM.
 * After an error the decoder is unusable (close the connection). */
int proto_decoder_feed(struct proto_decoder *dec, const uint8_t *buf, size_t len, size_t *used,
		       const struct proto_request **req);

/* True when the decoder is between requests (no partial frame held). */
bool proto_decoder_idle(const struct proto_decoder *dec);

/* Frees buffers kept for reuse when idle (keeps memory of idle connections
 * small). No-op in the middle of a frame. */
void proto_decoder_trim(struct proto_decoder *dec);

/* Heap bytes the decoder holds for the frame in progress (the capacity of
 * its bytes and of its field table); 0 between frames, when what it keeps
 * for reuse goes at the next proto_decoder_trim(). For a server's memory
 * accounting. */
size_t proto_decoder_held(const struct proto_decoder *dec);

/* Frees everything; the decoder may be initialised again. */
void proto_decoder_release(struct proto_decoder *dec);

/* Encoders: append one field to buf. Return 0 or -ENOMEM. */
int proto_put_u8(struct bytebuf *buf, uint8_t v);
int proto_put_u32(struct bytebuf *buf, uint32_t v);
int proto_put_i64(struct bytebuf *buf, int64_t v);
int proto_put_u64(struct bytebuf *buf, uint64_t v);
int proto_put_bytes(struct bytebuf *buf, const void *data, size_t len);
/* The type byte of op in gen; -EINVAL if gen has no such query. */
int proto_put_op(struct bytebuf *buf, enum proto_gen gen, enum proto_op op);

/* Reply parsing for clients, over the bytes received so far. Each returns 1
 * when the whole field is in buf (and stores it), 0 when more bytes are
 * needed, or -EMSGSIZE when a byte string announces more than max_len.
 * *size receives the bytes the field takes. */
int proto_take_u8(const uint8_t *buf, size_t len, uint8_t *v, size_t *size);
int proto_take_u32(const uint8_t *buf, size_t len, uint32_t *v, size_t *size);
int proto_take_i64(const uint8_t *buf, size_t len, int64_t *v, size_t *size);
/* On success *out views into buf (8 bytes past its start). */
int proto_take_bytes(const uint8_t *buf, size_t len, size_t max_len, struct byteview *out,
		     size_t *size);

#endif
