/*
 * metrics_spec.h - the one grammar of a metrics listening address,
 * [ADDR:]PORT, for ddplaunch's --metrics_port and ddp-rdzvd's
 * --metrics-port. Pure: no I/O, no name resolution.
 *
 * PORT is 0..65535 (0: a free one). ADDR, when given, is a literal address,
 * because the socket is bound to it as written: an IPv4 one (127.0.0.1) or an
 * IPv6 one in brackets ([::1]:9100). An unbracketed IPv6 address (::1:9100
 * is ambiguous) and a host name (localhost:9100) are refused, the message
 * naming the fix.
 */
#ifndef DDP_METRICS_METRICS_SPEC_H
#define DDP_METRICS_METRICS_SPEC_H

#include <stddef.h>

#define METRICS_ADDR_MAX 64

/* Parses spec into addr ("" without ADDR; addrlen >= METRICS_ADDR_MAX) and
 * *port. Returns 0, or -EINVAL with err (errlen > 0) saying what is wrong
 * and the fix. */
int metrics_spec_parse(const char *spec, char *addr, size_t addrlen, int *port, char *err,
		       size_t errlen);

#endif
