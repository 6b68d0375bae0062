/*
 * rdzv_host.h - where this node stands towards the rendezvous store's
 * host: whether it is that host (the endpoint's address is one of its own,
 * or --local_addr), and who holds a port when the store cannot bind it.
 *
 * These calls do blocking I/O of the set-up kind (name resolution,
 * getifaddrs, /proc); the agent makes them once, before its loop runs.
 */
#ifndef DDP_LAUNCHER_RDZV_HOST_H
#define DDP_LAUNCHER_RDZV_HOST_H

#include <stdbool.h>
#include <stddef.h>

/* Whether `host` names this node: with `local_addr` (--local_addr, may be
 * NULL) when one of host's addresses is one of local_addr's; otherwise when
 * one of host's addresses is an address of one of this machine's
 * interfaces. On success *literal receives host's address that matched (or
 * its first, when none did), as a literal for binding. Returns 0 (*is
 * set), or -ENOENT when `host` does not resolve (err says so). */
int rdzv_host_is_self(const char *host, const char *local_addr, bool *is, char *literal,
		      size_t litlen, char *err, size_t errlen);

/* Whether s is an IPv4 or IPv6 literal. */
bool rdzv_host_is_literal(const char *s);

/* Describes who listens on TCP `port`, for "port P is in use by ...":
 * "pid 1234 (ddplaunch --nnodes=2 ...)" when /proc shows the owner, else
 * "another process (not visible to this user)". */
void rdzv_port_owner(int port, char *buf, size_t len);

#endif
