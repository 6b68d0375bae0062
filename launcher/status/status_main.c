/*
 * status_main.c - `ddplaunch status [--rdzv_backend=B] --rdzv_endpoint=E
 * --rdzv_id=ID [--rdzv_conf=...] [--watch[=S]] [--json]`: the flags (the
 * agents' spellings of the store: opts_rdzv_resolve_reader) become a reader
 * (status_read.h) of our store (c10d or static: an agent's or a ddp-rdzvd,
 * through an agent session with the token from DDP_RDZV_TOKEN or
 * --rdzv_token, as for the agents) or of etcd v3 (the endpoint list, TLS
 * and etcd's user from --rdzv_conf, the password from DDP_ETCD_PASSWORD;
 * nothing is written there).
 */
#include "status.h"

#include <getopt.h>
#include <log.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opts_rdzv.h"
#include "rdzv_codec.h"
#include "status_read.h"

static const char status_help[] =
    "usage: ddplaunch status [--rdzv_backend=c10d|etcd] --rdzv_endpoint=ENDPOINT\n"
    "                        [--rdzv_id=ID] [--rdzv_conf=K=V,...] [--watch[=S]] [--json]\n"
    "\n"
    "Shows a running multi-node job as its rendezvous store knows it: the nodes and\n"
    "their addresses, their ranks, the round and why it was opened, each node's\n"
    "step and step rate, the time lost to failures, the last re-formations and why.\n"
    "Run it from any machine that reaches the store, with the flags the agents were\n"
    "given: our store (c10d or static: an agent's or a ddp-rdzvd) with the token\n"
    "from $DDP_RDZV_TOKEN (or --rdzv_token), or etcd (it only reads there: no\n"
    "lease, no key written) with etcd's TLS files and user from --rdzv_conf and the\n"
    "password from $DDP_ETCD_PASSWORD. PET_RDZV_BACKEND, PET_RDZV_ENDPOINT,\n"
    "PET_RDZV_ID and PET_RDZV_CONF give the defaults, as for the agents.\n"
    "\n"
    "  --rdzv_backend B       c10d (default), static, etcd (or etcd-v2)\n"
    "  --rdzv_endpoint E      our store: H[:P] (default port 29400; static 29500)\n"
    "                         etcd: [http[s]://]H[:P],... (default port 2379)\n"
    "  --rdzv_id ID           the job's run id (default 'none')\n"
    "  --rdzv_conf K=V,...    etcd: protocol, cacert, cert, key, user, read_timeout\n"
    "                         (each read's deadline, 5 s); the others are ignored\n"
    "  --watch[=S]            read again every S seconds (default 2) and redraw\n"
    "  --json                 print one JSON object per read, for scripts\n"
    "  --rdzv_token T         the job's token (better: $DDP_RDZV_TOKEN)\n";

static const char *or_null(const char *s)
{
	return s && *s ? s : NULL;
}

/* The reader's config for our store or etcd; r's strings stay in r. */
static void reader_config(struct status_read_opts *ro, const struct opts_rdzv *r, const char *token)
{
	const char *pw = getenv(OPTS_ETCD_PASSWORD_ENV);

	memset(&ro->cfg, 0, sizeof(ro->cfg));
	if (r->mode != OPTS_RDZV_ETCD) {
		ro->ops = &rdzv_prims_session;
		ro->cfg.host = r->host;
		ro->cfg.port = (uint16_t)r->port;
		ro->cfg.token = token && *token ? token : NULL;
		ro->cfg.token_len = ro->cfg.token ? strlen(token) : 0;
		ro->cfg.connect_timeout_ms = 5000;
		return;
	}
	ro->ops = &rdzv_prims_etcd;
	ro->backend = "etcd";
	ro->cfg.endpoints = r->endpoints;
	ro->cfg.ca_file = or_null(r->conf.cacert);
	ro->cfg.cert_file = or_null(r->conf.cert);
	ro->cfg.key_file = or_null(r->conf.key);
	ro->cfg.user = or_null(r->conf.user);
	ro->cfg.password = r->conf.password[0] ? r->conf.password
			   : ro->cfg.user      ? or_null(pw)
					       : NULL;
	ro->cfg.request_timeout_ms = (int64_t)(r->conf.read_timeout * 1000);
}

/* Defaults from torchrun's environment (PET_*), as for the agents. */
static const char *pet(const char *name, const char *dflt)
{
	const char *v = getenv(name);

	return v && *v ? v : dflt;
}

int status_main(int argc, char **argv, char **envp)
{
	static const struct option longs[] = {
	    {"rdzv_backend", required_argument, NULL, 'b'},
	    {"rdzv-backend", required_argument, NULL, 'b'},
	    {"rdzv_endpoint", required_argument, NULL, 'e'},
	    {"rdzv-endpoint", required_argument, NULL, 'e'},
	    {"rdzv_id", required_argument, NULL, 'i'},
	    {"rdzv-id", required_argument, NULL, 'i'},
	    {"run_id", required_argument, NULL, 'i'},
	    {"run-id", required_argument, NULL, 'i'},
	    {"rdzv_conf", required_argument, NULL, 'c'},
	    {"rdzv-conf", required_argument, NULL, 'c'},
	    {"rdzv_token", required_argument, NULL, 't'},
	    {"rdzv-token", required_argument, NULL, 't'},
	    {"watch", optional_argument, NULL, 'w'},
	    {"json", no_argument, NULL, 'j'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct status_read_opts ro = {.run_id = pet("PET_RDZV_ID", "none")};
	const char *backend = pet("PET_RDZV_BACKEND", NULL);
	const char *endpoint = pet("PET_RDZV_ENDPOINT", NULL);
	const char *conf = pet("PET_RDZV_CONF", NULL);
	const char *token = getenv(OPTS_RDZV_TOKEN_ENV);
	struct opts_rdzv r;
	char err[512], where[OPTS_RDZV_ENDPOINTS_MAX + 16];
	int opt;

	(void)envp;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
		switch (opt) {
		case 'b':
			backend = optarg;
			break;
		case 'e':
			endpoint = optarg;
			break;
		case 'i':
			ro.run_id = optarg;
			break;
		case 'c':
			conf = optarg;
			break;
		case 't':
			token = optarg;
			break;
		case 'w':
			ro.watch = optarg ? atof(optarg) : 2.0;
			if (ro.watch <= 0) {
				log_error("--watch: '%s' is not a positive number of seconds",
					  optarg);
				return 2;
			}
			break;
		case 'j':
			ro.json = true;
			break;
		case 'h':
			fputs(status_help, stdout);
			return 0;
		default:
			fputs("run 'ddplaunch status --help' for the flags\n", stderr);
			return 2;
		}
	}
	if (optind < argc) {
		log_error("status: unexpected argument '%s' (run 'ddplaunch status --help')",
			  argv[optind]);
		return 2;
	}
	if (!endpoint) {
		log_error("status: give the job's store as --rdzv_endpoint=HOST[:PORT] (etcd: "
			  "--rdzv_backend=etcd --rdzv_endpoint=HOST[:PORT][,HOST[:PORT]...])");
		return 2;
	}
	if (opts_rdzv_resolve_reader(backend, endpoint, conf, &r, err, sizeof(err)) < 0) {
		log_error("status: %s", err);
		return 2;
	}
	if (strlen(ro.run_id) > RDZV_RUN_ID_MAX) {
		log_error("status: --rdzv_id is over %d bytes", RDZV_RUN_ID_MAX);
		return 2;
	}
	if (r.mode == OPTS_RDZV_ETCD)
		snprintf(where, sizeof(where), "%s", r.endpoints);
	else
		snprintf(where, sizeof(where), strchr(r.host, ':') ? "[%s]:%d" : "%s:%d", r.host,
			 r.port);
	ro.endpoint = where;
	reader_config(&ro, &r, token);
	return status_read_run(&ro);
}
