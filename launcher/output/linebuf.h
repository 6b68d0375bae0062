/*
 * linebuf.h - assembles a byte stream into lines, so that each line of a
 * worker's output can be written out whole, with its prefix, in one write.
 * Pure module.
 *
 * A line longer than max_line is passed on in max_line pieces (each
 * becomes its own line); a last line without '\n' is passed on by
 * linebuf_flush() at end of stream.
 */
#ifndef DDP_LAUNCHER_LINEBUF_H
#define DDP_LAUNCHER_LINEBUF_H

#include <stddef.h>

struct linebuf {
	char *buf;
	size_t len, cap;
	size_t max_line;
	int cut; /* a full piece was just passed on: a '\n' next ends it */
};

/* Called once per line, without its '\n'; `line` is valid during the call. */
typedef void (*linebuf_emit_fn)(void *arg, const char *line, size_t len);

void linebuf_init(struct linebuf *lb, size_t max_line);
void linebuf_release(struct linebuf *lb);

/* Feeds n bytes. Returns 0 or -ENOMEM (then the bytes that did not fit are
 * emitted as a line rather than lost). */
int linebuf_feed(struct linebuf *lb, const char *data, size_t n, linebuf_emit_fn emit, void *arg);

/* Emits a pending partial line, if any. */
void linebuf_flush(struct linebuf *lb, linebuf_emit_fn emit, void *arg);

/* Writes the prefix for `fmt` ("%r" rank, "%l" local rank, "%%" a percent
 * sign) into out (always NUL-terminated). Returns its length. */
size_t linebuf_prefix(const char *fmt, int rank, int local_rank, char *out, size_t outlen);

#endif
