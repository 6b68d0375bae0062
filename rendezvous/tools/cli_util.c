/*
 * cli_util.c - argument parsing helpers shared by ddp-rdzvd and ddp-store.
 */
#include "cli_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cli_parse_size(const char *text, size_t *out)
{
	char *end = NULL;
	errno = 0;
	unsigned long long v = strtoull(text, &end, 10);
	if (errno || end == text || text[0] == '-')
		return -EINVAL;
	unsigned shift = 0;
	switch (*end) {
	case 'K':
	case 'k':
		shift = 10;
		end++;
		break;
	case 'M':
	case 'm':
		shift = 20;
		end++;
		break;
	case 'G':
	case 'g':
		shift = 30;
		end++;
		break;
	default:
		break;
	}
	if (*end != '\0' || v > (SIZE_MAX >> shift))
		return -EINVAL;
	*out = (size_t)v << shift;
	return 0;
}

int cli_parse_port(const char *text, int *out)
{
	char *end = NULL;
	errno = 0;
	long v = strtol(text, &end, 10);
	if (errno || end == text || *end != '\0' || v < 0 || v > 65535)
		return -EINVAL;
	*out = (int)v;
	return 0;
}

int cli_parse_addr(const char *text, char *host, size_t host_len, int *port)
{
	const char *colon = strrchr(text, ':');
	if (!colon || colon == text)
		return -EINVAL;
	const char *h = text;
	size_t hl = (size_t)(colon - text);
	if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
		h++;
		hl -= 2;
	}
	if (hl == 0 || hl >= host_len || cli_parse_port(colon + 1, port) < 0)
		return -EINVAL;
	memcpy(host, h, hl);
	host[hl] = '\0';
	return 0;
}

int cli_write_file_atomic(const char *path, int port)
{
	char tmp[4096];
	if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof(tmp)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	char line[16];
	int n = snprintf(line, sizeof(line), "%d\n", port);
	if (write(fd, line, (size_t)n) != n || fsync(fd) < 0) {
		int e = errno ? errno : EIO;
		close(fd);
		unlink(tmp);
		errno = e;
		return -1;
	}
	close(fd);
	if (rename(tmp, path) < 0) {
		int e = errno;
		unlink(tmp);
		errno = e;
		return -1;
	}
	return 0;
}
