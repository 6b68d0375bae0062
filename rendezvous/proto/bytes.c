/*
 * bytes.c - the growable byte buffer.
 */
#include "bytes.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int bytebuf_reserve(struct bytebuf *buf, size_t extra)
{
	if (extra <= buf->cap - buf->len)
		return 0;
	if (extra > SIZE_MAX / 2 - buf->len)
		return -ENOMEM;
	size_t need = buf->len + extra;
	size_t cap = buf->cap ? buf->cap : 64;
	while (cap < need)
		cap *= 2;
	uint8_t *data = realloc(buf->data, cap);
	if (!data)
		return -ENOMEM;
	buf->data = data;
	buf->cap = cap;
	return 0;
}

int bytebuf_append(struct bytebuf *buf, const void *data, size_t len)
{
	if (len == 0)
		return 0;
	int rc = bytebuf_reserve(buf, len);
	if (rc < 0)
		return rc;
	memcpy(buf->data + buf->len, data, len);
	buf->len += len;
	return 0;
}

int bytebuf_append_u8(struct bytebuf *buf, uint8_t v)
{
	return bytebuf_append(buf, &v, 1);
}

void bytebuf_consume(struct bytebuf *buf, size_t n)
{
	if (n >= buf->len) {
		buf->len = 0;
		return;
	}
	memmove(buf->data, buf->data + n, buf->len - n);
	buf->len -= n;
}

void bytebuf_release(struct bytebuf *buf)
{
	free(buf->data);
	buf->data = NULL;
	buf->len = 0;
	buf->cap = 0;
}
