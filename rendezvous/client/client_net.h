/*
 * client_net.h - blocking TCP plumbing of the store client: connect with
 * retry and backoff, send everything, receive with a deadline. Internal to
 * store_client.c.
 */
#ifndef DDP_RENDEZVOUS_CLIENT_NET_H
#define DDP_RENDEZVOUS_CLIENT_NET_H

#include <stddef.h>
#include <stdint.h>

#include "bytes.h"

/* Opens a TCP connection to host:port (TCP_NODELAY on, blocking), retrying
 * refused, unreachable or reset attempts, and names that do not resolve
 * (yet: a cluster's DNS may lag), with exponential backoff (10 ms doubling
 * to 1 s, each delay jittered to 50-100%) until deadline_ms (a
 * time_now_ms() value). Returns the fd, or -ECONNREFUSED (or the last
 * error) once the deadline passes, -EHOSTUNREACH when the name never
 * resolved; then *gai_err (if not NULL) holds getaddrinfo's last error
 * (0 when the name resolved). */
int client_net_connect(const char *host, int port, uint64_t deadline_ms, int *gai_err);

/* True for errors worth another connect attempt. */
int client_net_retryable(int err);

/* Sends all of buf. Returns 0, -EPIPE / -ECONNRESET, or -errno. */
int client_net_send(int fd, const void *buf, size_t len);

/* Reads what is available (at least one byte) into buf, waiting until
 * deadline_ms. *timeo_cache is the receive timeout last set on fd (0 at
 * first; keep one per fd). Returns 0, -ETIMEDOUT, -ECONNRESET when the peer
 * closed, -ENOMEM or -errno. */
int client_net_recv(int fd, struct bytebuf *buf, uint64_t deadline_ms, uint64_t *timeo_cache);

/* Sleeps for the jittered backoff `*delay_ms` (capped by the deadline) and
 * doubles it up to 1 s. */
void client_net_backoff(uint64_t *delay_ms, uint64_t deadline_ms);

#endif
