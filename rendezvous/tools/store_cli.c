/*
 * store_cli.c - ddp-store: a command-line client of the rendezvous store,
 * for shell workers and for looking into a live job.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "log.h"
#include "store_client.h"

enum {
	EXIT_OK = 0,
	EXIT_ERROR = 1, /* cannot connect, connection lost, bad reply */
	EXIT_USAGE = 2,
	EXIT_TIMEOUT = 3, /* get/wait: the key(s) did not appear in time */
	EXIT_MISSING = 4, /* check: a key does not exist */
};

static void usage(FILE *f)
{
	fprintf(f, "usage: ddp-store [--addr HOST:PORT] [--timeout SECONDS] [--torch113] COMMAND "
		   "[ARGS...]\n"
		   "\n"
		   "Talks to a running rendezvous store: ddp-rdzvd, ddplaunch's store, a\n"
		   "torch 2.x TCPStore server, or (with --torch113) the store a torch 1.13\n"
		   "process hosts, e.g. torchrun's agent store on MASTER_PORT.\n"
		   "\n"
		   "commands:\n"
		   "  set KEY VALUE     store VALUE under KEY\n"
		   "  get KEY           wait until KEY exists, print its value and a newline\n"
		   "  add KEY N         add the integer N to KEY (a missing key counts as 0),\n"
		   "                    print the result\n"
		   "  wait KEY...       wait until every KEY exists\n"
		   "  check KEY...      exit 0 if every KEY exists, 4 if not (no waiting)\n"
		   "  delete KEY        delete KEY; prints 1 if it existed, else 0\n"
		   "  keys              print the number of keys in the store\n"
		   "  list              print every key, one per line (not with --torch113)\n"
		   "  ping              check that the store answers\n"
		   "\n"
		   "options:\n"
		   "  --addr HOST:PORT  the store (default $MASTER_ADDR:$MASTER_PORT, else\n"
		   "                    127.0.0.1:29500)\n"
		   "  --timeout SEC     give up connecting, or waiting in get/wait, after SEC\n"
		   "                    seconds (default 30)\n"
		   "  --torch113        speak torch 1.13's framing, for a store hosted by torch\n"
		   "                    1.13 itself (do not point the default 2.x framing at\n"
		   "                    such a store: it would read the handshake as a huge set)\n"
		   "  -h, --help        show this help\n"
		   "\n"
		   "Keys are used exactly as given. torch's Python TCPStore puts a '/' in\n"
		   "front of every key, and init_process_group under torchrun adds\n"
		   "'/worker/attempt_N/': to read torch's key \"k\", ask for \"/k\".\n"
		   "\n"
		   "exit status: 0 done, 1 store unreachable or error, 2 usage error,\n"
		   "3 timed out waiting, 4 check found a missing key\n");
}

struct cli {
	char host[256];
	int port;
	uint64_t timeout_ms;
	enum store_client_proto proto;
	struct store_client *client;
};

/* After the store closed the connection: does it still take new ones? (If
 * not, it stopped, rather than refused the query.) */
static bool cli_store_answers(const struct cli *cli)
{
	struct store_client *c = NULL;
	int rc = store_client_connect_proto(cli->host, cli->port, 1000, cli->proto, &c, NULL, 0);
	store_client_free(c);
	return rc == 0;
}

static int cli_status(struct cli *cli, int rc)
{
	if (rc >= 0)
		return EXIT_OK;
	if ((rc == -ECONNRESET || rc == -EPIPE) && !cli_store_answers(cli)) {
		log_error("the store at %s:%d closed the connection and no longer answers (it "
			  "stopped?); what this command sent may not have been done",
			  cli->host, cli->port);
		return EXIT_ERROR;
	}
	log_error("%s", store_client_error(cli->client)[0] ? store_client_error(cli->client)
							   : strerror(-rc));
	return rc == -ETIMEDOUT ? EXIT_TIMEOUT : EXIT_ERROR;
}

/* A set is confirmed by a round trip (the protocol has no reply to it): the
 * store closes the connection on a write it refuses. */
static int cmd_set(struct cli *cli, char **args)
{
	int rc = store_client_set(cli->client, args[0], args[1], strlen(args[1]));
	if (rc == 0)
		rc = store_client_confirm(cli->client);
	return cli_status(cli, rc);
}

static int cmd_get(struct cli *cli, char **args)
{
	void *value = NULL;
	size_t len = 0;
	int rc = store_client_get(cli->client, args[0], cli->timeout_ms, &value, &len);
	if (rc == 0) {
		fwrite(value, 1, len, stdout);
		fputc('\n', stdout);
		free(value);
	}
	return cli_status(cli, rc);
}

/* True when the value at `key` is one the store cannot add to (not a
 * decimal integer in the int64 range, read as the store reads it): then says
 * so, naming the value. Asked on a new connection, since the store closed
 * the one that asked to add. */
static bool add_refused_value(const struct cli *cli, const char *key)
{
	struct store_client *c = NULL;
	void *value = NULL;
	size_t len = 0;
	bool refused = false, range = false;
	if (store_client_connect_proto(cli->host, cli->port, 1000, cli->proto, &c, NULL, 0) == 0 &&
	    store_client_check(c, &key, 1) == 1 &&
	    store_client_get(c, key, 1000, &value, &len) == 0) {
		const char *p = value;
		while (*p == ' ' || (*p >= '\t' && *p <= '\r'))
			p++;
		char *end = NULL;
		errno = 0;
		(void)strtoll(p, &end, 10);
		range = errno == ERANGE;
		refused = end == p || range;
	}
	if (refused)
		log_error("add: key '%s' holds '%.40s%s', which is not a %s, so the store refused "
			  "to add to it (set it to a number, or delete it, first)",
			  key, (const char *)value, len > 40 ? "..." : "",
			  range ? "64-bit integer" : "decimal integer");
	free(value);
	store_client_free(c);
	return refused;
}

static int cmd_add(struct cli *cli, char **args)
{
	char *end = NULL;
	errno = 0;
	long long delta = strtoll(args[1], &end, 10);
	if (errno || end == args[1] || *end) {
		log_error("add: '%s' is not an integer", args[1]);
		return EXIT_USAGE;
	}
	int64_t result = 0;
	int rc = store_client_add(cli->client, args[0], delta, &result);
	if (rc == 0)
		printf("%" PRId64 "\n", result);
	if (rc == -ECONNRESET && add_refused_value(cli, args[0]))
		return EXIT_ERROR;
	return cli_status(cli, rc);
}

static int cmd_list(struct cli *cli)
{
	char **keys = NULL;
	size_t n = 0;
	int rc = store_client_list_keys(cli->client, &keys, &n);
	for (size_t i = 0; rc == 0 && i < n; i++)
		printf("%s\n", keys[i]);
	store_client_free_keys(keys, n);
	return cli_status(cli, rc);
}

static int cmd_run(struct cli *cli, const char *cmd, char **args, int nargs)
{
	int rc;
	int64_t n = 0;
	if (strcmp(cmd, "set") == 0)
		return cmd_set(cli, args);
	if (strcmp(cmd, "get") == 0)
		return cmd_get(cli, args);
	if (strcmp(cmd, "add") == 0)
		return cmd_add(cli, args);
	if (strcmp(cmd, "wait") == 0)
		return cli_status(cli, store_client_wait(cli->client, (const char *const *)args,
							 (size_t)nargs, cli->timeout_ms));
	if (strcmp(cmd, "check") == 0) {
		rc = store_client_check(cli->client, (const char *const *)args, (size_t)nargs);
		return rc == 0 ? EXIT_MISSING : cli_status(cli, rc);
	}
	if (strcmp(cmd, "delete") == 0) {
		rc = store_client_delete(cli->client, args[0]);
		if (rc >= 0)
			printf("%d\n", rc);
		return cli_status(cli, rc);
	}
	if (strcmp(cmd, "keys") == 0) {
		rc = store_client_num_keys(cli->client, &n);
		if (rc == 0)
			printf("%" PRId64 "\n", n);
		return cli_status(cli, rc);
	}
	if (strcmp(cmd, "list") == 0)
		return cmd_list(cli);
	return cli_status(cli, store_client_ping(cli->client));
}

/* Checks the command name and its argument count. */
static int cmd_check_args(const char *cmd, int nargs)
{
	static const struct {
		const char *name;
		int min, max;
	} cmds[] = {
	    {"set", 2, 2},	  {"get", 1, 1},	 {"add", 2, 2},
	    {"wait", 1, 1 << 20}, {"check", 1, 1 << 20}, {"delete", 1, 1},
	    {"keys", 0, 0},	  {"ping", 0, 0},	 {"list", 0, 0},
	};
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		if (strcmp(cmd, cmds[i].name) != 0)
			continue;
		if (nargs >= cmds[i].min && nargs <= cmds[i].max)
			return 0;
		log_error("%s: wrong number of arguments (run 'ddp-store --help')", cmd);
		return -1;
	}
	log_error("unknown command '%s' (run 'ddp-store --help')", cmd);
	return -1;
}

static int parse_args(int argc, char **argv, struct cli *cli)
{
	static const struct option opts[] = {
	    {"addr", required_argument, NULL, 'a'},
	    {"timeout", required_argument, NULL, 't'},
	    {"torch113", no_argument, NULL, '1'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const char *addr = NULL;
	int opt;
	/* '+': stop at the command, so values like "-5" reach it. */
	while ((opt = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		if (opt == 'a') {
			addr = optarg;
		} else if (opt == 't') {
			char *end = NULL;
			double s = strtod(optarg, &end);
			if (end == optarg || *end || !(s > 0) || s > 1e7) {
				log_error("--timeout: '%s' is not a positive number of seconds",
					  optarg);
				return -1;
			}
			cli->timeout_ms = (uint64_t)(s * 1000.0);
		} else if (opt == '1') {
			cli->proto = STORE_CLIENT_PROTO_V1;
		} else if (opt == 'h') {
			return 1;
		} else {
			return -1;
		}
	}
	if (!addr) {
		const char *h = getenv("MASTER_ADDR"), *p = getenv("MASTER_PORT");
		snprintf(cli->host, sizeof(cli->host), "%s", h && *h ? h : "127.0.0.1");
		if (p && *p && cli_parse_port(p, &cli->port) < 0) {
			log_error("MASTER_PORT='%s' is not a port; pass --addr HOST:PORT", p);
			return -1;
		}
	} else if (cli_parse_addr(addr, cli->host, sizeof(cli->host), &cli->port) < 0) {
		log_error("--addr: '%s' is not HOST:PORT", addr);
		return -1;
	}
	if (optind >= argc) {
		log_error("no command given (run 'ddp-store --help')");
		return -1;
	}
	return cmd_check_args(argv[optind], argc - optind - 1);
}

int main(int argc, char **argv)
{
	struct cli cli = {.port = 29500, .timeout_ms = 30000};
	log_init("ddp-store", LOG_INFO);
	int rc = parse_args(argc, argv, &cli);
	if (rc != 0) {
		if (rc > 0)
			usage(stdout);
		return rc > 0 ? EXIT_OK : EXIT_USAGE;
	}
	char err[512] = "";
	rc = store_client_connect_proto(cli.host, cli.port, cli.timeout_ms, cli.proto, &cli.client,
					err, sizeof(err));
	if (rc < 0) {
		log_error("%s", err);
		return EXIT_ERROR;
	}
	rc = cmd_run(&cli, argv[optind], argv + optind + 1, argc - optind - 1);
	store_client_free(cli.client);
	return rc;
}
