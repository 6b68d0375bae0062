#include "linebuf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void linebuf_init(struct linebuf *lb, size_t max_line)
{
	lb->buf = NULL;
	lb->len = lb->cap = 0;
	lb->shown = 0;
	lb->max_line = max_line ? max_line : 1;
	lb->cut = 0;
}

void linebuf_release(struct linebuf *lb)
{
	free(lb->buf);
	lb->buf = NULL;
	lb->len = lb->cap = 0;
	lb->shown = 0;
}

static int linebuf_append(struct linebuf *lb, const char *data, size_t n)
{
	if (lb->len + n > lb->cap) {
		size_t cap = lb->cap ? lb->cap : 256;
		char *nb;

		while (cap < lb->len + n)
			cap *= 2;
		nb = realloc(lb->buf, cap);
		if (!nb)
			return -ENOMEM;
		lb->buf = nb;
		lb->cap = cap;
	}
	memcpy(lb->buf + lb->len, data, n);
	lb->len += n;
	return 0;
}

/* The buffered line is over: pass it on and start the next. */
static void linebuf_end(struct linebuf *lb, linebuf_emit_fn emit, void *arg)
{
	emit(arg, lb->buf, lb->len, lb->shown, true);
	lb->len = 0;
	lb->shown = 0;
}

int linebuf_feed(struct linebuf *lb, const char *data, size_t n, linebuf_emit_fn emit, void *arg)
{
	while (n > 0) {
		const char *nl;
		size_t take, room = lb->max_line - lb->len;

		if (lb->cut) {
			lb->cut = 0;
			if (*data == '\n') {
				/* The '\n' ends exactly the piece already passed on. */
				data++;
				n--;
				continue;
			}
		}
		nl = memchr(data, '\n', n);
		take = nl ? (size_t)(nl - data) : n;
		if (take >= room) {
			/* The line reaches max_line: pass on a full piece. */
			if (linebuf_append(lb, data, room)) {
				emit(arg, data, n, 0, true);
				return -ENOMEM;
			}
			linebuf_end(lb, emit, arg);
			lb->cut = 1;
			data += room;
			n -= room;
			continue;
		}
		if (!nl) {
			if (linebuf_append(lb, data, n)) {
				emit(arg, data, n, 0, true);
				return -ENOMEM;
			}
			return 0;
		}
		if (lb->len == 0) {
			emit(arg, data, take, 0, true); /* whole line in this chunk: no copy */
		} else {
			if (linebuf_append(lb, data, take)) {
				emit(arg, data, take, 0, true);
				return -ENOMEM;
			}
			linebuf_end(lb, emit, arg);
		}
		data += take + 1;
		n -= take + 1;
	}
	return 0;
}

void linebuf_flush(struct linebuf *lb, linebuf_emit_fn emit, void *arg)
{
	if (lb->len > 0)
		linebuf_end(lb, emit, arg);
	lb->cut = 0;
}

size_t linebuf_unshown(const struct linebuf *lb)
{
	size_t end = lb->len;

	if (end > lb->shown && lb->buf[end - 1] == '\r')
		end--;
	return end - lb->shown;
}

void linebuf_show(struct linebuf *lb, linebuf_emit_fn emit, void *arg)
{
	size_t n = linebuf_unshown(lb);

	if (n == 0)
		return;
	emit(arg, lb->buf, lb->shown + n, lb->shown, false);
	lb->shown += n;
}

size_t linebuf_prefix(const char *fmt, int rank, int local_rank, char *out, size_t outlen)
{
	size_t n = 0;

	if (!outlen)
		return 0;
	for (; fmt && *fmt && n + 1 < outlen; fmt++) {
		int w = 0;

		if (fmt[0] == '%' && fmt[1] == 'r')
			w = snprintf(out + n, outlen - n, "%d", rank);
		else if (fmt[0] == '%' && fmt[1] == 'l')
			w = snprintf(out + n, outlen - n, "%d", local_rank);
		else if (fmt[0] == '%' && fmt[1] == '%')
			w = snprintf(out + n, outlen - n, "%%");
		else {
			out[n++] = *fmt;
			continue;
		}
		fmt++;
		if (w < 0 || (size_t)w >= outlen - n)
			break;
		n += (size_t)w;
	}
	out[n] = '\0';
	return n;
}

size_t linebuf_prefix_max(const char *fmt)
{
	size_t n = 0;

	for (; fmt && *fmt; fmt++) {
		if (fmt[0] == '%' && (fmt[1] == 'r' || fmt[1] == 'l')) {
			n += 10; /* INT_MAX's digits */
			fmt++;
		} else if (fmt[0] == '%' && fmt[1] == '%') {
			n++;
			fmt++;
		} else {
			n++;
		}
	}
	return n;
}
