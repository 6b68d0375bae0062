/*
 * rdzv_host.h - where this node stands towards the rendezvous store's
 * host: whether it is that host (the endpoint's host is this machine), and
 * who holds a port when the store cannot bind it.
 *
 * These calls do blocking I/O of the set-up kind (name resolution,
 * getifaddrs, /proc); the agent makes them once, before its loop runs.
 */
#ifndef DDP_RENDEZVOUS_RDZV_HOST_H
#define DDP_RENDEZVOUS_RDZV_HOST_H

#include <stdbool.h>
#include <stddef.h>

/* Whether `host` is this machine, by torchrun's rule (c10d's
 * _matches_machine_hostname, widened to every interface): one of host's
 * addresses is an address of one of this machine's interfaces or a
 * loopback address (127.0.0.0/8, ::1), or host is "localhost", this
 * machine's hostname or its canonical name. --local_addr plays no part:
 * agents of simulated nodes on 127.0.0.2, ... are all on the machine of an
 * endpoint at 127.0.0.1. *literal receives host's address to bind: the
 * first on an interface, else the first loopback one, else its first.
 * Returns 0 (*is set), or -ENOENT when `host` does not resolve (err says
 * so). */
int rdzv_host_is_self(const char *host, bool *is, char *literal, size_t litlen, char *err,
		      size_t errlen);

/* Checks that --local_addr `addr` can be this node's: a literal must be an
 * address of one of this machine's interfaces or a loopback address (else
 * every connection from it fails, join_timeout long); a name must resolve
 * to one of those when it resolves at all (one that does not resolve here
 * is left to the others). `store` is the store's address as a literal (or
 * a name: then not compared): a literal of the other family cannot reach
 * it. Returns 0, or -EADDRNOTAVAIL with err naming the address and the
 * fix. */
int rdzv_host_local_check(const char *addr, const char *store, char *err, size_t errlen);

/* Whether s is an IPv4 or IPv6 literal. */
bool rdzv_host_is_literal(const char *s);

/* Whether `literal` is a loopback address (127.0.0.0/8, ::1); false for
 * names. */
bool rdzv_host_is_loopback(const char *literal);

/* Describes who listens on TCP `port`, for "port P is in use by ...":
 * "pid 1234 (ddplaunch --nnodes=2 ...)" when /proc shows the owner, else
 * "another process (not visible to this user)". */
void rdzv_port_owner(int port, char *buf, size_t len);

#endif
