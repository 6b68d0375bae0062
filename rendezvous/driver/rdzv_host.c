/*
 * rdzv_host.c - is this node the store's host, and who holds a port
 * (rdzv_host.h).
 */
#include "rdzv_host.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

/* An address reduced to its bytes (IPv4-mapped IPv6 as IPv4). */
struct host_ip {
	int family;
	unsigned char b[16];
};

static bool ip_of(const struct sockaddr *sa, struct host_ip *ip)
{
	static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

	memset(ip, 0, sizeof(*ip));
	if (sa->sa_family == AF_INET) {
		ip->family = AF_INET;
		memcpy(ip->b, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		return true;
	}
	if (sa->sa_family == AF_INET6) {
		const unsigned char *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;

		if (!memcmp(a, mapped, 12)) {
			ip->family = AF_INET;
			memcpy(ip->b, a + 12, 4);
		} else {
			ip->family = AF_INET6;
			memcpy(ip->b, a, 16);
		}
		return true;
	}
	return false;
}

static bool ip_eq(const struct host_ip *a, const struct host_ip *b)
{
	return a->family == b->family && !memcmp(a->b, b->b, a->family == AF_INET ? 4 : 16);
}

static void ip_text(const struct host_ip *ip, char *buf, size_t len)
{
	if (!inet_ntop(ip->family, ip->b, buf, (socklen_t)len) && len)
		buf[0] = '\0';
}

static int resolve(const char *name, int flags, struct addrinfo **out)
{
	struct addrinfo hints = {
	    .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = flags};

	return getaddrinfo(name, NULL, &hints, out) == 0 && *out ? 0 : -ENOENT;
}

static bool interface_has(struct ifaddrs *ifs, const struct host_ip *ip)
{
	struct host_ip x;

	for (struct ifaddrs *i = ifs; i; i = i->ifa_next)
		if (i->ifa_addr && ip_of(i->ifa_addr, &x) && ip_eq(&x, ip))
			return true;
	return false;
}

/* 127.0.0.0/8 or ::1: Linux answers on every loopback address, not only on
 * the one lo lists. */
static bool ip_loopback(const struct host_ip *ip)
{
	static const unsigned char one[16] = {[15] = 1};

	return ip->family == AF_INET ? ip->b[0] == 127 : !memcmp(ip->b, one, 16);
}

bool rdzv_host_is_literal(const char *s)
{
	unsigned char b[16];

	return inet_pton(AF_INET, s, b) == 1 || inet_pton(AF_INET6, s, b) == 1;
}

bool rdzv_host_is_loopback(const char *literal)
{
	struct host_ip ip = {.family = AF_INET};

	if (inet_pton(AF_INET, literal, ip.b) != 1) {
		ip.family = AF_INET6;
		if (inet_pton(AF_INET6, literal, ip.b) != 1)
			return false;
	}
	return ip_loopback(&ip);
}

/* torchrun's names of this machine: "localhost", its hostname, and the
 * hostname's canonical name (its FQDN). */
static bool name_is_machine(const char *host)
{
	char me[256];
	struct addrinfo *ai = NULL;
	bool is;

	if (rdzv_host_is_literal(host))
		return false;
	if (!strcasecmp(host, "localhost"))
		return true;
	if (gethostname(me, sizeof(me)) < 0)
		return false;
	me[sizeof(me) - 1] = '\0';
	if (!strcasecmp(host, me))
		return true;
	if (resolve(me, AI_CANONNAME, &ai) < 0)
		return false;
	is = ai->ai_canonname && !strcasecmp(host, ai->ai_canonname);
	freeaddrinfo(ai);
	return is;
}

/* Host's address to bind: the first on an interface, else the first
 * loopback one, else the first; *mine: whether it is this machine's. */
static void pick(struct addrinfo *h, struct ifaddrs *ifs, struct host_ip *out, bool *mine)
{
	struct host_ip ip, loop = {0}, first = {0};

	for (struct addrinfo *a = h; a; a = a->ai_next) {
		if (!ip_of(a->ai_addr, &ip))
			continue;
		if (interface_has(ifs, &ip)) {
			*out = ip;
			*mine = true;
			return;
		}
		if (!loop.family && ip_loopback(&ip))
			loop = ip;
		if (!first.family)
			first = ip;
	}
	*mine = loop.family != 0;
	*out = loop.family ? loop : first;
}

int rdzv_host_is_self(const char *host, bool *is, char *literal, size_t litlen, char *err,
		      size_t errlen)
{
	struct addrinfo *h = NULL;
	struct ifaddrs *ifs = NULL;
	struct host_ip ip;
	bool mine;

	if (resolve(host, 0, &h) < 0) {
		snprintf(err, errlen,
			 "cannot resolve the rendezvous host '%s' (check "
			 "--rdzv_endpoint or --master_addr)",
			 host);
		return -ENOENT;
	}
	if (getifaddrs(&ifs) < 0)
		ifs = NULL;
	pick(h, ifs, &ip, &mine);
	ip_text(&ip, literal, litlen);
	*is = mine || name_is_machine(host);
	freeaddrinfo(h);
	if (ifs)
		freeifaddrs(ifs);
	return 0;
}

/* Whether one of name's addresses is this machine's (*resolved: whether
 * it resolved). */
static bool addr_is_here(const char *name, bool *resolved)
{
	struct addrinfo *h = NULL;
	struct ifaddrs *ifs = NULL;
	struct host_ip ip;
	bool here = false;

	*resolved = resolve(name, 0, &h) == 0;
	if (!*resolved)
		return false;
	if (getifaddrs(&ifs) < 0)
		ifs = NULL;
	for (struct addrinfo *a = h; a && !here; a = a->ai_next)
		here = ip_of(a->ai_addr, &ip) && (ip_loopback(&ip) || interface_has(ifs, &ip));
	freeaddrinfo(h);
	if (ifs)
		freeifaddrs(ifs);
	return here;
}

static int literal_family(const char *s)
{
	unsigned char b[16];

	if (inet_pton(AF_INET, s, b) == 1)
		return AF_INET;
	return inet_pton(AF_INET6, s, b) == 1 ? AF_INET6 : 0;
}

int rdzv_host_local_check(const char *addr, const char *store, char *err, size_t errlen)
{
	int fa = literal_family(addr), fs = literal_family(store);
	bool resolved;

	if (!addr_is_here(addr, &resolved) && (fa || resolved)) {
		snprintf(err, errlen,
			 "--local_addr '%s' is not an address of this machine (see `ip addr`): "
			 "give one of its addresses, the one the other nodes reach it at, or "
			 "leave --local_addr out",
			 addr);
		return -EADDRNOTAVAIL;
	}
	if (fa && fs && fa != fs) {
		snprintf(err, errlen,
			 "--local_addr '%s' is an IPv%c address and the rendezvous store's '%s' "
			 "an IPv%c one: give an --local_addr of the store's family",
			 addr, fa == AF_INET ? '4' : '6', store, fs == AF_INET ? '4' : '6');
		return -EADDRNOTAVAIL;
	}
	return 0;
}

/* Adds the inodes of sockets listening on `port` in a /proc/net/tcp file. */
static size_t listen_inodes(const char *path, int port, unsigned long *inodes, size_t n, size_t max)
{
	char line[512];
	FILE *f = fopen(path, "r");

	if (!f)
		return n;
	while (fgets(line, sizeof(line), f) && n < max) {
		char local[128];
		unsigned st, lport;
		unsigned long inode;
		char *colon;

		/* sl local rem st tx:rx tr:tm retr uid timeout inode */
		if (sscanf(line, " %*d: %127s %*s %x %*s %*s %*s %*u %*u %lu", local, &st,
			   &inode) != 3)
			continue;
		colon = strchr(local, ':');
		if (!colon || sscanf(colon + 1, "%x", &lport) != 1)
			continue;
		if (st == 0x0A && (int)lport == port && inode)
			inodes[n++] = inode;
	}
	fclose(f);
	return n;
}

/* Whether process `pid` has one of the sockets open. */
static bool pid_holds(const char *pid, const unsigned long *inodes, size_t n)
{
	char dir[300], path[600], link[64];
	DIR *d;
	struct dirent *e;
	bool hit = false;

	snprintf(dir, sizeof(dir), "/proc/%s/fd", pid);
	if (!(d = opendir(dir)))
		return false;
	while (!hit && (e = readdir(d))) {
		ssize_t k;
		unsigned long ino;

		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		k = readlink(path, link, sizeof(link) - 1);
		if (k <= 0)
			continue;
		link[k] = '\0';
		if (sscanf(link, "socket:[%lu]", &ino) != 1)
			continue;
		for (size_t i = 0; i < n; i++)
			hit = hit || ino == inodes[i];
	}
	closedir(d);
	return hit;
}

static void describe_pid(const char *pid, char *buf, size_t len)
{
	char path[300], cmd[96] = "";
	size_t k = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%s/cmdline", pid);
	if ((f = fopen(path, "r"))) {
		k = fread(cmd, 1, sizeof(cmd) - 1, f);
		fclose(f);
	}
	for (size_t i = 0; i < k; i++)
		if (cmd[i] == '\0' || !isprint((unsigned char)cmd[i]))
			cmd[i] = ' ';
	while (k && cmd[k - 1] == ' ')
		k--;
	cmd[k] = '\0';
	snprintf(buf, len, "pid %s (%s%s)", pid, cmd, k == sizeof(cmd) - 1 ? "..." : "");
}

void rdzv_port_owner(int port, char *buf, size_t len)
{
	unsigned long inodes[16];
	size_t n = listen_inodes("/proc/net/tcp", port, inodes, 0, 16);
	DIR *d;
	struct dirent *e;

	n = listen_inodes("/proc/net/tcp6", port, inodes, n, 16);
	snprintf(buf, len, "another process (not visible to this user)");
	if (n == 0 || !(d = opendir("/proc")))
		return;
	while ((e = readdir(d)))
		if (isdigit((unsigned char)e->d_name[0]) && pid_holds(e->d_name, inodes, n)) {
			describe_pid(e->d_name, buf, len);
			break;
		}
	closedir(d);
}
