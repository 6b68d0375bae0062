/*
 * fuzz_input.h - the fuzz targets' reader of their input: bytes taken from
 * the front, 0 once it is used up (a short input ends as if padded with
 * zeros, so every input is a valid script).
 */
#ifndef DDP_TESTS_FUZZ_INPUT_H
#define DDP_TESTS_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>

#include "byteview.h"

struct fuzz_input {
	const uint8_t *p;
	size_t n;
};

static inline uint8_t fuzz_u8(struct fuzz_input *in)
{
	if (!in->n)
		return 0;
	in->n--;
	return *in->p++;
}

static inline uint16_t fuzz_u16(struct fuzz_input *in)
{
	uint16_t v = fuzz_u8(in);
	return (uint16_t)(v << 8 | fuzz_u8(in));
}

/* A view of up to `max` bytes of the input (its length from the input). */
static inline struct byteview fuzz_bytes(struct fuzz_input *in, size_t max)
{
	size_t want = fuzz_u16(in) % (max + 1);
	struct byteview b = {in->p, want < in->n ? want : in->n};
	in->p += b.len;
	in->n -= b.len;
	return b;
}

#endif
