/*
 * driver.h - the multi-node rendezvous driver: runs the rendezvous state
 * machine (rdzv_machine.h) on a libuv loop over a store backend
 * (rdzv_prims.h), hosts the rendezvous store when this node is its host, and
 * gives the workers of each round a fresh store of their own (MASTER_PORT
 * changes every round, so no key of an earlier round is ever seen). It knows
 * nothing of the launcher: its caller fills a struct rdzv_driver_config and
 * hears struct rdzv_driver_events.
 *
 * Who hosts the rendezvous store: in static mode the node with node rank 0,
 * at host:port (a taken port is refused at once, naming its owner: the
 * nodes can then never disagree about where the store is); in c10d mode by
 * torchrun's rule, every agent on the endpoint's machine (rdzv_host_is_self:
 * an interface's address, any loopback address, localhost, the hostname),
 * is_host overriding it, and node 0 where the endpoint came from a Slurm
 * step (host_is_node0): each binds the endpoint, the first wins, and the
 * others find the port taken and join the store there (as they do a
 * ddp-rdzvd's, or another job's agent's); by the rule a bind that fails
 * otherwise joins as a client too. The store listens on that one address
 * only. Until the session is open, a line every time the wait has doubled
 * (from 3 s) says that the store does not answer and what to do.
 *
 * Life cycle:
 *   rdzv_driver_new -> rdzv_driver_attach (hosts, starts connecting) ->
 *   per round: rdzv_driver_join -> (the caller runs its workers) ->
 *   rdzv_driver_group_exited, or round_over heard -> rdzv_driver_join ...
 *   -> ended heard, or rdzv_driver_leave / rdzv_driver_shutdown ->
 *   the loop runs out -> rdzv_driver_free.
 * Everything runs on the loop's thread.
 */
#ifndef DDP_RENDEZVOUS_DRIVER_H
#define DDP_RENDEZVOUS_DRIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "rdzv_codec.h"

struct rdzv_prims_ops;

#define RDZV_DRIVER_HOST_MAX 255 /* the store's host name or literal, bytes */

enum rdzv_driver_mode {
	RDZV_DRIVER_STATIC = 1, /* node rank 0 hosts the store for its job alone */
	RDZV_DRIVER_C10D,	/* the endpoint's host (or a ddp-rdzvd) hosts a
				   store any number of jobs share */
	RDZV_DRIVER_ETCD,	/* an etcd v3 cluster is the store */
};

/* Everything the driver needs. Strings are copied by rdzv_driver_new; NULL
 * where not given. Times in seconds, as --rdzv_conf gives them. */
struct rdzv_driver_config {
	enum rdzv_driver_mode mode;
	const char *host;      /* the store's host (etcd: the first endpoint's) */
	int port;	       /* its port; 0 only for the hosting node */
	const char *endpoints; /* etcd: "h1:2379,https://h2:2379" */
	const char *run_id;
	const char *job, *job_text; /* the job's fingerprint and its words */
	const char *cmd;	    /* this node's command line's fingerprint */
	int min_nodes, max_nodes;
	int node_rank; /* -1: not given */
	int nproc;     /* workers on this node */
	int max_restarts;
	const char *local_addr; /* where the others reach this node, or NULL */
	const char *token;	/* the job's token, or NULL */
	int is_host;		/* c10d: -1 by the rule above; 0, 1: as given */
	bool host_is_node0;	/* c10d: the endpoint came from a Slurm step */
	/* A lost node never comes back (a Slurm step): with fewer than
	 * min_nodes left the job fails at once. */
	bool lost_nodes_final;
	double join_timeout, last_call_timeout, close_timeout;
	double keep_alive_interval;
	int keep_alive_max_attempt;
	/* etcd: TLS files, user and password (the caller reads the password
	 * from wherever it comes), each request's deadline (0: the client's) */
	const char *ca_file, *cert_file, *key_file, *user, *password;
	double read_timeout;
	/* Beyond the backend's delay in telling a death: how long a failure of
	 * this node's workers waits for a membership change before it is
	 * charged as a restart ([2000] ms: etcd's lease checks and the
	 * watcher's census on a loaded host). */
	int64_t fail_slack_ms;
	/* The store backend ([NULL]: rdzv_prims_etcd for etcd, else
	 * rdzv_prims_session). Tests give a fake one. */
	const struct rdzv_prims_ops *prims;
};

/* torchrun's defaults (join 600 s, last call 30 s, close 30 s, keep-alive
 * 5 s x 3, is_host by the rule, node rank not given, 1 node, 1 worker),
 * fail_slack_ms 2000, no strings. */
void rdzv_driver_config_defaults(struct rdzv_driver_config *c);

/* This node's place in a round; valid during the join callback. */
struct rdzv_driver_round {
	uint32_t round;		 /* the machine's round (1, 2, ...) */
	uint32_t restarts;	 /* restarts the job has used */
	uint32_t rank;		 /* this node's rank among the nodes */
	uint32_t size;		 /* nodes in the round */
	uint64_t first_proc;	 /* global rank of this node's local rank 0 */
	uint64_t world_procs;	 /* workers in the whole job */
	const char *master_addr; /* the workers' store (rank 0's) */
	uint16_t master_port;
	const char *local_addr;		   /* this node's address as the others reach it */
	const struct rdzv_member *members; /* size entries in rank order */
	enum rdzv_reason reason;	   /* why the round was opened */
	const char *subject;		   /* the node the reason is about, or "" */
};

/* Called once per join; status 0 or a negative errno. */
typedef void (*rdzv_driver_joined_fn)(void *arg, int status, const struct rdzv_driver_round *r);

enum rdzv_driver_outcome {
	RDZV_DRIVER_FINISHED = 0, /* the job (or this node's part) is done */
	RDZV_DRIVER_LEFT,	  /* this node left after rdzv_driver_leave */
	RDZV_DRIVER_FAILED,	  /* the job failed; msg says why, for the user */
	RDZV_DRIVER_REFUSED,	  /* this node is not of the job it reached (msg
				     names both; that job is left alone) */
	RDZV_DRIVER_PERMANENT,	  /* the job failed because a node left with a
				     failure that will repeat and it cannot go on
				     without it (rdzv_driver_leave_permanent); msg
				     names that node and its cause */
};

struct rdzv_driver_events {
	/* The running round is over (a node died, left or joined, workers
	 * failed elsewhere, or this node lost its session with the store and
	 * joins again as a new node): stop the workers without counting a
	 * failure, then rdzv_driver_join. */
	void (*round_over)(void *arg, const char *why);
	/* The end (once): nothing more is heard. */
	void (*ended)(void *arg, enum rdzv_driver_outcome how, const char *msg);
	/* A line another node (or this one) posted (rdzv_driver_post), heard
	 * by every node of the job; NULL: not heard. */
	void (*notice)(void *arg, const char *text);
	/* Where this node's job was, in words, for the line that says the
	 * store was lost ("... ; this node was in WHERE"): the user (and the
	 * never-silent campaign) learns the phase when the loss is seen, not
	 * only when the job ends after the join deadline. NULL: not said. */
	void (*where)(void *arg, char *buf, size_t len);
};

struct rdzv_driver;

/* Copies cfg; decides whether this node hosts the store (name resolution),
 * and refuses what can never work (a local_addr not of this machine, a
 * port 0 on a node that does not host, what the machine refuses). Returns
 * 0, -ENOENT (a name that does not resolve; err says which), -EINVAL,
 * -EADDRNOTAVAIL (err says why) or -ENOMEM. */
int rdzv_driver_new(const struct rdzv_driver_config *cfg, struct rdzv_driver **out, char *err,
		    size_t errlen);

/* Runs on `loop` from now on: hosts the rendezvous store when this node is
 * its host, then starts connecting. Returns 0, -EADDRINUSE (static: the
 * port is taken; the owner was named in the log), or another negative
 * errno (reported). */
int rdzv_driver_attach(struct rdzv_driver *d, uv_loop_t *loop, const struct rdzv_driver_events *ev,
		       void *arg);

/* Joins the next round; `done` runs exactly once, when the round is formed
 * (possibly before this returns). Returns 0, or -ECANCELED (the
 * rendezvous has ended or was never attached; `done` does not run). */
int rdzv_driver_join(struct rdzv_driver *d, rdzv_driver_joined_fn done, void *arg);

/* The workers of the current round ended on their own (not stopped
 * because of round_over): success, or a failure that asks the job for a
 * restart (charged unless a membership change caused it). */
void rdzv_driver_group_exited(struct rdzv_driver *d, bool success);

/* One of this node's workers is replaced alone (rdzv_workers_renew): a new round
 * of the same nodes, not charged; round_over follows, on every node. */
void rdzv_driver_renew(struct rdzv_driver *d);
/* A replacement of this node that started outside the rounds is ready
 * (rdzv_workers_grow): a new round of the same nodes that counts it
 * (rdzv_driver_set_nproc first), dropped if a node has finished. */
void rdzv_driver_grow(struct rdzv_driver *d);

/* How many of this node's workers the next round counts (rdzv_set_local_procs):
 * fewer than cfg.nproc while a replaced worker's new process is not ready
 * to re-form, which then joins a later round (issue 24). Call it before
 * the round is joined (while round_over is heard, or before
 * rdzv_driver_join); a machine made afresh (this node rejoining as a new
 * node) counts it too. Returns 0, or -EINVAL (not 1..cfg.nproc). */
int rdzv_driver_set_nproc(struct rdzv_driver *d, int nproc);

/* The key of a node's status record (ddplaunch status): under the run id,
 * "st/" and the node's id; bound to the node's session (etcd: its lease), so
 * a node that dies takes its record with it. */
#define RDZV_STATUS_KEY_FMT "ddprdzv/%s/st/%s"
#define RDZV_STATUS_MAX	    4096 /* bytes of one record */

/* Writes this node's status record (at most RDZV_STATUS_MAX bytes; the
 * caller's format), replacing the last one. Returns 0 (written, or queued
 * to be), -ENOTCONN (no session now: write it again later), -EMSGSIZE or
 * -ENOMEM. Nobody hears whether the write succeeded: the record is a report,
 * written again at the next refresh. */
int rdzv_driver_publish(struct rdzv_driver *d, const void *rec, size_t len);

/* The rendezvous store this node hosts (for its metrics), or NULL. */
struct store_server *rdzv_driver_hosted_store(const struct rdzv_driver *d);

/* The longest notice, bytes. */
#define RDZV_NOTICE_MAX 1024

/* Posts `text` (one line, at most RDZV_NOTICE_MAX bytes) on the job's
 * notice board, a key of the job's prefix that every node watches: each
 * node's `notice` hears it (this one's too), once per post. Returns 0,
 * -ENOTCONN (no session now) or -EINVAL (too long). */
int rdzv_driver_post(struct rdzv_driver *d, const char *text);

/* A node's own word under the job's prefix, "ddprdzv/RUN/n/NAME" (NAME a
 * token of at most 64 bytes; the value at most RDZV_NOTICE_MAX): set by
 * rdzv_driver_put, read by rdzv_driver_get, whose `got` runs once, from
 * the loop, with the value (NULL: absent, or the store did not answer).
 * One get at a time: a second while one waits returns -EBUSY. Returns 0,
 * -ENOTCONN, -EINVAL or -EBUSY. */
typedef void (*rdzv_driver_got_fn)(void *arg, const char *value);
int rdzv_driver_put(struct rdzv_driver *d, const char *name, const char *value);
int rdzv_driver_get(struct rdzv_driver *d, const char *name, rdzv_driver_got_fn got, void *arg);

/* The member of node rank `rank` in this node's round is hung (its agent
 * silent past the deadline): the round re-forms without it
 * (rdzv_member_hung); round_over follows on every node. */
void rdzv_driver_evict(struct rdzv_driver *d, uint32_t rank);

/* Leave the job; `ended` (LEFT) follows within close_timeout. */
void rdzv_driver_leave(struct rdzv_driver *d);
/* The same for a node whose failure will repeat in every round; `cause`
 * (copied) says what, for the others' messages. When the job cannot go on
 * without this node (rdzv_stop_permanent: fewer than --nnodes' MIN left),
 * every other node hears `ended` (PERMANENT) at once. */
void rdzv_driver_leave_permanent(struct rdzv_driver *d, const char *cause);

/* The caller is done (its exit status given): the rendezvous ends (leaving
 * first if still a member, within close_timeout) and no event is heard any
 * more. A node that hosts the rendezvous store keeps it while other agents
 * are connected: shortly after, if some still are, the process forks, the
 * parent exits at once with exit_status and the child serves them until
 * the last one has gone. Keep the loop running. */
void rdzv_driver_shutdown(struct rdzv_driver *d, int exit_status);

/* Ends this node as a killed process would: the session and every store it
 * hosts close at once, without leaving (the others see a death when the
 * store drops the session's keys); no event is heard any more. For tests
 * and benchmarks that run many nodes in one process. Keep the loop
 * running. */
void rdzv_driver_kill(struct rdzv_driver *d);

/* After the loop has closed the driver's handles. NULL allowed. */
void rdzv_driver_free(struct rdzv_driver *d);

#endif
