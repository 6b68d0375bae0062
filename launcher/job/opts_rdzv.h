/*
 * opts_rdzv.h - how this node meets the others: the rendezvous options
 * (--nnodes, --node_rank, --master_addr/--master_port, --rdzv_backend,
 * --rdzv_endpoint, --rdzv_id, --rdzv_conf, --local_addr, --rdzv_token /
 * DDP_RDZV_TOKEN) resolved into one description that the agent runs and
 * --dry_run prints, so that both refuse the same jobs with the same words.
 *
 * Pure module: no I/O (the token comes in as an argument, names are not
 * resolved here).
 *
 * Modes:
 *  - local:  one node (--nnodes=1, or --standalone): the agent's own store,
 *            no rendezvous;
 *  - static: --nnodes=N (N > 1) with the static backend (the default):
 *            node --node_rank=0 hosts the store at --master_addr:
 *            --master_port (default 29500; --rdzv_endpoint overrides both);
 *            the others connect to it;
 *  - c10d:   --rdzv_backend=c10d --rdzv_endpoint=HOST[:PORT] (default port
 *            29400) with --nnodes=N or MIN:MAX: the agent whose address is
 *            HOST hosts the store (or a ddp-rdzvd there does).
 *  - etcd:   --rdzv_backend=etcd (or torchrun's other name, etcd-v2)
 *            --rdzv_endpoint=HOST[:PORT][,HOST[:PORT]...] (default port 2379;
 *            an entry may start with http:// or https://) with --nnodes=N or
 *            MIN:MAX: the nodes meet on an etcd v3 cluster; no agent hosts a
 *            rendezvous store. TLS and authentication through --rdzv_conf
 *            (protocol, cacert, cert, key, user, password; see below).
 */
#ifndef DDP_LAUNCHER_OPTS_RDZV_H
#define DDP_LAUNCHER_OPTS_RDZV_H

#include <stdbool.h>
#include <stddef.h>

#include "identity.h"
#include "opts.h"

#define OPTS_RDZV_HOST_MAX	255
#define OPTS_STATIC_PORT	29500 /* torchrun's --master_port default */
#define OPTS_C10D_PORT		29400 /* torchrun's --rdzv_endpoint port default */
#define OPTS_ETCD_PORT		2379  /* etcd's client port */
#define OPTS_RDZV_ENDPOINTS_MAX 1023
#define OPTS_RDZV_CONF_STR_MAX	256 /* an etcd --rdzv_conf string, with its NUL */
#define OPTS_RDZV_TOKEN_ENV	"DDP_RDZV_TOKEN"
#define OPTS_RDZV_TOKEN_MIN	16 /* bytes: rendezvous/proto/proto_auth.h says why */
#define OPTS_RDZV_TOKEN_MAX	4096
#define OPTS_RDZV_NODES_MAX	65536	       /* the rendezvous' RDZV_NODES_MAX */
#define OPTS_RDZV_SECONDS_MAX	(30 * 86400.0) /* any --rdzv_conf time, in seconds */

/* --rdzv_conf, in seconds (torchrun's names and defaults). */
struct opts_rdzv_conf {
	double join_timeout;	    /* 600: until this node is in a round */
	double last_call_timeout;   /* 30: window after MIN nodes are in */
	double close_timeout;	    /* 30: to close a round / to leave */
	double keep_alive_interval; /* 5: heartbeat period */
	int keep_alive_max_attempt; /* 3: missed heartbeats that mean dead */
	int is_host;		    /* -1: by address; 0, 1: as given (is_host=) */
	/* etcd only ("" when not given): torchrun's keys of its etcd backend
	 * (its etcd-v2 backend's names are aliases: ca_cert, ssl_cert,
	 * ssl_cert_key), and etcd's own authentication */
	char protocol[8];		       /* http or https */
	char cacert[OPTS_RDZV_CONF_STR_MAX];   /* CA bundle to verify etcd against */
	char cert[OPTS_RDZV_CONF_STR_MAX];     /* client certificate (PEM) */
	char key[OPTS_RDZV_CONF_STR_MAX];      /* its key */
	char user[OPTS_RDZV_CONF_STR_MAX];     /* etcd user; the password from */
	char password[OPTS_RDZV_CONF_STR_MAX]; /* here or OPTS_ETCD_PASSWORD_ENV */
	double read_timeout; /* etcd: each request's deadline over all endpoints, s
				(0: 5 s); other backends: accepted, unused */
};

/* etcd's password when --rdzv_conf has user= but no password= (read by the
 * agent; a password on the command line is visible to every local user). */
#define OPTS_ETCD_PASSWORD_ENV "DDP_ETCD_PASSWORD"

enum opts_rdzv_mode {
	OPTS_RDZV_LOCAL = 0,
	OPTS_RDZV_STATIC,
	OPTS_RDZV_C10D,
	OPTS_RDZV_ETCD,
};

struct opts_rdzv {
	enum opts_rdzv_mode mode;
	char host[OPTS_RDZV_HOST_MAX + 1]; /* the store's host (not for local;
					      etcd: the first endpoint's) */
	int port;			   /* its port; 0 only for the hosting node */
	/* etcd: the endpoints, each with its port ("h1:2379,https://h2:2379") */
	char endpoints[OPTS_RDZV_ENDPOINTS_MAX + 1];
	int min_nodes, max_nodes;
	int node_rank; /* -1: not given (c10d); static: 0 when not given */
	const char *run_id;
	const char *local_addr; /* --local_addr or NULL */
	struct opts_rdzv_conf conf;
	const char *token;	/* --rdzv_token, else DDP_RDZV_TOKEN, or NULL */
	const char *token_from; /* "--rdzv_token" or "DDP_RDZV_TOKEN" (for messages) */
	/* etcd: DDP_RDZV_TOKEN was set (sites export it everywhere) and is
	 * ignored, token left NULL; the caller says so in one warning line
	 * (OPTS_RDZV_TOKEN_IGNORED). An explicit --rdzv_token (or the job
	 * file's rdzv_token) with etcd is refused instead. */
	bool token_env_ignored;
	/* The shape came from a Slurm step (opts_slurm.h), whose lost tasks never
	 * come back: a node gone with fewer than min_nodes left ends the job at
	 * once instead of waiting for it until the join deadline. */
	bool lost_nodes_final;
	/* c10d's endpoint came from the Slurm step (its first node, node rank
	 * 0): without is_host, node 0 hosts. On a cluster that is the only node
	 * on the endpoint's machine anyway; where several Slurm nodes share one
	 * host (a test cluster) it keeps the others from hosting. */
	bool host_is_node0;
	/* The job's identity (identity.h; not for local): every node of one
	 * job must have the same fingerprint, or the rendezvous refuses it;
	 * their command lines' fingerprints (cmd) may differ, which the
	 * rendezvous says in one line. */
	char job[IDENTITY_JOB_LEN + 1];
	char cmd[IDENTITY_JOB_LEN + 1];
	char job_text[IDENTITY_TEXT_MAX + 1];
};

/* torchrun's defaults (join 600 s, last call 30 s, close 30 s, keep-alive
 * 5 s x 3, is_host by address). */
void opts_rdzv_conf_defaults(struct opts_rdzv_conf *c);

/* Parses "k=v,k=v" (spaces around items allowed; "" is the defaults) into
 * *c, which holds the defaults or earlier values. Keys: join_timeout,
 * last_call_timeout, close_timeout, keep_alive_interval (seconds, 0.001 to
 * OPTS_RDZV_SECONDS_MAX: the rendezvous counts in milliseconds;
 * last_call_timeout may be 0), keep_alive_max_attempt (1..1000), is_host
 * (a boolean), and torchrun's timeout (join_timeout's older name),
 * read_timeout (seconds, > 0; etcd only) and use_libuv (accepted,
 * meaningless here); for etcd: protocol (http or https), cacert, cert,
 * key, user, password (strings of fewer than OPTS_RDZV_CONF_STR_MAX bytes,
 * no ','). Returns 0, or
 * -EINVAL with err naming the item and the fix ("did you mean" for a near
 * key); *c is then partly updated. */
int opts_rdzv_conf_parse(const char *text, struct opts_rdzv_conf *c, char *err, size_t errlen);

/* Parses "HOST", "HOST:PORT", "[V6]" or "[V6]:PORT" (PORT 0..65535, digits
 * only; default_port when absent); a bare IPv6 address is the whole text.
 * HOST must parse as a host name or address and not be multicast or
 * broadcast (opts_host.h). Returns 0 or -EINVAL (err filled). */
int opts_endpoint_parse(const char *text, int default_port, char *host, size_t hostlen, int *port,
			char *err, size_t errlen);

/* The job's token's length (OPTS_RDZV_TOKEN_MIN..MAX): 0, or -EINVAL with
 * err naming `from` (--rdzv_token, DDP_RDZV_TOKEN) and the fix. The agents
 * (opts_rdzv_resolve) and `ddplaunch status` say the same. */
int opts_rdzv_token_check(const char *token, const char *from, char *err, size_t errlen);

/* Resolves o's rendezvous options; `env_token` is DDP_RDZV_TOKEN from the
 * launcher's environment (NULL when unset). Strings in *r point into o or
 * env_token. Returns 0, or -EINVAL/-ENOTSUP with err naming the option and
 * the fix (e.g. an unknown backend, MIN:MAX with the static backend, c10d
 * or etcd without an endpoint, etcd keys in --rdzv_conf of another backend,
 * more than OPTS_RDZV_NODES_MAX nodes, a URL or a list as c10d's or the
 * static store's endpoint, a --local_addr that no node can reach such as
 * 0.0.0.0, a keep-alive window over OPTS_RDZV_SECONDS_MAX, port 0 on a
 * static node other than node 0). What needs this machine (is --local_addr
 * one of its addresses, does the store's host resolve) is checked by
 * rdzv_new (launcher/rdzv/rdzv.h), which --dry_run runs too. */
int opts_rdzv_resolve(const struct launch_opts *o, const char *env_token, struct opts_rdzv *r,
		      char *err, size_t errlen);

/* Where a running job's rendezvous store is, for a program that reads it
 * without being one of its nodes (ddplaunch status): the backend (NULL:
 * c10d; static, c10d, etcd or etcd-v2), the endpoint (required; the same
 * forms and default ports as opts_rdzv_resolve's: etcd's list of
 * [http[s]://]HOST[:PORT]) and --rdzv_conf's text (NULL: none; its etcd keys
 * and read_timeout are what a reader uses, the others are checked and
 * unused). Fills r's mode, host/port (etcd: endpoints too) and conf; the
 * rest is zero (node_rank -1). Returns 0 or -EINVAL with err naming the
 * option and the fix, in opts_rdzv_resolve's words. */
int opts_rdzv_resolve_reader(const char *backend, const char *endpoint, const char *conf,
			     struct opts_rdzv *r, char *err, size_t errlen);

/* The warning for token_env_ignored. */
#define OPTS_RDZV_TOKEN_IGNORED                                                                    \
	OPTS_RDZV_TOKEN_ENV " is set, but --rdzv_backend=etcd does not use the job's token "       \
			    "(etcd's user= and " OPTS_ETCD_PASSWORD_ENV                            \
			    " guard it): it is ignored"

/* "local", "static", "c10d" or "etcd". */
const char *opts_rdzv_mode_name(enum opts_rdzv_mode mode);

/* Prints the resolved rendezvous for --dry_run ("rdzv = ..." lines; the
 * token and etcd's password are never shown, only where they came from). */
void opts_rdzv_print(const struct opts_rdzv *r, FILE *out);

/* When no source gave --rdzv_id (not the flags, the job file, PET_RDZV_ID
 * or a Slurm step: it is still the default "none") and the job runs across
 * nodes, sets it, as a default, to "job-" and the command line's
 * fingerprint (so different command lines never meet). Call it after
 * every source was applied. Options the rendezvous refuses
 * are left for it to report. Returns 0 or -ENOMEM. */
int opts_rdzv_default_run_id(struct launch_opts *o);

#endif
