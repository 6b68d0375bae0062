/*
 * transport.c - the helpers every CPU transport shares (transport.h).
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "timeutil.h"
#include "transport.h"

int cpu_synchronize(struct ddp_backend *b)
{
	return 0;
}

int cpu_alloc(struct ddp_backend *b, size_t bytes, void **out)
{
	/* 64-byte alignment keeps the reduction loops on whole cache lines. */
	void *p = NULL;

	if (posix_memalign(&p, 64, bytes ? bytes : 64))
		return -ENOMEM;
	*out = p;
	return 0;
}

void cpu_free_mem(struct ddp_backend *b, void *ptr)
{
	free(ptr);
}

int cpu_copy(struct ddp_backend *b, void *dst, const void *src, size_t bytes)
{
	if (bytes)
		memmove(dst, src, bytes);
	return 0;
}

const char *cpu_op_name(int kind)
{
	static const char *const names[] = {"all-reduce", "broadcast", "all-gather", "barrier"};

	return (kind >= 0 && kind < 4) ? names[kind] : "collective";
}

int cpu_poll_ms(uint64_t deadline)
{
	uint64_t left = time_left_ms(deadline);

	return left > INT_MAX ? INT_MAX : (int)left;
}
