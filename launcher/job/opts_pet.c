/*
 * opts_pet.c - options from torchrun's PET_<NAME> variables (opts_pet.h):
 * each value the command line and the job file left out, a boolean by
 * torchrun's rule, and the one line that says what was taken.
 */
#include "opts_pet.h"
#include "envp.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* Options never read from the environment (opts_pet.h says why). */
static const char *const pet_never[] = {"config", "dry_run", "rdzv_token"};

/* What the line says: options taken, variables overridden, unknown ones. */
struct pet_used {
	char taken[384];
	char kept[192];
	char ignored[192];
};

static bool pet_read(const struct settings_def *d)
{
	for (size_t i = 0; i < sizeof(pet_never) / sizeof(pet_never[0]); i++)
		if (!strcmp(d->name, pet_never[i]))
			return false;
	return true;
}

/* "PET_" and `name` in upper case. */
static void pet_var(const char *name, char *buf, size_t len)
{
	size_t n = strlen(OPTS_PET_PREFIX);

	snprintf(buf, len, "%s%s", OPTS_PET_PREFIX, name);
	for (char *p = buf + (n < len ? n : 0); *p; p++)
		*p = (char)toupper((unsigned char)*p);
}

void opts_pet_name(const struct launch_opts *o, size_t i, char *buf, size_t len)
{
	const struct settings_def *d = &opts_settings.defs[i];

	pet_var(((o->pet_by_alias >> i) & 1) ? d->alias : d->name, buf, len);
}

/* The value of variable `var` in envp; NULL when absent or empty. */
static const char *pet_env(char *const envp[], const char *var)
{
	const char *v = envp_get(envp, var);

	return v && *v ? v : NULL;
}

/* Entry d's variable and value: PET_NAME, else PET_ALIAS for a long alias. */
static const char *pet_lookup(char *const envp[], const struct settings_def *d, char *var,
			      size_t varlen, bool *by_alias)
{
	const char *v;

	pet_var(d->name, var, varlen);
	v = pet_env(envp, var);
	*by_alias = false;
	if (v || !d->alias || strlen(d->alias) < 2)
		return v;
	pet_var(d->alias, var, varlen);
	v = pet_env(envp, var);
	*by_alias = v != NULL;
	return v;
}

/* torchrun's check_env: bool(int(value)); the settings' words too. */
static int pet_bool(const char *v, const char **out)
{
	long long n;
	bool b;

	if (settings_parse_ll(v, LLONG_MIN, LLONG_MAX, &n) == 0)
		b = n != 0;
	else if (settings_parse_bool(v, &b))
		return -EINVAL;
	*out = b ? "true" : "false";
	return 0;
}

static int pet_bad(const struct settings_def *d, const char *var, const char *value, char *err,
		   size_t errlen)
{
	char expect[96] = "an integer, 0 for false and non-zero for true, as torchrun reads it";

	if (d->type != SETTINGS_BOOL)
		settings_expect(d, expect, sizeof(expect));
	snprintf(err, errlen,
		 "bad value '%.48s%s' in the environment variable %s (expected %s); fix or unset "
		 "%s, or give --%s, which wins over it",
		 value, strlen(value) > 48 ? "..." : "", var, expect, var, d->name);
	return -EINVAL;
}

/* Entry i from its variable, unless the command line or the job file set it. */
static int pet_take(struct launch_opts *o, char *const envp[], size_t i, struct pet_used *u,
		    char *err, size_t errlen)
{
	const struct settings_def *d = &opts_settings.defs[i];
	char var[SETTINGS_NAME_MAX + 8], msg[OPTS_ERR_LEN];
	const char *v, *value;
	bool by_alias;
	int rc;

	if (!pet_read(d) || !(v = pet_lookup(envp, d, var, sizeof(var), &by_alias)))
		return 0;
	if (opts_source_of(o, i) > OPTS_SRC_PET) {
		opts_line_add(u->kept, sizeof(u->kept), ", %s", var);
		return 0;
	}
	value = v;
	if (d->type == SETTINGS_BOOL && pet_bool(v, &value))
		return pet_bad(d, var, v, err, errlen);
	rc = opts_set(o, d->name, value, OPTS_SRC_PET, msg, sizeof(msg));
	if (rc == -ENOMEM)
		snprintf(err, errlen, "out of memory");
	if (rc)
		return rc == -ENOMEM ? rc : pet_bad(d, var, v, err, errlen);
	if (by_alias)
		o->pet_by_alias |= 1ull << i;
	opts_line_add(u->taken, sizeof(u->taken), ", %s", by_alias ? d->alias : d->name);
	return 0;
}

/* Whether "PET_<name>" is the variable of `entry`, whose name is `len` long. */
static bool pet_named(const char *name, const char *entry, size_t len)
{
	char var[SETTINGS_NAME_MAX + 8];

	pet_var(name, var, sizeof(var));
	return strlen(var) == len && !strncmp(var, entry, len);
}

/* Whether this module reads the variable of `entry` ("PET_X=..."). */
static bool pet_known(const char *entry, size_t len)
{
	for (size_t i = 0; i < opts_settings.n; i++) {
		const struct settings_def *d = &opts_settings.defs[i];

		if (pet_read(d) &&
		    (pet_named(d->name, entry, len) ||
		     (d->alias && strlen(d->alias) > 1 && pet_named(d->alias, entry, len))))
			return true;
	}
	return false;
}

/* The set PET_ variables that name no option read here. */
static void pet_ignored(char *const envp[], struct pet_used *u)
{
	size_t plen = strlen(OPTS_PET_PREFIX);

	for (; envp && *envp; envp++) {
		const char *e = *envp, *eq = strchr(e, '=');

		if (strncmp(e, OPTS_PET_PREFIX, plen) || !eq || !eq[1] ||
		    pet_known(e, (size_t)(eq - e)))
			continue;
		opts_line_add(u->ignored, sizeof(u->ignored), ", %.*s", (int)(eq - e), e);
	}
}

static void pet_describe(struct launch_opts *o, const struct pet_used *u)
{
	char *line = o->pet_used;
	size_t len = sizeof(o->pet_used);

	line[0] = '\0';
	if (!u->taken[0] && !u->kept[0] && !u->ignored[0])
		return;
	if (u->taken[0])
		opts_line_add(
		    line, len,
		    "took %s from PET_* (Kubeflow/torchrun environment); flags and the job file "
		    "override them",
		    u->taken + 2);
	else
		opts_line_add(line, len, "took nothing from PET_* (Kubeflow/torchrun environment)");
	if (u->kept[0])
		opts_line_add(line, len, "; given as flags or in the job file, so not taken: %s",
			      u->kept + 2);
	if (u->ignored[0])
		opts_line_add(line, len, "; ignored, no ddplaunch option reads them: %s",
			      u->ignored + 2);
}

int opts_pet_apply(struct launch_opts *o, char *const envp[], char *err, size_t errlen)
{
	struct pet_used u = {"", "", ""};
	int rc;

	o->pet_used[0] = '\0';
	for (size_t i = 0; i < opts_settings.n; i++) {
		rc = pet_take(o, envp, i, &u, err, errlen);
		if (rc)
			return rc;
	}
	pet_ignored(envp, &u);
	pet_describe(o, &u);
	return 0;
}

/* Whether err names flag "--name" (not a longer flag it begins). */
static bool pet_mentions(const char *err, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = strstr(err, "--"); p; p = strstr(p + 2, "--"))
		if (!strncmp(p + 2, name, n) && !isalnum((unsigned char)p[2 + n]) &&
		    p[2 + n] != '_')
			return true;
	return false;
}

void opts_pet_explain(const struct launch_opts *o, char *const envp[], char *err, size_t errlen)
{
	char var[SETTINGS_NAME_MAX + 8], list[256] = "";
	int count = 0;

	for (size_t i = 0; i < opts_settings.n; i++) {
		const char *name = opts_settings.defs[i].name;
		const char *v;

		if (!((o->set_by[OPTS_SRC_PET] >> i) & 1) || !pet_mentions(err, name))
			continue;
		opts_pet_name(o, i, var, sizeof(var));
		v = pet_env(envp, var);
		opts_line_add(list, sizeof(list), "%s%s=%.48s (--%s)", count++ ? ", " : "", var,
			      v ? v : "", name);
	}
	if (count)
		opts_line_add(err, errlen,
			      "; from the environment: %s; fix or unset %s, or give the flag%s",
			      list, count > 1 ? "them" : "it", count > 1 ? "s" : "");
}
