/*
 * linebuf.h - assembles a byte stream into lines, so that each line of a
 * worker's output can be written out whole, with its prefix, in one write.
 * Pure module.
 *
 * A line longer than max_line is passed on in max_line pieces (each
 * becomes its own line); a last line without '\n' is passed on by
 * linebuf_flush() at end of stream.
 *
 * A line still waiting for its '\n' (a prompt, a progress bar redrawn
 * with '\r') can be shown early with linebuf_show(): the bytes so far are
 * passed on as a piece that does not end the line, and the line's later
 * pieces pass on only what came after. The whole line stays in the buffer
 * until it ends, so every emit sees the line from its start.
 */
#ifndef DDP_LAUNCHER_LINEBUF_H
#define DDP_LAUNCHER_LINEBUF_H

#include <stdbool.h>
#include <stddef.h>

struct linebuf {
	char *buf;
	size_t len, cap;
	size_t shown; /* bytes of buf already passed on by linebuf_show */
	size_t max_line;
	int cut; /* a full piece was just passed on: a '\n' next ends it */
};

/* Called for each piece passed on: `line` holds the line from its start
 * (without its '\n'), `len` bytes, valid during the call; the first `shown`
 * of them were passed on before (by linebuf_show), the rest are new.
 * `ends`: the line is over (its '\n' came, it reached max_line, or the
 * stream ended); false for a piece shown early. */
typedef void (*linebuf_emit_fn)(void *arg, const char *line, size_t len, size_t shown, bool ends);

void linebuf_init(struct linebuf *lb, size_t max_line);
void linebuf_release(struct linebuf *lb);

/* Feeds n bytes. Returns 0 or -ENOMEM (then the bytes that did not fit are
 * emitted as a line rather than lost). */
int linebuf_feed(struct linebuf *lb, const char *data, size_t n, linebuf_emit_fn emit, void *arg);

/* Emits a pending partial line, if any, as a line that ends (end of
 * stream). */
void linebuf_flush(struct linebuf *lb, linebuf_emit_fn emit, void *arg);

/* Bytes of the pending partial line not passed on yet (a '\r' at its end
 * is not counted: what follows it decides how it is shown). */
size_t linebuf_unshown(const struct linebuf *lb);

/* Passes on the pending partial line's unshown bytes (linebuf_unshown) as
 * a piece that does not end the line. */
void linebuf_show(struct linebuf *lb, linebuf_emit_fn emit, void *arg);

/* Writes the prefix for `fmt` ("%r" rank, "%l" local rank, "%%" a percent
 * sign) into out (always NUL-terminated). Returns its length. */
size_t linebuf_prefix(const char *fmt, int rank, int local_rank, char *out, size_t outlen);

/* The longest prefix a line is given, in bytes; a format that can expand
 * to more (linebuf_prefix_max) is refused where it is read (--prefix). */
#define LINEBUF_PREFIX_MAX 255

/* The longest prefix `fmt` expands to, for any rank (ranks of 10 digits). */
size_t linebuf_prefix_max(const char *fmt);

#endif
