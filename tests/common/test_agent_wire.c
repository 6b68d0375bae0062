/*
 * test_agent_wire.c - the agent channel's codec (common/agent_wire.h)
 * against the shared vectors (agent_wire_vectors.txt, its path the first
 * argument; tests/python/test_agent_wire.py reads the same file): each
 * line parsed alone and formatted again; then all of them as one stream,
 * fed whole, byte by byte, and split in two at every offset; the
 * formatter's refusals.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_wire.h"

#define MAX_VECTORS 256
#define MAX_FIELD   4096

struct vec {
	char expect[MAX_FIELD];
	char line[MAX_FIELD];
	size_t line_len;
	int lineno;
};

static const char *vectors_path;
static struct vec vectors[MAX_VECTORS];
static size_t nvectors;

/* "\xHH", "\\" and "{C*N}" (agent_wire_vectors.txt's header) into out. */
static size_t unescape(const char *s, char *out, size_t cap)
{
	size_t n = 0;

	while (*s) {
		unsigned byte, count;
		char c;
		int used = 0;

		if (s[0] == '\\' && s[1] == '\\') {
			c = '\\';
			used = 2;
		} else if (s[0] == '\\' && s[1] == 'x' && sscanf(s + 2, "%2x", &byte) == 1) {
			c = (char)byte;
			used = 4;
		} else if (s[0] == '{' && sscanf(s, "{%c*%u}%n", &c, &count, &used) == 2 &&
			   used > 0) {
			assert_true(n + count <= cap);
			memset(out + n, c, count);
			n += count;
			s += used;
			continue;
		} else {
			c = s[0];
			used = 1;
		}
		assert_true(n < cap);
		out[n++] = c;
		s += used;
	}
	return n;
}

static void load_vectors(void)
{
	FILE *f = fopen(vectors_path, "r");
	char raw[MAX_FIELD];
	int lineno = 0;

	assert_non_null(f);
	while (fgets(raw, sizeof(raw), f)) {
		char *tab;
		struct vec *v;
		size_t n;

		lineno++;
		raw[strcspn(raw, "\n")] = '\0';
		if (raw[0] == '#' || raw[0] == '\0')
			continue;
		tab = strchr(raw, '\t');
		assert_non_null(tab);
		*tab = '\0';
		assert_true(nvectors < MAX_VECTORS);
		v = &vectors[nvectors++];
		v->lineno = lineno;
		n = unescape(raw, v->expect, sizeof(v->expect) - 1);
		v->expect[n] = '\0';
		v->line_len = unescape(tab + 1, v->line, sizeof(v->line));
	}
	fclose(f);
	assert_true(nvectors > 50);
}

static const char *err_name(int rc)
{
	return rc == -EINVAL	 ? "EINVAL"
	       : rc == -ERANGE	 ? "ERANGE"
	       : rc == -EMSGSIZE ? "EMSGSIZE"
				 : "other";
}

/* The message as the vectors write it. */
static void dump(int rc, const struct agent_wire_msg *m, char *out, size_t len)
{
	const struct agent_wire_round *r = &m->r;

	if (rc < 0) {
		snprintf(out, len, "error %s", err_name(rc));
		return;
	}
	switch (m->kind) {
	case AGENT_WIRE_HELLO:
		snprintf(out, len, "hello version=%d resizable=%d", m->version, m->resizable);
		break;
	case AGENT_WIRE_RESIZABLE:
		snprintf(out, len, "resizable");
		break;
	case AGENT_WIRE_FIXED:
		snprintf(out, len, "fixed");
		break;
	case AGENT_WIRE_TOOK:
		snprintf(out, len, "took round=%d", m->round);
		break;
	case AGENT_WIRE_REPLICA:
		snprintf(out, len, "replica step=%d rank=%d healed=%d tensor=%s", m->replica.step,
			 m->replica.rank, m->replica.healed, m->replica.tensor);
		break;
	case AGENT_WIRE_STRAGGLER:
		snprintf(out, len, "straggler step=%d rank=%d node=%d cause=%s slower_x100=%d",
			 m->straggler.step, m->straggler.rank, m->straggler.node,
			 agent_wire_cause_name(m->straggler.cause), m->straggler.slower_x100);
		break;
	case AGENT_WIRE_ROUND:
		snprintf(out, len,
			 "round round=%d rank=%d world=%d local_rank=%d local_world=%d addr=%s "
			 "port=%d group_rank=%d group_world=%d",
			 r->round, r->rank, r->world_size, r->local_rank, r->local_world_size,
			 r->master_addr, r->master_port, r->group_rank, r->group_world_size);
		break;
	case AGENT_WIRE_NUMERICS:
		snprintf(out, len, "numerics promise=%s text=%s",
			 m->numerics == AGENT_WIRE_NUMERICS_KEPT      ? "kept"
			 : m->numerics == AGENT_WIRE_NUMERICS_DROPPED ? "dropped"
								      : "refused",
			 m->text);
		break;
	default:
		snprintf(out, len, "unknown");
	}
}

static void check(const struct vec *v, int rc, const struct agent_wire_msg *m)
{
	char got[MAX_FIELD];

	dump(rc, m, got, sizeof(got));
	if (strcmp(got, v->expect) != 0)
		fail_msg("vector at line %d:\n  expected %s\n  got      %s", v->lineno, v->expect,
			 got);
}

static bool formattable(const struct agent_wire_msg *m)
{
	return m->kind != AGENT_WIRE_UNKNOWN &&
	       (m->kind != AGENT_WIRE_HELLO || m->version == AGENT_WIRE_VERSION);
}

static void test_each_vector(void **state)
{
	for (size_t i = 0; i < nvectors; i++) {
		const struct vec *v = &vectors[i];
		struct agent_wire_msg m;
		char out[AGENT_WIRE_MAX_LINE];
		int rc = agent_wire_parse(v->line, v->line_len, &m), n;

		check(v, rc, &m);
		if (rc < 0 || !formattable(&m))
			continue;
		/* Written again, the same bytes and its '\n'. */
		n = agent_wire_format(&m, out, sizeof(out));
		assert_int_equal(n, v->line_len + 1);
		assert_memory_equal(out, v->line, v->line_len);
		assert_int_equal(out[n - 1], '\n');
	}
}

/* Every vector with its '\n', one after another. */
static char stream[MAX_VECTORS * 128 + 8192];
static size_t stream_len;

static void build_stream(void)
{
	stream_len = 0;
	for (size_t i = 0; i < nvectors; i++) {
		assert_true(stream_len + vectors[i].line_len + 1 <= sizeof(stream));
		memcpy(stream + stream_len, vectors[i].line, vectors[i].line_len);
		stream_len += vectors[i].line_len;
		stream[stream_len++] = '\n';
	}
}

/* Feeds the stream in chunks of the given sizes (the last repeats); each
 * line must come out as its vector says, in order. */
static void feed_stream(const size_t *chunks, size_t nchunks)
{
	struct agent_wire_reader rd;
	size_t pos = 0, got = 0, ci = 0;

	agent_wire_reader_init(&rd);
	while (pos < stream_len) {
		size_t n = chunks[ci < nchunks ? ci : nchunks - 1], off = 0;

		ci++;
		if (n > stream_len - pos)
			n = stream_len - pos;
		while (off < n) {
			struct agent_wire_msg m;
			size_t used = 0;
			int rc = agent_wire_read(&rd, stream + pos + off, n - off, &used, &m);

			assert_true(used > 0 && used <= n - off);
			off += used;
			if (rc == 0) {
				assert_int_equal(off, n);
				continue;
			}
			assert_true(got < nvectors);
			check(&vectors[got++], rc == 1 ? 0 : rc, &m);
		}
		pos += n;
	}
	assert_int_equal(got, nvectors);
	assert_true(agent_wire_reader_idle(&rd));
}

static void test_stream_all_ways(void **state)
{
	size_t whole, one = 1;

	build_stream();
	whole = stream_len;
	feed_stream(&whole, 1);
	feed_stream(&one, 1);
	for (size_t cut = 1; cut < stream_len; cut++) {
		size_t chunks[2] = {cut, stream_len};

		feed_stream(chunks, 2);
	}
}

/* The formatter refuses what the parser would refuse, and never cuts. */
static void test_format_refuses(void **state)
{
	struct agent_wire_msg m = {.kind = AGENT_WIRE_ROUND};
	char buf[AGENT_WIRE_MAX_LINE], small[16];

	m.r = (struct agent_wire_round){.round = 1,
					.world_size = 2,
					.local_world_size = 1,
					.master_port = 80,
					.group_world_size = 2};
	memset(m.r.master_addr, 'h', AGENT_WIRE_ADDR_MAX);
	m.r.master_addr[AGENT_WIRE_ADDR_MAX] = '\0';
	assert_true(agent_wire_format(&m, buf, sizeof(buf)) > AGENT_WIRE_ADDR_MAX);
	assert_int_equal(agent_wire_format(&m, small, sizeof(small)), -ENOSPC);
	m.r.master_addr[0] = '\0';
	assert_int_equal(agent_wire_format(&m, buf, sizeof(buf)), -ERANGE);
	strcpy(m.r.master_addr, "has space");
	assert_int_equal(agent_wire_format(&m, buf, sizeof(buf)), -ERANGE);
	strcpy(m.r.master_addr, "h");
	m.r.rank = 2;
	assert_int_equal(agent_wire_format(&m, buf, sizeof(buf)), -ERANGE);
	m = (struct agent_wire_msg){.kind = AGENT_WIRE_TOOK, .round = -1};
	assert_int_equal(agent_wire_format(&m, buf, sizeof(buf)), -ERANGE);
	m = (struct agent_wire_msg){.kind = AGENT_WIRE_HELLO, .version = 2};
	assert_int_equal(agent_wire_format(&m, buf, sizeof(buf)), -EINVAL);
	m = (struct agent_wire_msg){.kind = AGENT_WIRE_UNKNOWN};
	assert_int_equal(agent_wire_format(&m, buf, sizeof(buf)), -EINVAL);
	m = (struct agent_wire_msg){
	    .kind = AGENT_WIRE_HELLO, .version = AGENT_WIRE_VERSION, .resizable = true};
	assert_int_equal(agent_wire_format(&m, buf, sizeof(buf)), 18);
	assert_string_equal(buf, "hello 1 resizable\n");
}

/* A numerics line's text: refused by the formatter unless the parser would
 * take it; agent_wire_set_text makes any string one. */
static void test_numerics_text(void **state)
{
	struct agent_wire_msg m = {.kind = AGENT_WIRE_NUMERICS,
				   .numerics = AGENT_WIRE_NUMERICS_DROPPED};
	char buf[AGENT_WIRE_MAX_LINE], big[AGENT_WIRE_TEXT_MAX + 50];
	struct agent_wire_msg back;

	(void)state;
	assert_int_equal(agent_wire_format(&m, buf, sizeof(buf)), -ERANGE); /* empty */
	strcpy(m.text, " x");
	assert_int_equal(agent_wire_format(&m, buf, sizeof(buf)), -ERANGE);
	m.numerics = 7;
	strcpy(m.text, "x");
	assert_int_equal(agent_wire_format(&m, buf, sizeof(buf)), -EINVAL);
	m.numerics = AGENT_WIRE_NUMERICS_REFUSED;
	agent_wire_set_text(&m, "  caf\xc3\xa9\tok  ");
	assert_string_equal(m.text, "caf???ok");
	agent_wire_set_text(&m, "   ");
	assert_string_equal(m.text, "-");
	memset(big, 'w', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	agent_wire_set_text(&m, big);
	assert_int_equal(strlen(m.text), AGENT_WIRE_TEXT_MAX);
	assert_int_equal(agent_wire_format(&m, buf, sizeof(buf)),
			 (int)strlen("numerics refused \n") + AGENT_WIRE_TEXT_MAX);
	assert_int_equal(agent_wire_parse(buf, strlen(buf) - 1, &back), 0);
	assert_int_equal(back.kind, AGENT_WIRE_NUMERICS);
	assert_int_equal(back.numerics, AGENT_WIRE_NUMERICS_REFUSED);
	assert_string_equal(back.text, m.text);
}

static int setup(void **state)
{
	load_vectors();
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_each_vector),
	    cmocka_unit_test(test_stream_all_ways),
	    cmocka_unit_test(test_format_refuses),
	    cmocka_unit_test(test_numerics_text),
	};

	if (argc < 2) {
		fprintf(stderr, "usage: test_agent_wire VECTORS_FILE\n");
		return 2;
	}
	vectors_path = argv[1];
	return cmocka_run_group_tests(tests, setup, NULL);
}
