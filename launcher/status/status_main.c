/*
 * status_main.c - `ddplaunch status --rdzv_endpoint=HOST[:PORT]
 * --rdzv_id=ID [--watch[=S]] [--json]`: reads a running job's state from its
 * rendezvous store (our store, hosted by an agent or a ddp-rdzvd) through an
 * agent session (the token from DDP_RDZV_TOKEN or --rdzv_token, as for the
 * agents), and shows it (status_view.h). Reads: the job state
 * (ddprdzv/ID/state), the world of its last formed round (w/GEN.ROUND, or
 * the round before while one forms) and each member's status record
 * (RDZV_STATUS_KEY_FMT). A job that is not there is said in one line (exit
 * 1); --watch reads again every S seconds (2) and redraws until ^C.
 */
#include "status.h"
#include "status_view.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <log.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "driver.h"
#include "opts_rdzv.h"
#include "store_session.h"

struct status_cmd {
	uv_loop_t loop;
	struct store_session *s;
	uv_timer_t again;
	uv_signal_t sigint;
	char host[256], endpoint[300];
	int port;
	const char *run_id;
	double watch; /* seconds; 0: once */
	bool json;
	int exit_status;
	struct status_snap snap;
	char key[512];
	int world_tries;
};

static void status_read(struct status_cmd *c);

static void status_end(struct status_cmd *c, int exit_status)
{
	c->exit_status = exit_status;
	store_session_close(c->s);
	c->s = NULL;
	uv_close((uv_handle_t *)&c->again, NULL);
	uv_close((uv_handle_t *)&c->sigint, NULL);
}

static void on_again(uv_timer_t *t)
{
	status_read(t->data);
}

/* The screen is written whole, in one write: a terminal never shows half
 * of a redraw. */
static void status_show(struct status_cmd *c)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (f) {
		if (c->watch > 0 && !c->json)
			fputs("\033[H\033[2J", f); /* redraw from the top */
		if (c->json)
			status_render_json(f, &c->snap);
		else
			status_render_text(f, &c->snap, time(NULL));
		if (fclose(f) == 0 && buf) {
			fwrite(buf, 1, len, stdout);
			fflush(stdout);
		}
		free(buf);
	}
	status_snap_release(&c->snap);
	if (c->watch > 0)
		uv_timer_start(&c->again, on_again, (uint64_t)(c->watch * 1000), 0);
	else
		status_end(c, 0);
}

static void on_records(void *arg, uint64_t tag, int status, const struct store_session_value *v,
		       size_t n)
{
	struct status_cmd *c = arg;

	if (status < 0) {
		log_error("cannot read the nodes' status from %s: %s", c->endpoint,
			  strerror(-status));
		status_end(c, 1);
		return;
	}
	for (size_t i = 0; i < n && i < c->snap.nnodes; i++)
		if (v[i].present)
			c->snap.nodes[i].rec =
			    json_loadb((const char *)v[i].bytes.data, v[i].bytes.len, 0, NULL);
	status_show(c);
}

static void read_records(struct status_cmd *c)
{
	struct byteview keys[c->snap.nnodes ? c->snap.nnodes : 1];
	char(*names)[RDZV_RUN_ID_MAX + RDZV_ID_MAX + 32] =
	    calloc(c->snap.nnodes ? c->snap.nnodes : 1, sizeof(*names));
	int rc;

	if (!c->snap.nnodes || !names) {
		free(names);
		status_show(c);
		return;
	}
	for (size_t i = 0; i < c->snap.nnodes; i++) {
		snprintf(names[i], sizeof(names[i]), RDZV_STATUS_KEY_FMT, c->run_id,
			 c->snap.nodes[i].id);
		keys[i] = (struct byteview){(const uint8_t *)names[i], strlen(names[i])};
	}
	rc = store_session_get(c->s, keys, c->snap.nnodes, on_records, c, 0);
	free(names); /* the request copied the keys */
	if (rc < 0) {
		log_error("cannot ask %s: %s", c->endpoint, strerror(-rc));
		status_end(c, 1);
	}
}

static void read_world(struct status_cmd *c, uint32_t round);

static void on_world(void *arg, uint64_t tag, int status, const struct store_session_value *v,
		     size_t n)
{
	struct status_cmd *c = arg;
	struct rdzv_world_data w = {0};

	if (status < 0 || n != 1) {
		log_error("cannot read the job's nodes from %s: %s", c->endpoint,
			  strerror(status < 0 ? -status : EPROTO));
		status_end(c, 1);
		return;
	}
	if (!v[0].present) {
		/* A round being formed has no world yet: its last one's. */
		if (tag > 1 && c->world_tries++ < 3) {
			read_world(c, (uint32_t)tag - 1);
			return;
		}
		read_records(c);
		return;
	}
	if (rdzv_world_decode(v[0].bytes.data, v[0].bytes.len, RDZV_NODES_MAX, &w) == 0) {
		c->snap.world_round = w.round;
		c->snap.nodes = calloc(w.size ? w.size : 1, sizeof(*c->snap.nodes));
		for (uint32_t i = 0; c->snap.nodes && i < w.size; i++) {
			snprintf(c->snap.nodes[i].id, sizeof(c->snap.nodes[i].id), "%s",
				 w.members[i].id);
			snprintf(c->snap.nodes[i].addr, sizeof(c->snap.nodes[i].addr), "%s",
				 w.members[i].addr);
			c->snap.nodes[i].nproc = w.members[i].nproc;
		}
		c->snap.nnodes = c->snap.nodes ? w.size : 0;
	}
	rdzv_world_data_release(&w);
	read_records(c);
}

static void read_world(struct status_cmd *c, uint32_t round)
{
	struct byteview k;
	int rc;

	snprintf(c->key, sizeof(c->key), "ddprdzv/%s/w/%" PRIu64 ".%" PRIu32, c->run_id,
		 c->snap.st.gen, round);
	k = (struct byteview){(const uint8_t *)c->key, strlen(c->key)};
	rc = store_session_get(c->s, &k, 1, on_world, c, round);
	if (rc < 0) {
		log_error("cannot ask %s: %s", c->endpoint, strerror(-rc));
		status_end(c, 1);
	}
}

static void on_state(void *arg, uint64_t tag, int status, const struct store_session_value *v,
		     size_t n)
{
	struct status_cmd *c = arg;

	if (status < 0 || n != 1) {
		log_error("cannot read the job's state from %s: %s", c->endpoint,
			  strerror(status < 0 ? -status : EPROTO));
		status_end(c, 1);
		return;
	}
	if (!v[0].present) {
		log_error("no job with run id '%s' at %s (check --rdzv_id and --rdzv_endpoint)",
			  c->run_id, c->endpoint);
		status_end(c, 1);
		return;
	}
	if (rdzv_state_decode(v[0].bytes.data, v[0].bytes.len, &c->snap.st) < 0) {
		log_error("the state of run id '%s' at %s is not one this ddplaunch reads",
			  c->run_id, c->endpoint);
		status_end(c, 1);
		return;
	}
	c->world_tries = 0;
	read_world(c, c->snap.st.round);
}

static void status_read(struct status_cmd *c)
{
	struct byteview k;
	int rc;

	memset(&c->snap.st, 0, sizeof(c->snap.st));
	snprintf(c->key, sizeof(c->key), "ddprdzv/%s/state", c->run_id);
	k = (struct byteview){(const uint8_t *)c->key, strlen(c->key)};
	rc = store_session_get(c->s, &k, 1, on_state, c, 0);
	if (rc < 0) {
		log_error("cannot ask %s: %s", c->endpoint, strerror(-rc));
		status_end(c, 1);
	}
}

static void on_connect(struct store_session *s, void *arg, int status, const char *msg)
{
	struct status_cmd *c = arg;

	if (status < 0) {
		c->s = NULL; /* freed by the session */
		log_error("%s", msg);
		status_end(c, 1);
		return;
	}
	status_read(c);
}

static void on_lost(struct store_session *s, void *arg, int status, const char *msg)
{
	struct status_cmd *c = arg;

	c->s = NULL;
	log_error("%s", msg);
	status_end(c, 1);
}

static void on_sigint(uv_signal_t *h, int sig)
{
	struct status_cmd *c = h->data;

	status_snap_release(&c->snap);
	status_end(c, 0);
}

static const char status_help[] =
    "usage: ddplaunch status --rdzv_endpoint=HOST[:PORT] [--rdzv_id=ID] [--watch[=S]] "
    "[--json]\n"
    "\n"
    "Shows a running multi-node job as its rendezvous store knows it: the nodes and\n"
    "their addresses, their ranks, the round and why it was opened, each node's\n"
    "step and step rate, the time lost to failures, the last re-formations and why.\n"
    "Run it from any machine that reaches the store (our store: an agent's or a\n"
    "ddp-rdzvd; not etcd). The token comes from $DDP_RDZV_TOKEN (or --rdzv_token),\n"
    "as for the agents.\n"
    "\n"
    "  --rdzv_endpoint H[:P]  the job's store (default port 29400)\n"
    "  --rdzv_id ID           the job's run id (default 'none')\n"
    "  --watch[=S]            read again every S seconds (default 2) and redraw\n"
    "  --json                 print one JSON object per read, for scripts\n"
    "  --rdzv_token T         the job's token (better: $DDP_RDZV_TOKEN)\n";

static int parse_endpoint(struct status_cmd *c, const char *ep)
{
	const char *colon = strrchr(ep, ':');
	size_t hl = colon ? (size_t)(colon - ep) : strlen(ep);
	char *end;
	long port = OPTS_C10D_PORT;

	if (colon) {
		port = strtol(colon + 1, &end, 10);
		if (end == colon + 1 || *end || port < 1 || port > 65535)
			return -EINVAL;
	}
	if (hl >= 2 && ep[0] == '[' && ep[hl - 1] == ']') {
		ep++;
		hl -= 2;
	}
	if (!hl || hl >= sizeof(c->host))
		return -EINVAL;
	memcpy(c->host, ep, hl);
	c->host[hl] = '\0';
	c->port = (int)port;
	snprintf(c->endpoint, sizeof(c->endpoint), "%s:%d", c->host, c->port);
	return 0;
}

int status_main(int argc, char **argv, char **envp)
{
	static const struct option longs[] = {
	    {"rdzv_endpoint", required_argument, NULL, 'e'},
	    {"rdzv-endpoint", required_argument, NULL, 'e'},
	    {"rdzv_id", required_argument, NULL, 'i'},
	    {"rdzv-id", required_argument, NULL, 'i'},
	    {"run_id", required_argument, NULL, 'i'},
	    {"run-id", required_argument, NULL, 'i'},
	    {"rdzv_token", required_argument, NULL, 't'},
	    {"rdzv-token", required_argument, NULL, 't'},
	    {"watch", optional_argument, NULL, 'w'},
	    {"json", no_argument, NULL, 'j'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct status_cmd c = {.run_id = "none"};
	struct store_session_opts so;
	const char *endpoint = NULL, *token = getenv(OPTS_RDZV_TOKEN_ENV);
	int opt, rc;

	(void)envp;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
		switch (opt) {
		case 'e':
			endpoint = optarg;
			break;
		case 'i':
			c.run_id = optarg;
			break;
		case 't':
			token = optarg;
			break;
		case 'w':
			c.watch = optarg ? atof(optarg) : 2.0;
			if (c.watch <= 0) {
				log_error("--watch: '%s' is not a positive number of seconds",
					  optarg);
				return 2;
			}
			break;
		case 'j':
			c.json = true;
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
	if (!endpoint || parse_endpoint(&c, endpoint)) {
		log_error("status: give the job's store as --rdzv_endpoint=HOST[:PORT]");
		return 2;
	}
	if (strlen(c.run_id) > RDZV_RUN_ID_MAX) {
		log_error("status: --rdzv_id is over %d bytes", RDZV_RUN_ID_MAX);
		return 2;
	}
	c.snap.run_id = c.run_id;
	c.snap.endpoint = c.endpoint;
	uv_loop_init(&c.loop);
	store_session_opts_default(&so);
	so.host = c.host;
	so.port = (uint16_t)c.port;
	so.token = token && *token ? token : NULL;
	so.token_len = so.token ? strlen(token) : 0;
	so.connect_timeout_ms = 5000;
	uv_timer_init(&c.loop, &c.again);
	uv_signal_init(&c.loop, &c.sigint);
	c.again.data = c.sigint.data = &c;
	uv_signal_start(&c.sigint, on_sigint, SIGINT);
	rc = store_session_connect(&c.loop, &so, on_connect, on_lost, &c, &c.s);
	if (rc < 0) {
		log_error("status: cannot reach %s: %s", c.endpoint, strerror(-rc));
		c.s = NULL;
		status_end(&c, 1);
	}
	uv_run(&c.loop, UV_RUN_DEFAULT);
	uv_loop_close(&c.loop);
	return c.exit_status;
}
