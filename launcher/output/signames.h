/*
 * signames.h - signal names both ways ("TERM", "SIGTERM", "15" <-> 15).
 * Pure module.
 */
#ifndef DDP_LAUNCHER_SIGNAMES_H
#define DDP_LAUNCHER_SIGNAMES_H

#include <signal.h>

/* Returns the signal number for "TERM", "SIGTERM", "sigterm" or "15",
 * or -EINVAL. */
int signame_parse(const char *name);

/* "SIGTERM" for 15; "SIG42" style for numbers without a name. The result
 * lives in static storage for names, or in a thread-local buffer. */
const char *signame_name(int sig);

#endif
