/*
 * settings_ini.c - INI files by section, over inih. Lines come from our
 * own reader (one whole line per call), which counts them, measures them
 * before inih's fixed buffer could cut them, and stops the parse at the
 * first problem.
 */
#include "settings_ini.h"

#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct settings_ini_state {
	const struct settings_ini *ini;
	FILE *f;
	int line; /* lines read so far: the one inih is working on */
	int rc;	  /* first problem, 0 while none */
	int err_line;
	char *err;
	size_t errlen;
};

static void settings_ini_fail(struct settings_ini_state *st, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void settings_ini_fail(struct settings_ini_state *st, int rc, const char *fmt, ...)
{
	va_list ap;

	if (st->rc)
		return;
	st->rc = rc;
	st->err_line = st->line;
	va_start(ap, fmt);
	vsnprintf(st->err, st->errlen, fmt, ap);
	va_end(ap);
}

/* The line's characters after its first (c), into buf while they fit;
 * returns the line's length without the newline and a CR before it. */
static size_t settings_ini_read_line(struct settings_ini_state *st, int c, char *buf, size_t size,
				     bool *nul)
{
	size_t len = 0;
	int last = 0;

	for (; c != EOF && c != '\n'; c = getc(st->f)) {
		if (c == '\0')
			*nul = true;
		if (len + 1 < size)
			buf[len] = (char)c;
		len++;
		last = c;
	}
	if (c == EOF && ferror(st->f))
		settings_ini_fail(st, -EIO, "cannot read the file (%s)", strerror(errno));
	return last == '\r' ? len - 1 : len;
}

/* inih's reader: one whole line per call, without its line ending (inih
 * does not need it), or NULL at the end or after the first problem. */
static char *settings_ini_reader(char *buf, int size, void *stream)
{
	struct settings_ini_state *st = stream;
	size_t max =
	    (size_t)size - 2 < SETTINGS_INI_MAX_LINE ? (size_t)size - 2 : SETTINGS_INI_MAX_LINE;
	const char *hint = st->ini->long_line_hint;
	bool nul = false;
	size_t len;
	int c;

	if (st->rc || (c = getc(st->f)) == EOF)
		return NULL;
	st->line++;
	len = settings_ini_read_line(st, c, buf, (size_t)size, &nul);
	if (nul)
		settings_ini_fail(st, -EINVAL, "a NUL byte in this line (is it a text file?)");
	else if (len > max)
		settings_ini_fail(st, -EINVAL, "line longer than %zu characters (inih limit)%s%s",
				  max, hint ? "; " : "", hint ? hint : "");
	if (st->rc)
		return NULL;
	buf[len] = '\0';
	return buf;
}

/* "a, b or c" from the section names. */
static void settings_ini_section_list(const struct settings_ini *ini, char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < ini->nsections && used < len; i++) {
		const char *sep = i == 0 ? "" : i + 1 == ini->nsections ? " or " : ", ";
		int n = snprintf(buf + used, len - used, "%s%s", sep, ini->sections[i].name);

		used += n > 0 ? (size_t)n : 0;
	}
}

static void settings_ini_other_section(struct settings_ini_state *st, const char *section,
				       const char *key)
{
	char list[128];

	if (!*section && st->ini->nsections) {
		settings_ini_fail(st, -EINVAL, "key '%s' outside any section (put it under [%s])",
				  key, st->ini->sections[0].name);
		return;
	}
	settings_ini_section_list(st->ini, list, sizeof(list));
	settings_ini_fail(st, -EINVAL, "unknown section [%s] for key '%s' (expected %s)", section,
			  key, list);
}

static int settings_ini_handler(void *user, const char *section, const char *key, const char *value)
{
	struct settings_ini_state *st = user;
	const struct settings_ini *ini = st->ini;
	int rc;

	if (st->rc)
		return 1;
	for (size_t i = 0; i < ini->nsections; i++) {
		if (strcmp(section, ini->sections[i].name))
			continue;
		if (!ini->sections[i].on_key)
			return 1;
		rc = ini->sections[i].on_key(ini->user, key, value, st->err, st->errlen);
		if (rc < 0) {
			st->rc = rc;
			st->err_line = st->line;
		}
		return 1;
	}
	if (!ini->skip_others)
		settings_ini_other_section(st, section, key);
	/* Handled: our own errors are in st, inih's count is for its own. */
	return 1;
}

int settings_ini_parse(const struct settings_ini *ini, FILE *f, int *line, char *err, size_t errlen)
{
	struct settings_ini_state st = {.ini = ini, .f = f, .err = err, .errlen = errlen};
	int rc = ini_parse_stream(settings_ini_reader, &st, settings_ini_handler, &st);

	/* inih's own first error comes before ours: the parse stops at ours. */
	if (rc > 0) {
		*line = rc;
		snprintf(err, errlen,
			 "cannot parse this line (expected 'key = value' or '[section]')");
		return -EINVAL;
	}
	if (rc < 0) {
		*line = 0;
		snprintf(err, errlen, "out of memory while parsing");
		return -ENOMEM;
	}
	*line = st.rc ? st.err_line : 0;
	return st.rc;
}

/* Why a file that is not a regular file cannot be a job file. */
static int settings_ini_not_regular(const char *path, mode_t mode, char *err, size_t errlen)
{
	const char *what = S_ISDIR(mode)		    ? "a directory"
			   : S_ISFIFO(mode)		    ? "a FIFO"
			   : S_ISCHR(mode) || S_ISBLK(mode) ? "a device"
							    : "not a regular file";

	snprintf(err, errlen, "job file '%s' is %s (give an INI file)", path, what);
	return S_ISDIR(mode) ? -EISDIR : -EINVAL;
}

/* A read-only stream on `path` if it is a regular file. Opened without
 * blocking, so a FIFO is refused instead of waited on. */
static int settings_ini_open(const char *path, FILE **out, char *err, size_t errlen)
{
	struct stat sb;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC), rc;

	if (fd < 0)
		goto fail_errno;
	if (fstat(fd, &sb) < 0)
		goto fail_errno;
	if (!S_ISREG(sb.st_mode)) {
		rc = settings_ini_not_regular(path, sb.st_mode, err, errlen);
		goto fail;
	}
	if (fcntl(fd, F_SETFL, 0) < 0 || !(*out = fdopen(fd, "r")))
		goto fail_errno;
	return 0;
fail_errno:
	rc = -errno;
	snprintf(err, errlen, "cannot open job file '%s': %s", path, strerror(-rc));
fail:
	if (fd >= 0)
		close(fd);
	return rc;
}

int settings_ini_load(const struct settings_ini *ini, const char *path, int *line, char *err,
		      size_t errlen)
{
	FILE *f;
	int rc;

	*line = 0;
	rc = settings_ini_open(path, &f, err, errlen);
	if (rc < 0)
		return rc;
	rc = settings_ini_parse(ini, f, line, err, errlen);
	fclose(f);
	return rc;
}
