/*
 * settings.c - the settings table: lookup by either spelling, typed
 * parsing with messages, "did you mean", command-line words.
 */
#include "settings.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Longest value quoted in a message; longer ones end in "...". */
#define SETTINGS_QUOTE_MAX 60

static void settings_err(char *err, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void settings_err(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!err || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
}

/* `name` with dashes as underscores into canon[SETTINGS_NAME_MAX]; false
 * when empty or too long. */
static bool settings_canon(const char *name, char *canon)
{
	size_t n = strlen(name);

	if (n == 0 || n >= SETTINGS_NAME_MAX)
		return false;
	for (size_t i = 0; i <= n; i++)
		canon[i] = name[i] == '-' ? '_' : name[i];
	return true;
}

int settings_find(const struct settings_table *t, const char *name)
{
	char canon[SETTINGS_NAME_MAX];

	if (!settings_canon(name, canon))
		return -ENOENT;
	for (size_t i = 0; i < t->n; i++) {
		const struct settings_def *d = &t->defs[i];

		if (!strcmp(canon, d->name) || (d->alias && !strcmp(canon, d->alias)))
			return (int)i;
	}
	return -ENOENT;
}

int settings_parse_ll(const char *s, long long min, long long max, long long *out)
{
	char *end;
	long long v;

	if (!s || !*s)
		return -EINVAL;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

int settings_parse_real(const char *s, double *out)
{
	char *end;
	double v;

	if (!s || !*s)
		return -EINVAL;
	v = strtod(s, &end);
	/* Overflow gives HUGE_VAL (refused as not finite); an underflow to
	 * (nearly) zero is taken as the number it rounds to. */
	if (*end || !isfinite(v) || v < 0)
		return -EINVAL;
	*out = v;
	return 0;
}

int settings_parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = {"1", "true", "yes", "on"};
	static const char *const no[] = {"0", "false", "no", "off"};

	if (!s) {
		*out = true;
		return 0;
	}
	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (!strcasecmp(s, yes[i])) {
			*out = true;
			return 0;
		}
		if (!strcasecmp(s, no[i])) {
			*out = false;
			return 0;
		}
	}
	return -EINVAL;
}

static int settings_store_str(char **field, const char *value)
{
	char *copy;

	if (!*value)
		return -EINVAL;
	copy = strdup(value);
	if (!copy)
		return -ENOMEM;
	free(*field);
	*field = copy;
	return 0;
}

static int settings_store(const struct settings_def *d, void *obj, const char *value)
{
	void *field = (char *)obj + d->offset;
	long long l;
	int rc;

	if (d->type == SETTINGS_BOOL)
		return settings_parse_bool(value, field);
	if (!value && !(d->type == SETTINGS_CUSTOM && (d->flags & SETTINGS_F_BARE)))
		return -EINVAL;
	switch (d->type) {
	case SETTINGS_STR:
		return settings_store_str(field, value);
	case SETTINGS_BUF:
		if (strlen(value) >= d->size)
			return -EINVAL;
		memcpy(field, value, strlen(value) + 1);
		return 0;
	case SETTINGS_INT:
	case SETTINGS_I64:
		rc = settings_parse_ll(value, d->min, d->max, &l);
		if (rc == 0 && d->type == SETTINGS_INT)
			*(int *)field = (int)l;
		else if (rc == 0)
			*(int64_t *)field = l;
		return rc;
	case SETTINGS_REAL:
		return settings_parse_real(value, field);
	case SETTINGS_CUSTOM:
		return d->parse(obj, d, value);
	default:
		return -EINVAL;
	}
}

void settings_expect(const struct settings_def *d, char *buf, size_t len)
{
	long long top = d->type == SETTINGS_INT ? INT_MAX : INT64_MAX;

	if (d->expect)
		snprintf(buf, len, "%s", d->expect);
	else if (d->type == SETTINGS_STR)
		snprintf(buf, len, "a non-empty string");
	else if (d->type == SETTINGS_BUF)
		snprintf(buf, len, "at most %zu characters", d->size - 1);
	else if ((d->type == SETTINGS_INT || d->type == SETTINGS_I64) && d->max < top)
		snprintf(buf, len, "an integer from %lld to %lld", d->min, d->max);
	else if (d->type == SETTINGS_INT || d->type == SETTINGS_I64)
		snprintf(buf, len, d->min == 0 ? "a non-negative integer" : "an integer >= %lld",
			 d->min);
	else if (d->type == SETTINGS_REAL)
		snprintf(buf, len, "a non-negative number");
	else if (d->type == SETTINGS_BOOL)
		snprintf(buf, len, "true or false");
	else
		snprintf(buf, len, "a valid value");
}

int settings_apply(const struct settings_table *t, size_t i, void *obj, const char *value,
		   char *err, size_t errlen)
{
	const struct settings_def *d = &t->defs[i];
	char expect[96];
	int rc = settings_store(d, obj, value);

	if (rc == -ENOMEM) {
		settings_err(err, errlen, "out of memory");
		return rc;
	}
	if (rc == 0)
		return 0;
	settings_expect(d, expect, sizeof(expect));
	if (!value)
		settings_err(err, errlen, "'%s' needs a value (%s)", d->name, expect);
	else
		settings_err(err, errlen, "bad value '%.*s%s' for '%s' (expected %s)",
			     SETTINGS_QUOTE_MAX, value,
			     strlen(value) > SETTINGS_QUOTE_MAX ? "..." : "", d->name, expect);
	return -EINVAL;
}

void settings_format(const struct settings_table *t, size_t i, const void *obj, char *buf,
		     size_t len)
{
	const struct settings_def *d = &t->defs[i];
	const void *field = (const char *)obj + d->offset;
	const char *s;

	switch (d->type) {
	case SETTINGS_STR:
		s = *(char *const *)field;
		snprintf(buf, len, "%s", s ? s : "");
		break;
	case SETTINGS_BUF:
		snprintf(buf, len, "%s", (const char *)field);
		break;
	case SETTINGS_INT:
		snprintf(buf, len, "%d", *(const int *)field);
		break;
	case SETTINGS_I64:
		snprintf(buf, len, "%lld", (long long)*(const int64_t *)field);
		break;
	case SETTINGS_REAL:
		snprintf(buf, len, "%g", *(const double *)field);
		break;
	case SETTINGS_BOOL:
		snprintf(buf, len, "%s", *(const bool *)field ? "true" : "false");
		break;
	default:
		snprintf(buf, len, "%s", "");
	}
}

/* Edits (insert, delete, substitute, swap two neighbours) from a to b. */
static size_t settings_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	size_t rows[3][SETTINGS_NAME_MAX + 1];
	size_t *prev2 = rows[0], *prev = rows[1], *cur = rows[2];

	if (la >= SETTINGS_NAME_MAX || lb >= SETTINGS_NAME_MAX)
		return SIZE_MAX;
	for (size_t j = 0; j <= lb; j++)
		prev[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t *tmp = prev2;

		cur[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t cost = a[i - 1] != b[j - 1];
			size_t best = prev[j - 1] + cost;

			if (prev[j] + 1 < best)
				best = prev[j] + 1;
			if (cur[j - 1] + 1 < best)
				best = cur[j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    prev2[j - 2] + 1 < best)
				best = prev2[j - 2] + 1;
			cur[j] = best;
		}
		prev2 = prev;
		prev = cur;
		cur = tmp;
	}
	return prev[lb];
}

const char *settings_suggest(const struct settings_table *t, const char *name)
{
	char canon[SETTINGS_NAME_MAX];
	const char *best = NULL;
	size_t best_d, limit;

	name += strspn(name, "-");
	if (!settings_canon(name, canon))
		return NULL;
	/* A third of the name may be wrong: "master_prot" finds
	 * "master_port", "bogus" finds nothing. */
	limit = strlen(canon) / 3 ? strlen(canon) / 3 : 1;
	best_d = limit + 1;
	for (size_t i = 0; i < t->n; i++) {
		const char *cands[2] = {t->defs[i].name, t->defs[i].alias};

		for (size_t k = 0; k < 2; k++) {
			size_t d;

			if (!cands[k] || strlen(cands[k]) < 2)
				continue;
			d = settings_distance(canon, cands[k]);
			if (d < best_d) {
				best_d = d;
				best = cands[k];
			}
		}
	}
	return best;
}

void settings_unknown(const struct settings_table *t, const char *what, const char *name,
		      const char *where, char *err, size_t errlen)
{
	const char *near = settings_suggest(t, name);
	int dashes = (int)strspn(name, "-");

	if (near)
		settings_err(err, errlen, "unknown %s '%s'%s; did you mean '%.*s%s'?", what, name,
			     where, dashes, name, near);
	else
		settings_err(err, errlen, "unknown %s '%s'%s (see --help)", what, name, where);
}

/* settings_cli_take's unknown option: the word up to '=' for a long one. */
static int settings_cli_unknown(const struct settings_table *t, const char *arg, bool lng,
				char *err, size_t errlen)
{
	char shown[SETTINGS_NAME_MAX + 2];

	snprintf(shown, sizeof(shown), "%.*s", lng ? (int)strcspn(arg, "=") : (int)strlen(arg),
		 arg);
	settings_unknown(t, "option", shown, "", err, errlen);
	return -ENOENT;
}

/* "--no-NAME" for a boolean NAME: its index, or -ENOENT. */
static int settings_cli_negated(const struct settings_table *t, const char *name)
{
	int i;

	if (strncmp(name, "no_", 3) && strncmp(name, "no-", 3))
		return -ENOENT;
	i = settings_find(t, name + 3);
	return i >= 0 && t->defs[i].type == SETTINGS_BOOL ? i : -ENOENT;
}

int settings_cli_take(const struct settings_table *t, unsigned flags, int argc, char *const argv[],
		      int *i, struct settings_flag *out, char *err, size_t errlen)
{
	const char *arg = argv[*i], *body, *value = NULL;
	bool lng = arg[0] == '-' && arg[1] == '-';
	char name[SETTINGS_NAME_MAX];
	size_t nlen;
	int idx;

	if (arg[0] != '-' || (!lng && !(flags & SETTINGS_CLI_SHORT)))
		return settings_cli_unknown(t, arg, lng, err, errlen);
	body = arg + (lng ? 2 : 1);
	nlen = lng ? strcspn(body, "=") : 1;
	if (!*body || nlen == 0 || nlen >= sizeof(name))
		return settings_cli_unknown(t, arg, lng, err, errlen);
	memcpy(name, body, nlen);
	name[nlen] = '\0';
	if (lng && body[nlen] == '=')
		value = body + nlen + 1;
	else if (!lng && body[1])
		value = body + 1; /* "-t1", as argparse takes it */
	idx = settings_find(t, name);
	if (idx < 0 && lng && !value && (flags & SETTINGS_CLI_NEGATE) &&
	    (idx = settings_cli_negated(t, name)) >= 0) {
		*out = (struct settings_flag){.index = (size_t)idx, .value = "false"};
		return 0;
	}
	if (idx < 0 || (!lng && value && t->defs[idx].type == SETTINGS_BOOL))
		return settings_cli_unknown(t, arg, lng, err, errlen);
	if (!value && t->defs[idx].type == SETTINGS_BOOL) {
		if ((flags & SETTINGS_CLI_BOOL_WORD) && *i + 1 < argc && argv[*i + 1][0] != '-')
			value = argv[++*i];
	} else if (!value && !(t->defs[idx].flags & SETTINGS_F_BARE)) {
		if (*i + 1 >= argc) {
			settings_err(err, errlen, "missing value after '%s' (see --help)", arg);
			return -EINVAL;
		}
		value = argv[++*i];
	}
	*out = (struct settings_flag){.index = (size_t)idx, .value = value};
	return 0;
}

void settings_print_usage(const struct settings_table *t, const void *defaults, FILE *out)
{
	char def[64];

	for (size_t i = 0; i < t->n; i++) {
		if (!t->defs[i].help)
			continue;
		settings_format(t, i, defaults, def, sizeof(def));
		fprintf(out, "  --%-20s %s (default: %s)\n", t->defs[i].name, t->defs[i].help, def);
	}
}
