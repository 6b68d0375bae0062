/*
 * opts_host.h - whether a host given in the options (an endpoint's host, the
 * static store's --master_addr, --local_addr) can ever be one: an IPv4 or
 * IPv6 literal, or a name that parses as a host name. Pure: nothing is
 * resolved (a name that parses but does not resolve yet is the run's to
 * retry), so --dry_run and the run refuse the same hosts.
 */
#ifndef DDP_LAUNCHER_OPTS_HOST_H
#define DDP_LAUNCHER_OPTS_HOST_H

#include <stdbool.h>
#include <stddef.h>

/* Whether host is an IPv6 literal, with or without a zone ("%SCOPE": an
 * interface name or number, a non-empty word of [A-Za-z0-9_.-], as in
 * fe80::1%eth0; getaddrinfo takes it). On true, addr (when not NULL) gets
 * the address without its zone. */
bool opts_host_ipv6(const char *host, unsigned char addr[16]);

/* Whether host (no brackets, no port) parses: an IPv4 literal (also the
 * short forms getaddrinfo takes, "127.1"), an IPv6 literal (opts_host_ipv6:
 * a zone is allowed), or a host name
 * (labels of letters, digits, '-' and '_', 1 to 63 bytes, not starting or
 * ending with '-', joined by single dots, at most 253 bytes, an optional
 * final dot; a name whose last label is all digits is an IPv4 address that
 * does not parse, such as 256.1.1.1). On false, why (lowercase, no subject)
 * says what is wrong. */
bool opts_host_parses(const char *host, char *why, size_t whylen);

/* Whether host is an address no store can be at: multicast (224.0.0.0/4,
 * ff00::/8) or the IPv4 broadcast address. */
bool opts_host_not_unicast(const char *host);

#endif
