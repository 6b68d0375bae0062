#include "timeutil.h"

#include <time.h>

uint64_t time_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t time_now_ms(void)
{
	return time_now_ns() / 1000000u;
}

uint64_t time_left_ms(uint64_t deadline_ms)
{
	uint64_t now = time_now_ms();

	return now >= deadline_ms ? 0 : deadline_ms - now;
}
