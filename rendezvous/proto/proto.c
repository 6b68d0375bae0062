/*
 * proto.c - the TCPStore wire codec: query numbering of both generations,
 * the incremental request decoder, and field encoders / reply parsers.
 */
#include "proto.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum dec_stage {
	ST_START,  /* next byte is a query type */
	ST_DETECT, /* first byte was 0 on a new connection: magic or V1 SET? */
	ST_NUM,	   /* reading a little-endian integer into num[] */
	ST_BODY,   /* copying the bytes of a key or value */
	ST_DONE,   /* a request was returned; reset on the next feed */
	ST_ERROR,  /* a bad frame was seen; the decoder is dead */
};

/* V1: torch 1.13, extended as early 2.x clients did (9..12). */
static const int8_t v1_ops[] = {
    PROTO_OP_SET,	  PROTO_OP_COMPARE_SET, PROTO_OP_GET,	    PROTO_OP_ADD,
    PROTO_OP_CHECK,	  PROTO_OP_WAIT,	PROTO_OP_NUM_KEYS,  PROTO_OP_WATCH_KEY,
    PROTO_OP_DELETE_KEY,  PROTO_OP_APPEND,	PROTO_OP_MULTI_GET, PROTO_OP_MULTI_SET,
    PROTO_OP_CANCEL_WAIT,
};

/* V2: torch 2.x with the validate handshake. */
static const int8_t v2_ops[] = {
    PROTO_OP_VALIDATE,	  PROTO_OP_SET,	      PROTO_OP_COMPARE_SET, PROTO_OP_GET,
    PROTO_OP_ADD,	  PROTO_OP_CHECK,     PROTO_OP_WAIT,	    PROTO_OP_NUM_KEYS,
    PROTO_OP_DELETE_KEY,  PROTO_OP_APPEND,    PROTO_OP_MULTI_GET,   PROTO_OP_MULTI_SET,
    PROTO_OP_CANCEL_WAIT, PROTO_OP_PING,      PROTO_OP_QUEUE_PUSH,  PROTO_OP_QUEUE_POP,
    PROTO_OP_QUEUE_LEN,	  PROTO_OP_LIST_KEYS, PROTO_OP_BARRIER,
};

/* The fields after the type byte: k key, v value, i i64, u u32, N a u64
 * count followed by count repetitions of the rest of the pattern. */
static const char *const op_patterns[PROTO_OP_COUNT] = {
    [PROTO_OP_VALIDATE] = "u",	  [PROTO_OP_SET] = "kv",       [PROTO_OP_COMPARE_SET] = "kvv",
    [PROTO_OP_GET] = "k",	  [PROTO_OP_ADD] = "ki",       [PROTO_OP_CHECK] = "Nk",
    [PROTO_OP_WAIT] = "Nk",	  [PROTO_OP_NUM_KEYS] = "",    [PROTO_OP_WATCH_KEY] = "k",
    [PROTO_OP_DELETE_KEY] = "k",  [PROTO_OP_APPEND] = "kv",    [PROTO_OP_MULTI_GET] = "Nk",
    [PROTO_OP_MULTI_SET] = "Nkv", [PROTO_OP_CANCEL_WAIT] = "", [PROTO_OP_PING] = "u",
    [PROTO_OP_QUEUE_PUSH] = "kv", [PROTO_OP_QUEUE_POP] = "k",  [PROTO_OP_QUEUE_LEN] = "k",
    [PROTO_OP_LIST_KEYS] = "",	  [PROTO_OP_BARRIER] = "ki",   [PROTO_OP_S_HELLO] = "iv",
    [PROTO_OP_S_AUTH] = "v",	  [PROTO_OP_S_GET] = "Nk",     [PROTO_OP_S_CAS] = "kivv",
    [PROTO_OP_S_ADD] = "ki",	  [PROTO_OP_S_SET] = "kv",     [PROTO_OP_S_SET_SESSION] = "kv",
    [PROTO_OP_S_WATCH] = "k",	  [PROTO_OP_S_UNWATCH] = "k",  [PROTO_OP_S_PING] = "u",
};

static const char *const op_names[PROTO_OP_COUNT] = {
    [PROTO_OP_VALIDATE] = "validate",
    [PROTO_OP_SET] = "set",
    [PROTO_OP_COMPARE_SET] = "compare_set",
    [PROTO_OP_GET] = "get",
    [PROTO_OP_ADD] = "add",
    [PROTO_OP_CHECK] = "check",
    [PROTO_OP_WAIT] = "wait",
    [PROTO_OP_NUM_KEYS] = "num_keys",
    [PROTO_OP_WATCH_KEY] = "watch_key",
    [PROTO_OP_DELETE_KEY] = "delete_key",
    [PROTO_OP_APPEND] = "append",
    [PROTO_OP_MULTI_GET] = "multi_get",
    [PROTO_OP_MULTI_SET] = "multi_set",
    [PROTO_OP_CANCEL_WAIT] = "cancel_wait",
    [PROTO_OP_PING] = "ping",
    [PROTO_OP_QUEUE_PUSH] = "queue_push",
    [PROTO_OP_QUEUE_POP] = "queue_pop",
    [PROTO_OP_QUEUE_LEN] = "queue_len",
    [PROTO_OP_LIST_KEYS] = "list_keys",
    [PROTO_OP_BARRIER] = "barrier",
    [PROTO_OP_S_HELLO] = "session_hello",
    [PROTO_OP_S_AUTH] = "session_auth",
    [PROTO_OP_S_GET] = "session_get",
    [PROTO_OP_S_CAS] = "session_cas",
    [PROTO_OP_S_ADD] = "session_add",
    [PROTO_OP_S_SET] = "session_set",
    [PROTO_OP_S_SET_SESSION] = "session_set_session",
    [PROTO_OP_S_WATCH] = "session_watch",
    [PROTO_OP_S_UNWATCH] = "session_unwatch",
    [PROTO_OP_S_PING] = "session_ping",
};

/* Agent-session codes: PROTO_SESSION_CODE_FIRST + (op - PROTO_OP_S_HELLO),
 * V2 only, far above anything torch numbers. */
#define SESSION_OPS (PROTO_OP_COUNT - PROTO_OP_S_HELLO)

int proto_op_code(enum proto_gen gen, enum proto_op op)
{
	if (op >= PROTO_OP_S_HELLO && op < PROTO_OP_COUNT)
		return gen == PROTO_GEN_V2 ? PROTO_SESSION_CODE_FIRST + (int)(op - PROTO_OP_S_HELLO)
					   : -1;
	const int8_t *table = gen == PROTO_GEN_V2 ? v2_ops : v1_ops;
	size_t n = gen == PROTO_GEN_V2 ? sizeof(v2_ops) : sizeof(v1_ops);
	for (size_t i = 0; i < n; i++)
		if (table[i] == (int8_t)op)
			return (int)i;
	return -1;
}

int proto_op_from_code(enum proto_gen gen, uint8_t code)
{
	if (gen == PROTO_GEN_V2 && code >= PROTO_SESSION_CODE_FIRST &&
	    code < PROTO_SESSION_CODE_FIRST + SESSION_OPS)
		return PROTO_OP_S_HELLO + (code - PROTO_SESSION_CODE_FIRST);
	if (gen == PROTO_GEN_V2)
		return code < sizeof(v2_ops) ? v2_ops[code] : -1;
	return code < sizeof(v1_ops) ? v1_ops[code] : -1;
}

const char *proto_op_name(enum proto_op op)
{
	return (unsigned)op < PROTO_OP_COUNT ? op_names[op] : "unknown";
}

void proto_decoder_init(struct proto_decoder *dec, const struct proto_limits *limits)
{
	memset(dec, 0, sizeof(*dec));
	dec->limits = limits;
	dec->gen = PROTO_GEN_UNKNOWN;
	dec->stage = ST_START;
	dec->fields = dec->inline_fields;
	dec->fields_cap = sizeof(dec->inline_fields) / sizeof(dec->inline_fields[0]);
}

static void dec_reset(struct proto_decoder *dec)
{
	dec->stage = ST_START;
	dec->item = 0;
	dec->count = 0;
	dec->nexpected = 0;
	dec->data_len = 0;
	dec->req.nfields = 0;
	dec->req.fields = NULL;
	dec->req.integer = 0;
	dec->req.u32 = 0;
}

/* The kind of the next item ('k', 'v', 'i', 'u', 'N'), or 0 when done. */
static char dec_next_kind(const struct proto_decoder *dec)
{
	const char *pat = op_patterns[dec->req.op];
	if (pat[0] != 'N')
		return pat[dec->item];
	if (dec->item == 0)
		return 'N';
	if (dec->req.nfields >= dec->nexpected)
		return 0;
	size_t body = strlen(pat + 1);
	return pat[1 + dec->req.nfields % body];
}

static int dec_complete(struct proto_decoder *dec)
{
	/* Field views hold offsets while data may still move; make them
	 * pointers now that the request is whole. */
	static const uint8_t empty[1];
	const uint8_t *base = dec->data ? dec->data : empty;
	for (size_t i = 0; i < dec->req.nfields; i++)
		dec->fields[i].data = base + (uintptr_t)dec->fields[i].data;
	dec->req.fields = dec->fields;
	dec->stage = ST_DONE;
	return 1;
}

/* Moves to the next item of the pattern, or completes the request. */
static int dec_next_item(struct proto_decoder *dec)
{
	char kind = dec_next_kind(dec);
	if (kind == 0)
		return dec_complete(dec);
	dec->stage = ST_NUM;
	dec->numfill = 0;
	dec->numlen = kind == 'u' ? 4 : 8;
	return 0;
}

static int dec_start(struct proto_decoder *dec, uint8_t code)
{
	if (dec->gen == PROTO_GEN_UNKNOWN) {
		if (code == 0) {
			dec->stage = ST_DETECT;
			dec->numfill = 0;
			dec->numlen = 4;
			return 0;
		}
		dec->gen = PROTO_GEN_V1;
	}
	int op = proto_op_from_code(dec->gen, code);
	if (op < 0)
		return -EPROTO;
	dec->req.op = (enum proto_op)op;
	return dec_next_item(dec);
}

/* After "00" and four more bytes on a new connection. */
static int dec_detect(struct proto_decoder *dec)
{
	if (bytes_load_u32(dec->num) == PROTO_VALIDATE_MAGIC) {
		dec->gen = PROTO_GEN_V2;
		dec->req.op = PROTO_OP_VALIDATE;
		dec->req.u32 = PROTO_VALIDATE_MAGIC;
		return dec_complete(dec);
	}
	/* A torch 1.13 SET: the four bytes begin the key's u64 length. */
	dec->gen = PROTO_GEN_V1;
	dec->req.op = PROTO_OP_SET;
	dec->stage = ST_NUM;
	dec->numlen = 8;
	return 0;
}

static int dec_count(struct proto_decoder *dec, uint64_t count)
{
	const char *pat = op_patterns[dec->req.op];
	if (count > dec->limits->max_keys_per_request)
		return -EMSGSIZE;
	size_t n = (size_t)count * strlen(pat + 1);
	if (n > dec->fields_cap) {
		struct byteview *fields = dec->fields == dec->inline_fields ? NULL : dec->fields;
		fields = realloc(fields, n * sizeof(*fields));
		if (!fields)
			return -ENOMEM;
		dec->fields = fields;
		dec->fields_cap = n;
	}
	dec->count = count;
	dec->nexpected = n;
	dec->item = 1;
	return dec_next_item(dec);
}

static int dec_field_len(struct proto_decoder *dec, char kind, uint64_t len)
{
	const struct proto_limits *lim = dec->limits;
	if (len > (kind == 'k' ? lim->max_key_len : lim->max_value_len))
		return -EMSGSIZE;
	if (len > lim->max_request_bytes - dec->data_len || dec->req.nfields >= dec->fields_cap)
		return -EMSGSIZE;
	struct byteview *f = &dec->fields[dec->req.nfields];
	f->data = (const uint8_t *)(uintptr_t)dec->data_len;
	f->len = (size_t)len;
	dec->need = len;
	dec->stage = ST_BODY;
	return 0;
}

static int dec_field_done(struct proto_decoder *dec)
{
	dec->req.nfields++;
	if (op_patterns[dec->req.op][0] != 'N')
		dec->item++;
	return dec_next_item(dec);
}

static int dec_number(struct proto_decoder *dec)
{
	char kind = dec_next_kind(dec);
	uint64_t v = dec->numlen == 4 ? bytes_load_u32(dec->num) : bytes_load_u64(dec->num);
	switch (kind) {
	case 'N':
		return dec_count(dec, v);
	case 'i':
		dec->req.integer = (int64_t)v;
		dec->item++;
		return dec_next_item(dec);
	case 'u':
		dec->req.u32 = (uint32_t)v;
		if (dec->req.op == PROTO_OP_VALIDATE && v != PROTO_VALIDATE_MAGIC)
			return -EPROTO;
		dec->item++;
		return dec_next_item(dec);
	default: {
		int rc = dec_field_len(dec, kind, v);
		if (rc == 0 && dec->need == 0)
			return dec_field_done(dec);
		return rc;
	}
	}
}

/* Makes room for `take` more body bytes. The buffer grows with the bytes
 * that actually arrive (doubling, up to what the field announced), so a
 * client that announces a large value and sends part of it holds no more
 * than about twice what it sent. */
static int dec_room(struct proto_decoder *dec, size_t take)
{
	size_t want = dec->data_len + take;
	if (want <= dec->data_cap)
		return 0;
	size_t end = dec->data_len + (size_t)dec->need; /* end of this field */
	size_t cap = dec->data_cap ? dec->data_cap : 64;
	while (cap < want)
		cap *= 2;
	if (cap > end)
		cap = end;
	uint8_t *data = realloc(dec->data, cap);
	if (!data)
		return -ENOMEM;
	dec->data = data;
	dec->data_cap = cap;
	return 0;
}

/* Consumes bytes of the current stage; returns bytes used through *n. */
static int dec_step(struct proto_decoder *dec, const uint8_t *buf, size_t len, size_t *n)
{
	size_t take;
	switch (dec->stage) {
	case ST_START:
		*n = 1;
		return dec_start(dec, buf[0]);
	case ST_DETECT:
	case ST_NUM:
		take = dec->numlen - dec->numfill;
		take = take < len ? take : len;
		memcpy(dec->num + dec->numfill, buf, take);
		dec->numfill += (uint8_t)take;
		*n = take;
		if (dec->numfill < dec->numlen)
			return 0;
		return dec->stage == ST_DETECT ? dec_detect(dec) : dec_number(dec);
	case ST_BODY:
		take = dec->need < len ? (size_t)dec->need : len;
		*n = 0;
		if (dec_room(dec, take) < 0)
			return -ENOMEM;
		memcpy(dec->data + dec->data_len, buf, take);
		dec->data_len += take;
		dec->need -= take;
		*n = take;
		return dec->need == 0 ? dec_field_done(dec) : 0;
	default:
		*n = 0;
		return -EPROTO;
	}
}

int proto_decoder_feed(struct proto_decoder *dec, const uint8_t *buf, size_t len, size_t *used,
		       const struct proto_request **req)
{
	size_t pos = 0;
	if (dec->stage == ST_DONE)
		dec_reset(dec);
	while (pos < len) {
		size_t n = 0;
		int rc = dec_step(dec, buf + pos, len - pos, &n);
		pos += n;
		if (rc < 0) {
			dec->stage = ST_ERROR;
			*used = pos;
			return rc;
		}
		if (rc == 1) {
			*used = pos;
			*req = &dec->req;
			return 1;
		}
	}
	*used = pos;
	return dec->stage == ST_ERROR ? -EPROTO : 0;
}

bool proto_decoder_idle(const struct proto_decoder *dec)
{
	return dec->stage == ST_START || dec->stage == ST_DONE;
}

void proto_decoder_trim(struct proto_decoder *dec)
{
	if (!proto_decoder_idle(dec))
		return;
	if (dec->stage == ST_DONE)
		dec_reset(dec);
	free(dec->data);
	dec->data = NULL;
	dec->data_cap = 0;
	if (dec->fields != dec->inline_fields)
		free(dec->fields);
	dec->fields = dec->inline_fields;
	dec->fields_cap = sizeof(dec->inline_fields) / sizeof(dec->inline_fields[0]);
}

size_t proto_decoder_held(const struct proto_decoder *dec)
{
	if (proto_decoder_idle(dec))
		return 0;
	size_t fields = dec->fields == dec->inline_fields ? 0 : dec->fields_cap;
	return dec->data_cap + fields * sizeof(*dec->fields);
}

void proto_decoder_release(struct proto_decoder *dec)
{
	free(dec->data);
	if (dec->fields != dec->inline_fields)
		free(dec->fields);
	proto_decoder_init(dec, dec->limits);
}
