/*
 * jobfile.c - the launcher's sections of a job file ([launch] through the
 * option table, [program], [env]) over the settings module's INI reader.
 */
#include "jobfile.h"
#include "settings_ini.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct jobfile_state {
	struct launch_opts *o;
	bool program_cleared;
};

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

static int jobfile_launch_key(void *user, const char *key, const char *value, char *msg,
			      size_t msglen)
{
	struct jobfile_state *st = user;
	int rc;

	if (!strcmp(key, "config")) {
		snprintf(msg, msglen, "'config' cannot be set in a job file");
		return -EINVAL;
	}
	rc = opts_set(st->o, key, value, OPTS_SRC_FILE, msg, msglen);
	if (rc == -ENOENT) {
		settings_unknown(&opts_settings, "key", key, " in [launch]", msg, msglen);
		return -EINVAL;
	}
	return rc;
}

static int jobfile_program_key(void *user, const char *key, const char *value, char *msg,
			       size_t msglen)
{
	int rc = jobfile_program(user, key, value);

	if (rc == -ENOENT) {
		snprintf(msg, msglen,
			 "unknown key '%s' in [program] (expected program, arg or args)", key);
		return -EINVAL;
	}
	if (rc == -ENOMEM)
		snprintf(msg, msglen, "out of memory");
	else if (rc)
		snprintf(msg, msglen, "bad value for '%s' in [program]", key);
	return rc;
}

static int jobfile_env_key(void *user, const char *key, const char *value, char *msg, size_t msglen)
{
	int rc = jobfile_env(user, key, value);

	if (rc)
		snprintf(msg, msglen, "bad environment variable name '%s' in [env]", key);
	return rc;
}

static const struct settings_ini_section jobfile_sections[] = {
    {"launch", jobfile_launch_key},
    {"program", jobfile_program_key},
    {"env", jobfile_env_key},
    {"train", NULL}, /* ddp-train's */
};

/* err = "NAME:LINE: message" from the parser's message and line. */
static int jobfile_where(int rc, const char *name, int line, char *err, size_t errlen)
{
	char msg[OPTS_ERR_LEN];

	if (rc < 0 && line > 0) {
		snprintf(msg, sizeof(msg), "%s", err);
		snprintf(err, errlen, "%s:%d: %s", name, line, msg);
	}
	return rc;
}

static int jobfile_run(struct launch_opts *o, FILE *f, const char *path, const char *name,
		       char *err, size_t errlen)
{
	struct jobfile_state st = {.o = o};
	const struct settings_ini ini = {
	    .sections = jobfile_sections,
	    .nsections = sizeof(jobfile_sections) / sizeof(jobfile_sections[0]),
	    .long_line_hint = "put long argument lists on several 'arg =' lines",
	    .user = &st,
	};
	int line = 0;
	int rc = f ? settings_ini_parse(&ini, f, &line, err, errlen)
		   : settings_ini_load(&ini, path, &line, err, errlen);

	return jobfile_where(rc, name, line, err, errlen);
}

int jobfile_load_stream(struct launch_opts *o, FILE *f, const char *name, char *err, size_t errlen)
{
	return jobfile_run(o, f, NULL, name, err, errlen);
}

int jobfile_load(struct launch_opts *o, const char *path, char *err, size_t errlen)
{
	return jobfile_run(o, NULL, path, path, err, errlen);
}
