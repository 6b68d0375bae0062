/*
 * slurm_resolve.c - the master's address (see slurm_resolve.h).
 */
#include "slurm_resolve.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#define LIST_MAX 4 /* addresses a note names */

static int is_loopback(const struct addrinfo *ai)
{
	if (ai->ai_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)ai->ai_addr;

		return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
	}
	return IN6_IS_ADDR_LOOPBACK(
	    &((const struct sockaddr_in6 *)(const void *)ai->ai_addr)->sin6_addr);
}

static void numeric(const struct addrinfo *ai, char *out, size_t outlen)
{
	if (getnameinfo(ai->ai_addr, ai->ai_addrlen, out, (socklen_t)outlen, NULL, 0,
			NI_NUMERICHOST))
		snprintf(out, outlen, "?");
}

/* "a, b, c" of the first LIST_MAX distinct addresses; returns how many
 * distinct addresses there are in all. */
static int list_addresses(const struct addrinfo *res, char *out, size_t outlen)
{
	char seen[16][SLURM_ADDR_MAX];
	int n = 0, total = 0;
	size_t len = 0;

	out[0] = '\0';
	for (const struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		char a[SLURM_ADDR_MAX];
		int dup = 0;

		numeric(ai, a, sizeof(a));
		for (int i = 0; i < n; i++)
			dup |= !strcmp(seen[i], a);
		if (dup)
			continue;
		if (n < (int)(sizeof(seen) / sizeof(seen[0])))
			snprintf(seen[n++], SLURM_ADDR_MAX, "%s", a);
		if (total++ < LIST_MAX && len < outlen)
			len += (size_t)snprintf(out + len, outlen - len, "%s%s",
						total > 1 ? ", " : "", a);
	}
	if (total > LIST_MAX && len < outlen)
		snprintf(out + len, outlen - len, ", ...");
	return total;
}

static int fail_gai(int gai, const char *host, char *note, size_t notelen)
{
	int rc = gai == EAI_NONAME || gai == EAI_FAMILY ? -ENOENT
		 : gai == EAI_AGAIN			? -EAGAIN
		 : gai == EAI_MEMORY			? -ENOMEM
							: -EIO;
#ifdef EAI_NODATA
	if (gai == EAI_NODATA)
		rc = -ENOENT;
#endif
	if (notelen)
		snprintf(note, notelen, "cannot resolve \"%s\": %s", host,
			 gai == EAI_SYSTEM ? strerror(errno) : gai_strerror(gai));
	return rc;
}

int slurm_resolve_host(const char *host, char *addr, size_t addrlen, char *note, size_t notelen)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	struct addrinfo *res = NULL, *pick = NULL;
	char all[256];
	int gai, count;

	if (!note)
		notelen = 0;
	if (notelen)
		note[0] = '\0';
	gai = getaddrinfo(host, NULL, &hints, &res);
	if (gai)
		return fail_gai(gai, host, note, notelen);
	for (struct addrinfo *ai = res; ai && !pick; ai = ai->ai_next)
		if (ai->ai_family == AF_INET)
			pick = ai;
	for (struct addrinfo *ai = res; ai && !pick; ai = ai->ai_next)
		if (ai->ai_family == AF_INET6)
			pick = ai;
	if (!pick) {
		freeaddrinfo(res);
		if (notelen)
			snprintf(note, notelen, "\"%s\" has no IPv4 or IPv6 address", host);
		return -ENOENT;
	}
	numeric(pick, addr, addrlen);
	count = list_addresses(res, all, sizeof(all));
	if (notelen && is_loopback(pick) && strcmp(host, addr))
		snprintf(note, notelen,
			 "%s resolves to %s, a loopback address: other hosts cannot reach it", host,
			 addr);
	else if (notelen && count > 1)
		snprintf(note, notelen, "%s has %d addresses (%s); using %s", host, count, all,
			 addr);
	freeaddrinfo(res);
	return 0;
}
