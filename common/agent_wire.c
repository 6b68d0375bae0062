/* The agent channel's grammar: format, parse, and the incremental reader. */
#include "agent_wire.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* A cursor over the fields of one line. */
struct wire_cur {
	const char *p, *end;
};

/* The next field (the bytes up to the next space or the end), or -EINVAL
 * when none is left or it is empty (two spaces, a trailing space). */
static int cur_field(struct wire_cur *c, const char **f, size_t *n)
{
	const char *s;

	if (c->p >= c->end)
		return -EINVAL;
	if (*c->p == ' ') {
		c->p++;
		if (c->p >= c->end || *c->p == ' ')
			return -EINVAL;
	}
	s = c->p;
	while (c->p < c->end && *c->p != ' ')
		c->p++;
	*f = s;
	*n = (size_t)(c->p - s);
	return 0;
}

/* A decimal 0..INT32_MAX written canonically (no sign, no leading zero). */
static int cur_int(struct wire_cur *c, int *out)
{
	const char *f;
	size_t n;
	int64_t v = 0;
	int rc = cur_field(c, &f, &n);

	if (rc < 0)
		return rc;
	if (n > 1 && f[0] == '0')
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (f[i] < '0' || f[i] > '9')
			return -EINVAL;
		if (v <= INT32_MAX)
			v = v * 10 + (f[i] - '0');
	}
	if (v > INT32_MAX)
		return -ERANGE;
	*out = (int)v;
	return 0;
}

static int cur_end(const struct wire_cur *c)
{
	return c->p == c->end ? 0 : -EINVAL;
}

static bool addr_ok(const char *a, size_t n)
{
	if (n == 0 || n > AGENT_WIRE_ADDR_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)a[i] < 0x21 || (unsigned char)a[i] > 0x7e)
			return false;
	return true;
}

/* The ranges of a round's fields; the parser and the formatter share them. */
static int round_check(const struct agent_wire_round *r)
{
	if (r->round < 0 || r->world_size < 1 || r->rank < 0 || r->rank >= r->world_size ||
	    r->local_world_size < 1 || r->local_world_size > r->world_size || r->local_rank < 0 ||
	    r->local_rank >= AGENT_WIRE_LOCAL_RANK_MAX || r->master_port < 1 ||
	    r->master_port > 65535 || r->group_world_size < 1 || r->group_rank < 0 ||
	    r->group_rank >= r->group_world_size)
		return -ERANGE;
	return addr_ok(r->master_addr, strnlen(r->master_addr, sizeof(r->master_addr))) ? 0
											: -ERANGE;
}

int agent_wire_round_set_addr(struct agent_wire_round *r, const char *addr)
{
	size_t n = strnlen(addr, AGENT_WIRE_ADDR_MAX + 1);

	if (n == 0 || n > AGENT_WIRE_ADDR_MAX)
		return -ERANGE;
	memcpy(r->master_addr, addr, n + 1);
	return 0;
}

static int parse_addr(struct wire_cur *c, char *out)
{
	const char *f;
	size_t n;
	int rc = cur_field(c, &f, &n);

	if (rc < 0)
		return rc;
	if (n > AGENT_WIRE_ADDR_MAX)
		return -ERANGE;
	memcpy(out, f, n);
	out[n] = '\0';
	return 0;
}

static int parse_replica(struct wire_cur *c, struct agent_wire_replica *r)
{
	const char *f;
	size_t n;
	int rc = 0;

	memset(r, 0, sizeof(*r));
	rc = rc ?: cur_int(c, &r->step);
	rc = rc ?: cur_int(c, &r->rank);
	rc = rc ?: cur_field(c, &f, &n);
	if (rc < 0)
		return rc;
	if (n == 6 && !memcmp(f, "healed", 6))
		r->healed = true;
	else if (!(n == 7 && !memcmp(f, "stopped", 7)))
		return -EINVAL;
	return parse_addr(c, r->tensor) ?: cur_end(c);
}

static const char *const cause_words[] = {
    [AGENT_WIRE_CAUSE_NONE] = "none",
    [AGENT_WIRE_CAUSE_COMPUTE] = "compute",
    [AGENT_WIRE_CAUSE_LINK] = "link",
};
#define CAUSE_NWORDS (sizeof(cause_words) / sizeof(cause_words[0]))

const char *agent_wire_cause_name(enum agent_wire_cause c)
{
	return (unsigned)c < CAUSE_NWORDS ? cause_words[c] : NULL;
}

/* DIGITS "." two digits, DIGITS canonical: hundredths 0..INT32_MAX. */
static int cur_ratio(struct wire_cur *c, int *out)
{
	const char *f;
	size_t n;
	int64_t v = 0;
	int rc = cur_field(c, &f, &n);

	if (rc < 0)
		return rc;
	if (n < 4 || f[n - 3] != '.' || (n > 4 && f[0] == '0'))
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (i == n - 3)
			continue;
		if (f[i] < '0' || f[i] > '9')
			return -EINVAL;
		if (v <= INT32_MAX)
			v = v * 10 + (f[i] - '0');
	}
	if (v > INT32_MAX)
		return -ERANGE;
	*out = (int)v;
	return 0;
}

static int parse_straggler(struct wire_cur *c, struct agent_wire_straggler *s)
{
	const char *f;
	size_t n, i;
	int rc = 0;

	memset(s, 0, sizeof(*s));
	rc = rc ?: cur_int(c, &s->step);
	rc = rc ?: cur_int(c, &s->rank);
	rc = rc ?: cur_int(c, &s->node);
	rc = rc ?: cur_field(c, &f, &n);
	if (rc < 0)
		return rc;
	for (i = 0; i < CAUSE_NWORDS; i++)
		if (n == strlen(cause_words[i]) && !memcmp(f, cause_words[i], n))
			break;
	if (i == CAUSE_NWORDS)
		return -EINVAL;
	s->cause = (enum agent_wire_cause)i;
	return cur_ratio(c, &s->slower_x100) ?: cur_end(c);
}

static int parse_round(struct wire_cur *c, struct agent_wire_round *r)
{
	int rc = 0;

	memset(r, 0, sizeof(*r));
	rc = rc ?: cur_int(c, &r->round);
	rc = rc ?: cur_int(c, &r->rank);
	rc = rc ?: cur_int(c, &r->world_size);
	rc = rc ?: cur_int(c, &r->local_rank);
	rc = rc ?: cur_int(c, &r->local_world_size);
	rc = rc ?: parse_addr(c, r->master_addr);
	rc = rc ?: cur_int(c, &r->master_port);
	rc = rc ?: cur_int(c, &r->group_rank);
	rc = rc ?: cur_int(c, &r->group_world_size);
	rc = rc ?: cur_end(c);
	return rc ?: round_check(r);
}

static int parse_decl(struct wire_cur *c, bool *resizable)
{
	const char *f;
	size_t n;
	int rc = cur_field(c, &f, &n);

	if (rc < 0)
		return rc;
	if (n == 9 && !memcmp(f, "resizable", 9))
		*resizable = true;
	else if (n == 5 && !memcmp(f, "fixed", 5))
		*resizable = false;
	else
		return -EINVAL;
	return cur_end(c);
}

static const char *const numerics_words[] = {
    [AGENT_WIRE_NUMERICS_KEPT] = "kept",
    [AGENT_WIRE_NUMERICS_DROPPED] = "dropped",
    [AGENT_WIRE_NUMERICS_REFUSED] = "refused",
};
#define NUMERICS_NWORDS (sizeof(numerics_words) / sizeof(numerics_words[0]))

static bool text_ok(const char *t, size_t n)
{
	if (n == 0 || n > AGENT_WIRE_TEXT_MAX || t[0] == ' ' || t[n - 1] == ' ')
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)t[i] < 0x20 || (unsigned char)t[i] > 0x7e)
			return false;
	return true;
}

void agent_wire_set_text(struct agent_wire_msg *m, const char *text)
{
	size_t n = 0;

	while (*text == ' ')
		text++;
	for (; text[n] && n < AGENT_WIRE_TEXT_MAX; n++) {
		unsigned char b = (unsigned char)text[n];

		m->text[n] = b < 0x20 || b > 0x7e ? '?' : (char)b;
	}
	while (n > 0 && m->text[n - 1] == ' ')
		n--;
	if (n == 0)
		m->text[n++] = '-';
	m->text[n] = '\0';
}

/* "numerics PROMISE TEXT": TEXT is the rest of the line. */
static int parse_numerics(struct wire_cur *c, struct agent_wire_msg *m)
{
	const char *f;
	size_t n, i;
	int rc = cur_field(c, &f, &n);

	if (rc < 0)
		return rc;
	for (i = 0; i < NUMERICS_NWORDS; i++)
		if (n == strlen(numerics_words[i]) && !memcmp(f, numerics_words[i], n))
			break;
	if (i == NUMERICS_NWORDS || c->p >= c->end)
		return -EINVAL;
	m->numerics = (enum agent_wire_numerics)i;
	c->p++; /* the one space before the text */
	n = (size_t)(c->end - c->p);
	if (n > AGENT_WIRE_TEXT_MAX)
		return -ERANGE;
	if (!text_ok(c->p, n))
		return -EINVAL;
	memcpy(m->text, c->p, n);
	m->text[n] = '\0';
	return 0;
}

static int parse_hello(struct wire_cur *c, struct agent_wire_msg *m)
{
	int rc = cur_int(c, &m->version);

	if (rc < 0)
		return rc;
	if (m->version < 1)
		return -EINVAL;
	if (m->version != AGENT_WIRE_VERSION)
		return 0; /* another version's fields: the caller says so */
	return parse_decl(c, &m->resizable);
}

static bool kind_ok(const char *k, size_t n)
{
	if (n == 0 || n > AGENT_WIRE_KIND_MAX || k[0] < 'a' || k[0] > 'z')
		return false;
	for (size_t i = 1; i < n; i++)
		if (!((k[i] >= 'a' && k[i] <= 'z') || (k[i] >= '0' && k[i] <= '9') || k[i] == '-'))
			return false;
	return true;
}

static bool printable(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
			return false;
	return true;
}

static bool kind_is(const char *k, size_t n, const char *name)
{
	return n == strlen(name) && !memcmp(k, name, n);
}

int agent_wire_parse(const char *line, size_t len, struct agent_wire_msg *m)
{
	struct wire_cur c = {line, line + len};
	const char *k = line;
	size_t n = 0;

	memset(m, 0, sizeof(*m));
	if (len >= AGENT_WIRE_MAX_LINE)
		return -EMSGSIZE;
	while (n < len && line[n] != ' ')
		n++;
	if (!kind_ok(k, n))
		return -EINVAL;
	c.p = line + n;
	/* The kinds of this version; any other well-formed one is skipped. */
	if (!kind_is(k, n, "hello") && !kind_is(k, n, "resizable") && !kind_is(k, n, "fixed") &&
	    !kind_is(k, n, "took") && !kind_is(k, n, "round") && !kind_is(k, n, "numerics") &&
	    !kind_is(k, n, "replica") && !kind_is(k, n, "straggler"))
		return 0;
	if (!printable(line, len))
		return -EINVAL;
	if (kind_is(k, n, "hello")) {
		m->kind = AGENT_WIRE_HELLO;
		return parse_hello(&c, m);
	}
	if (kind_is(k, n, "resizable") || kind_is(k, n, "fixed")) {
		m->kind = kind_is(k, n, "fixed") ? AGENT_WIRE_FIXED : AGENT_WIRE_RESIZABLE;
		return cur_end(&c);
	}
	if (kind_is(k, n, "took")) {
		m->kind = AGENT_WIRE_TOOK;
		return cur_int(&c, &m->round) ?: cur_end(&c);
	}
	if (kind_is(k, n, "numerics")) {
		m->kind = AGENT_WIRE_NUMERICS;
		return parse_numerics(&c, m);
	}
	if (kind_is(k, n, "replica")) {
		m->kind = AGENT_WIRE_REPLICA;
		return parse_replica(&c, &m->replica);
	}
	if (kind_is(k, n, "straggler")) {
		m->kind = AGENT_WIRE_STRAGGLER;
		return parse_straggler(&c, &m->straggler);
	}
	m->kind = AGENT_WIRE_ROUND;
	return parse_round(&c, &m->r);
}

static int format_body(const struct agent_wire_msg *m, char *buf, size_t len)
{
	const struct agent_wire_round *r = &m->r;

	switch (m->kind) {
	case AGENT_WIRE_HELLO:
		if (m->version != AGENT_WIRE_VERSION)
			return -EINVAL;
		return snprintf(buf, len, "hello %d %s\n", m->version,
				m->resizable ? "resizable" : "fixed");
	case AGENT_WIRE_RESIZABLE:
		return snprintf(buf, len, "resizable\n");
	case AGENT_WIRE_FIXED:
		return snprintf(buf, len, "fixed\n");
	case AGENT_WIRE_TOOK:
		if (m->round < 0)
			return -ERANGE;
		return snprintf(buf, len, "took %d\n", m->round);
	case AGENT_WIRE_ROUND:
		if (round_check(r) < 0)
			return -ERANGE;
		return snprintf(buf, len, "round %d %d %d %d %d %s %d %d %d\n", r->round, r->rank,
				r->world_size, r->local_rank, r->local_world_size, r->master_addr,
				r->master_port, r->group_rank, r->group_world_size);
	case AGENT_WIRE_NUMERICS:
		if ((unsigned)m->numerics >= NUMERICS_NWORDS)
			return -EINVAL;
		if (!text_ok(m->text, strnlen(m->text, sizeof(m->text))))
			return -ERANGE;
		return snprintf(buf, len, "numerics %s %s\n", numerics_words[m->numerics], m->text);
	case AGENT_WIRE_REPLICA:
		if (m->replica.step < 0 || m->replica.rank < 0 ||
		    !addr_ok(m->replica.tensor,
			     strnlen(m->replica.tensor, sizeof(m->replica.tensor))))
			return -ERANGE;
		return snprintf(buf, len, "replica %d %d %s %s\n", m->replica.step, m->replica.rank,
				m->replica.healed ? "healed" : "stopped", m->replica.tensor);
	case AGENT_WIRE_STRAGGLER: {
		const struct agent_wire_straggler *g = &m->straggler;

		if (!agent_wire_cause_name(g->cause))
			return -EINVAL;
		if (g->step < 0 || g->rank < 0 || g->node < 0 || g->slower_x100 < 0)
			return -ERANGE;
		return snprintf(buf, len, "straggler %d %d %d %s %d.%02d\n", g->step, g->rank,
				g->node, cause_words[g->cause], g->slower_x100 / 100,
				g->slower_x100 % 100);
	}
	default:
		return -EINVAL;
	}
}

int agent_wire_format(const struct agent_wire_msg *m, char *buf, size_t len)
{
	int n = format_body(m, buf, len);

	if (n < 0)
		return n;
	return (size_t)n >= len ? -ENOSPC : n;
}

void agent_wire_reader_init(struct agent_wire_reader *rd)
{
	rd->len = 0;
	rd->overlong = false;
}

bool agent_wire_reader_idle(const struct agent_wire_reader *rd)
{
	return rd->len == 0 && !rd->overlong;
}

int agent_wire_read(struct agent_wire_reader *rd, const char *data, size_t n, size_t *used,
		    struct agent_wire_msg *m)
{
	const char *nl = memchr(data, '\n', n);
	size_t take = nl ? (size_t)(nl - data) : n;
	int rc;

	*used = nl ? take + 1 : n;
	/* Checked before anything is copied: a line past the limit is
	 * dropped up to its '\n', never buffered. */
	if (!rd->overlong && rd->len + take >= AGENT_WIRE_MAX_LINE)
		rd->overlong = true;
	if (!rd->overlong) {
		memcpy(rd->line + rd->len, data, take);
		rd->len += take;
	}
	if (!nl)
		return 0;
	if (rd->overlong) {
		agent_wire_reader_init(rd);
		memset(m, 0, sizeof(*m));
		return -EMSGSIZE;
	}
	rc = agent_wire_parse(rd->line, rd->len, m);
	rd->len = 0;
	return rc < 0 ? rc : 1;
}
