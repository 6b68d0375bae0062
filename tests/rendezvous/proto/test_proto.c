/*
 * test_proto.c - unit tests of the TCPStore codec: every vector whole, one
 * byte at a time, split at every offset, and pipelined; limits; generation
 * detection; encoders and reply parsers.
 *
 * torch 1.13 vectors are the bytes captured from the real client
 * (shared/reference/pytorch-facts.md); 2.x vectors follow the 2.x sources,
 * and list_keys / barrier were captured from torch 2.15's client.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proto.h"

#define L8(n) (n), 0, 0, 0, 0, 0, 0, 0

struct vec {
	const char *name;
	enum proto_gen gen;
	const uint8_t *bytes;
	size_t len;
	enum proto_op op;
	int nfields;
	const char *fields[4];
	int64_t integer;
	uint32_t u32;
};

/* torch 1.13.1, captured. */
static const uint8_t v1_set[] = {0x00, L8(2), '/', 'k', L8(1), 'v'};
static const uint8_t v1_wait[] = {0x05, L8(1), L8(2), '/', 'k'};
static const uint8_t v1_get[] = {0x02, L8(2), '/', 'k'};
static const uint8_t v1_add[] = {0x03, L8(2), '/', 'c', L8(5)};
static const uint8_t v1_cas[] = {0x01, L8(3), '/', 'c', 's', L8(0), L8(1), 'x'};
static const uint8_t v1_numkeys[] = {0x06};
static const uint8_t v1_delete[] = {0x08, L8(2), '/', 'k'};
static const uint8_t v1_init[] = {0x03, L8(5), 'i', 'n', 'i', 't', '/', L8(1)};
static const uint8_t v1_check[] = {0x04, L8(2), L8(1), 'a', L8(0)};
static const uint8_t v1_neg_add[] = {0x03, L8(1), 'n',	0xFF, 0xFF, 0xFF,
				     0xFF, 0xFF,  0xFF, 0xFF, 0xFF};

static const struct vec v1_vectors[] = {
    {"set", PROTO_GEN_V1, v1_set, sizeof(v1_set), PROTO_OP_SET, 2, {"/k", "v"}, 0, 0},
    {"wait", PROTO_GEN_V1, v1_wait, sizeof(v1_wait), PROTO_OP_WAIT, 1, {"/k"}, 0, 0},
    {"get", PROTO_GEN_V1, v1_get, sizeof(v1_get), PROTO_OP_GET, 1, {"/k"}, 0, 0},
    {"add", PROTO_GEN_V1, v1_add, sizeof(v1_add), PROTO_OP_ADD, 1, {"/c"}, 5, 0},
    {"cas", PROTO_GEN_V1, v1_cas, sizeof(v1_cas), PROTO_OP_COMPARE_SET, 3, {"/cs", "", "x"}, 0, 0},
    {"numkeys", PROTO_GEN_V1, v1_numkeys, sizeof(v1_numkeys), PROTO_OP_NUM_KEYS, 0, {0}, 0, 0},
    {"delete", PROTO_GEN_V1, v1_delete, sizeof(v1_delete), PROTO_OP_DELETE_KEY, 1, {"/k"}, 0, 0},
    {"init", PROTO_GEN_V1, v1_init, sizeof(v1_init), PROTO_OP_ADD, 1, {"init/"}, 1, 0},
    {"check", PROTO_GEN_V1, v1_check, sizeof(v1_check), PROTO_OP_CHECK, 2, {"a", ""}, 0, 0},
    {"neg_add", PROTO_GEN_V1, v1_neg_add, sizeof(v1_neg_add), PROTO_OP_ADD, 1, {"n"}, -1, 0},
};

/* torch 2.x (from the sources): one send per query, validate first. */
static const uint8_t v2_validate[] = {0x00, 0xCE, 0xF7, 0x85, 0x3C};
static const uint8_t v2_ping[] = {0x0D, 0x39, 0x30, 0x00, 0x00};
static const uint8_t v2_set[] = {0x01, L8(2), '/', 'k', L8(1), 'v'};
static const uint8_t v2_cas[] = {0x02, L8(1), 'k', L8(1), 'a', L8(1), 'b'};
static const uint8_t v2_get[] = {0x03, L8(2), '/', 'k'};
static const uint8_t v2_add[] = {0x04, L8(1), 'c', L8(7)};
static const uint8_t v2_check[] = {0x05, L8(1), L8(1), 'k'};
static const uint8_t v2_wait[] = {0x06, L8(2), L8(1), 'a', L8(1), 'b'};
static const uint8_t v2_numkeys[] = {0x07};
static const uint8_t v2_delete[] = {0x08, L8(1), 'k'};
static const uint8_t v2_append[] = {0x09, L8(1), 'k', L8(3), 'x', 'y', 'z'};
static const uint8_t v2_mget[] = {0x0A, L8(2), L8(1), 'a', L8(2), 'b', 'c'};
static const uint8_t v2_mset[] = {0x0B, L8(2), L8(1), 'a', L8(1), '1', L8(1), 'b', L8(0)};
static const uint8_t v2_cancel[] = {0x0C};
static const uint8_t v2_qpush[] = {0x0E, L8(1), 'q', L8(2), 'h', 'i'};
static const uint8_t v2_qpop[] = {0x0F, L8(1), 'q'};
static const uint8_t v2_qlen[] = {0x10, L8(1), 'q'};
static const uint8_t v2_mget0[] = {0x0A, L8(0)};
/* torch 2.15, captured: list_keys(); barrier("bar1", 1, ...). */
static const uint8_t v2_list[] = {0x11};
static const uint8_t v2_barrier[] = {0x12, L8(5), '/', 'b', 'a', 'r', '1', L8(1)};
static const uint8_t v2_barrier_neg[] = {0x12, L8(0), 0xFE, 0xFF, 0xFF,
					 0xFF, 0xFF,  0xFF, 0xFF, 0xFF};

static const struct vec v2_vectors[] = {
    {"validate",
     PROTO_GEN_V2,
     v2_validate,
     sizeof(v2_validate),
     PROTO_OP_VALIDATE,
     0,
     {0},
     0,
     PROTO_VALIDATE_MAGIC},
    {"ping", PROTO_GEN_V2, v2_ping, sizeof(v2_ping), PROTO_OP_PING, 0, {0}, 0, 12345},
    {"set", PROTO_GEN_V2, v2_set, sizeof(v2_set), PROTO_OP_SET, 2, {"/k", "v"}, 0, 0},
    {"cas", PROTO_GEN_V2, v2_cas, sizeof(v2_cas), PROTO_OP_COMPARE_SET, 3, {"k", "a", "b"}, 0, 0},
    {"get", PROTO_GEN_V2, v2_get, sizeof(v2_get), PROTO_OP_GET, 1, {"/k"}, 0, 0},
    {"add", PROTO_GEN_V2, v2_add, sizeof(v2_add), PROTO_OP_ADD, 1, {"c"}, 7, 0},
    {"check", PROTO_GEN_V2, v2_check, sizeof(v2_check), PROTO_OP_CHECK, 1, {"k"}, 0, 0},
    {"wait", PROTO_GEN_V2, v2_wait, sizeof(v2_wait), PROTO_OP_WAIT, 2, {"a", "b"}, 0, 0},
    {"numkeys", PROTO_GEN_V2, v2_numkeys, sizeof(v2_numkeys), PROTO_OP_NUM_KEYS, 0, {0}, 0, 0},
    {"delete", PROTO_GEN_V2, v2_delete, sizeof(v2_delete), PROTO_OP_DELETE_KEY, 1, {"k"}, 0, 0},
    {"append", PROTO_GEN_V2, v2_append, sizeof(v2_append), PROTO_OP_APPEND, 2, {"k", "xyz"}, 0, 0},
    {"mget", PROTO_GEN_V2, v2_mget, sizeof(v2_mget), PROTO_OP_MULTI_GET, 2, {"a", "bc"}, 0, 0},
    {"mset",
     PROTO_GEN_V2,
     v2_mset,
     sizeof(v2_mset),
     PROTO_OP_MULTI_SET,
     4,
     {"a", "1", "b", ""},
     0,
     0},
    {"cancel", PROTO_GEN_V2, v2_cancel, sizeof(v2_cancel), PROTO_OP_CANCEL_WAIT, 0, {0}, 0, 0},
    {"qpush", PROTO_GEN_V2, v2_qpush, sizeof(v2_qpush), PROTO_OP_QUEUE_PUSH, 2, {"q", "hi"}, 0, 0},
    {"qpop", PROTO_GEN_V2, v2_qpop, sizeof(v2_qpop), PROTO_OP_QUEUE_POP, 1, {"q"}, 0, 0},
    {"qlen", PROTO_GEN_V2, v2_qlen, sizeof(v2_qlen), PROTO_OP_QUEUE_LEN, 1, {"q"}, 0, 0},
    {"mget0", PROTO_GEN_V2, v2_mget0, sizeof(v2_mget0), PROTO_OP_MULTI_GET, 0, {0}, 0, 0},
    {"list", PROTO_GEN_V2, v2_list, sizeof(v2_list), PROTO_OP_LIST_KEYS, 0, {0}, 0, 0},
    {"barrier", PROTO_GEN_V2, v2_barrier, sizeof(v2_barrier), PROTO_OP_BARRIER, 1, {"/bar1"}, 1, 0},
    {"barrier_neg",
     PROTO_GEN_V2,
     v2_barrier_neg,
     sizeof(v2_barrier_neg),
     PROTO_OP_BARRIER,
     1,
     {""},
     -2,
     0},
};

#define NV1 (sizeof(v1_vectors) / sizeof(v1_vectors[0]))
#define NV2 (sizeof(v2_vectors) / sizeof(v2_vectors[0]))

static const struct proto_limits limits = {
    .max_key_len = 64,
    .max_value_len = 256,
    .max_keys_per_request = 8,
    .max_request_bytes = 1024,
};

static void check_request(const struct vec *v, const struct proto_request *req)
{
	assert_int_equal(req->op, v->op);
	assert_int_equal(req->nfields, v->nfields);
	for (int i = 0; i < v->nfields; i++) {
		assert_int_equal(req->fields[i].len, strlen(v->fields[i]));
		if (req->fields[i].len)
			assert_memory_equal(req->fields[i].data, v->fields[i], req->fields[i].len);
	}
	if (v->op == PROTO_OP_ADD || v->op == PROTO_OP_BARRIER)
		assert_int_equal(req->integer, v->integer);
	if (v->op == PROTO_OP_PING || v->op == PROTO_OP_VALIDATE)
		assert_int_equal(req->u32, v->u32);
}

/* A stream of vectors, and the split points at which it is fed. */
struct stream {
	uint8_t bytes[4096];
	size_t len;
	const struct vec *expect[64];
	size_t nexpect;
};

static void stream_add(struct stream *s, const struct vec *v)
{
	assert_true(s->len + v->len <= sizeof(s->bytes));
	memcpy(s->bytes + s->len, v->bytes, v->len);
	s->len += v->len;
	s->expect[s->nexpect++] = v;
}

/* Feeds the stream in chunks of the given sizes (the last repeats) and
 * checks every request comes out in order, then that the decoder is idle. */
static void feed_stream(const struct stream *s, const size_t *chunks, size_t nchunks)
{
	struct proto_decoder dec;
	proto_decoder_init(&dec, &limits);
	size_t pos = 0, got = 0, ci = 0;
	while (pos < s->len) {
		size_t n = chunks[ci < nchunks ? ci : nchunks - 1];
		ci++;
		if (n > s->len - pos)
			n = s->len - pos;
		size_t off = 0;
		while (off < n) {
			size_t used = 0;
			const struct proto_request *req = NULL;
			int rc =
			    proto_decoder_feed(&dec, s->bytes + pos + off, n - off, &used, &req);
			assert_true(rc >= 0);
			off += used;
			if (rc == 1) {
				assert_true(got < s->nexpect);
				check_request(s->expect[got], req);
				got++;
			} else {
				assert_int_equal(off, n);
			}
		}
		pos += n;
	}
	assert_int_equal(got, s->nexpect);
	assert_true(proto_decoder_idle(&dec));
	proto_decoder_release(&dec);
}

/* Whole, byte by byte, and split in two at every offset. */
static void feed_all_ways(const struct stream *s)
{
	size_t whole = s->len, one = 1;
	feed_stream(s, &whole, 1);
	feed_stream(s, &one, 1);
	for (size_t cut = 1; cut < s->len; cut++) {
		size_t chunks[2] = {cut, s->len};
		feed_stream(s, chunks, 2);
	}
}

static void test_v1_each_vector(void **state)
{
	for (size_t i = 0; i < NV1; i++) {
		struct stream s = {0};
		stream_add(&s, &v1_vectors[i]);
		feed_all_ways(&s);
	}
}

static void test_v2_each_vector(void **state)
{
	for (size_t i = 1; i < NV2; i++) {
		struct stream s = {0};
		stream_add(&s, &v2_vectors[0]); /* a 2.x connection opens with validate */
		stream_add(&s, &v2_vectors[i]);
		feed_all_ways(&s);
	}
}

static void test_v1_pipelined(void **state)
{
	struct stream s = {0};
	for (size_t i = 0; i < NV1; i++)
		stream_add(&s, &v1_vectors[i]);
	for (size_t i = 0; i < NV1; i++)
		stream_add(&s, &v1_vectors[NV1 - 1 - i]);
	feed_all_ways(&s);
	size_t chunks[] = {3, 7, 1, 13, 2};
	feed_stream(&s, chunks, 5);
}

static void test_v2_pipelined(void **state)
{
	struct stream s = {0};
	for (size_t i = 0; i < NV2; i++)
		stream_add(&s, &v2_vectors[i]);
	stream_add(&s, &v2_vectors[0]); /* validate again later is accepted */
	for (size_t i = 1; i < NV2; i++)
		stream_add(&s, &v2_vectors[NV2 - i]);
	feed_all_ways(&s);
}

/* Feeds bytes to a fresh decoder; returns the first error or the last rc. */
static int feed_raw(struct proto_decoder *dec, const uint8_t *b, size_t len)
{
	size_t pos = 0;
	int rc = 0;
	while (pos < len) {
		size_t used = 0;
		const struct proto_request *req = NULL;
		rc = proto_decoder_feed(dec, b + pos, len - pos, &used, &req);
		if (rc < 0)
			return rc;
		pos += used;
	}
	return rc;
}

static void expect_error(const uint8_t *b, size_t len, int err)
{
	struct proto_decoder dec;
	proto_decoder_init(&dec, &limits);
	assert_int_equal(feed_raw(&dec, b, len), err);
	/* A refused length allocates nothing for it. */
	assert_true(dec.data_cap <= limits.max_request_bytes * 2);
	proto_decoder_release(&dec);
}

static void test_limits(void **state)
{
	const uint8_t key_over[] = {0x02, L8(65)};
	expect_error(key_over, sizeof(key_over), -EMSGSIZE);
	const uint8_t huge_key[] = {0x02, 0, 0, 0, 0, 0, 0, 0, 0x80};
	expect_error(huge_key, sizeof(huge_key), -EMSGSIZE);
	const uint8_t value_over[] = {0x00, L8(1), 'k', 0x01, 0x01, 0, 0, 0, 0, 0, 0};
	expect_error(value_over, sizeof(value_over), -EMSGSIZE);
	const uint8_t count_over[] = {0x05, L8(9)};
	expect_error(count_over, sizeof(count_over), -EMSGSIZE);
	const uint8_t count_huge[] = {0x04, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
	expect_error(count_huge, sizeof(count_huge), -EMSGSIZE);
	/* Eight values of 200 bytes pass each limit but not the request's. */
	uint8_t mset[1 + 8 + 8 * (8 + 1 + 8 + 200)];
	size_t n = 0;
	mset[n++] = 0x0B;
	bytes_store_u64(mset + n, 8);
	n += 8;
	for (int i = 0; i < 8; i++) {
		bytes_store_u64(mset + n, 1);
		mset[n + 8] = (uint8_t)('a' + i);
		bytes_store_u64(mset + n + 9, 200);
		memset(mset + n + 17, 'v', 200);
		n += 217;
	}
	struct proto_decoder dec;
	proto_decoder_init(&dec, &limits);
	assert_int_equal(feed_raw(&dec, v2_validate, sizeof(v2_validate)), 1);
	assert_int_equal(feed_raw(&dec, mset, n), -EMSGSIZE);
	proto_decoder_release(&dec);
}

static void test_unknown_and_magic(void **state)
{
	const uint8_t v1_unknown[] = {0x0D};
	expect_error(v1_unknown, 1, -EPROTO);
	const uint8_t v1_high[] = {0xFF};
	expect_error(v1_high, 1, -EPROTO);
	uint8_t v2_unknown[sizeof(v2_validate) + 1];
	memcpy(v2_unknown, v2_validate, sizeof(v2_validate));
	v2_unknown[sizeof(v2_validate)] = 0x13; /* one past BARRIER */
	expect_error(v2_unknown, sizeof(v2_unknown), -EPROTO);
	/* LIST_KEYS and BARRIER do not exist in 1.13 numbering. */
	const uint8_t v1_list[] = {0x11};
	expect_error(v1_list, 1, -EPROTO);
	const uint8_t v1_barrier[] = {0x12};
	expect_error(v1_barrier, 1, -EPROTO);
	/* A validate with the wrong magic on a 2.x connection. */
	uint8_t bad[10];
	memcpy(bad, v2_validate, 5);
	memcpy(bad + 5, (const uint8_t[]){0x00, 0xCE, 0xF7, 0x85, 0x3D}, 5);
	expect_error(bad, sizeof(bad), -EPROTO);
	/* An error is sticky. */
	struct proto_decoder dec;
	proto_decoder_init(&dec, &limits);
	assert_int_equal(feed_raw(&dec, v1_unknown, 1), -EPROTO);
	assert_true(feed_raw(&dec, v1_get, sizeof(v1_get)) < 0);
	proto_decoder_release(&dec);
}

static void test_generation(void **state)
{
	struct proto_decoder dec;
	proto_decoder_init(&dec, &limits);
	assert_int_equal(dec.gen, PROTO_GEN_UNKNOWN);
	/* 00 then a key length that is not the magic: a 1.13 SET. */
	assert_int_equal(feed_raw(&dec, v1_set, 3), 0);
	assert_int_equal(dec.gen, PROTO_GEN_UNKNOWN);
	assert_int_equal(feed_raw(&dec, v1_set + 3, 3), 0);
	assert_int_equal(dec.gen, PROTO_GEN_V1);
	assert_int_equal(feed_raw(&dec, v1_set + 6, sizeof(v1_set) - 6), 1);
	/* 2 is GET on V1 but COMPARE_SET on V2. */
	const struct proto_request *req = NULL;
	size_t used;
	assert_int_equal(proto_decoder_feed(&dec, v1_get, sizeof(v1_get), &used, &req), 1);
	assert_int_equal(req->op, PROTO_OP_GET);
	proto_decoder_release(&dec);

	proto_decoder_init(&dec, &limits);
	assert_int_equal(feed_raw(&dec, v2_validate, 4), 0);
	assert_int_equal(feed_raw(&dec, v2_validate + 4, 1), 1);
	assert_int_equal(dec.gen, PROTO_GEN_V2);
	assert_int_equal(feed_raw(&dec, v2_cas, sizeof(v2_cas)), 1);
	proto_decoder_release(&dec);
}

static void test_truncated_and_trim(void **state)
{
	struct proto_decoder dec;
	proto_decoder_init(&dec, &limits);
	assert_int_equal(feed_raw(&dec, v1_set, sizeof(v1_set) - 1), 0);
	assert_false(proto_decoder_idle(&dec));
	proto_decoder_trim(&dec); /* no effect mid-frame */
	assert_non_null(dec.data);
	assert_int_equal(feed_raw(&dec, v1_set + sizeof(v1_set) - 1, 1), 1);
	assert_true(proto_decoder_idle(&dec));
	proto_decoder_trim(&dec);
	assert_null(dec.data);
	/* Still decodes after trimming. */
	assert_int_equal(feed_raw(&dec, v1_get, sizeof(v1_get)), 1);
	proto_decoder_release(&dec);
}

/* A client that announces a huge value and sends a little of it holds a
 * buffer about the size of what it sent, not of what it announced. */
static void test_buffer_follows_data(void **state)
{
	static const struct proto_limits big = {
	    .max_key_len = 64,
	    .max_value_len = (size_t)1 << 30,
	    .max_keys_per_request = 8,
	    .max_request_bytes = (size_t)1 << 30,
	};
	struct proto_decoder dec;
	proto_decoder_init(&dec, &big);
	const uint8_t head[] = {0x00, L8(1), 'k', 0x00, 0x00, 0x00, 0x20, 0, 0, 0, 0};
	assert_int_equal(feed_raw(&dec, head, sizeof(head)), 0);
	uint8_t chunk[1000];
	memset(chunk, 'x', sizeof(chunk));
	for (int i = 0; i < 10; i++)
		assert_int_equal(feed_raw(&dec, chunk, sizeof(chunk)), 0);
	assert_true(dec.data_cap < 4 * 10001);
	assert_false(proto_decoder_idle(&dec));
	proto_decoder_release(&dec);
}

static void test_encoders(void **state)
{
	struct bytebuf b = {0};
	assert_int_equal(proto_put_op(&b, PROTO_GEN_V2, PROTO_OP_VALIDATE), 0);
	assert_int_equal(proto_put_u32(&b, PROTO_VALIDATE_MAGIC), 0);
	assert_int_equal(b.len, sizeof(v2_validate));
	assert_memory_equal(b.data, v2_validate, b.len);
	b.len = 0;
	proto_put_op(&b, PROTO_GEN_V1, PROTO_OP_SET);
	proto_put_bytes(&b, "/k", 2);
	proto_put_bytes(&b, "v", 1);
	assert_int_equal(b.len, sizeof(v1_set));
	assert_memory_equal(b.data, v1_set, b.len);
	b.len = 0;
	assert_int_equal(proto_put_op(&b, PROTO_GEN_V1, PROTO_OP_PING), -EINVAL);
	assert_int_equal(proto_put_op(&b, PROTO_GEN_V2, PROTO_OP_WATCH_KEY), -EINVAL);
	/* Replies: i64 -2, bytes "xy", u8. */
	proto_put_i64(&b, -2);
	proto_put_bytes(&b, "xy", 2);
	proto_put_u8(&b, PROTO_WAIT_CANCELED);
	int64_t v;
	size_t size, off = 0;
	assert_int_equal(proto_take_i64(b.data, 7, &v, &size), 0);
	assert_int_equal(proto_take_i64(b.data, b.len, &v, &size), 1);
	assert_int_equal(v, -2);
	off += size;
	struct byteview bv;
	assert_int_equal(proto_take_bytes(b.data + off, 9, 16, &bv, &size), 0);
	assert_int_equal(proto_take_bytes(b.data + off, b.len - off, 1, &bv, &size), -EMSGSIZE);
	assert_int_equal(proto_take_bytes(b.data + off, b.len - off, 16, &bv, &size), 1);
	assert_int_equal(bv.len, 2);
	assert_memory_equal(bv.data, "xy", 2);
	off += size;
	uint8_t u;
	assert_int_equal(proto_take_u8(b.data + off, b.len - off, &u, &size), 1);
	assert_int_equal(u, PROTO_WAIT_CANCELED);
	uint32_t u32;
	assert_int_equal(proto_take_u32(v2_ping + 1, 4, &u32, &size), 1);
	assert_int_equal(u32, 12345);
	bytebuf_release(&b);
}

/* The list_keys reply torch 2.15's server sent for the keys /bb and /a,
 * read back with the reply parsers. */
static void test_list_keys_reply(void **state)
{
	static const uint8_t reply[] = {L8(2), L8(3), '/', 'b', 'b', L8(2), '/', 'a'};
	struct bytebuf b = {0};
	proto_put_i64(&b, 2);
	proto_put_bytes(&b, "/bb", 3);
	proto_put_bytes(&b, "/a", 2);
	assert_int_equal(b.len, sizeof(reply));
	assert_memory_equal(b.data, reply, sizeof(reply));
	bytebuf_release(&b);
	for (size_t len = 0; len <= sizeof(reply); len++) {
		int64_t n = 0;
		size_t size = 0, off = 0;
		struct byteview k;
		int rc = proto_take_i64(reply, len, &n, &size);
		if (len < 8) {
			assert_int_equal(rc, 0);
			continue;
		}
		assert_int_equal(rc, 1);
		assert_int_equal(n, 2);
		off = size;
		rc = proto_take_bytes(reply + off, len - off, 64, &k, &size);
		if (len < off + 11) {
			assert_int_equal(rc, 0);
			continue;
		}
		assert_int_equal(rc, 1);
		assert_memory_equal(k.data, "/bb", 3);
		off += size;
		rc = proto_take_bytes(reply + off, len - off, 64, &k, &size);
		assert_int_equal(rc, len == sizeof(reply) ? 1 : 0);
	}
}

static void test_op_tables(void **state)
{
	for (int op = 0; op < PROTO_OP_COUNT; op++) {
		for (int gen = PROTO_GEN_V1; gen <= PROTO_GEN_V2; gen++) {
			int code = proto_op_code(gen, op);
			if (code >= 0)
				assert_int_equal(proto_op_from_code(gen, (uint8_t)code), op);
		}
		assert_string_not_equal(proto_op_name(op), "unknown");
	}
	assert_int_equal(proto_op_code(PROTO_GEN_V1, PROTO_OP_WATCH_KEY), 7);
	assert_int_equal(proto_op_code(PROTO_GEN_V2, PROTO_OP_DELETE_KEY), 8);
	assert_int_equal(proto_op_code(PROTO_GEN_V2, PROTO_OP_QUEUE_LEN), 16);
	assert_int_equal(proto_op_code(PROTO_GEN_V1, PROTO_OP_CANCEL_WAIT), 12);
	assert_int_equal(proto_op_code(PROTO_GEN_V2, PROTO_OP_LIST_KEYS), 17);
	assert_int_equal(proto_op_code(PROTO_GEN_V2, PROTO_OP_BARRIER), 18);
	assert_int_equal(proto_op_code(PROTO_GEN_V1, PROTO_OP_LIST_KEYS), -1);
	assert_int_equal(proto_op_code(PROTO_GEN_V1, PROTO_OP_BARRIER), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_v1_each_vector), cmocka_unit_test(test_v2_each_vector),
	    cmocka_unit_test(test_v1_pipelined),   cmocka_unit_test(test_v2_pipelined),
	    cmocka_unit_test(test_limits),	   cmocka_unit_test(test_unknown_and_magic),
	    cmocka_unit_test(test_generation),	   cmocka_unit_test(test_truncated_and_trim),
	    cmocka_unit_test(test_encoders),	   cmocka_unit_test(test_buffer_follows_data),
	    cmocka_unit_test(test_op_tables),	   cmocka_unit_test(test_list_keys_reply),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
