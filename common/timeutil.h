/*
 * timeutil.h - monotonic clock helpers shared by every part.
 */
#ifndef DDP_COMMON_TIMEUTIL_H
#define DDP_COMMON_TIMEUTIL_H

#include <stdint.h>

/* Nanoseconds / milliseconds from CLOCK_MONOTONIC. */
uint64_t time_now_ns(void);
uint64_t time_now_ms(void);

/* Milliseconds left until deadline_ms (a time_now_ms() value); 0 when past. */
uint64_t time_left_ms(uint64_t deadline_ms);

#endif
