/*
 * shm_name.c - the start of this rank's /dev/shm names (shm.h), shared by
 * the segment (cpu_shm.c) and the arenas (shm_arena.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shm.h"

void shm_name_base(char *buf, size_t len)
{
	const char *tag = getenv("DDP_JOB_TAG");
	size_t n = tag ? strspn(tag, "0123456789abcdefghijklmnopqrstuvwxyz"
				     "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
		       : 0;

	if (n && n <= 32 && !tag[n])
		snprintf(buf, len, "/ddp-%s-%d", tag, (int)getpid());
	else
		snprintf(buf, len, "/ddp-%d", (int)getpid());
}
