/*
 * dtype.c - element types (enum ddp_dtype, ddp.h): their sizes, for every
 * part of libddp that turns an element count into bytes.
 */
#include "ddp.h"

size_t ddp_dtype_size(enum ddp_dtype dtype)
{
	switch (dtype) {
	case DDP_FLOAT32:
		return 4;
	case DDP_FLOAT64:
		return 8;
	}
	return 0;
}
