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
	default:
		return "1.13 split";
	}
}

static int idle_one(struct sbr_state *st, const struct sb_server *srv, enum sb_wire wire,
		    struct sb_idle_result *r)
{
	int rc = sb_idle_run(srv, wire, st->cfg->idle, r);

	if (rc < 0) {
		error(st, srv->name, rc);
		return rc;
	}
	printf("  %-11s %-12s %8d conns  VmRSS %7lld -> %7lld KiB  %8.0f B/conn\n", srv->name,
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
	if (st->torch && idle_one(st, st->torch, SB_WIRE_V113, &theirs) == 0 && rc == 0)
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
	printf("  %5d  %-11s %-12s %10.0f %9.1f %9.1f %9.2f\n", conns, srv->name, wire_name(wire),
	       m->ops_per_s, m->p50_us, m->p99_us, m->cpu_ns_per_op / 1e3);
	return 0;
}

static void pairs_ratio(struct sbr_state *st, int conns, enum sb_wire wire,
			const struct sb_pairs_result *o, const struct sb_pairs_result *t)
{
	printf("  ratio ours/torch, %-12s ops/s %.2fx  cpu/op %.2fx  p99 %.2fx\n", wire_name(wire),
	       o->ops_per_s / t->ops_per_s, o->cpu_ns_per_op / t->cpu_ns_per_op,
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

/* Settings measured for each K; ours and torch's alternate within a round. */
enum { S_API, S_V1_OURS, S_V1_TORCH, S_SPLIT_OURS, S_SPLIT_TORCH, S_COUNT };

static void pairs_k(struct sbr_state *st, int k)
{
	static const enum sb_wire wire[S_COUNT] = {SB_WIRE_API, SB_WIRE_V113, SB_WIRE_V113,
						   SB_WIRE_V113_SPLIT, SB_WIRE_V113_SPLIT};
	const struct sb_server *srv[S_COUNT] = {st->ours, st->ours, st->torch, st->ours, st->torch};
	struct pairs_series series[S_COUNT];
	struct sb_pairs_result m[S_COUNT];
	int ok[S_COUNT];

	memset(series, 0, sizeof(series));
	for (int r = 0; r < st->cfg->rounds; r++)
		for (int i = 0; i < S_COUNT; i++)
			if (srv[i])
				pairs_measure(st, srv[i], wire[i], k, &series[i]);
	for (int i = 0; i < S_COUNT; i++)
		ok[i] = pairs_print(srv[i], wire[i], k, &series[i], &m[i]) == 0;
	if (ok[S_V1_OURS] && ok[S_V1_TORCH])
		pairs_ratio(st, k, SB_WIRE_V113, &m[S_V1_OURS], &m[S_V1_TORCH]);
	if (ok[S_SPLIT_OURS] && ok[S_SPLIT_TORCH])
		pairs_ratio(st, k, SB_WIRE_V113_SPLIT, &m[S_SPLIT_OURS], &m[S_SPLIT_TORCH]);
	if (ok[S_API] && ok[S_V1_TORCH])
		pairs_ratio(st, k, SB_WIRE_API, &m[S_API], &m[S_V1_TORCH]);
}

static void run_pairs(struct sbr_state *st)
{
	printf("\n== set+get pairs, %d-byte values, %.1f s per run, median of %d rounds (servers\n"
	       "   alternate within a round); an op is one set or one get; latency is one\n"
	       "   set+get pair; server CPU is utime+stime from /proc/PID/stat per op;\n"
	       "   1.13 frames: one send() per query; 1.13 split: type byte, then the rest,\n"
	       "   as torch 1.13's own client sends them; C client: store_client.h (2.x\n"
	       "   framing; its get is a plain GET, one round trip for a present key),\n"
	       "   compared with torch's 1.13-frames row\n",
	       VALUE_LEN, st->cfg->seconds, st->cfg->rounds);
	printf("  %5s  %-11s %-12s %10s %9s %9s %9s\n", "conns", "server", "client", "ops/s",
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
	printf("  %6d  %-11s %-20s %8d %9.3f %9.3f %9.2f\n", n, srv->name, how, r->released,
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
	printf("  %6s  %-11s %-20s %8s %9s %9s %9s\n", "N", "server", "client", "released",
	       "conn s", "total s", "cpu us/op");
	for (int i = 0; i < st->cfg->nstorms; i++) {
		int n = st->cfg->storms[i];
		struct sb_storm_result v2, v1, api, theirs;
		int rc_v2 = storm_one(st, st->ours, "2.x frames", n, &v2);
		int rc_v1 = storm_one(st, st->ours, "1.13 frames", n, &v1);
		int rc_api = storm_one(st, st->ours, "C client", n, &api);
		int rc_t = st->torch ? storm_one(st, st->torch, "1.13 frames", n, &theirs) : -1;

		if (rc_v1 == 0 && rc_t == 0)
			printf("  ratio ours/torch time, same 1.13 frames: %.3fx\n",
			       v1.seconds / theirs.seconds);
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
