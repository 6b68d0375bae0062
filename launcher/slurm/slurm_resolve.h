/*
 * slurm_resolve.h - turns the master's host name from Slurm into the
 * address to connect to, and says which one was chosen. Not pure: it asks
 * the resolver (getaddrinfo: /etc/hosts, DNS, ...).
 */
#ifndef DDP_LAUNCHER_SLURM_RESOLVE_H
#define DDP_LAUNCHER_SLURM_RESOLVE_H

#include <stddef.h>

/* Room for any numeric address slurm_resolve_host() writes. */
#define SLURM_ADDR_MAX 46

/* Resolves host (a name or a numeric address) for a TCP connection and
 * writes one numeric address into addr (addrlen >= SLURM_ADDR_MAX): the
 * first IPv4 answer in the resolver's order, else the first IPv6 one (the
 * launcher's store listens on IPv4 first). note, which may be NULL, gets
 * one lowercase line on the choice when there is something to say, else
 * "": "n1 has 2 addresses (10.0.0.1, fd00::1); using 10.0.0.1", "n1
 * resolves to 127.0.1.1, a loopback address: other hosts cannot reach it".
 * Returns 0, or -ENOENT (no such host, or no IPv4/IPv6 address), -EAGAIN
 * (a temporary failure: the resolver may answer later), -EIO (any other
 * resolver failure), with note (where given) saying why. */
int slurm_resolve_host(const char *host, char *addr, size_t addrlen, char *note, size_t notelen);

#endif
