/*
 * safetensors.h - a safetensors file as libddp holds it (the inside of
 * struct ddp_ckpt, ddp.h): the whole file in memory, its header parsed and
 * validated into one entry per tensor (offsets checked to lie within the
 * data section, without overlap), and the "__metadata__" object. An open
 * checkpoint is read-only; all it holds lives until ddp_ckpt_free.
 */
#ifndef DDP_WORKER_SAFETENSORS_H
#define DDP_WORKER_SAFETENSORS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "ddp.h"

/* Limits on what we accept from a file. */
#define ST_MAX_HEADER (100u << 20)
#define ST_MAX_NDIM   8
#define ST_MAX_NAME   4096 /* bytes of a tensor name we write, with its terminator */

/* Each tensor's checksum is the metadata entry "xxh3_64:NAME" -> 16
 * lowercase hex digits, XXH3_64bits (xxHash, seed 0) of the tensor's bytes
 * as stored. Metadata keys with this prefix are reserved. */
#define ST_SUM_PREFIX "xxh3_64:"
#define ST_SUM_HEX    16

struct st_entry {
	char *name;
	char dtype_str[8]; /* as in the file: "F32", "F64", "BF16", ... */
	int dtype;	   /* DDP_FLOAT32/64, or -1 for a dtype we do not load */
	size_t esize;
	int ndim;
	int64_t shape[ST_MAX_NDIM];
	size_t begin, end; /* byte offsets in the data section */
	int verified;	   /* 1: the bytes matched the stored checksum; 0: none stored */
};

struct ddp_ckpt {
	char *path;
	char *file; /* whole file */
	size_t len;
	const char *data; /* data section */
	size_t ntensors;
	struct st_entry *t;
	json_t *meta; /* "__metadata__" object or NULL */
};

#endif
