/* [ADDR:]PORT for the metrics options (metrics_spec.h). */
#include "metrics_spec.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int bad(char *err, size_t errlen, const char *fmt, const char *a, const char *b)
{
	if (errlen)
		snprintf(err, errlen, fmt, a, b);
	return -EINVAL;
}

int metrics_spec_parse(const char *spec, char *addr, size_t addrlen, int *port, char *err,
		       size_t errlen)
{
	const char *p = spec, *a = spec;
	size_t alen = 0;
	char lit[METRICS_ADDR_MAX];
	unsigned char bin[16];
	char *end;
	long v;

	if (!spec || !*spec)
		return bad(err, errlen, "'%s%s' is not [ADDR:]PORT", spec ? spec : "", "");
	if (spec[0] == '[') { /* [IPv6]:PORT */
		const char *close = strchr(spec, ']');

		if (!close || close[1] != ':')
			return bad(err, errlen,
				   "'%s' is not [IPV6]:PORT (a port after the bracket, as in "
				   "[::1]:9100)%s",
				   spec, "");
		a = spec + 1;
		alen = (size_t)(close - a);
		p = close + 2;
	} else if (strchr(spec, ':')) { /* IPv4:PORT */
		p = strrchr(spec, ':') + 1;
		alen = (size_t)(p - 1 - spec);
		if (memchr(spec, ':', alen))
			return bad(err, errlen,
				   "'%s': write an IPv6 address in brackets, as in [::1]:9100%s",
				   spec, "");
	}
	if (a != p && (!alen || alen >= sizeof(lit) || alen >= addrlen))
		return bad(err, errlen, "'%s' is not [ADDR:]PORT (ADDR empty or too long)%s", spec,
			   "");
	memcpy(lit, a, alen);
	lit[alen] = '\0';
	if (alen && inet_pton(spec[0] == '[' ? AF_INET6 : AF_INET, lit, bin) != 1)
		return bad(err, errlen,
			   "'%s' is not a literal %s address: give the address to listen on "
			   "as numbers (127.0.0.1, or [::1] in brackets; no host names)",
			   lit, spec[0] == '[' ? "IPv6" : "IPv4");
	errno = 0;
	v = strtol(p, &end, 10);
	if (errno || end == p || *end || *p == '-' || *p == '+' || v < 0 || v > 65535)
		return bad(err, errlen, "'%s' is not a port (0-65535; 0: a free one)%s", p, "");
	memcpy(addr, lit, alen + 1);
	*port = (int)v;
	return 0;
}
