/*
 * rdzv_codec.c - the state, slot and world encodings (see rdzv_codec.h).
 *
 * Decoding splits the first line into exactly the expected number of
 * tokens and checks each on its own; nothing is allocated before the
 * announced sizes have been checked against what the input can hold.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_codec.h"

#define STATE_FIELDS 17
#define SLOT_FIELDS  10
#define WORLD_FIELDS 5
#define OWNER_FIELDS 4
#define ROW_FIELDS   3
#define ROW_MIN	     6 /* "a b 1\n" */

struct tok {
	const uint8_t *p;
	size_t len;
};

static const char *const phase_names[] = {"", "open", "running", "finished", "failed"};
static const char *const reason_names[] = {"",	      "start",	"join",	   "dead",     "left",
					   "restart", "reform", "replace", "permanent"};

const char *rdzv_phase_name(enum rdzv_phase phase)
{
	return phase >= RDZV_OPEN && phase <= RDZV_FAILED ? phase_names[phase] : "?";
}

const char *rdzv_reason_name(enum rdzv_reason reason)
{
	return reason >= RDZV_WHY_START && reason <= RDZV_WHY_PERMANENT ? reason_names[reason]
									: "?";
}

/* Bytes allowed in ids and addresses: printable ASCII but space and '/'
 * (a table: every agent checks every byte of the world once per round). */
#define TOK_OK(c)   ((c) > 0x20 && (c) < 0x7f && (c) != '/')
#define TOK_OK4(c)  TOK_OK(c), TOK_OK(c + 1), TOK_OK(c + 2), TOK_OK(c + 3)
#define TOK_OK16(c) TOK_OK4(c), TOK_OK4(c + 4), TOK_OK4(c + 8), TOK_OK4(c + 12)
static const bool tok_table[256] = {
    TOK_OK16(0x00), TOK_OK16(0x10), TOK_OK16(0x20), TOK_OK16(0x30),
    TOK_OK16(0x40), TOK_OK16(0x50), TOK_OK16(0x60), TOK_OK16(0x70),
};

static bool tok_char_ok(uint8_t c)
{
	return tok_table[c];
}

bool rdzv_token_ok(const char *s, size_t max)
{
	size_t n = strnlen(s, max + 1);
	if (n == 0 || n > max || (n == 1 && s[0] == '-'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!tok_char_ok((uint8_t)s[i]))
			return false;
	return true;
}

/* Splits data[0..len) up to and including its first '\n' into exactly n
 * tokens separated by single spaces. *line_len gets the bytes consumed. */
static int split_line(const uint8_t *data, size_t len, struct tok *toks, size_t n, size_t *line_len)
{
	const uint8_t *nl = len ? memchr(data, '\n', len) : NULL;
	if (!nl)
		return -EINVAL;
	size_t end = (size_t)(nl - data), start = 0, k = 0;
	for (size_t i = 0; i <= end; i++) {
		if (i < end && data[i] != ' ')
			continue;
		if (i == start || k == n)
			return -EINVAL; /* empty token (double space) or too many */
		toks[k].p = data + start;
		toks[k].len = i - start;
		k++;
		start = i + 1;
	}
	if (k != n)
		return -EINVAL;
	*line_len = end + 1;
	return 0;
}

int rdzv_parse_u64(const uint8_t *p, size_t len, uint64_t max, uint64_t *out)
{
	if (len == 0 || len > 20 || (len > 1 && p[0] == '0'))
		return -EINVAL;
	uint64_t v = 0;
	for (size_t i = 0; i < len; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -EINVAL;
		uint64_t d = (uint64_t)(p[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -EINVAL;
		v = v * 10 + d;
	}
	if (v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

static int tok_u32(struct tok t, uint32_t lo, uint32_t hi, uint32_t *out)
{
	uint64_t v;
	if (rdzv_parse_u64(t.p, t.len, hi, &v) < 0 || v < lo)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

/* A token into a NUL-terminated buffer of max + 1 bytes; "-" gives "" when
 * `optional`. */
static int tok_str(struct tok t, char *out, size_t max, bool optional)
{
	if (optional && t.len == 1 && t.p[0] == '-') {
		out[0] = '\0';
		return 0;
	}
	if (t.len == 0 || t.len > max || (t.len == 1 && t.p[0] == '-'))
		return -EINVAL;
	for (size_t i = 0; i < t.len; i++)
		if (!tok_char_ok(t.p[i]))
			return -EINVAL;
	memcpy(out, t.p, t.len);
	out[t.len] = '\0';
	return 0;
}

static int tok_word(struct tok t, const char *const *names, int count)
{
	for (int i = 1; i < count; i++)
		if (strlen(names[i]) == t.len && memcmp(names[i], t.p, t.len) == 0)
			return i;
	return -EINVAL;
}

static bool msg_ok(const uint8_t *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] < 0x20 || p[i] > 0x7e)
			return false;
	return true;
}

static bool state_ok(const struct rdzv_state *s)
{
	if (s->gen < 1 || s->round < 1 || s->min_nodes < 1 || s->min_nodes > s->max_nodes ||
	    s->max_nodes > RDZV_NODES_MAX || s->expect > RDZV_EXPECT_MAX ||
	    s->size > s->max_nodes || s->restarts > s->max_restarts)
		return false;
	if (s->phase < RDZV_OPEN || s->phase > RDZV_FAILED || s->reason < RDZV_WHY_START ||
	    s->reason > RDZV_WHY_PERMANENT)
		return false;
	bool formed = s->phase == RDZV_RUNNING || s->phase == RDZV_FINISHED;
	if (formed && (s->size < 1 || !s->coord[0]))
		return false;
	size_t ml = strnlen(s->msg, RDZV_MSG_MAX + 1);
	if (ml > RDZV_MSG_MAX || (s->phase == RDZV_FAILED) != (ml > 0))
		return false;
	if ((s->subject[0] && !rdzv_token_ok(s->subject, RDZV_ID_MAX)) ||
	    (s->coord[0] && !rdzv_token_ok(s->coord, RDZV_ID_MAX)) ||
	    (s->job[0] && !rdzv_token_ok(s->job, RDZV_ID_MAX)) ||
	    (s->cmd[0] && !rdzv_token_ok(s->cmd, RDZV_ID_MAX)))
		return false;
	size_t jl = strnlen(s->job_text, RDZV_JOB_MAX + 1);
	if (jl > RDZV_JOB_MAX || !msg_ok((const uint8_t *)s->job_text, jl))
		return false;
	return msg_ok((const uint8_t *)s->msg, ml);
}

int rdzv_state_encode(const struct rdzv_state *s, char *buf, size_t cap)
{
	if (!state_ok(s))
		return -EINVAL;
	int n =
	    snprintf(buf, cap,
		     "rdzv3 %" PRIu64 " %" PRIu32 " %s %" PRIu32 " %" PRIu32 " %" PRIu32 " %" PRIu32
		     " %" PRIu32 " %" PRIu32 " %s %s %s %s %s %zu %zu\n%s%s",
		     s->gen, s->round, rdzv_phase_name(s->phase), s->min_nodes, s->max_nodes,
		     s->expect, s->size, s->restarts, s->max_restarts, rdzv_reason_name(s->reason),
		     s->subject[0] ? s->subject : "-", s->coord[0] ? s->coord : "-",
		     s->job[0] ? s->job : "-", s->cmd[0] ? s->cmd : "-", strlen(s->job_text),
		     strlen(s->msg), s->job_text, s->msg);
	if (n < 0 || (size_t)n >= cap || n > RDZV_STATE_MAX)
		return -ENOSPC;
	return n;
}

static int state_fields(const struct tok *t, struct rdzv_state *s)
{
	uint64_t gen;
	int phase, reason;
	if (t[0].len != 5 || memcmp(t[0].p, "rdzv3", 5) != 0)
		return -EINVAL; /* RDZV_STATE_VERSION */
	if (rdzv_parse_u64(t[1].p, t[1].len, UINT64_MAX, &gen) < 0)
		return -EINVAL;
	s->gen = gen;
	if ((phase = tok_word(t[3], phase_names, 5)) < 0 ||
	    (reason = tok_word(t[10], reason_names, 9)) < 0)
		return -EINVAL;
	s->phase = (enum rdzv_phase)phase;
	s->reason = (enum rdzv_reason)reason;
	if (tok_u32(t[2], 1, UINT32_MAX, &s->round) < 0 ||
	    tok_u32(t[4], 1, RDZV_NODES_MAX, &s->min_nodes) < 0 ||
	    tok_u32(t[5], 1, RDZV_NODES_MAX, &s->max_nodes) < 0 ||
	    tok_u32(t[6], 0, RDZV_EXPECT_MAX, &s->expect) < 0 ||
	    tok_u32(t[7], 0, RDZV_NODES_MAX, &s->size) < 0 ||
	    tok_u32(t[8], 0, UINT32_MAX, &s->restarts) < 0 ||
	    tok_u32(t[9], 0, UINT32_MAX, &s->max_restarts) < 0)
		return -EINVAL;
	if (tok_str(t[11], s->subject, RDZV_ID_MAX, true) < 0 ||
	    tok_str(t[12], s->coord, RDZV_ID_MAX, true) < 0 ||
	    tok_str(t[13], s->job, RDZV_ID_MAX, true) < 0 ||
	    tok_str(t[14], s->cmd, RDZV_ID_MAX, true) < 0)
		return -EINVAL;
	return 0;
}

/* The text after the first line: `a` bytes into a (max_a + 1 buffer), then
 * `b` bytes into b (NULL: none expected), each printable ASCII. */
static int tail_take(const uint8_t *p, size_t len, uint32_t alen, char *a, uint32_t blen, char *b)
{
	if (len != (size_t)alen + blen || !msg_ok(p, len))
		return -EINVAL;
	memcpy(a, p, alen);
	a[alen] = '\0';
	if (b) {
		memcpy(b, p + alen, blen);
		b[blen] = '\0';
	}
	return 0;
}

int rdzv_state_decode(const uint8_t *data, size_t len, struct rdzv_state *out)
{
	struct tok t[STATE_FIELDS];
	size_t line;
	uint32_t joblen, msglen;
	memset(out, 0, sizeof(*out));
	if (len > RDZV_STATE_MAX || split_line(data, len, t, STATE_FIELDS, &line) < 0)
		goto bad;
	if (state_fields(t, out) < 0 || tok_u32(t[15], 0, RDZV_JOB_MAX, &joblen) < 0 ||
	    tok_u32(t[16], 0, RDZV_MSG_MAX, &msglen) < 0)
		goto bad;
	if (tail_take(data + line, len - line, joblen, out->job_text, msglen, out->msg) < 0)
		goto bad;
	if (!state_ok(out))
		goto bad;
	return 0;
bad:
	memset(out, 0, sizeof(*out));
	return -EINVAL;
}

int rdzv_state_version_other(const uint8_t *data, size_t len, struct rdzv_state *out)
{
	struct tok t[4];
	size_t k = 0, start = 0;
	uint64_t ver, gen;
	int phase;
	memset(out, 0, sizeof(*out));
	if (len > RDZV_STATE_MAX)
		return -EINVAL;
	/* The first four space-ended tokens; no newline needed before them. */
	for (size_t i = 0; i < len && k < 4; i++) {
		if (data[i] == '\n')
			break;
		if (data[i] != ' ')
			continue;
		if (i == start)
			return -EINVAL;
		t[k].p = data + start;
		t[k].len = i - start;
		k++;
		start = i + 1;
	}
	if (k < 1 || t[0].len < 5 || memcmp(t[0].p, "rdzv", 4) != 0 ||
	    rdzv_parse_u64(t[0].p + 4, t[0].len - 4, INT32_MAX, &ver) < 0 || ver == 0 ||
	    ver == RDZV_STATE_VERSION)
		return -EINVAL;
	if (ver > RDZV_STATE_VERSION)
		return (int)ver;
	if (k < 4 || rdzv_parse_u64(t[1].p, t[1].len, UINT64_MAX, &gen) < 0 || gen == 0 ||
	    tok_u32(t[2], 1, UINT32_MAX, &out->round) < 0 ||
	    (phase = tok_word(t[3], phase_names, 5)) < 0) {
		memset(out, 0, sizeof(*out));
		return -EINVAL;
	}
	out->gen = gen;
	out->phase = (enum rdzv_phase)phase;
	return (int)ver;
}

static bool slot_ok(const struct rdzv_slot *s)
{
	return s->gen >= 1 && s->round >= 1 && rdzv_token_ok(s->id, RDZV_ID_MAX) &&
	       rdzv_token_ok(s->addr, RDZV_ADDR_MAX) && s->nproc >= 1 &&
	       s->nproc <= RDZV_NPROC_MAX && s->node_rank >= -1 && s->node_rank < RDZV_NODES_MAX &&
	       (s->prev_round > 0 || s->prev_rank == 0) && s->prev_rank < RDZV_NODES_MAX;
}

int rdzv_slot_encode(const struct rdzv_slot *s, char *buf, size_t cap)
{
	char rank[16] = "-";
	if (!slot_ok(s))
		return -EINVAL;
	if (s->node_rank >= 0)
		snprintf(rank, sizeof(rank), "%" PRId32, s->node_rank);
	int n = snprintf(buf, cap,
			 "rdzvs1 %" PRIu64 " %" PRIu32 " %s %s %u %" PRIu32 " %s %" PRIu32
			 " %" PRIu32 "\n",
			 s->gen, s->round, s->id, s->addr, (unsigned)s->port, s->nproc, rank,
			 s->prev_round, s->prev_rank);
	if (n < 0 || (size_t)n >= cap || n > RDZV_SLOT_MAX)
		return -ENOSPC;
	return n;
}

int rdzv_slot_decode(const uint8_t *data, size_t len, struct rdzv_slot *out)
{
	struct tok t[SLOT_FIELDS];
	size_t line;
	uint32_t port, rank;
	memset(out, 0, sizeof(*out));
	if (len > RDZV_SLOT_MAX || split_line(data, len, t, SLOT_FIELDS, &line) < 0 || line != len)
		goto bad;
	if (t[0].len != 6 || memcmp(t[0].p, "rdzvs1", 6) != 0 ||
	    rdzv_parse_u64(t[1].p, t[1].len, UINT64_MAX, &out->gen) < 0 ||
	    tok_u32(t[2], 1, UINT32_MAX, &out->round) < 0 ||
	    tok_str(t[3], out->id, RDZV_ID_MAX, false) < 0 ||
	    tok_str(t[4], out->addr, RDZV_ADDR_MAX, false) < 0 ||
	    tok_u32(t[5], 0, UINT16_MAX, &port) < 0 ||
	    tok_u32(t[6], 1, RDZV_NPROC_MAX, &out->nproc) < 0 ||
	    tok_u32(t[8], 0, UINT32_MAX, &out->prev_round) < 0 ||
	    tok_u32(t[9], 0, RDZV_NODES_MAX - 1, &out->prev_rank) < 0)
		goto bad;
	out->port = (uint16_t)port;
	out->node_rank = -1;
	if (!(t[7].len == 1 && t[7].p[0] == '-')) {
		if (tok_u32(t[7], 0, RDZV_NODES_MAX - 1, &rank) < 0)
			goto bad;
		out->node_rank = (int32_t)rank;
	}
	if (!slot_ok(out))
		goto bad;
	return 0;
bad:
	memset(out, 0, sizeof(*out));
	return -EINVAL;
}

static bool owner_ok(const struct rdzv_owner *o)
{
	size_t jl = strnlen(o->job_text, RDZV_JOB_MAX + 1);
	return rdzv_token_ok(o->run_id, RDZV_RUN_ID_MAX) &&
	       (!o->job[0] || rdzv_token_ok(o->job, RDZV_ID_MAX)) && jl <= RDZV_JOB_MAX &&
	       msg_ok((const uint8_t *)o->job_text, jl);
}

int rdzv_owner_encode(const struct rdzv_owner *o, char *buf, size_t cap)
{
	if (!owner_ok(o))
		return -EINVAL;
	int n = snprintf(buf, cap, "rdzvo1 %s %s %zu\n%s", o->run_id, o->job[0] ? o->job : "-",
			 strlen(o->job_text), o->job_text);
	if (n < 0 || (size_t)n >= cap || n > RDZV_OWNER_MAX)
		return -ENOSPC;
	return n;
}

int rdzv_owner_decode(const uint8_t *data, size_t len, struct rdzv_owner *out)
{
	struct tok t[OWNER_FIELDS];
	size_t line;
	uint32_t joblen;
	memset(out, 0, sizeof(*out));
	if (len > RDZV_OWNER_MAX || split_line(data, len, t, OWNER_FIELDS, &line) < 0)
		goto bad;
	if (t[0].len != 6 || memcmp(t[0].p, "rdzvo1", 6) != 0 ||
	    tok_str(t[1], out->run_id, RDZV_RUN_ID_MAX, false) < 0 ||
	    tok_str(t[2], out->job, RDZV_ID_MAX, true) < 0 ||
	    tok_u32(t[3], 0, RDZV_JOB_MAX, &joblen) < 0 ||
	    tail_take(data + line, len - line, joblen, out->job_text, 0, NULL) < 0 ||
	    !owner_ok(out))
		goto bad;
	return 0;
bad:
	memset(out, 0, sizeof(*out));
	return -EINVAL;
}

int rdzv_world_encode(uint64_t gen, uint32_t round, uint16_t master_port,
		      const struct rdzv_member *m, uint32_t n, char **out, size_t *out_len)
{
	if (gen < 1 || round < 1 || n < 1 || n > RDZV_NODES_MAX)
		return -EINVAL;
	size_t cap = 64 + (size_t)n * RDZV_WORLD_ROW_MAX, len;
	char *buf = malloc(cap);
	if (!buf)
		return -ENOMEM;
	len = (size_t)snprintf(buf, cap, "rdzvw1 %" PRIu64 " %" PRIu32 " %" PRIu32 " %u\n", gen,
			       round, n, (unsigned)master_port);
	for (uint32_t i = 0; i < n; i++) {
		if (!rdzv_token_ok(m[i].id, RDZV_ID_MAX) ||
		    !rdzv_token_ok(m[i].addr, RDZV_ADDR_MAX) || m[i].nproc < 1 ||
		    m[i].nproc > RDZV_NPROC_MAX) {
			free(buf);
			return -EINVAL;
		}
		len += (size_t)snprintf(buf + len, cap - len, "%s %s %" PRIu32 "\n", m[i].id,
					m[i].addr, m[i].nproc);
	}
	*out = buf;
	*out_len = len;
	return 0;
}

void rdzv_world_data_release(struct rdzv_world_data *w)
{
	if (!w)
		return;
	free(w->members);
	free(w->raw);
	memset(w, 0, sizeof(*w));
}

/* One token of a world row ending in a space, NUL-terminated in place.
 * Returns its length, or 0 when malformed. */
static size_t row_token(uint8_t **pos, const uint8_t *end, size_t max)
{
	uint8_t *start = *pos, *q = start;
	while (q < end && tok_char_ok(*q))
		q++;
	size_t n = (size_t)(q - start);
	if (q == end || *q != ' ' || n == 0 || n > max || (n == 1 && start[0] == '-'))
		return 0;
	*q = '\0';
	*pos = q + 1;
	return n;
}

/* Parses the rows of w->raw from `pos` in one pass, NUL-terminating the id
 * and address of each in place. */
static int world_rows(struct rdzv_world_data *w, size_t pos)
{
	uint8_t *p = w->raw + pos;
	const uint8_t *end = w->raw + w->raw_len;
	for (uint32_t i = 0; i < w->size; i++) {
		struct rdzv_member *m = &w->members[i];
		m->id = (const char *)p;
		if (!row_token(&p, end, RDZV_ID_MAX))
			return -EINVAL;
		m->addr = (const char *)p;
		if (!row_token(&p, end, RDZV_ADDR_MAX))
			return -EINVAL;
		const uint8_t *nl = memchr(p, '\n', (size_t)(end - p) < 8 ? (size_t)(end - p) : 8);
		uint64_t nproc;
		if (!nl || rdzv_parse_u64(p, (size_t)(nl - p), RDZV_NPROC_MAX, &nproc) < 0 ||
		    nproc < 1)
			return -EINVAL;
		m->nproc = (uint32_t)nproc;
		p = (uint8_t *)nl + 1;
	}
	return p == end ? 0 : -EINVAL;
}

int rdzv_world_decode(const uint8_t *data, size_t len, uint32_t max_size,
		      struct rdzv_world_data *out)
{
	struct tok t[WORLD_FIELDS];
	size_t line;
	uint32_t port;
	int rc = -EINVAL;
	memset(out, 0, sizeof(*out));
	if (split_line(data, len > 64 ? 64 : len, t, WORLD_FIELDS, &line) < 0)
		return -EINVAL;
	if (t[0].len != 6 || memcmp(t[0].p, "rdzvw1", 6) != 0 ||
	    rdzv_parse_u64(t[1].p, t[1].len, UINT64_MAX, &out->gen) < 0 || out->gen < 1 ||
	    tok_u32(t[2], 1, UINT32_MAX, &out->round) < 0 ||
	    tok_u32(t[3], 1, max_size < RDZV_NODES_MAX ? max_size : RDZV_NODES_MAX, &out->size) <
		0 ||
	    tok_u32(t[4], 0, UINT16_MAX, &port) < 0)
		goto fail;
	/* The announced count must fit the bytes that follow before we allocate. */
	if ((len - line) / ROW_MIN < out->size ||
	    len - line > (size_t)out->size * RDZV_WORLD_ROW_MAX)
		goto fail;
	out->master_port = (uint16_t)port;
	out->members = calloc(out->size, sizeof(*out->members));
	out->raw = malloc(len);
	if (!out->members || !out->raw) {
		rc = -ENOMEM;
		goto fail;
	}
	memcpy(out->raw, data, len);
	out->raw_len = len;
	if ((rc = world_rows(out, line)) < 0)
		goto fail;
	return 0;
fail:
	rdzv_world_data_release(out);
	return rc;
}
