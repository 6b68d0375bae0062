/*
 * rdzvd_main.c - ddp-rdzvd: the standalone rendezvous store daemon. Parses
 * flags, runs one store server on a libuv loop, stops on SIGTERM/SIGINT.
 */
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "cli_util.h"
#include "fileutil.h"
#include "log.h"
#include "metrics_http.h"
#include "rdzvd_metrics.h"
#include "store_access.h"
#include "store_server.h"

struct rdzvd {
	uv_loop_t *loop;
	struct store_server *server;
	uv_signal_t sigterm;
	uv_signal_t sigint;
	const char *port_file;
	const char *token_file;
	const char **allow; /* --allow addresses */
	size_t nallow;
	const char *metrics_spec;     /* --metrics-port, or NULL */
	struct metrics_http *metrics; /* its server */
};

/* 65536 -> "64K": sizes as the flags accept them. */
static const char *size_text(size_t v, char *buf, size_t len)
{
	const char *unit = "KMG";
	int u = -1;
	while (u < 2 && v >= 1024 && v % 1024 == 0) {
		v /= 1024;
		u++;
	}
	if (u < 0)
		snprintf(buf, len, "%zu", v);
	else
		snprintf(buf, len, "%zu%c", v, unit[u]);
	return buf;
}

static void usage(FILE *f)
{
	char a[32], b[32], c[32];
	struct store_limits d;
	store_limits_default(&d);
	fprintf(
	    f,
	    "usage: ddp-rdzvd [--host ADDR] [--port N] [--port-file PATH] [--token-file FILE]\n"
	    "                 [--allow ADDR]... [--metrics-port [ADDR:]PORT] [limits] [-v]\n"
	    "\n"
	    "Hosts a rendezvous key-value store that speaks PyTorch's c10d TCPStore\n"
	    "protocol (torch 1.13 and 2.x clients at once): the store torchrun's agent\n"
	    "hosts on MASTER_PORT, here as its own process, e.g. for multi-node jobs.\n"
	    "Workers reach it with MASTER_ADDR/MASTER_PORT and\n"
	    "TORCHELASTIC_USE_AGENT_STORE=True; ddp-store talks to it from a shell.\n"
	    "\n"
	    "  --host ADDR        address to listen on (default 127.0.0.1); 0.0.0.0 or ::\n"
	    "                     listen on every interface - without a token anyone who\n"
	    "                     reaches the port can use the store, so only do that with\n"
	    "                     --token-file or on a trusted network\n"
	    "  --port N           port to listen on (default 29500, torchrun's default\n"
	    "                     MASTER_PORT); 0 lets the kernel choose a free one\n"
	    "  --port-file PATH   write the bound port to PATH (atomically, as\n"
	    "                     \"PORT\\n\"); removed again on a clean exit\n"
	    "  --token-file FILE  the job's token (the file's bytes, less a final newline;\n"
	    "                     or the environment variable DDP_RDZV_TOKEN): ddplaunch\n"
	    "                     agents must prove they know it (HMAC-SHA-256\n"
	    "                     challenge-response; the token never crosses the network)\n"
	    "                     and check that the store knows it too. Clients that cannot\n"
	    "                     prove it (torch workers, ddp-store) are served only from\n"
	    "                     127.0.0.1/::1, from --allow addresses and from the\n"
	    "                     addresses of agents that proved it; any other client is\n"
	    "                     disconnected and logged. Those clients cannot write the\n"
	    "                     agents' keys (ddprdzv/...): only agents that proved the\n"
	    "                     token can. At least 16 bytes (a short token can be\n"
	    "                     guessed offline from one recorded handshake).\n"
	    "                     Clients still to prove it: at most 16 from one address\n"
	    "                     (more are disconnected at once) and 128 in all (the\n"
	    "                     oldest is disconnected), each for 10 s at most; one that\n"
	    "                     sends a frame over 256 bytes is disconnected at once\n"
	    "  --allow ADDR       serve clients from ADDR (an IPv4 or IPv6 address; may be\n"
	    "                     repeated) without the token; without a token, --allow\n"
	    "                     refuses every other address except 127.0.0.1 and ::1\n"
	    "  --metrics-port [ADDR:]PORT\n"
	    "                     serve /metrics for Prometheus on PORT (0: a free port,\n"
	    "                     said on stderr; ADDR: one address, else every\n"
	    "                     interface): connections open and accepted, requests by\n"
	    "                     kind, keys and bytes stored and in flight, clients\n"
	    "                     refused (ddp_store_*); off by default\n"
	    "  -v, --verbose      debug output: why each client was disconnected, ...\n"
	    "  -h, --help         show this help\n"
	    "\n"
	    "limits (sizes take K, M, G suffixes); a client over one is disconnected:\n"
	    "  --max-key-len BYTES           one key (default %s)\n"
	    "  --max-value-len BYTES         one value (default %s)\n"
	    "  --max-keys-per-request N      keys in one wait/check/multi-get/set (default %zu)\n"
	    "  --max-total-bytes BYTES       everything stored, and what clients hold in\n"
	    "                                flight, together (default %s); past it, the\n"
	    "                                clients holding more than their share go first\n"
	    "  --max-conn-bytes BYTES        what one client holds in flight: a half-sent\n"
	    "                                query and replies it has not read; also the\n"
	    "                                largest query (default twice --max-value-len\n"
	    "                                plus --max-key-len, at least 64M)\n"
	    "  --max-connections N           open client connections (default %zu)\n"
	    "  --max-conns-per-addr N        open connections from one address (default\n"
	    "                                %zu: no bound); a client that sends no complete\n"
	    "                                request within 10 s of connecting is closed,\n"
	    "                                unless a client of its address that spoke\n"
	    "                                vouches for it (one each: torch 1.13's silent\n"
	    "                                callback connection) or its address keeps\n"
	    "                                fewer than %zu other silent ones\n"
	    "  --max-barrier-world N         world size of one torch 2.x barrier (default %zu)\n"
	    "  --max-list-keys N             keys one torch 2.x list_keys may return\n"
	    "                                (default %zu)\n"
	    "\n"
	    "memory: at most --max-total-bytes, plus --max-conn-bytes (or --max-total-bytes\n"
	    "if less) so that a full store still answers one client, plus about 700 bytes\n"
	    "per open connection (up to --max-connections), plus a few MiB of its own and\n"
	    "freed memory not yet given back (1/16 of --max-total-bytes, at least 1 MiB).\n"
	    "With --max-total-bytes 64M: at worst 128 MiB + 700 bytes per connection + a\n"
	    "few MiB (a full store and a client reading a 64 MiB value); clients holding\n"
	    "half-sent queries and unread replies beside a near-empty store keep it\n"
	    "within 80 MiB: the limit, 1/16 of it freed and not yet given back, and its\n"
	    "own few MiB (measured: 47 MiB with 20 clients each sending half of a 60 MiB\n"
	    "query and 20 not reading 16 replies of 1 MiB; 72 MiB when they send 59 MiB\n"
	    "and pipeline 256 replies). A lower --max-conn-bytes lowers the worst\n"
	    "case (it also bounds one query: keep it over the largest value).\n"
	    "\n"
	    "The daemon raises its limit on open files (ulimit -n) to the hard limit at\n"
	    "start (-v shows it).\n"
	    "\n"
	    "The bound port is printed on stdout. SIGTERM or SIGINT stops the daemon\n"
	    "cleanly (exit status 0).\n"
	    "\n"
	    "example: a store for a two-node job of unchanged torch scripts\n"
	    "  node0$ ddp-rdzvd --host 0.0.0.0 --port 29500\n"
	    "  each$  MASTER_ADDR=node0 MASTER_PORT=29500 TORCHELASTIC_USE_AGENT_STORE=True \\\n"
	    "         TORCHELASTIC_RESTART_COUNT=0 RANK=... WORLD_SIZE=... python train.py\n"
	    "  any$   ddp-store --addr node0:29500 keys\n"
	    "\n"
	    "example: a store for ddplaunch agents on other nodes\n"
	    "  node0$ head -c 32 /dev/urandom | base64 > ~/.rdzv-token; chmod 600 ~/.rdzv-token\n"
	    "  node0$ ddp-rdzvd --host 0.0.0.0 --port 29400 --token-file ~/.rdzv-token\n",
	    size_text(d.max_key_len, a, sizeof(a)), size_text(d.max_value_len, b, sizeof(b)),
	    d.max_keys_per_request, size_text(d.max_total_bytes, c, sizeof(c)), d.max_connections,
	    d.max_conns_per_addr, d.max_silent_per_addr, d.max_barrier_world, d.max_list_keys);
}

enum {
	OPT_PORT_FILE = 256,
	OPT_TOKEN_FILE,
	OPT_ALLOW,
	OPT_MAX_KEY,
	OPT_MAX_VALUE,
	OPT_MAX_KEYS,
	OPT_MAX_TOTAL,
	OPT_MAX_CONN,
	OPT_MAX_BARRIER,
	OPT_MAX_LIST,
	OPT_MAX_CONN_BYTES,
	OPT_MAX_CONNS_PER_ADDR,
	OPT_METRICS_PORT,
};

static const struct option long_opts[] = {
    {"host", required_argument, NULL, 'H'},
    {"port", required_argument, NULL, 'p'},
    {"port-file", required_argument, NULL, OPT_PORT_FILE},
    {"token-file", required_argument, NULL, OPT_TOKEN_FILE},
    {"allow", required_argument, NULL, OPT_ALLOW},
    {"max-key-len", required_argument, NULL, OPT_MAX_KEY},
    {"max-value-len", required_argument, NULL, OPT_MAX_VALUE},
    {"max-keys-per-request", required_argument, NULL, OPT_MAX_KEYS},
    {"max-total-bytes", required_argument, NULL, OPT_MAX_TOTAL},
    {"max-connections", required_argument, NULL, OPT_MAX_CONN},
    {"max-barrier-world", required_argument, NULL, OPT_MAX_BARRIER},
    {"max-list-keys", required_argument, NULL, OPT_MAX_LIST},
    {"max-conn-bytes", required_argument, NULL, OPT_MAX_CONN_BYTES},
    {"max-conns-per-addr", required_argument, NULL, OPT_MAX_CONNS_PER_ADDR},
    {"metrics-port", required_argument, NULL, OPT_METRICS_PORT},
    {"metrics_port", required_argument, NULL, OPT_METRICS_PORT},
    {"verbose", no_argument, NULL, 'v'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static size_t *limit_slot(struct store_limits *l, int opt)
{
	switch (opt) {
	case OPT_MAX_KEY:
		return &l->max_key_len;
	case OPT_MAX_VALUE:
		return &l->max_value_len;
	case OPT_MAX_KEYS:
		return &l->max_keys_per_request;
	case OPT_MAX_TOTAL:
		return &l->max_total_bytes;
	case OPT_MAX_CONN:
		return &l->max_connections;
	case OPT_MAX_BARRIER:
		return &l->max_barrier_world;
	case OPT_MAX_LIST:
		return &l->max_list_keys;
	case OPT_MAX_CONN_BYTES:
		return &l->max_conn_bytes;
	case OPT_MAX_CONNS_PER_ADDR:
		return &l->max_conns_per_addr;
	default:
		return NULL;
	}
}

/* Whether a limit flag counts bytes (else things: keys, connections). */
static bool limit_is_bytes(int opt)
{
	return opt == OPT_MAX_KEY || opt == OPT_MAX_VALUE || opt == OPT_MAX_TOTAL ||
	       opt == OPT_MAX_CONN_BYTES;
}

/* --allow's check, before any server exists. */
static int allow_check(const char *addr)
{
	struct sockaddr_in6 sa;
	return uv_ip4_addr(addr, 0, (struct sockaddr_in *)&sa) == 0 ||
		       uv_ip6_addr(addr, 0, &sa) == 0
		   ? 0
		   : -EINVAL;
}

/* Returns 0, 1 for --help, or -1 on a usage error (reported). */
static int parse_args(int argc, char **argv, const char **host, int *port, struct rdzvd *d,
		      struct store_limits *limits, int *verbose)
{
	int opt, idx = -1;
	while ((opt = getopt_long(argc, argv, "vh", long_opts, &idx)) != -1) {
		size_t *slot = limit_slot(limits, opt);
		if (slot) {
			/* getopt sets idx for long options, and these are long only. */
			if (cli_parse_size(optarg, slot) < 0 || *slot == 0) {
				log_error("--%s: '%s' is not a positive %s (e.g. %s)",
					  long_opts[idx].name, optarg,
					  limit_is_bytes(opt) ? "size" : "number",
					  limit_is_bytes(opt) ? "64K, 8M or 1G" : "1024 or 64K");
				return -1;
			}
			continue;
		}
		switch (opt) {
		case 'H':
			*host = optarg;
			break;
		case 'p':
			if (cli_parse_port(optarg, port) < 0) {
				log_error("--port: '%s' is not a port (0-65535)", optarg);
				return -1;
			}
			break;
		case OPT_PORT_FILE:
			d->port_file = optarg;
			break;
		case OPT_TOKEN_FILE:
			d->token_file = optarg;
			break;
		case OPT_ALLOW:
			if (allow_check(optarg) < 0) {
				log_error("--allow: '%s' is not an IPv4 or IPv6 address", optarg);
				return -1;
			}
			d->allow[d->nallow++] = optarg;
			break;
		case OPT_METRICS_PORT:
			d->metrics_spec = optarg;
			break;
		case 'v':
			(*verbose)++;
			break;
		case 'h':
			return 1;
		default:
			fprintf(stderr, "run 'ddp-rdzvd --help' for the flags\n");
			return -1;
		}
	}
	if (optind < argc) {
		log_error("unexpected argument '%s' (run 'ddp-rdzvd --help')", argv[optind]);
		return -1;
	}
	return 0;
}

/* Reads a token file: its bytes less a final "\n" or "\r\n". Returns 0 or
 * -EINVAL (reported). */
static int rdzvd_read_token(const char *path, char *buf, size_t cap, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		log_error("cannot read the token file '%s': %s", path, strerror(errno));
		return -EINVAL;
	}
	struct stat st;
	if (fstat(fileno(f), &st) == 0 && (st.st_mode & 077))
		log_warn("the token file '%s' can be read by others (chmod 600 it)", path);
	size_t n = fread(buf, 1, cap, f);
	fclose(f);
	if (n >= cap) {
		log_error("the token file '%s' holds over %d bytes", path, STORE_TOKEN_MAX);
		return -EINVAL;
	}
	if (n && buf[n - 1] == '\n')
		n--;
	if (n && buf[n - 1] == '\r')
		n--;
	if (n == 0) {
		log_error("the token file '%s' is empty", path);
		return -EINVAL;
	}
	*len = n;
	return 0;
}

static void rdzvd_closed(void *arg)
{
	struct rdzvd *d = arg;
	d->server = NULL;
	uv_close((uv_handle_t *)&d->sigterm, NULL);
	uv_close((uv_handle_t *)&d->sigint, NULL);
}

static void rdzvd_on_signal(uv_signal_t *sig, int signum)
{
	struct rdzvd *d = sig->data;
	log_info("%s received; closing the store", strsignal(signum));
	uv_signal_stop(&d->sigterm);
	uv_signal_stop(&d->sigint);
	metrics_http_close(d->metrics);
	d->metrics = NULL;
	if (d->server)
		store_server_close(d->server, rdzvd_closed, d);
}

/* The token from --token-file or DDP_RDZV_TOKEN, and the --allow list. */
static int rdzvd_access(struct rdzvd *d, const char *host)
{
	char token[STORE_TOKEN_MAX + 2];
	size_t len = 0;
	const char *from = d->token_file;
	if (from) {
		int rc = rdzvd_read_token(from, token, sizeof(token), &len);
		if (rc < 0)
			return rc;
	} else if (getenv("DDP_RDZV_TOKEN") && getenv("DDP_RDZV_TOKEN")[0]) {
		from = "DDP_RDZV_TOKEN";
		len = strlen(getenv("DDP_RDZV_TOKEN"));
		if (len > STORE_TOKEN_MAX) {
			log_error("DDP_RDZV_TOKEN is over %d bytes", STORE_TOKEN_MAX);
			return -EINVAL;
		}
		memcpy(token, getenv("DDP_RDZV_TOKEN"), len);
	}
	if (len && len < STORE_TOKEN_MIN) {
		log_error("the token from %s is %zu bytes; it must be at least %d, because whoever "
			  "records one handshake can test guesses of a short token offline (use a "
			  "random one: head -c 32 /dev/urandom | base64 > FILE)",
			  from, len, STORE_TOKEN_MIN);
		explicit_bzero(token, sizeof(token));
		return -EINVAL;
	}
	if (len && store_server_set_token(d->server, token, len) < 0) {
		log_error("cannot use the token from %s", from);
		return -EINVAL;
	}
	explicit_bzero(token, sizeof(token));
	for (size_t i = 0; i < d->nallow; i++)
		if (store_server_allow(d->server, d->allow[i]) < 0)
			return -ENOMEM;
	if (d->nallow && !len)
		store_server_restrict(d->server);
	if (len)
		log_info("token from %s: agents must prove it; other clients are served from "
			 "127.0.0.1, ::1%s and the agents' addresses only",
			 from, d->nallow ? ", the --allow addresses" : "");
	else if (d->nallow)
		log_info("no token: clients are served from 127.0.0.1, ::1 and the --allow "
			 "addresses only");
	else if (strcmp(host, "127.0.0.1") != 0 && strcmp(host, "::1") != 0 &&
		 strcmp(host, "localhost") != 0)
		log_warn("no token: anyone who reaches %s can use the store (give --token-file)",
			 host);
	return 0;
}

/* Buffers this large or larger get a mapping of their own (malloc.h), and
 * the heap keeps at most this much free at its top. */
#define RDZVD_MALLOC_MMAP (4 * 1024 * 1024)

/* glibc raises its mmap threshold (up to 32 MiB) each time it frees a large
 * mapped buffer, and then keeps up to twice that of freed heap memory: a
 * connection's buffer freed when the budget closes it stays resident, and
 * the next ones grow on the heap beside it by copying (issue 18: 111 MB of
 * RSS under --max-total-bytes 64M). A fixed threshold keeps every buffer of
 * 4 MiB or more in a mapping of its own, grown with mremap and given back
 * when freed; smaller ones are reused from the heap (a lower threshold costs
 * page faults on every large value: 1 MiB ones took 4 times as long at
 * 128 KiB), and the server trims the heap (store_budget.h). */
static void bound_malloc(void)
{
	mallopt(M_MMAP_THRESHOLD, RDZVD_MALLOC_MMAP);
	mallopt(M_TRIM_THRESHOLD, RDZVD_MALLOC_MMAP);
}

/* Thousands of clients need thousands of descriptors. */
static int rdzvd_start(struct rdzvd *d, const char *host, int port,
		       const struct store_limits *limits)
{
	int rc = store_server_new(d->loop, limits, &d->server);
	if (rc == 0 && rdzvd_access(d, host) < 0)
		return -EINVAL;
	if (rc == 0)
		rc = store_server_listen(d->server, host, port);
	if (rc < 0) {
		log_error("cannot listen on %s:%d: %s%s", host, port, uv_strerror(rc),
			  rc == UV_EADDRINUSE ? " (another process holds the port; pick another "
						"--port, or --port 0 for a free one)"
					      : "");
		return rc;
	}
	if (d->metrics_spec &&
	    (rc = rdzvd_metrics_start(d->loop, d->metrics_spec, &d->server, &d->metrics)) < 0)
		return rc;
	/* Before the port is told: whoever reads it may send SIGTERM at once. */
	uv_signal_init(d->loop, &d->sigterm);
	uv_signal_init(d->loop, &d->sigint);
	d->sigterm.data = d->sigint.data = d;
	uv_signal_start(&d->sigterm, rdzvd_on_signal, SIGTERM);
	uv_signal_start(&d->sigint, rdzvd_on_signal, SIGINT);
	port = store_server_port(d->server);
	if (d->port_file && cli_write_file_atomic(d->port_file, port) < 0) {
		rc = -errno;
		log_error("cannot write the port file '%s': %s", d->port_file, strerror(-rc));
		uv_close((uv_handle_t *)&d->sigterm, NULL);
		uv_close((uv_handle_t *)&d->sigint, NULL);
		return rc;
	}
	printf("%d\n", port);
	fflush(stdout);
	log_info("listening on %s:%d", host, port);
	return 0;
}

int main(int argc, char **argv)
{
	const char *host = "127.0.0.1";
	int port = 29500, verbose = 0;
	struct store_limits limits;
	struct rdzvd d = {.loop = uv_default_loop()};

	log_init("ddp-rdzvd", LOG_INFO);
	store_limits_default(&limits);
	const char *allow[argc > 0 ? argc : 1];
	d.allow = allow;
	int rc = parse_args(argc, argv, &host, &port, &d, &limits, &verbose);
	if (rc != 0) {
		if (rc > 0)
			usage(stdout);
		return rc > 0 ? 0 : 2;
	}
	if (verbose > 0)
		log_set_level(LOG_DEBUG);
	signal(SIGPIPE, SIG_IGN);
	file_raise_nofile();
	bound_malloc();
	if (rdzvd_start(&d, host, port, &limits) < 0) {
		metrics_http_close(d.metrics);
		if (d.server)
			store_server_close(d.server, NULL, NULL);
		uv_run(d.loop, UV_RUN_DEFAULT);
		return 1;
	}
	uv_run(d.loop, UV_RUN_DEFAULT);
	if (d.port_file)
		unlink(d.port_file);
	uv_loop_close(d.loop);
	log_info("stopped");
	return 0;
}
