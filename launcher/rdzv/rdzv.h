/*
 * rdzv.h - the agent's seam for the rendezvous: one ops table, two backends.
 * It tells this node its place in each round (group rank, world size, first
 * global rank, where the workers' store is), hears how the node's group of
 * workers ended, and answers with the next round or with the end.
 *
 * The agent's one path, whatever the backend:
 *   rdzv_new -> rdzv_attach -> per round: rdzv_join -> spawn with the round
 *   -> the group ends -> rdzv_group_ended -> true: rdzv_join again; false:
 *   `ended` was or will be heard -> the agent finishes, computes its exit
 *   status with rdzv_exit_status, and calls rdzv_shutdown.
 * A stop signal: the agent calls rdzv_signal, stops its workers, and reports
 * the group's end as above (with stop_signal set).
 *
 * One node (rdzv_one.c): owns the workers' store (bound by rdzv_attach at
 * --master_addr:--master_port, reset before every round after the first)
 * and the restart policy (policy.h): a failed group is answered with the
 * next round after the backoff while restarts remain, else with the end.
 * Every round has this node alone. Its round_over event comes only after
 * rdzv_renew.
 *
 * Many nodes (rdzv_many.c, --nnodes > 1 or c10d with an endpoint): the
 * multi-node driver (driver.h, through rdzv_nodes.c) runs the rendezvous
 * state machine on the agent's loop; the job's restart budget is the machine's, counted for all
 * nodes; the driver gives each round a fresh workers' store. Besides
 * `ended`, the agent hears:
 *   round_over  the running round is over (a node died, left or joined,
 *               workers failed elsewhere, a worker is replaced alone
 *               somewhere (rdzv_renew), or this node lost its session with
 *               the store and joins again as a new node): stop the local
 *               workers (SIGTERM, grace) without counting a failure, then
 *               report the group's end with round_over set; or, when the
 *               workers re-form in place (agent_inplace.c), join the next round
 *               while they run and hand it to them
 * A stop signal makes this node leave the job (the others re-form at once);
 * rdzv_shutdown closes the session (and a hosted store, once its clients
 * have gone: see rdzv_shutdown).
 */
#ifndef DDP_LAUNCHER_RDZV_H
#define DDP_LAUNCHER_RDZV_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

struct launch_opts;
struct opts_rdzv;
struct store_server;

/* The longest line rdzv_post takes, bytes. */
#define RDZV_POST_MAX 1024

struct rdzv_round {
	int round;	      /* one node: the round (0, 1, ...); many nodes: the
				 machine's round (1, 2, ...) */
	int restart_count;    /* TORCHELASTIC_RESTART_COUNT: restarts used (the
				 job's, across nodes, for many nodes) */
	int group_rank;	      /* this node's rank among the nodes */
	int group_world_size; /* nodes in the round */
	int rank_base;	      /* global rank of the first local worker in the round */
	int local_procs;      /* this node's workers the round counts (rdzv_set_nproc;
				 nproc unless it was set lower) */
	int world_size;	      /* workers in the whole job */
	const char *master_addr;
	int master_port;
	const char *local_addr; /* many nodes: this node's address as the
				   others reach it (DDP_LOCAL_ADDR), else NULL */
	/* Why the round was opened, one of rdzv_reasons (static): "start",
	 * "join", "dead", "left", "restart", "reform", "replace". */
	const char *reason;
	const char *subject; /* many nodes: the node it is about, or ""; NULL
				for one node */
};

#define RDZV_REASONS 7
extern const char *const rdzv_reasons[RDZV_REASONS];

/* Called once per join; status 0 or a negative errno. `r` is valid during
 * the call. */
typedef void (*rdzv_joined_fn)(void *arg, int status, const struct rdzv_round *r);

/* How the job ended for this node; rdzv_exit_status turns it into
 * ddplaunch's exit status. */
enum rdzv_outcome {
	RDZV_OUT_FINISHED = 0, /* the job (or this node's part) is done */
	RDZV_OUT_LEFT,	       /* this node left (many nodes, after rdzv_signal or a
				  failure that will repeat) */
	RDZV_OUT_FAILED,       /* the job failed */
	RDZV_OUT_REFUSED,      /* this node is not of the job it reached (msg names
				  both; that job is left alone) */
	RDZV_OUT_PERMANENT,    /* one node: the failure will repeat, no restart;
				  many nodes: a node left with such a failure and
				  the job cannot go on without it (msg says who) */
	RDZV_OUT_STOPPED,      /* stopped by a signal (one node; or the agent, at a
				  second signal while it waits to leave) */
};

struct rdzv_events {
	/* Many nodes only (see above). */
	void (*round_over)(void *arg, const char *why);
	/* Once. `msg`: what the agent tells the user (an error for FAILED and
	 * REFUSED), or NULL when the backend has said it already. */
	void (*ended)(void *arg, enum rdzv_outcome how, const char *msg);
	/* Many nodes: a line some node posted (rdzv_post), this one's too;
	 * NULL: not heard. */
	void (*notice)(void *arg, const char *text);
	/* Many nodes: where this node's workers are, in words, for the line
	 * that says the store was lost; NULL: not said. */
	void (*where)(void *arg, char *buf, size_t len);
};

/* How this node's group of workers ended (all its handles closed). */
struct rdzv_group_end {
	int attempt;	   /* the agent's attempt that ended (0, 1, ...) */
	bool failed;	   /* a worker failed (not one that ddplaunch stopped) */
	bool permanent;	   /* ... and that failure will repeat (policy.h) */
	const char *cause; /* permanent: what failed, in words (many nodes tell
			      the others), or NULL */
	bool round_over;   /* stopped because round_over was heard */
	int stop_signal;   /* ddplaunch was told to stop by this signal, or 0 */
	/* Prints the attempt's summary of failures; at most once per attempt. */
	void (*show_summary)(void *arg);
	void *arg;
};

struct rdzv;

/* The backend's operations; rdzv_* below call them. */
struct rdzv_ops {
	int (*attach)(struct rdzv *r, uv_loop_t *loop, const struct rdzv_events *ev, void *arg);
	int (*join)(struct rdzv *r, rdzv_joined_fn done, void *arg);
	bool (*group_ended)(struct rdzv *r, const struct rdzv_group_end *g);
	int (*renew)(struct rdzv *r);				     /* NULL: not supported */
	int (*set_nproc)(struct rdzv *r, int nproc);		     /* NULL: one node */
	int (*grow)(struct rdzv *r);				     /* NULL: one node */
	int (*node_of)(struct rdzv *r, int rank);		     /* NULL: one node */
	int (*publish)(struct rdzv *r, const void *rec, size_t len); /* NULL: one node */
	struct store_server *(*hosted_store)(struct rdzv *r);	     /* NULL: one node */
	int (*post)(struct rdzv *r, const char *text); /* NULL: one node, no one to tell */
	int (*put)(struct rdzv *r, const char *name, const char *value); /* NULL: one node */
	int (*get)(struct rdzv *r, const char *name, void (*got)(void *arg, const char *value),
		   void *arg);			 /* NULL: one node */
	void (*evict)(struct rdzv *r, int node); /* NULL: one node */
	void (*signal)(struct rdzv *r, int sig);
	void (*shutdown)(struct rdzv *r, int exit_status);
	void (*free)(struct rdzv *r);
};

/* The head of each backend's state. */
struct rdzv {
	const struct rdzv_ops *ops;
};

/* Picks the backend for the options (opts_rdzv.h): one node, or many nodes
 * (static or c10d), after checking what a run would refuse (the options,
 * the store's host name); DDP_RDZV_TOKEN is read from environ_in. `o` must
 * outlive r. Returns 0, or -EINVAL/-ENOTSUP/-ENOENT with err filled, or
 * -ENOMEM. Nothing is bound or connected yet. */
int rdzv_new(const struct launch_opts *o, char **environ_in, int nproc, struct rdzv **out,
	     char *err, size_t errlen);

/* What a dry run refuses that a run would (exit 2), without joining:
 * rdzv_new's checks, and for one node with --strict_port, that the port it
 * may not move from is free now (a run binds it at rdzv_attach). Returns 0,
 * rdzv_new's errors, or -EADDRINUSE with err filled. */
int rdzv_check(const struct launch_opts *o, char **environ_in, int nproc, char *err, size_t errlen);

/* Runs on `loop` from now on. One node: binds the workers' store (a taken
 * port is said, and another one used unless --strict_port). Many nodes:
 * hosts the rendezvous store when this node is its host, then starts
 * connecting. Returns 0, or -EADDRINUSE when the asked port is taken and
 * may not move (--strict_port; static mode's node 0: the owner was named in
 * the log), or another negative errno (reported). */
int rdzv_attach(struct rdzv *r, uv_loop_t *loop, const struct rdzv_events *ev, void *arg);

/* Joins the next round; `done` runs exactly once (possibly before this
 * returns; one node: after the backoff that the last group's end asked
 * for). Returns 0 or a negative errno (then `done` does not run;
 * -ECANCELED: the rendezvous has ended, `ended` was or will be heard). */
int rdzv_join(struct rdzv *r, rdzv_joined_fn done, void *arg);

/* The group of the round ended (g is read during the call). Returns true
 * when the agent should join the next round (unless `ended` was heard
 * during this call), false when `ended` was or will be heard instead. One
 * node: the restart policy decides, says so (the summary first) and
 * answers. Many nodes: a failure or success is the job's to judge (unless
 * the round was over or ddplaunch is stopping); a failure that will repeat
 * makes this node leave the job. */
bool rdzv_group_ended(struct rdzv *r, const struct rdzv_group_end *g);

/* One local worker died and is replaced alone while the others run on:
 * asks for a new round of the same nodes, not charged against the job's
 * restarts, which round_over announces (then join it while the workers
 * run, as for any round_over; one node: the same store, reset). Returns 0,
 * -ECANCELED (no round runs, or the rendezvous ended) or -ENOTSUP (the
 * backend cannot: restart the group as for any failure). */
int rdzv_renew(struct rdzv *r);

/* Many nodes: how many of this node's workers the next round this node
 * joins counts (1..nproc): the workers that will be in it. Fewer than
 * nproc while a worker replaced alone has a new process that is not ready
 * to re-form yet (the others re-form without it at once; it joins a later
 * round, which rdzv_renew asks for once it is ready); nproc again for a
 * group started afresh. Call it before rdzv_join, or while round_over is
 * heard. The round's rank_base and world_size count it; local_procs says
 * what was counted. Returns 0, -EINVAL, or -ENOTSUP (one node: every round
 * counts nproc, and a replacement re-forms with the others in the round). */
int rdzv_set_nproc(struct rdzv *r, int nproc);

/* Many nodes: a replacement that started outside the rounds is ready to
 * re-form: as rdzv_renew (round_over follows everywhere; count it with
 * rdzv_set_nproc while it is heard), except that a job some node has
 * finished drops the request instead of failing. Returns 0, -ENOTSUP (one
 * node) or -ECANCELED. */
int rdzv_grow(struct rdzv *r);

/* The node (group rank) of global rank `rank` in the round this node last
 * joined, from the workers each node brought to it (not rank / nproc: a
 * node whose replaced worker is outside the round brings fewer); -1 when
 * the round has no such rank. One node: 0. */
int rdzv_node_of(struct rdzv *r, int rank);

/* Many nodes: writes this node's status record into the rendezvous store
 * (rdzv_driver_publish: RDZV_STATUS_KEY_FMT, bound to the node's session),
 * for `ddplaunch status`. Returns 0, -ENOTSUP (one node: no store to
 * publish in), -ENOTCONN (no session now), -EMSGSIZE or -ENOMEM. */
int rdzv_publish(struct rdzv *r, const void *rec, size_t len);
/* The rendezvous store this node hosts (many nodes), for /metrics; NULL
 * when it hosts none (one node: its workers' store is not shown). */
struct store_server *rdzv_hosted_store(struct rdzv *r);
#define RDZV_PUBLISH_MAX 4096 /* bytes of a record: driver.h's RDZV_STATUS_MAX */

/* Posts one line (at most 1024 bytes) for every node of the job: each
 * node's `notice` hears it, this one's too (driver.h: rdzv_driver_post).
 * Returns 0, -ENOTSUP (one node: no one else to tell), -ENOTCONN or
 * -EINVAL. */
int rdzv_post(struct rdzv *r, const char *text);

/* Many nodes: this node's word NAME (a token without '/') under the job's
 * prefix, set, or read back once (`got` runs once from the loop with the
 * value, NULL when absent; one read at a time). Returns 0, -ENOTSUP (one
 * node), -ENOTCONN, -EINVAL or -EBUSY (driver.h: rdzv_driver_put/get). */
int rdzv_put(struct rdzv *r, const char *name, const char *value);
int rdzv_get(struct rdzv *r, const char *name, void (*got)(void *arg, const char *value),
	     void *arg);

/* Many nodes: node `node` of this round is hung, its agent silent: the
 * round re-forms without it now (round_over follows everywhere), not at
 * the keep-alive window's end. One node: nothing. */
void rdzv_evict(struct rdzv *r, int node);

/* ddplaunch was told to stop by `sig` (the first such signal): says what
 * follows. One node: a round in progress ends with the group (its end is
 * reported with stop_signal); between rounds (the backoff) `ended`
 * (STOPPED) comes at once. Many nodes: leaves the job; `ended` (LEFT)
 * follows within close_timeout. */
void rdzv_signal(struct rdzv *r, int sig);

/* The agent is done (its exit status given): the rendezvous ends (leaving
 * first if still a member, within close_timeout), its stores close, and no
 * event is heard any more. A node that hosts the rendezvous store keeps it
 * while other agents are connected: shortly after, if some still are, the
 * process forks, the parent exits at once with exit_status and the child
 * serves them until the last one has gone. Keep the loop running. NULL
 * allowed. */
void rdzv_shutdown(struct rdzv *r, int exit_status);

/* After the loop has ended. NULL allowed. */
void rdzv_free(struct rdzv *r);

/* ddplaunch's exit status for an end: FINISHED 0; REFUSED 2 (the wrong job
 * for that store: a usage error); STOPPED 128+stop_signal; PERMANENT
 * DDP_EXIT_PERMANENT; LEFT 128+stop_signal after a stop signal, else
 * DDP_EXIT_PERMANENT when this node's failure will repeat (`permanent`),
 * else 0; FAILED 128+stop_signal after a stop signal, else fail_status
 * (this node's last failed group's status, see policy_exit_status), else
 * 1 (another node's failure). */
int rdzv_exit_status(enum rdzv_outcome how, int stop_signal, bool permanent, int fail_status);

/* The backends, for rdzv_new: the same arguments; many nodes gets the
 * options resolved and checked. */
int rdzv_one_new(const struct launch_opts *o, int nproc, struct rdzv **out);
/* rdzv_check's port check for one node: 0 or -EADDRINUSE (err filled). */
int rdzv_one_check_port(const struct launch_opts *o, char *err, size_t errlen);
int rdzv_many_new(const struct opts_rdzv *cfg, int nproc, int max_restarts, struct rdzv **out,
		  char *err, size_t errlen);

#endif
