/*
 * status_main.c - `ddplaunch status [--rdzv_backend=B] --rdzv_endpoint=E
 * --rdzv_id=ID [--rdzv_conf=...] [--watch[=S]] [--json]`: the flags (the
 * agents' spellings of the store: opts_rdzv_resolve_reader) become a reader
 * (status_read.h) of our store (c10d or static: an agent's or a ddp-rdzvd,
 * through an agent session with the token from DDP_RDZV_TOKEN or
 * --rdzv_token, as for the agents) or of etcd v3 (the endpoint list, TLS
 * and etcd's user from --rdzv_conf, the password from DDP_ETCD_PASSWORD;
 * nothing is written there). What the flags leave out comes from the job
 * file (--config) and PET_*, with the agents' precedence (opts_pet.h).
 */
#include "status.h"

#include <getopt.h>
#include <log.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobfile.h"
#include "opts.h"
#include "opts_pet.h"
#include "opts_rdzv.h"
#include "rdzv_codec.h"
#include "status_read.h"

static const char status_help[] =
    "usage: ddplaunch status [--rdzv_backend=c10d|etcd] --rdzv_endpoint=ENDPOINT\n"
    "                        [--rdzv_id=ID] [--rdzv_conf=K=V,...] [--config JOB.ini]\n"
    "                        [--watch[=S]] [--json]\n"
    "\n"
    "Shows a running multi-node job as its rendezvous store knows it: the nodes and\n"
    "their addresses, their ranks, the round and why it was opened, each node's\n"
    "step and step rate, the time lost to failures, the last re-formations and why.\n"
    "Run it from any machine that reaches the store, with the flags the agents were\n"
    "given: our store (c10d or static: an agent's or a ddp-rdzvd) with the token\n"
    "from $DDP_RDZV_TOKEN (or --rdzv_token), or etcd (it only reads there: no\n"
    "lease, no key written) with etcd's TLS files and user from --rdzv_conf and the\n"
    "password from $DDP_ETCD_PASSWORD. A job file's [launch] keys (--config) and\n"
    "PET_RDZV_BACKEND, PET_RDZV_ENDPOINT, PET_RDZV_ID, PET_RDZV_CONF give what the\n"
    "flags leave out, as for the agents.\n"
    "\n"
    "  --rdzv_backend B       c10d (default), static, etcd (or etcd-v2)\n"
    "  --rdzv_endpoint E      our store: H[:P] (default port 29400; static 29500)\n"
    "                         etcd: [http[s]://]H[:P],... (default port 2379)\n"
    "  --rdzv_id ID           the job's run id (default 'none')\n"
    "  --rdzv_conf K=V,...    etcd: protocol, cacert, cert, key, user, read_timeout\n"
    "                         (each read's deadline, 5 s); the others are ignored\n"
    "  --watch[=S]            read again every S seconds (default 2) and redraw\n"
    "  --json                 print one JSON object per read, for scripts\n"
    "  --rdzv_token T         the job's token (better: $DDP_RDZV_TOKEN)\n"
    "  --config JOB.ini       the agents' job file: its rdzv_* keys\n";

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

/* Flags that name the store, as the agents take them. */
static const char *const store_keys[] = {"rdzv_backend", "rdzv_endpoint", "rdzv_id",
					 "rdzv_conf",	 "rdzv_token",	  "config"};

/* The store as the agents take it, value by value: the flags (given[],
 * store_keys' order), then the job file (--config), then PET_*. Returns 0,
 * or a negative errno with err naming the value and the fix. */
static int store_opts(struct launch_opts *o, const char *const given[], char **envp, char *err,
		      size_t errlen)
{
	int rc = 0;

	for (size_t k = 0; rc == 0 && k < sizeof(store_keys) / sizeof(store_keys[0]); k++)
		if (given[k])
			rc = opts_set(o, store_keys[k], given[k], OPTS_SRC_CLI, err, errlen);
	if (rc == 0 && o->config)
		rc = jobfile_load(o, o->config, err, errlen);
	if (rc == 0)
		rc = opts_pet_apply(o, envp, err, errlen);
	return rc;
}

/* The reader of the store o names; exit status 2 for a usage error. */
static int status_run(struct status_read_opts *ro, const struct launch_opts *o)
{
	bool backend_given =
	    opts_source_of(o, (size_t)settings_find(&opts_settings, "rdzv_backend")) !=
	    OPTS_SRC_DEFAULT;
	const char *token = o->rdzv_token ? o->rdzv_token : getenv(OPTS_RDZV_TOKEN_ENV);
	const char *token_from = o->rdzv_token ? "--rdzv_token" : OPTS_RDZV_TOKEN_ENV;
	char err[512], where[OPTS_RDZV_ENDPOINTS_MAX + 16];
	struct opts_rdzv r;

	if (!o->rdzv_endpoint) {
		log_error("status: give the job's store as --rdzv_endpoint=HOST[:PORT] (etcd: "
			  "--rdzv_backend=etcd --rdzv_endpoint=HOST[:PORT][,HOST[:PORT]...])");
		return 2;
	}
	/* The agents' default backend is static; a reader's is c10d. */
	if (opts_rdzv_resolve_reader(backend_given ? o->rdzv_backend : NULL, o->rdzv_endpoint,
				     o->rdzv_conf, &r, err, sizeof(err)) < 0) {
		log_error("status: %s", err);
		return 2;
	}
	if (strlen(o->rdzv_id) > RDZV_RUN_ID_MAX) {
		log_error("status: --rdzv_id is over %d bytes", RDZV_RUN_ID_MAX);
		return 2;
	}
	/* The session refuses a short token with a bare -EINVAL: say why first. */
	if (r.mode != OPTS_RDZV_ETCD && token && *token &&
	    opts_rdzv_token_check(token, token_from, err, sizeof(err)) < 0) {
		log_error("status: %s", err);
		return 2;
	}
	ro->run_id = o->rdzv_id;
	if (r.mode == OPTS_RDZV_ETCD)
		snprintf(where, sizeof(where), "%s", r.endpoints);
	else
		snprintf(where, sizeof(where), strchr(r.host, ':') ? "[%s]:%d" : "%s:%d", r.host,
			 r.port);
	ro->endpoint = where;
	reader_config(ro, &r, token);
	return status_read_run(ro);
}

int status_main(int argc, char **argv, char **envp)
{
	static const struct option longs[] = {
	    {"rdzv_backend", required_argument, NULL, 0},
	    {"rdzv-backend", required_argument, NULL, 0},
	    {"rdzv_endpoint", required_argument, NULL, 1},
	    {"rdzv-endpoint", required_argument, NULL, 1},
	    {"rdzv_id", required_argument, NULL, 2},
	    {"rdzv-id", required_argument, NULL, 2},
	    {"run_id", required_argument, NULL, 2},
	    {"run-id", required_argument, NULL, 2},
	    {"rdzv_conf", required_argument, NULL, 3},
	    {"rdzv-conf", required_argument, NULL, 3},
	    {"rdzv_token", required_argument, NULL, 4},
	    {"rdzv-token", required_argument, NULL, 4},
	    {"config", required_argument, NULL, 5},
	    {"watch", optional_argument, NULL, 'w'},
	    {"json", no_argument, NULL, 'j'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const char *given[sizeof(store_keys) / sizeof(store_keys[0])] = {NULL};
	struct status_read_opts ro = {0};
	struct launch_opts o;
	char err[4 * OPTS_ERR_LEN];
	int opt, rc;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
		switch (opt) {
		case 0 ... 5:
			given[opt] = optarg;
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
		/* --watch takes its period only after '=': "--watch 5" leaves "5"
		 * (getopt may have moved it after the other flags) */
		bool period = strspn(argv[optind], "0123456789.") == strlen(argv[optind]);
		bool watch = false;

		for (int i = 1; i < argc; i++)
			watch = watch || !strcmp(argv[i], "--watch");
		period = period && watch;
		if (period)
			log_error("status: unexpected argument '%s' (the period goes after '=': "
				  "--watch=%s)",
				  argv[optind], argv[optind]);
		else
			log_error(
			    "status: unexpected argument '%s' (run 'ddplaunch status --help')",
			    argv[optind]);
		return 2;
	}
	if (opts_init(&o)) {
		log_error("out of memory");
		return 1;
	}
	rc = store_opts(&o, given, envp, err, sizeof(err));
	if (rc < 0) {
		opts_pet_explain(&o, envp, err, sizeof(err));
		log_error("status: %s", err);
		rc = 2;
	} else {
		rc = status_run(&ro, &o);
	}
	opts_release(&o);
	return rc;
}
