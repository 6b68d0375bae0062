/*
 * cudak_util.cu - the thread's last-error message of the kernel library.
 */
#include <stdio.h>
#include "cudak_internal.h"

static thread_local char cudak_errbuf[256];

extern "C" const char *cudak_last_error(void)
{
	return cudak_errbuf;
}

int cudak_fail(const char *what, cudaError_t err)
{
	snprintf(cudak_errbuf, sizeof(cudak_errbuf), "%s: %s (%s)", what, cudaGetErrorString(err),
		 cudaGetErrorName(err));
	return -EIO;
}

int cudak_fail_msg(const char *what, const char *reason)
{
	snprintf(cudak_errbuf, sizeof(cudak_errbuf), "%s: %s", what, reason);
	return -EIO;
}
