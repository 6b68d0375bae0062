/*
 * hostlist.c - Slurm host list expansion (see hostlist.h).
 *
 * Two passes over the text: the first checks it and counts the names and
 * their bytes (so that nothing is allocated for a list that is refused, and
 * the bound is checked before any name is made); the second writes the
 * names into one allocation.
 */
#include "hostlist.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DIGITS 18 /* keeps every value and sum inside uint64_t */
#define QUOTE_MAX  64 /* how much of the list a message quotes */

struct range {
	uint64_t lo, hi;
	int width; /* digits LO was written with: the padding */
};

struct cursor {
	const char *expr; /* the whole list, for messages */
	const char *p;
	char *err;
	size_t errlen;
};

/* Writes "<what> (character N of "<list>")" into err; returns -EINVAL. */
static int fail(const struct cursor *c, const char *at, const char *fmt, ...)
{
	size_t n, len = strlen(c->expr);
	va_list ap;

	if (!c->errlen)
		return -EINVAL;
	va_start(ap, fmt);
	vsnprintf(c->err, c->errlen, fmt, ap);
	va_end(ap);
	n = strlen(c->err);
	snprintf(c->err + n, c->errlen - n, " (character %zu of \"%.*s%s\")",
		 (size_t)(at - c->expr) + 1, QUOTE_MAX, c->expr, len > QUOTE_MAX ? "..." : "");
	return -EINVAL;
}

static int is_digit(char ch)
{
	return ch >= '0' && ch <= '9';
}

/* Printable ASCII other than the list's own punctuation. */
static int is_name_char(char ch)
{
	return ch > ' ' && ch < 0x7f && ch != ',' && ch != '[' && ch != ']';
}

static int digits(uint64_t v)
{
	int n = 1;

	while (v >= 10) {
		v /= 10;
		n++;
	}
	return n;
}

/* A decimal number at c->p; on success c->p is past it. */
static int parse_number(struct cursor *c, uint64_t *v, int *width)
{
	const char *start = c->p;

	*v = 0;
	while (is_digit(*c->p)) {
		if (c->p - start == MAX_DIGITS)
			return fail(c, start, "number \"%.*s...\" has more than %d digits",
				    MAX_DIGITS, start, MAX_DIGITS);
		*v = *v * 10 + (uint64_t)(*c->p - '0');
		c->p++;
	}
	*width = (int)(c->p - start);
	return 0;
}

/* Explains why the character at `at` cannot be where a number must be. */
static int fail_not_number(struct cursor *c, const char *at, const char *group)
{
	if (*at == '\0')
		return fail(c, group, "'[' is never closed");
	if (*at == '[')
		return fail(c, at, "'[' inside brackets");
	if (*at == ']' || *at == ',')
		return fail(c, at, "empty range");
	return fail(c, at, "'%c' in a range: a range is N or LO-HI, in decimal", *at);
}

/* One range "N" or "LO-HI" at c->p inside the group that opened at
 * `group`; on success c->p is at the ',' or ']' after it. */
static int parse_range(struct cursor *c, const char *group, struct range *r)
{
	const char *start = c->p;
	int rc, hi_width;

	if (*c->p == '-')
		return fail(c, start, "range \"%.*s\" has no low end", (int)strcspn(start, ",]"),
			    start);
	if (!is_digit(*c->p))
		return fail_not_number(c, c->p, group);
	rc = parse_number(c, &r->lo, &r->width);
	if (rc)
		return rc;
	r->hi = r->lo;
	if (*c->p == '-') {
		c->p++;
		if (*c->p == ']' || *c->p == ',')
			return fail(c, start, "range \"%.*s\" has no high end", (int)(c->p - start),
				    start);
		if (!is_digit(*c->p))
			return fail_not_number(c, c->p, group);
		rc = parse_number(c, &r->hi, &hi_width);
		if (rc)
			return rc;
		if (*c->p == '-')
			return fail(c, c->p, "a range has more than one '-'");
		if (r->hi < r->lo)
			return fail(c, start, "range \"%.*s\" counts down", (int)(c->p - start),
				    start);
	}
	if (*c->p != ',' && *c->p != ']')
		return fail_not_number(c, c->p, group);
	return 0;
}

/* Checks the group at c->p (its '['); adds the values it names to *count
 * and their widest print to *width. On success c->p is past its ']'. */
static int check_group(struct cursor *c, size_t max_hosts, uint64_t *count, int *width)
{
	const char *group = c->p++;
	struct range r;
	int rc;

	*count = 0;
	*width = 0;
	for (;;) {
		rc = parse_range(c, group, &r);
		if (rc)
			return rc;
		if (r.hi - r.lo >= max_hosts || *count + (r.hi - r.lo + 1) > max_hosts)
			return -E2BIG;
		*count += r.hi - r.lo + 1;
		if (r.width > *width)
			*width = r.width;
		if (digits(r.hi) > *width)
			*width = digits(r.hi);
		if (*c->p++ == ']')
			return 0;
	}
}

/* Checks one entry at c->p; on success c->p is at the ',' or NUL after it,
 * *count is the number of names it makes and *len their longest length. */
static int check_entry(struct cursor *c, size_t max_hosts, uint64_t *count, size_t *len)
{
	const char *start = c->p;
	uint64_t n;
	int w, rc;

	*count = 1;
	*len = 0;
	while (*c->p && *c->p != ',') {
		if (*c->p == '[') {
			rc = check_group(c, max_hosts, &n, &w);
			if (rc)
				return rc;
			if (*count > max_hosts / n)
				return -E2BIG;
			*count *= n;
			*len += (size_t)w;
		} else if (*c->p == ']') {
			return fail(c, c->p, "']' without '['");
		} else if (!is_name_char(*c->p)) {
			return fail(c, c->p, "character 0x%02x is not allowed in a host name",
				    (unsigned char)*c->p);
		} else {
			c->p++;
			(*len)++;
		}
	}
	if (c->p == start)
		return fail(c, start, "empty entry");
	if (*len > HOSTLIST_NAME_MAX)
		return fail(c, start, "names would be longer than %d characters",
			    HOSTLIST_NAME_MAX);
	return 0;
}

struct writer {
	struct hostlist *hl;
	char *next; /* where the next name's bytes go */
};

static void emit(struct writer *w, const char *name, size_t len)
{
	memcpy(w->next, name, len);
	w->next[len] = '\0';
	w->hl->hosts[w->hl->count++] = w->next;
	w->next += len + 1;
}

/* Writes every name of the (checked) entry rest at p, after the len bytes
 * already in name: copies text up to the next group, then recurses once per
 * value of that group, so the last group varies fastest. */
static void expand_from(struct writer *w, const char *p, char *name, size_t len)
{
	struct cursor c = {.expr = p, .p = p};
	const char *rest, *group;
	struct range r;

	while (*p && *p != ',' && *p != '[')
		name[len++] = *p++;
	if (*p != '[') {
		emit(w, name, len);
		return;
	}
	group = p;
	rest = strchr(p, ']') + 1;
	c.p = p + 1;
	do {
		parse_range(&c, group, &r); /* checked before: cannot fail */
		for (uint64_t v = r.lo;; v++) {
			int n = sprintf(name + len, "%0*" PRIu64, r.width, v);

			expand_from(w, rest, name, len + (size_t)n);
			if (v == r.hi)
				break;
		}
	} while (*c.p++ == ',');
}

/* The ',' or NUL that ends the (checked) entry at p. */
static const char *entry_end(const char *p)
{
	while (*p && *p != ',')
		p = *p == '[' ? strchr(p, ']') + 1 : p + 1;
	return p;
}

static int check_list(struct cursor *c, size_t max_hosts, size_t *count, size_t *bytes)
{
	uint64_t n;
	size_t len;
	int rc;

	*count = 0;
	*bytes = 0;
	if (*c->p == '\0')
		return fail(c, c->p, "the host list is empty");
	for (;;) {
		rc = check_entry(c, max_hosts, &n, &len);
		if (rc)
			return rc;
		if (n > max_hosts - *count)
			return -E2BIG;
		*count += (size_t)n;
		*bytes += (size_t)n * (len + 1);
		if (*c->p++ == '\0')
			return 0;
	}
}

int hostlist_expand(const char *expr, size_t max_hosts, struct hostlist *out, char *err,
		    size_t errlen)
{
	struct cursor c = {.expr = expr, .p = expr, .err = err, .errlen = errlen};
	char name[HOSTLIST_NAME_MAX + MAX_DIGITS + 1];
	struct writer w = {.hl = out};
	size_t count, bytes;
	const char *p;
	int rc;

	out->hosts = NULL;
	out->count = 0;
	if (errlen)
		err[0] = '\0';
	rc = check_list(&c, max_hosts, &count, &bytes);
	if (rc == -E2BIG && errlen)
		snprintf(err, errlen, "the host list \"%.*s%s\" names more than %zu hosts",
			 QUOTE_MAX, expr, strlen(expr) > QUOTE_MAX ? "..." : "", max_hosts);
	if (rc)
		return rc;
	out->hosts = malloc(count * sizeof(char *) + bytes);
	if (!out->hosts) {
		if (errlen)
			snprintf(err, errlen, "out of memory for %zu host names", count);
		return -ENOMEM;
	}
	w.next = (char *)(out->hosts + count);
	for (p = expr;; p++) {
		expand_from(&w, p, name, 0);
		p = entry_end(p);
		if (*p == '\0')
			return 0;
	}
}

void hostlist_release(struct hostlist *hl)
{
	free(hl->hosts);
	hl->hosts = NULL;
	hl->count = 0;
}
