/* What a process does now, from /proc (see proc_state.h). */
#include "proc_state.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int proc_state_parse_stat(const char *line, char *state, uint64_t *ticks)
{
	/* The command may hold spaces and parentheses: the last ')' ends it. */
	const char *p = strrchr(line, ')');
	unsigned long long ut, st;
	char s;

	if (!p || sscanf(p + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &s, &ut,
			 &st) != 3)
		return -EIO;
	*state = s;
	*ticks = ut + st;
	return 0;
}

int proc_read_small(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -EIO;
	buf[n] = '\0';
	return 0;
}

static void count(struct proc_state *out, char s)
{
	switch (s) {
	case 'T':
	case 't':
		out->stopped++;
		break;
	case 'R':
		out->running++;
		break;
	case 'Z':
	case 'X':
		out->zombie++;
		break;
	default:
		out->blocked++;
	}
}

int proc_state_read(int pid, struct proc_state *out)
{
	char path[64], line[1024];
	struct dirent *e;
	DIR *d;
	int rc;

	memset(out, 0, sizeof(*out));
	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	d = opendir(path);
	if (!d)
		return errno == ENOENT ? -ENOENT : -errno;
	while ((e = readdir(d))) {
		char s;
		uint64_t t;

		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.16s/stat", pid, e->d_name);
		if (proc_read_small(path, line, sizeof(line)) ||
		    proc_state_parse_stat(line, &s, &t))
			continue; /* the thread ended meanwhile */
		out->threads++;
		out->cpu_ticks += t;
		count(out, s);
		if (atoi(e->d_name) == pid)
			out->main_state = s;
	}
	closedir(d);
	if (!out->threads)
		return -ENOENT;
	snprintf(path, sizeof(path), "/proc/%d/wchan", pid);
	rc = proc_read_small(path, out->wchan, sizeof(out->wchan));
	if (rc || !strcmp(out->wchan, "0"))
		out->wchan[0] = '\0';
	return 0;
}
