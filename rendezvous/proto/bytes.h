/*
 * bytes.h - byte views and a growable byte buffer, shared by the codec, the
 * store and the client. Pure, no I/O.
 */
#ifndef DDP_RENDEZVOUS_BYTES_H
#define DDP_RENDEZVOUS_BYTES_H

#include <stddef.h>
#include <stdint.h>

#include "byteview.h"

/* A growable buffer. Zero-initialised (or after bytebuf_release) it holds no
 * memory; it allocates on the first append. */
struct bytebuf {
	uint8_t *data;
	size_t len;
	size_t cap;
};

/* Makes room for `extra` more bytes past len. Returns 0 or -ENOMEM. */
int bytebuf_reserve(struct bytebuf *buf, size_t extra);

/* Appends; each returns 0 or -ENOMEM (the buffer is unchanged on failure). */
int bytebuf_append(struct bytebuf *buf, const void *data, size_t len);
int bytebuf_append_u8(struct bytebuf *buf, uint8_t v);

/* Drops the first n bytes (n <= len), moving the rest to the front. */
void bytebuf_consume(struct bytebuf *buf, size_t n);

/* Frees the memory; the buffer is empty and reusable afterwards. */
void bytebuf_release(struct bytebuf *buf);

/* Little-endian loads and stores (the wire is little-endian). */
static inline uint64_t bytes_load_u64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static inline uint32_t bytes_load_u32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void bytes_store_u64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void bytes_store_u32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

#endif
