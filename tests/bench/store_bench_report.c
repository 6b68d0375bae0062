/*
 * store_bench_report.c - the order of the measurements and their report.
 *
 * Idle memory is measured first, on fresh servers (memory freed by earlier
 * runs would otherwise hide the cost of new connections). For every setting
 * each server is measured back to back, so slow drifts of the machine hit
 * both alike.
 */
#include "store_bench_report.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VALUE_LEN 32

struct sbr_state {
	const struct sbr_config *cfg;
	const struct sb_server *ours, *torch;
	int errors, missed;
};

static void target(struct sbr_state *st, int met, const char *what, double got, const char *op,
		   double want)
{
	printf("  target %-46s %10.3f (want %s %g)  %s\n", what, got, op, want,
	       met ? "MET" : "MISSED");
	if (!met)
		st->missed++;
}

static void error(struct sbr_state *st, const char *what, int rc)
{
	printf("  error: %s: %s\n", what, strerror(-rc));
	st->errors++;
}

static const char *wire_name(enum sb_wire wire)
{
	switch (wire) {
	case SB_WIRE_API:
		return "C client";
	case SB_WIRE_V113:
		return "1.13 frames";
	case SB_WIRE_V2:
		return "2.x frames";
	default:
		return "1.13 split";
	}
}

/* torch's server is a 2.x one (it speaks 2.x frames and our C client). */
static int torch_v2(const struct sbr_state *st)
{
	return st->torch && st->torch->gen == PROTO_GEN_V2;
}

static int idle_one(struct sbr_state *st, const struct sb_server *srv, enum sb_wire wire,
		    struct sb_idle_result *r)
{
	int rc = sb_idle_run(srv, wire, st->cfg->idle, r);

	if (rc < 0) {
		error(st, srv->name, rc);
		return rc;
	}
	printf("  %-12s %-12s %8d conns  VmRSS %7lld -> %7lld KiB  %8.0f B/conn\n", srv->name,
	       wire_name(wire), r->connections, (long long)r->rss_before_kib,
	       (long long)r->rss_with_kib, r->bytes_per_conn);
	return 0;
}

static void run_idle(struct sbr_state *st)
{
	struct sb_idle_result ours, theirs;
	int rc;

	if (st->cfg->idle == 0)
		return;
	printf("\n== idle connections: server VmRSS before and with them (/proc/PID/status)\n");
	rc = idle_one(st, st->ours, SB_WIRE_API, &ours);
	if (st->torch &&
	    idle_one(st, st->torch, torch_v2(st) ? SB_WIRE_V2 : SB_WIRE_V113, &theirs) == 0 &&
	    rc == 0)
		printf("  ratio ours/torch bytes per connection: %.3f\n",
		       ours.bytes_per_conn / theirs.bytes_per_conn);
	if (rc == 0)
		target(st, ours.bytes_per_conn <= 2048, "bytes per idle connection <= 2048",
		       ours.bytes_per_conn, "<=", 2048);
}

#define MAX_ROUNDS 9

/* The rounds of one (server, client, K) setting. */
struct pairs_series {
	struct sb_pairs_result r[MAX_ROUNDS];
	int n;
};

static void pairs_measure(struct sbr_state *st, const struct sb_server *srv, enum sb_wire wire,
			  int conns, struct pairs_series *s)
{
	int rc;

	sb_server_quiesce(srv, 3000);
	rc = sb_pairs_run(srv, wire, conns, st->cfg->seconds, VALUE_LEN, &s->r[s->n]);
	if (rc < 0)
		error(st, srv->name, rc);
	else
		s->n++;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median_of(const struct pairs_series *s, size_t offset)
{
	double v[MAX_ROUNDS];

	for (int i = 0; i < s->n; i++)
		memcpy(&v[i], (const char *)&s->r[i] + offset, sizeof(double));
	qsort(v, (size_t)s->n, sizeof(double), cmp_double);
	return s->n % 2 ? v[s->n / 2] : (v[s->n / 2 - 1] + v[s->n / 2]) / 2;
}

/* Each figure's median over the rounds (figures taken separately). */
static int pairs_median(const struct pairs_series *s, struct sb_pairs_result *m)
{
	memset(m, 0, sizeof(*m));
	if (s->n == 0)
		return -1;
	m->ops_per_s = median_of(s, offsetof(struct sb_pairs_result, ops_per_s));
	m->p50_us = median_of(s, offsetof(struct sb_pairs_result, p50_us));
	m->p99_us = median_of(s, offsetof(struct sb_pairs_result, p99_us));
	m->cpu_ns_per_op = median_of(s, offsetof(struct sb_pairs_result, cpu_ns_per_op));
	return 0;
}

static int pairs_print(const struct sb_server *srv, enum sb_wire wire, int conns,
		       const struct pairs_series *s, struct sb_pairs_result *m)
{
	if (!srv || pairs_median(s, m) < 0)
		return -1;
	printf("  %5d  %-12s %-12s %10.0f %9.1f %9.1f %9.2f\n", conns, srv->name, wire_name(wire),
	       m->ops_per_s, m->p50_us, m->p99_us, m->cpu_ns_per_op / 1e3);
	return 0;
}

static void pairs_ratio(struct sbr_state *st, int conns, enum sb_wire wire,
			const struct sb_pairs_result *o, const struct sb_pairs_result *t)
{
	printf("  ratio ours/torch, %3d conns, %-12s ops/s %.2fx  cpu/op %.2fx  p99 %.2fx\n", conns,
	       wire_name(wire), o->ops_per_s / t->ops_per_s, o->cpu_ns_per_op / t->cpu_ns_per_op,
	       o->p99_us / t->p99_us);
	if (wire == SB_WIRE_API || (conns != 16 && conns != 64))
		return;
	target(st, o->ops_per_s >= 1.4 * t->ops_per_s, "throughput ours/torch >= 1.4",
	       o->ops_per_s / t->ops_per_s, ">=", 1.4);
	target(st, o->cpu_ns_per_op <= 0.5 * t->cpu_ns_per_op,
	       "server CPU per op ours/torch <= 0.5", o->cpu_ns_per_op / t->cpu_ns_per_op,
	       "<=", 0.5);
	if (conns == 64)
		target(st, o->p99_us < t->p99_us, "p99 ours/torch < 1", o->p99_us / t->p99_us, "<",
		       1);
}

/* One (server, client) setting of the pairs. */
struct pairs_setting {
	const struct sb_server *srv;
	enum sb_wire wire;
};

/* The settings measured for each K, ours and torch's on the same client
 * side by side: torch 1.13's server speaks only 1.13 frames (our C client
 * is set against its 1.13-frames row), torch 2.x's speaks 2.x frames and
 * our C client. Returns how many. */
static int pairs_settings(const struct sbr_state *st, struct pairs_setting *set)
{
	int n = 0;

	if (torch_v2(st)) {
		set[n++] = (struct pairs_setting){st->ours, SB_WIRE_V2};
		set[n++] = (struct pairs_setting){st->torch, SB_WIRE_V2};
		set[n++] = (struct pairs_setting){st->ours, SB_WIRE_API};
		set[n++] = (struct pairs_setting){st->torch, SB_WIRE_API};
		return n;
	}
	set[n++] = (struct pairs_setting){st->ours, SB_WIRE_API};
	set[n++] = (struct pairs_setting){st->ours, SB_WIRE_V113};
	set[n++] = (struct pairs_setting){st->torch, SB_WIRE_V113};
	set[n++] = (struct pairs_setting){st->ours, SB_WIRE_V113_SPLIT};
	set[n++] = (struct pairs_setting){st->torch, SB_WIRE_V113_SPLIT};
	return n;
}

#define MAX_SETTINGS 5

/* Measures every setting for K connections (ours and torch's alternate
 * within a round), prints them and the ratios of ours to torch's. */
static void pairs_k(struct sbr_state *st, int k)
{
	struct pairs_setting set[MAX_SETTINGS];
	int n = pairs_settings(st, set);
	struct pairs_series series[MAX_SETTINGS];
	struct sb_pairs_result m[MAX_SETTINGS];
	int ok[MAX_SETTINGS];

	memset(series, 0, sizeof(series));
	for (int r = 0; r < st->cfg->rounds; r++)
		for (int i = 0; i < n; i++)
			if (set[i].srv)
				pairs_measure(st, set[i].srv, set[i].wire, k, &series[i]);
	for (int i = 0; i < n; i++)
		ok[i] = pairs_print(set[i].srv, set[i].wire, k, &series[i], &m[i]) == 0;
	/* ours (i) against torch (j): the same client, else (1.13) the C
	 * client against torch's 1.13-frames row. */
	for (int i = 0; i < n; i++) {
		if (!ok[i] || set[i].srv != st->ours)
			continue;
		for (int j = 0; j < n; j++) {
			int same = set[j].wire == set[i].wire;
			int api_v113 = set[i].wire == SB_WIRE_API && set[j].wire == SB_WIRE_V113;

			if (ok[j] && set[j].srv == st->torch &&
			    (same || (!torch_v2(st) && api_v113)))
				pairs_ratio(st, k, set[i].wire, &m[i], &m[j]);
		}
	}
}

static void run_pairs(struct sbr_state *st)
{
	printf("\n== set+get pairs, %d-byte values, %.1f s per run, median of %d rounds (servers\n"
	       "   alternate within a round); an op is one set or one get; latency is one\n"
	       "   set+get pair; server CPU is utime+stime from /proc/PID/stat per op;\n"
	       "   1.13 frames: one send() per query; 1.13 split: type byte, then the rest,\n"
	       "   as torch 1.13's own client sends them; 2.x frames: validate + ping,\n"
	       "   then one send() per query, as torch 2.x's client; C client:\n"
	       "   store_client.h (2.x framing; its get is a plain GET, one round trip\n"
	       "   for a present key), set against torch 1.13's 1.13-frames row or torch\n"
	       "   2.x's C client row\n",
	       VALUE_LEN, st->cfg->seconds, st->cfg->rounds);
	printf("  %5s  %-12s %-12s %10s %9s %9s %9s\n", "conns", "server", "client", "ops/s",
	       "p50 us", "p99 us", "cpu us/op");
	for (int i = 0; i < st->cfg->nconns; i++)
		pairs_k(st, st->cfg->conns[i]);
}

static int storm_one(struct sbr_state *st, const struct sb_server *srv, const char *how, int n,
		     struct sb_storm_result *r)
{
	int rc;

	sb_server_quiesce(srv, 5000);
	if (strcmp(how, "C client") == 0)
		rc = sb_storm_api(srv, n, st->cfg->storm_timeout_ms, r);
	else
		rc = sb_storm_raw(srv, strcmp(how, "2.x frames") == 0 ? PROTO_GEN_V2 : PROTO_GEN_V1,
				  n, st->cfg->storm_timeout_ms, r);
	if (rc < 0) {
		error(st, srv->name, rc);
		return rc;
	}
	printf("  %6d  %-12s %-20s %8d %9.3f %9.3f %9.2f\n", n, srv->name, how, r->released,
	       r->connect_s, r->seconds, r->cpu_ns_per_op / 1e3);
	if (r->released < n) {
		printf("  error: %s released %d of %d clients within %.0f s\n", srv->name,
		       r->released, n, st->cfg->storm_timeout_ms / 1e3);
		st->errors += srv == st->ours;
		return -1;
	}
	return 0;
}

static void run_storms(struct sbr_state *st)
{
	printf("\n== barrier storm: N clients connect at once, add 1, wait for the release key\n"
	       "   (set by the N-th adder); time from the first connect to the last release\n");
	printf("  %6s  %-12s %-20s %8s %9s %9s %9s\n", "N", "server", "client", "released",
	       "conn s", "total s", "cpu us/op");
	for (int i = 0; i < st->cfg->nstorms; i++) {
		int n = st->cfg->storms[i];
		struct sb_storm_result v2, v1, api, theirs;
		int rc_v2 = storm_one(st, st->ours, "2.x frames", n, &v2);
		int rc_v1 = storm_one(st, st->ours, "1.13 frames", n, &v1);
		int rc_api = storm_one(st, st->ours, "C client", n, &api);
		const char *tframes = torch_v2(st) ? "2.x frames" : "1.13 frames";
		int rc_t = st->torch ? storm_one(st, st->torch, tframes, n, &theirs) : -1;
		int rc_same = torch_v2(st) ? rc_v2 : rc_v1;

		if (rc_same == 0 && rc_t == 0)
			printf("  ratio ours/torch time, same %s: %.3fx\n", tframes,
			       (torch_v2(st) ? v2.seconds : v1.seconds) / theirs.seconds);
		if (n == 10000) {
			if (rc_v2 == 0)
				target(st, v2.seconds < 2.0,
				       "10,000-client barrier (2.x frames) < 2 s", v2.seconds, "<",
				       2.0);
			if (rc_api == 0)
				target(st, api.seconds < 2.0,
				       "10,000-client barrier (C client) < 2 s", api.seconds, "<",
				       2.0);
		}
	}
}

int sbr_run_all(const struct sbr_config *cfg, const struct sb_server *ours,
		const struct sb_server *torch)
{
	struct sbr_state st = {.cfg = cfg, .ours = ours, .torch = torch};

	printf("store_bench: %s pid %d port %d", ours->name, (int)ours->pid, ours->port);
	if (torch)
		printf("; %s pid %d port %d", torch->name, (int)torch->pid, torch->port);
	printf("\n");
	run_idle(&st);
	run_pairs(&st);
	run_storms(&st);
	printf("\nstore_bench: %d error(s), %d target(s) missed\n", st.errors, st.missed);
	fflush(stdout);
	return st.errors || (cfg->strict && st.missed) ? 1 : 0;
}
