/*
 * settings.h - a typed table of settings, set by name from INI files
 * (settings_ini.h) and command-line flags: one name per setting (dashes
 * and underscores are the same character), one parser per type, and error
 * messages that name the setting, the value and what was expected.
 *
 * A program describes its settings struct with an array of struct
 * settings_def (field offsets, types, ranges) and sets fields through it.
 * Pure module: no I/O except settings_print_usage() on a stream it is given.
 */
#ifndef DDP_COMMON_SETTINGS_H
#define DDP_COMMON_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Longest setting name, plus its terminator. */
#define SETTINGS_NAME_MAX 64

enum settings_type {
	SETTINGS_STR,	 /* char *: a non-empty string, copied (the old copy freed);
			    the owner frees the field */
	SETTINGS_BUF,	 /* char[size] in place: any string shorter than size, "" too */
	SETTINGS_INT,	 /* int in [min, max] */
	SETTINGS_I64,	 /* int64_t in [min, max] */
	SETTINGS_REAL,	 /* double: finite and >= 0 */
	SETTINGS_BOOL,	 /* bool: 1/true/yes/on or 0/false/no/off (any case) */
	SETTINGS_CUSTOM, /* parsed by def->parse */
};

/* A relative value read from an INI file is taken relative to that file's
 * folder (the program applies it; see settings_def.flags). */
#define SETTINGS_F_PATH 1u
/* SETTINGS_CUSTOM: may also be given bare ("--name" alone on the command
 * line, never taking the next word); the parser then gets NULL. */
#define SETTINGS_F_BARE 2u

struct settings_def {
	const char *name;  /* canonical spelling, with underscores */
	const char *alias; /* another accepted name (a one-letter one is also
			      "-x" on the command line), or NULL */
	enum settings_type type;
	size_t offset;	    /* of the field in the settings struct */
	size_t size;	    /* SETTINGS_BUF: the buffer's size */
	long long min, max; /* SETTINGS_INT, SETTINGS_I64 */
	/* SETTINGS_CUSTOM: parses `value` (NULL only for a bare one, see
	 * SETTINGS_F_BARE) into `obj`, the whole settings struct. Returns 0,
	 * -EINVAL (obj untouched) or -ENOMEM. */
	int (*parse)(void *obj, const struct settings_def *def, const char *value);
	const char *expect; /* what a good value looks like, for messages;
			       NULL: the type's own words (required for CUSTOM) */
	const char *help;   /* one line for settings_print_usage(), or NULL */
	unsigned flags;	    /* SETTINGS_F_* */
};

struct settings_table {
	const struct settings_def *defs;
	size_t n;
};

/* The table index of `name` (canonical or alias, dashes or underscores, no
 * leading dashes), or -ENOENT. */
int settings_find(const struct settings_table *t, const char *name);

/* Parses `value` into entry `i` of `obj`. NULL is a bare flag: true for a
 * boolean, an error for anything else. Returns 0; -EINVAL with err =
 * "bad value 'V' for 'NAME' (expected ...)"; -ENOMEM with err. On error the
 * field is unchanged. */
int settings_apply(const struct settings_table *t, size_t i, void *obj, const char *value,
		   char *err, size_t errlen);

/* What a good value of `d` looks like, for a message: def->expect, else the
 * type's own words ("an integer from 0 to 65535"). */
void settings_expect(const struct settings_def *d, char *buf, size_t len);

/* Writes entry `i` of `obj` as text (a SETTINGS_STR field that is NULL and a
 * CUSTOM one give ""). */
void settings_format(const struct settings_table *t, size_t i, const void *obj, char *buf,
		     size_t len);

/* Formats "unknown WHAT 'NAME'WHERE" followed by "; did you mean 'X'?" when
 * a name of t is a few edits away, else " (see --help)". Leading dashes of
 * `name` ("--bogus") are kept on the suggestion ("--bogus2"). `where` is
 * appended as is ("" or " in [launch]"). */
void settings_unknown(const struct settings_table *t, const char *what, const char *name,
		      const char *where, char *err, size_t errlen);

/* The closest name to `name` (dashes or underscores, leading dashes
 * skipped), or NULL when none is close. */
const char *settings_suggest(const struct settings_table *t, const char *name);

/* Value parsers, for CUSTOM parsers built on them: 0 or -EINVAL, *out
 * untouched on error. A decimal integer in [min, max]; a finite number >= 0;
 * a boolean as above (NULL is true). */
int settings_parse_ll(const char *s, long long min, long long max, long long *out);
int settings_parse_real(const char *s, double *out);
int settings_parse_bool(const char *s, bool *out);

/* Command-line spelling, for settings_cli_take(). */
#define SETTINGS_CLI_SHORT  1u /* "-x", "-xVALUE", "-x VALUE" for one-letter names */
#define SETTINGS_CLI_NEGATE 2u /* "--no-NAME" sets the boolean NAME to false */
#define SETTINGS_CLI_BOOL_WORD                                                                     \
	4u /* a boolean takes the next word as its value                                           \
	      when that word does not start with '-' */

struct settings_flag {
	size_t index;	   /* table entry */
	const char *value; /* points into argv or is "false"; NULL: a bare boolean */
};

/* Reads the option argv[*i] (it starts with '-'): "--name=value",
 * "--name value", a bare "--flag" (booleans never take the next word unless
 * SETTINGS_CLI_BOOL_WORD), plus the spellings `flags` allows. Advances *i
 * past a value taken from the next word. Returns 0; -ENOENT for an unknown
 * option (err names it and a close name); -EINVAL when the value is
 * missing (err says so). */
int settings_cli_take(const struct settings_table *t, unsigned flags, int argc, char *const argv[],
		      int *i, struct settings_flag *out, char *err, size_t errlen);

/* Writes "  --NAME  HELP (default: VALUE)" for every entry with a help
 * line, the values taken from `defaults`. */
void settings_print_usage(const struct settings_table *t, const void *defaults, FILE *out);

#endif
