#include "jobfile.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct jobfile_state {
	struct launch_opts *o;
	FILE *f;
	const char *name;
	int line;	/* line the last chunk handed to inih began on */
	bool line_done; /* the last chunk ended its line */
	int rc;		/* first error */
	char *err;
	size_t errlen;
	bool program_cleared;
};

static void jobfile_fail(struct jobfile_state *st, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records the first problem as "FILE:LINE: message". */
static void jobfile_fail(struct jobfile_state *st, int rc, const char *fmt, ...)
{
	char msg[OPTS_ERR_LEN];
	va_list ap;

	if (st->rc)
		return;
	st->rc = rc;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(st->err, st->errlen, "%s:%d: %s", st->name, st->line, msg);
}

/* inih's reader: one line per call, counting lines so the handler knows
 * where it is (Debian's inih does not pass line numbers). A line too long
 * for inih's buffer is reported here and skipped whole. */
static char *jobfile_reader(char *buf, int size, void *stream)
{
	struct jobfile_state *st = stream;
	size_t len;
	int c;

	if (!fgets(buf, size, st->f))
		return NULL;
	if (st->line_done)
		st->line++;
	len = strlen(buf);
	st->line_done = len > 0 && buf[len - 1] == '\n';
	if (st->line_done || feof(st->f))
		return buf;
	jobfile_fail(st, -EINVAL,
		     "line longer than 198 characters (inih limit); put long argument lists on "
		     "several 'arg =' lines");
	while ((c = fgetc(st->f)) != EOF && c != '\n')
		;
	st->line_done = true;
	strcpy(buf, "\n");
	return buf;
}

static int jobfile_program(struct jobfile_state *st, const char *key, const char *value)
{
	struct launch_opts *o = st->o;
	char *copy, *save = NULL;

	if (o->program_from_cli)
		return 0;
	if (!st->program_cleared) {
		/* The first [program] line of this file starts a fresh list. */
		opts_strv_clear(&o->args);
		st->program_cleared = true;
	}
	if (!strcmp(key, "program")) {
		if (!*value)
			return -EINVAL;
		free(o->program);
		o->program = strdup(value);
		return o->program ? 0 : -ENOMEM;
	}
	if (!strcmp(key, "arg"))
		return opts_strv_push(&o->args, value);
	if (strcmp(key, "args"))
		return -ENOENT;
	copy = strdup(value);
	if (!copy)
		return -ENOMEM;
	for (char *w = strtok_r(copy, " \t", &save); w; w = strtok_r(NULL, " \t", &save))
		if (opts_strv_push(&o->args, w)) {
			free(copy);
			return -ENOMEM;
		}
	free(copy);
	return 0;
}

static bool env_name_valid(const char *s)
{
	if (!isalpha((unsigned char)*s) && *s != '_')
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '_')
			return false;
	return true;
}

static int jobfile_env(struct jobfile_state *st, const char *key, const char *value)
{
	size_t n = strlen(key) + strlen(value) + 2;
	char *kv;
	int rc;

	if (!env_name_valid(key))
		return -EINVAL;
	kv = malloc(n);
	if (!kv)
		return -ENOMEM;
	snprintf(kv, n, "%s=%s", key, value);
	rc = opts_strv_push(&st->o->env, kv);
	free(kv);
	return rc;
}

static int jobfile_handler(void *user, const char *section, const char *key, const char *value)
{
	struct jobfile_state *st = user;
	char msg[OPTS_ERR_LEN];
	int rc;

	if (st->rc)
		return 1;
	if (!strcmp(section, "train"))
		return 1;
	if (!strcmp(section, "launch")) {
		if (!strcmp(key, "config")) {
			jobfile_fail(st, -EINVAL, "'config' cannot be set in a job file");
			return 1;
		}
		rc = opts_set(st->o, key, value, OPTS_SRC_FILE, msg, sizeof(msg));
		if (rc == -ENOENT)
			jobfile_fail(st, -EINVAL, "unknown key '%s' in [launch] (see --help)", key);
		else if (rc)
			jobfile_fail(st, rc, "%s", msg);
		return 1;
	}
	if (!strcmp(section, "program")) {
		rc = jobfile_program(st, key, value);
		if (rc == -ENOENT)
			jobfile_fail(
			    st, -EINVAL,
			    "unknown key '%s' in [program] (expected program, arg or args)", key);
		else if (rc)
			jobfile_fail(st, rc, "bad value for '%s' in [program]", key);
		return 1;
	}
	if (!strcmp(section, "env")) {
		rc = jobfile_env(st, key, value);
		if (rc)
			jobfile_fail(st, rc, "bad environment variable name '%s' in [env]", key);
		return 1;
	}
	if (!*section)
		jobfile_fail(st, -EINVAL, "key '%s' outside any section (put it under [launch])",
			     key);
	else
		jobfile_fail(st, -EINVAL,
			     "unknown section [%s] for key '%s' (expected launch, program, env or "
			     "train)",
			     section, key);
	return 1;
}

int jobfile_load_stream(struct launch_opts *o, FILE *f, const char *name, char *err, size_t errlen)
{
	struct jobfile_state st = {.o = o,
				   .f = f,
				   .name = name,
				   .line = 0,
				   .line_done = true,
				   .err = err,
				   .errlen = errlen};
	int rc = ini_parse_stream(jobfile_reader, &st, jobfile_handler, &st);

	if (st.rc)
		return st.rc;
	if (rc > 0) {
		snprintf(err, errlen,
			 "%s:%d: cannot parse this line (expected 'key = value' or "
			 "'[section]')",
			 name, rc);
		return -EINVAL;
	}
	if (rc < 0) {
		snprintf(err, errlen, "%s: out of memory while parsing", name);
		return -ENOMEM;
	}
	return 0;
}

int jobfile_load(struct launch_opts *o, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	int rc;

	if (!f) {
		rc = -errno;
		snprintf(err, errlen, "cannot open job file '%s': %s", path, strerror(errno));
		return rc;
	}
	rc = jobfile_load_stream(o, f, path, err, errlen);
	fclose(f);
	return rc;
}
