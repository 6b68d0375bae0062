/*
 * gpu_probe.c - exit 0 and print the device count when a GPU is usable,
 * else print why and exit 77 (meson's "skipped"). Test scripts call it first.
 */
#include <stdio.h>

#include "cudak_probe.h"

int main(void)
{
	char why[256];
	int n = cudak_probe_devices(why, sizeof(why));

	if (n == 0) {
		printf("skip: no usable GPU (%s)\n", why);
		return CUDAK_EXIT_SKIP;
	}
	printf("%d GPU(s)\n", n);
	return 0;
}
