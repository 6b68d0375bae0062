/*
 * opts_host.c - whether a host given in the options can ever be one
 * (opts_host.h).
 */
#include "opts_host.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#define HOST_NAME_MAX_LEN 253
#define HOST_LABEL_MAX	  63

static bool label_char(char c)
{
	return isalnum((unsigned char)c) || c == '-' || c == '_';
}

/* The label of len bytes at s; false with why filled. */
static bool label_ok(const char *s, size_t len, char *why, size_t whylen)
{
	if (len == 0) {
		snprintf(why, whylen, "an empty label (two dots, or a leading dot)");
		return false;
	}
	if (len > HOST_LABEL_MAX) {
		snprintf(why, whylen, "a label over %d bytes", HOST_LABEL_MAX);
		return false;
	}
	for (size_t i = 0; i < len; i++)
		if (!label_char(s[i])) {
			if (isprint((unsigned char)s[i]))
				snprintf(why, whylen, "'%c' is not allowed in a host name", s[i]);
			else
				snprintf(why, whylen, "a control character (0x%02x)",
					 (unsigned char)s[i]);
			return false;
		}
	if (s[0] == '-' || s[len - 1] == '-') {
		snprintf(why, whylen, "a label starts or ends with '-'");
		return false;
	}
	return true;
}

static bool all_digits(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (!isdigit((unsigned char)s[i]))
			return false;
	return len > 0;
}

bool opts_host_ipv6(const char *host, unsigned char addr[16])
{
	char plain[INET6_ADDRSTRLEN];
	unsigned char b[16];
	const char *zone = strchr(host, '%');
	size_t n = zone ? (size_t)(zone - host) : strlen(host);

	if (n >= sizeof(plain))
		return false;
	if (zone) {
		if (!zone[1] || zone[1 + strspn(zone + 1, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
							  "abcdefghijklmnopqrstuvwxyz"
							  "0123456789_.-")])
			return false;
	}
	memcpy(plain, host, n);
	plain[n] = '\0';
	if (inet_pton(AF_INET6, plain, b) != 1)
		return false;
	if (addr)
		memcpy(addr, b, sizeof(b));
	return true;
}

bool opts_host_parses(const char *host, char *why, size_t whylen)
{
	unsigned char b[16];
	struct in_addr a4;
	size_t len = strlen(host), last = 0;

	if (inet_pton(AF_INET, host, b) == 1 || opts_host_ipv6(host, NULL))
		return true;
	if (len && host[len - 1] == '.')
		len--; /* a fully qualified name's final dot */
	if (len == 0 || len > HOST_NAME_MAX_LEN) {
		snprintf(why, whylen, "a host name has 1 to %d bytes", HOST_NAME_MAX_LEN);
		return false;
	}
	for (size_t i = 0, start = 0; i <= len; i++)
		if (i == len || host[i] == '.') {
			if (!label_ok(host + start, i - start, why, whylen))
				return false;
			last = start;
			start = i + 1;
		}
	/* No top-level domain is all digits: this is an IPv4 address, which
	 * must then parse (getaddrinfo also takes "127.1" and "10.1.2"). */
	if (all_digits(host + last, len - last) && inet_aton(host, &a4) == 0) {
		snprintf(why, whylen, "an IPv4 address is four numbers from 0 to 255");
		return false;
	}
	return true;
}

bool opts_host_not_unicast(const char *host)
{
	unsigned char b[16];

	if (inet_pton(AF_INET, host, b) == 1)
		return (b[0] >= 224 && b[0] <= 239) || (b[0] & b[1] & b[2] & b[3]) == 255;
	if (opts_host_ipv6(host, b))
		return b[0] == 0xff;
	return false;
}
