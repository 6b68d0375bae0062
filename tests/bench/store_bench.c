/*
 * store_bench.c - the store load generator: ddp-rdzvd against the TCPStore
 * server of the torch --python has (1.13's, or 2.x's libuv server), in the
 * same run, on this machine.
 *
 *   store_bench --rdzvd PATH [--python /usr/bin/python3] [--seconds 2] [--rounds 3]
 *               [--conns 1,16,64,256] [--storm 1024,4000,10000] [--idle 10000]
 *               [--storm-timeout 60] [--rdzvd-arg ARG]... [--no-torch] [--strict]
 *
 * Prints every figure, ours/theirs ratios and the targets (met or
 * missed). Exit status: 0, or 1 when a measurement failed (or, with
 * --strict, a target was missed), 2 for bad usage.
 */
#include "store_bench.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_bench_report.h"

#define MAX_LIST 16

static int parse_list(const char *s, int *out, int max)
{
	int n = 0;

	while (*s && n < max) {
		char *end;
		long v = strtol(s, &end, 10);

		if (end == s || v <= 0 || v > 100000)
			return -EINVAL;
		out[n++] = (int)v;
		s = *end == ',' ? end + 1 : end;
		if (*end && *end != ',')
			return -EINVAL;
	}
	return n;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: store_bench --rdzvd PATH [--python PATH] [--seconds S] [--rounds N]\n"
		   "                   [--conns 1,16,64,256] [--storm 1024,4000,10000]\n"
		   "                   [--idle N] [--storm-timeout S] [--rdzvd-arg ARG]...\n"
		   "                   [--no-torch] [--strict]\n"
		   "measures ddp-rdzvd and the TCPStore server of --python's torch (1.13 or\n"
		   "2.x) in the same run\n");
}

static int parse_args(int argc, char **argv, struct sbr_config *cfg)
{
	static const struct option opts[] = {
	    {"rdzvd", required_argument, NULL, 'r'},
	    {"python", required_argument, NULL, 'p'},
	    {"seconds", required_argument, NULL, 's'},
	    {"conns", required_argument, NULL, 'c'},
	    {"storm", required_argument, NULL, 'b'},
	    {"idle", required_argument, NULL, 'i'},
	    {"storm-timeout", required_argument, NULL, 't'},
	    {"rounds", required_argument, NULL, 'R'},
	    {"rdzvd-arg", required_argument, NULL, 'a'},
	    {"no-torch", no_argument, NULL, 'n'},
	    {"strict", no_argument, NULL, 'S'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	int c, nargs = 0;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'r':
			cfg->rdzvd = optarg;
			break;
		case 'p':
			cfg->python = optarg;
			break;
		case 's':
			cfg->seconds = atof(optarg);
			break;
		case 'c':
			cfg->nconns = parse_list(optarg, cfg->conns, MAX_LIST);
			break;
		case 'b':
			cfg->nstorms = parse_list(optarg, cfg->storms, MAX_LIST);
			break;
		case 'i':
			cfg->idle = atoi(optarg);
			break;
		case 'R':
			cfg->rounds = atoi(optarg);
			break;
		case 't':
			cfg->storm_timeout_ms = (uint64_t)(atof(optarg) * 1000);
			break;
		case 'a':
			if (nargs < SBR_MAX_ARGS)
				cfg->rdzvd_args[nargs++] = optarg;
			break;
		case 'n':
			cfg->python = NULL;
			break;
		case 'S':
			cfg->strict = 1;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			return -EINVAL;
		}
	}
	if (!cfg->rdzvd || cfg->nconns < 0 || cfg->nstorms < 0 || cfg->seconds <= 0 ||
	    cfg->idle < 0 || cfg->rounds < 1 || cfg->rounds > 9 || optind != argc)
		return -EINVAL;
	return 0;
}

int main(int argc, char **argv)
{
	struct sbr_config cfg = {
	    .python = "/usr/bin/python3",
	    .seconds = 2.0,
	    .rounds = 3,
	    .conns = {1, 16, 64, 256},
	    .nconns = 4,
	    .storms = {1024, 4000, 10000},
	    .nstorms = 3,
	    .idle = 10000,
	    .storm_timeout_ms = 60000,
	};
	struct sb_server servers[2] = {{.pid = 0, .stdin_fd = -1}, {.pid = 0, .stdin_fd = -1}};
	int rc;

	if (parse_args(argc, argv, &cfg) < 0) {
		usage(stderr);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	printf("store_bench: fd limit %ld\n", sb_raise_nofile());
	rc = sb_server_start_rdzvd(cfg.rdzvd, cfg.rdzvd_args, &servers[0]);
	if (rc < 0) {
		fprintf(stderr, "store_bench: cannot start %s: %s\n", cfg.rdzvd, strerror(-rc));
		return 1;
	}
	if (cfg.python) {
		rc = sb_server_start_torch(cfg.python, &servers[1]);
		if (rc < 0) {
			fprintf(stderr, "store_bench: cannot start torch's TCPStore under %s: %s\n",
				cfg.python, strerror(-rc));
			sb_server_stop(&servers[0]);
			return 1;
		}
	}
	rc = sbr_run_all(&cfg, &servers[0], cfg.python ? &servers[1] : NULL);
	sb_server_stop(&servers[1]);
	sb_server_stop(&servers[0]);
	return rc;
}
