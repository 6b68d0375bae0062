/*
 * settings_ini.h - INI files (read with inih) dispatched by section:
 *
 *   [section]
 *   key = value        ; a comment
 *
 * Each section a program knows gets a callback per key, in file order;
 * sections of other programs are skipped (a NULL callback, or all unlisted
 * ones with skip_others). Lines are read here, not by inih, so the limits
 * are exact and the messages name what is wrong: a line may hold
 * SETTINGS_INI_MAX_LINE characters besides its line ending (LF or CRLF;
 * Debian's inih holds 200 bytes with the newline and the terminator), a
 * longer one is an error, never cut; a NUL byte is an error. The first
 * problem stops the parse.
 */
#ifndef DDP_COMMON_SETTINGS_INI_H
#define DDP_COMMON_SETTINGS_INI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define SETTINGS_INI_MAX_LINE 198

struct settings_ini_section {
	const char *name;
	/* Called for each "key = value" of the section; key and value are
	 * valid only during the call. Returns 0, or a negative errno with msg
	 * set (without the line: the caller of the parse adds it). NULL: the
	 * section belongs to another program and is skipped. */
	int (*on_key)(void *user, const char *key, const char *value, char *msg, size_t msglen);
};

struct settings_ini {
	const struct settings_ini_section *sections;
	size_t nsections;
	bool skip_others;	    /* skip unlisted sections (else each is an error) */
	const char *long_line_hint; /* said after "line longer than ...", or NULL */
	void *user;		    /* passed to on_key */
};

/* Parses `f` to its end or its first problem. Returns 0, or a negative
 * errno (-EINVAL for the file's content, -EIO, -ENOMEM) with err = the
 * message and *line = the line it is about (0: none). */
int settings_ini_parse(const struct settings_ini *ini, FILE *f, int *line, char *err,
		       size_t errlen);

/* Opens `path`, which must be a regular file (a directory, FIFO or device
 * is refused without reading it), and parses it. A file that cannot be
 * opened gives its -errno and err = "cannot open job file 'PATH': REASON". */
int settings_ini_load(const struct settings_ini *ini, const char *path, int *line, char *err,
		      size_t errlen);

#endif
