/*
 * driver_keeper.c - the stores a multi-node agent hosts (driver_int.h):
 * the rendezvous store when this node is its host, kept at the end for the
 * agents still connected to it, and each round's workers' store.
 */
#include <errno.h>
#include <fcntl.h>
#include <log.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <unistd.h>

#include "driver_int.h"
#include "rdzv_host.h"
#include "store_access.h"
#include "store_server.h"

/* The end: how often the hosted store's clients are counted, and how long
 * they may stay before this process hands the store to a child of its own
 * (the agents of this job close their sessions within milliseconds of
 * FINISHED; whoever stays longer is running: another job's agents, or this
 * job's nodes whose workers have not finished). */
#define KEEPER_TICK_MS	     20
#define KEEPER_HANDOFF_MS    300
#define KEEPER_CHILD_TICK_MS 100
/* However long clients stay, the kept store ends this long after the job
 * (torchrun's default join_timeout): a client without the token never
 * counts, but without a token no client can be told from the job's. */
#define KEEPER_DEADLINE_MS 600000

/* Descriptors the stores leave to this node's own work (store_access.h):
 * per local worker its output pipes, log files, agent channel and pidfd,
 * with room for a spawn in progress; for the rendezvous store also the
 * connections of every worker of the job to the workers' store, which this
 * node hosts when it is rank 0 (but at most half of the limit: the store
 * must still serve). A flood of local clients then cannot make the next
 * round's workers unstartable. */
#define KEEPER_FD_BASE	     64
#define KEEPER_FD_PER_WORKER 16
#define KEEPER_FD_PER_PEER   4

static unsigned keeper_fd_reserve(const struct rdzv_driver *d, bool rendezvous)
{
	uint64_t n = KEEPER_FD_BASE + (uint64_t)KEEPER_FD_PER_WORKER * (unsigned)d->c.nproc;
	struct rlimit rl;

	if (!rendezvous)
		return (unsigned)n;
	n += (uint64_t)KEEPER_FD_PER_PEER * (unsigned)d->c.nproc * (unsigned)d->c.max_nodes;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    n > rl.rlim_cur / 2)
		n = rl.rlim_cur / 2;
	return n > UINT32_MAX ? UINT32_MAX : (unsigned)n;
}

static void keeper_store_close(struct store_server **s)
{
	if (*s)
		store_server_close(*s, NULL, NULL);
	*s = NULL;
}

static void keeper_refuse_taken(struct rdzv_driver *d)
{
	char owner[160];

	rdzv_port_owner(d->c.port, owner, sizeof(owner));
	log_error("port %d on %s is in use by %s; node 0 hosts the job's rendezvous store "
		  "there, so the other nodes would meet a stranger: stop that process or give "
		  "every node another --master_port",
		  d->c.port, d->bind_lit, owner);
}

/* The store could not listen: c10d joins whoever holds the port (another
 * agent of this machine, a ddp-rdzvd); an agent that hosts only by the rule
 * joins as a client whatever the error (torchrun does the same), one told
 * is_host=true fails. Returns 0 (joining) or rc, reported. */
static int keeper_listen_failed(struct rdzv_driver *d, int rc)
{
	char owner[160];

	if (rc == UV_EADDRINUSE && d->c.mode == RDZV_DRIVER_C10D) {
		rdzv_port_owner(d->c.port, owner, sizeof(owner));
		log_info("the rendezvous port %s:%d is taken (by %s); joining the store there",
			 d->bind_lit, d->c.port, owner);
		return 0;
	}
	if (d->host_by_rule && d->c.port != 0) {
		log_warn("cannot listen on %s:%d for the rendezvous store: %s; joining it as a "
			 "client (is_host=true in --rdzv_conf makes this an error)",
			 d->bind_lit, d->c.port, uv_strerror(rc));
		return 0;
	}
	if (rc == UV_EADDRINUSE)
		keeper_refuse_taken(d);
	else
		log_error("cannot listen on %s:%d for the rendezvous store: %s (check %s)",
			  d->bind_lit, d->c.port, uv_strerror(rc),
			  d->c.mode == RDZV_DRIVER_STATIC ? "--master_addr and --master_port"
							  : "--rdzv_endpoint and --local_addr");
	return rc;
}

/* A name (not "localhost") that is a loopback address here, as Debian's
 * /etc/hosts makes the hostname: agents of other machines cannot reach it. */
static void keeper_warn_loopback(const struct rdzv_driver *d)
{
	if (rdzv_host_is_literal(d->c.host) || !strcasecmp(d->c.host, "localhost") ||
	    !rdzv_host_is_loopback(d->bind_lit))
		return;
	log_warn("the rendezvous host '%s' is %s on this machine, a loopback address: agents of "
		 "other machines cannot reach the store there (give --rdzv_endpoint this "
		 "machine's network address)",
		 d->c.host, d->bind_lit);
}

/* An agent's stores: the defaults, and a bound per address (store_access.h). */
static int keeper_store_new(struct rdzv_driver *d, bool rendezvous, struct store_server **out)
{
	struct store_limits l;
	int rc;

	store_limits_default(&l);
	l.max_conns_per_addr = STORE_CONNS_PER_ADDR;
	rc = store_server_new(d->loop, &l, out);
	if (rc == 0)
		store_server_set_fd_reserve(*out, keeper_fd_reserve(d, rendezvous));
	return rc;
}

int keeper_host(struct rdzv_driver *d)
{
	int rc = keeper_store_new(d, true, &d->rstore);

	if (rc < 0)
		return rc;
	if (d->token && (rc = store_server_set_token(d->rstore, d->token, strlen(d->token))) < 0) {
		log_error("cannot give the rendezvous store the job's token: %s", strerror(-rc));
		keeper_store_close(&d->rstore);
		return rc;
	}
	rc = store_server_listen(d->rstore, d->bind_lit, d->c.port);
	if (rc < 0) {
		keeper_store_close(&d->rstore);
		return keeper_listen_failed(d, rc);
	}
	d->c.port = store_server_port(d->rstore);
	/* Its clients can tell it from a standalone ddp-rdzvd. */
	if ((rc = store_server_put(d->rstore, DRV_HOSTED_KEY, DRV_HOSTED_VALUE)) < 0)
		log_debug("cannot mark the rendezvous store as an agent's: %s", strerror(-rc));
	log_info("hosting the rendezvous store at %s%s%s:%d for run id '%s'%s",
		 strchr(d->bind_lit, ':') ? "[" : "", d->bind_lit,
		 strchr(d->bind_lit, ':') ? "]" : "", d->c.port, d->run_id,
		 d->token ? " (agents prove the job's token)"
			  : "; no token, so any process that reaches this address may use it (set "
			    "DDP_RDZV_TOKEN on every node to keep strangers out)");
	keeper_warn_loopback(d);
	return 0;
}

int keeper_new_wstore(struct rdzv_driver *d)
{
	struct store_server *s;
	int rc = keeper_store_new(d, false, &s);

	if (rc < 0)
		return rc;
	/* With a token, only the round's nodes (and loopback) may connect. */
	if (d->token)
		store_server_restrict(s);
	rc = store_server_listen(s, d->addr, 0);
	if (rc < 0) {
		store_server_close(s, NULL, NULL);
		return rc;
	}
	/* Two stores live at a time: the running round's, and the next's. */
	keeper_store_close(&d->wold);
	d->wold = d->wstore;
	d->wstore = s;
	return store_server_port(s);
}

void keeper_round(struct rdzv_driver *d, const struct rdzv_world *w)
{
	/* The store of the round before has no client left that matters: the
	 * agent asks for a round only once its workers have gone. */
	if (!d->wstore || !d->token)
		return;
	for (uint32_t i = 0; i < w->size; i++)
		if (store_server_allow(d->wstore, w->members[i].addr) < 0)
			log_debug("the workers' store cannot allow '%s' (not an address literal)",
				  w->members[i].addr);
}

static void keeper_handles_close(struct rdzv_driver *d)
{
	if (!d->handles)
		return;
	d->handles = false;
	uv_close((uv_handle_t *)&d->timer, NULL);
	uv_close((uv_handle_t *)&d->linger, NULL);
	uv_close((uv_handle_t *)&d->prepare, NULL);
}

/* This process stays to serve the store's last clients; its parent exits
 * with the agent's status. The child has no terminal and no pipe of the
 * agent's (whoever waits for the agent's output is not kept waiting). */
static void keeper_hand_off(struct rdzv_driver *d)
{
	pid_t pid;
	int fd;

	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		log_warn("cannot fork to keep the rendezvous store for its %zu clients: %s; "
			 "staying until they leave",
			 store_server_connection_count(d->rstore), strerror(errno));
		d->kept = true;
		return;
	}
	if (pid > 0) {
		log_info("the rendezvous store at %s:%d stays up in process %d for %zu clients "
			 "of the job still connected; it ends when the last one leaves, or "
			 "%d s after the job",
			 d->bind_lit, d->c.port, (int)pid, store_server_member_count(d->rstore),
			 KEEPER_DEADLINE_MS / 1000);
		fflush(NULL);
		_exit(d->exit_status);
	}
	d->kept = true;
	setsid();
	fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (fd >= 0) {
		dup2(fd, STDIN_FILENO);
		dup2(fd, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
		close(fd);
	}
	if (uv_loop_fork(d->loop) < 0)
		_exit(1);
}

static void keeper_tick(uv_timer_t *t)
{
	struct rdzv_driver *d = t->data;

	uint64_t held = uv_hrtime() / 1000000u - d->linger_since;

	/* Only the job's clients count: agents that passed the token
	 * handshake and the workers served by address, not strangers. */
	if (store_server_member_count(d->rstore) == 0 || held >= KEEPER_DEADLINE_MS) {
		if (held >= KEEPER_DEADLINE_MS)
			log_info("the kept rendezvous store ends %d s after the job with %zu "
				 "clients still connected",
				 KEEPER_DEADLINE_MS / 1000, store_server_member_count(d->rstore));
		keeper_store_close(&d->rstore);
		keeper_handles_close(d);
		return;
	}
	if (!d->kept && held >= KEEPER_HANDOFF_MS) {
		keeper_hand_off(d);
		uv_timer_stop(&d->linger);
		uv_timer_start(&d->linger, keeper_tick, KEEPER_CHILD_TICK_MS, KEEPER_CHILD_TICK_MS);
	}
}

void keeper_close_all(struct rdzv_driver *d, bool at_once)
{
	d->ops->close(d->be);
	d->be = NULL;
	if (d->handles)
		uv_timer_stop(&d->timer);
	keeper_store_close(&d->wstore);
	keeper_store_close(&d->wold);
	if (at_once)
		keeper_store_close(&d->rstore);
	if (!d->rstore) {
		keeper_handles_close(d);
		return;
	}
	/* Our own session's connection may still be counted: it closes on the
	 * next turns of the loop, so the first look comes a tick later. */
	d->linger_since = uv_hrtime() / 1000000u;
	uv_timer_start(&d->linger, keeper_tick, KEEPER_TICK_MS, KEEPER_TICK_MS);
}
