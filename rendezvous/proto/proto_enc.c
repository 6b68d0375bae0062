/*
 * proto_enc.c - field encoders and reply parsers of the TCPStore wire format.
 */
#include "proto.h"

#include <errno.h>

int proto_put_u8(struct bytebuf *buf, uint8_t v)
{
	return bytebuf_append_u8(buf, v);
}

int proto_put_u32(struct bytebuf *buf, uint32_t v)
{
	uint8_t b[4];
	bytes_store_u32(b, v);
	return bytebuf_append(buf, b, sizeof(b));
}

int proto_put_u64(struct bytebuf *buf, uint64_t v)
{
	uint8_t b[8];
	bytes_store_u64(b, v);
	return bytebuf_append(buf, b, sizeof(b));
}

int proto_put_i64(struct bytebuf *buf, int64_t v)
{
	return proto_put_u64(buf, (uint64_t)v);
}

int proto_put_bytes(struct bytebuf *buf, const void *data, size_t len)
{
	int rc = bytebuf_reserve(buf, 8 + len);
	if (rc < 0)
		return rc;
	proto_put_u64(buf, len);
	return bytebuf_append(buf, data, len);
}

int proto_put_op(struct bytebuf *buf, enum proto_gen gen, enum proto_op op)
{
	int code = proto_op_code(gen, op);
	if (code < 0)
		return -EINVAL;
	return proto_put_u8(buf, (uint8_t)code);
}

int proto_take_u8(const uint8_t *buf, size_t len, uint8_t *v, size_t *size)
{
	if (len < 1)
		return 0;
	*v = buf[0];
	*size = 1;
	return 1;
}

int proto_take_u32(const uint8_t *buf, size_t len, uint32_t *v, size_t *size)
{
	if (len < 4)
		return 0;
	*v = bytes_load_u32(buf);
	*size = 4;
	return 1;
}

int proto_take_i64(const uint8_t *buf, size_t len, int64_t *v, size_t *size)
{
	if (len < 8)
		return 0;
	*v = (int64_t)bytes_load_u64(buf);
	*size = 8;
	return 1;
}

int proto_take_bytes(const uint8_t *buf, size_t len, size_t max_len, struct byteview *out,
		     size_t *size)
{
	if (len < 8)
		return 0;
	uint64_t n = bytes_load_u64(buf);
	if (n > max_len)
		return -EMSGSIZE;
	if (len - 8 < n)
		return 0;
	out->data = buf + 8;
	out->len = (size_t)n;
	*size = 8 + (size_t)n;
	return 1;
}
