/*
 * rdzv_machine.h - one agent's side of the multi-node rendezvous, as a pure
 * state machine (no I/O, no clock, no threads). docs/rendezvous.md explains
 * the protocol, its costs and the choices behind it.
 *
 * The machine runs over a few store primitives that both our TCPStore and
 * etcd v3 provide; the driver (the agent) performs them and feeds back what
 * happened, with the time:
 *
 *   GET keys...          -> rdzv_on_get    the values (or missing) of each key
 *   CAS key old new      -> rdzv_on_cas    compare-and-set (old may be "absent")
 *   ADD key delta        -> rdzv_on_add    atomic counter (decimal text value)
 *   SET key value        -> rdzv_on_done   plain write
 *   SET_SESSION key val  -> rdzv_on_done   a write whose key lives only as long
 *                                          as this node's session: the store
 *                                          deletes it when the connection closes
 *                                          (etcd: the lease expires)
 *   WATCH key            -> rdzv_on_key    the key's value now, then at every
 *                                          change (deleted = missing); no polling
 *   UNWATCH watch        (no answer)
 *   TIMER at             -> rdzv_on_timer  one timer; each TIMER replaces the last
 *
 * and it tells the driver what to do with the node:
 *
 *   ROUND       the round is formed: rdzv_machine_world() says who is where;
 *               start the workers
 *   ROUND_OVER  the round this node ran in is over (a node died, left, joined,
 *               or workers failed somewhere): stop the workers; the machine
 *               rejoins by itself and answers with the next ROUND
 *   LEFT        (after rdzv_stop) this node has left: close the session, exit
 *   FINISHED    nothing more to do for this node (its workers' success is
 *               recorded, or it ran in the job and the job finished while it
 *               rejoined): close the session, exit 0
 *   FAILED      text says why, in a user-facing sentence: stop the workers,
 *               close the session, exit non-zero. A node that never ran in
 *               a round ends here too when the job it waited for finishes
 *   REFUSED     this node is not of the job it reached (another job holds
 *               the run id, or the store is another job's): text names both
 *               jobs. Nothing of the other job was touched; close the
 *               session, exit as for a usage error
 *   NOTICE      text: one user-facing line to print; nothing to do (this
 *               node's command line differs from the one of the node that
 *               started its job: said once per machine)
 *
 * Job identity: every node of one job gives the same fingerprint (struct
 * rdzv_config's job). It is written into the state by the node that creates
 * the generation; a node that finds an open or running generation with
 * another fingerprint is REFUSED before it takes a ticket. The nodes of one
 * job may differ in the rest of their command lines (each its own paths):
 * a node whose command line's fingerprint (cmd) differs from the
 * generation's creator's is told so once (NOTICE) and goes on. A node that
 * hosts the store for its own job alone (static node 0) writes its job to
 * RDZV_OWNER_KEY first; a node told that the store is its job's node 0's
 * (static, node rank > 0) waits for that key and is REFUSED when it names
 * another run id or fingerprint.
 *
 * Driving it:
 *   rdzv_machine_new(cfg) -> rdzv_start(now) -> loop { while
 *   (rdzv_next_action(m, &a)) perform a; wait for a reply, a watch event, the
 *   timer, the workers or a signal; call the matching rdzv_on_* / rdzv_* }
 * Every entry point takes `now_ms`, a monotonic clock in milliseconds, used
 * only for deadlines. Entry points return 0, or -ENOMEM (then the machine
 * is unusable: free it); a request the machine did not make (unknown or
 * stale id) is ignored. A store request that failed is answered with its
 * negative errno in `status`; the machine then reports FAILED.
 *
 * Ordering the driver must keep: writes to one key are performed in the
 * order they were given (one TCP session does this by itself). Nothing else
 * needs to be ordered: the machine waits for each answer it depends on, so
 * requests may be pipelined. Watch events are level-triggered: duplicates
 * are harmless, but the last event delivered for a key must be its latest
 * value. CAS answers may say `swapped` when the key already held `value`
 * (TCPStore's compare_set cannot tell); for an absent key TCPStore answers
 * the expected value itself, which the machine reads as absent.
 */
#ifndef DDP_RENDEZVOUS_RDZV_MACHINE_H
#define DDP_RENDEZVOUS_RDZV_MACHINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "byteview.h"
#include "rdzv_codec.h"

/* Whose store this node meets the others on (see "Job identity" above). */
enum rdzv_store_role {
	RDZV_STORE_SHARED = 0, /* any number of jobs, one per run id (c10d, etcd) */
	RDZV_STORE_OWN,	       /* this node hosts it for its own job: it writes
				  RDZV_OWNER_KEY */
	RDZV_STORE_OWNED,      /* its job's host writes RDZV_OWNER_KEY: wait
				  for it, refuse another job's */
};

/* What the job asks for. Strings are copied by rdzv_machine_new. */
struct rdzv_config {
	const char *run_id;	       /* --rdzv_id: a token (rdzv_token_ok), <= RDZV_RUN_ID_MAX */
	const char *node_id;	       /* unique per agent instance, e.g. "host:pid" (a token) */
	const char *addr;	       /* where other nodes reach this one (a token) */
	uint16_t port;		       /* this node's workers' store port, used if it is rank 0 */
	uint32_t nproc;		       /* local workers, 1..RDZV_NPROC_MAX */
	uint32_t min_nodes, max_nodes; /* --nnodes=MIN:MAX (static mode: N:N) */
	int32_t node_rank;	       /* --node_rank, or -1 */
	uint32_t max_restarts;	       /* --max_restarts, for the whole job */
	const char *job;	       /* the job's fingerprint (a token, <= RDZV_ID_MAX),
					  or NULL: none (only jobs without one meet) */
	const char *job_text;	       /* the job in words for messages (printable
					  ASCII, <= RDZV_JOB_MAX), or NULL */
	const char *cmd;	       /* the fingerprint of this node's whole
					  command line (a token, <= RDZV_ID_MAX),
					  or NULL: none (never noticed) */
	enum rdzv_store_role store_role;
	/* --rdzv_conf, in milliseconds (torchrun's names; defaults in brackets) */
	int64_t join_timeout_ms;	 /* [600 s] until this node is in a round (a
					    spare of a full job too) */
	int64_t last_call_timeout_ms;	 /* [30 s] window after MIN nodes are in, or
					    after a node asked to join a running job */
	int64_t close_timeout_ms;	 /* [30 s] a closer's wait for slots being
					    written; when later tickets take over a
					    close that did not happen; a leaving
					    node's try to tell the others */
	int64_t keep_alive_interval_ms;	 /* [5 s] heartbeat period */
	uint32_t keep_alive_max_attempt; /* [3] missed heartbeats: dead */
	/* [0] how long a failure of this node's workers waits for a membership
	 * change that may have caused it before it is charged as a restart: the
	 * store's delay in telling a node's death (a peer's workers see it
	 * first). The driver sets it from its backend (driver.c). */
	int64_t fail_grace_ms;
	/* [0: never] while this node waits for a round (others to join, or a
	 * place as a spare): a census and RDZV_ACT_WAITING this long after the
	 * wait began, then each time the time waited has doubled (at most
	 * RDZV_REPORT_MAX_MS apart) */
	int64_t report_first_ms;
};

#define RDZV_REPORT_MAX_MS 60000

/* Fills torchrun's defaults: 1:1 nodes, 1 worker, no node rank, 0 restarts,
 * join 600 s, last call 30 s, close 30 s, keep-alive 5 s x 3, no failure
 * grace (strings NULL, a shared store). */
void rdzv_config_defaults(struct rdzv_config *cfg);

/* Checks cfg. Returns 0, or -EINVAL with a user-facing sentence in msg
 * (e.g. "--node_rank=4 is out of range for --nnodes=4 (use 0 to 3)"). */
int rdzv_config_check(const struct rdzv_config *cfg, char *msg, size_t msglen);

enum rdzv_action_kind {
	RDZV_ACT_GET = 1,     /* keys[0..nkeys) -> rdzv_on_get(id) */
	RDZV_ACT_CAS,	      /* key, has_expected/expected, value -> rdzv_on_cas(id) */
	RDZV_ACT_ADD,	      /* key, delta -> rdzv_on_add(id) */
	RDZV_ACT_SET,	      /* key, value -> rdzv_on_done(id) */
	RDZV_ACT_SET_SESSION, /* key, value -> rdzv_on_done(id) */
	RDZV_ACT_WATCH,	      /* key -> rdzv_on_key(id, ...) now and on every change */
	RDZV_ACT_UNWATCH,     /* stop watch `watch`; later events for it are ignored */
	RDZV_ACT_TIMER,	      /* call rdzv_on_timer at at_ms (-1: no timer) */
	RDZV_ACT_ROUND,	      /* see rdzv_machine_world() */
	RDZV_ACT_ROUND_OVER,  /* text: why, for the log */
	RDZV_ACT_LEFT,	      /* text: what happened, for the log */
	RDZV_ACT_FINISHED,    /* text: what happened, for the log */
	RDZV_ACT_FAILED,      /* text: the user-facing message */
	RDZV_ACT_REFUSED,     /* text: the user-facing message, naming both jobs */
	RDZV_ACT_WAITING,     /* text: what this node waits for: who joined, who is
				 missing, until when (report_first_ms) */
	RDZV_ACT_NOTICE,      /* text: a line for the user; nothing to do */
};

/* One thing to do. Every pointer in it stays valid until the next call of
 * an entry point other than rdzv_next_action. */
struct rdzv_action {
	enum rdzv_action_kind kind;
	uint64_t id;	/* answer with this id (requests and WATCH) */
	uint64_t watch; /* UNWATCH: the id of the WATCH to stop */
	struct byteview key;
	const struct byteview *keys; /* GET */
	size_t nkeys;
	bool has_expected; /* CAS: false = the key must be absent */
	struct byteview expected, value;
	int64_t delta;
	int64_t at_ms;
	const char *text;
};

/* A value read: present or missing. */
struct rdzv_value {
	bool present;
	struct byteview bytes;
};

/* This node's round, valid from RDZV_ACT_ROUND until the next ROUND_OVER,
 * ROUND or rdzv_machine_free. */
struct rdzv_world {
	uint64_t gen;		 /* the job's generation of the run id */
	uint32_t round;		 /* 1, 2, ...: rounds of this job */
	uint32_t restarts;	 /* restarts the job has used (TORCHELASTIC_RESTART_COUNT) */
	uint32_t size;		 /* nodes (GROUP_WORLD_SIZE) */
	uint32_t rank;		 /* this node's group rank (GROUP_RANK) */
	uint64_t world_procs;	 /* workers in the job (WORLD_SIZE) */
	uint64_t first_proc;	 /* global rank of this node's local rank 0 */
	const char *master_addr; /* rank 0's addr (MASTER_ADDR) */
	uint16_t master_port;	 /* rank 0's port (MASTER_PORT) */
	const struct rdzv_member *members; /* size entries in group-rank order */
	const char *key_prefix;		   /* "ddprdzv/RUN/k/GEN.ROUND/": fresh for every round */
};

struct rdzv_machine;

/* Returns 0, -EINVAL (cfg fails rdzv_config_check) or -ENOMEM. */
int rdzv_machine_new(const struct rdzv_config *cfg, struct rdzv_machine **out);

/* NULL is allowed. Performs nothing: the driver closes the session. */
void rdzv_machine_free(struct rdzv_machine *m);

/* Pops the next action into *out. Returns true, or false when none is due. */
bool rdzv_next_action(struct rdzv_machine *m, struct rdzv_action *out);

/* Starts joining: writes this node's heartbeat key, watches the state. */
int rdzv_start(struct rdzv_machine *m, int64_t now_ms);

/* Answers. `vals` has one entry per key of the GET, in order. */
int rdzv_on_get(struct rdzv_machine *m, int64_t now_ms, uint64_t id, int status,
		const struct rdzv_value *vals, size_t nvals);
/* `current` is the key's value after the operation when !swapped. */
int rdzv_on_cas(struct rdzv_machine *m, int64_t now_ms, uint64_t id, int status, bool swapped,
		struct rdzv_value current);
int rdzv_on_add(struct rdzv_machine *m, int64_t now_ms, uint64_t id, int status, int64_t value);
int rdzv_on_done(struct rdzv_machine *m, int64_t now_ms, uint64_t id, int status);

/* A watched key's value (the first event after WATCH gives the current one). */
int rdzv_on_key(struct rdzv_machine *m, int64_t now_ms, uint64_t watch, struct rdzv_value value);

int rdzv_on_timer(struct rdzv_machine *m, int64_t now_ms);

/* This process was stopped and runs again (the driver's timer came far too
 * late: SIGSTOP, a VM migration, a swapped-out host). A liveness deadline
 * that ran out during the pause is moved to now + the keep-alive window:
 * the peers' heartbeats that arrived meanwhile are read after this call, and
 * a node is judged by what is heard after the thaw, never by the pause
 * alone. Call it before rdzv_on_timer. */
void rdzv_resumed(struct rdzv_machine *m, int64_t now_ms);

/* Stop requested (SIGTERM): leave. A member of a running round tells the
 * others first (they re-form at once), within close_timeout; then LEFT. */
int rdzv_stop(struct rdzv_machine *m, int64_t now_ms);

/* Like rdzv_stop, for a node whose workers failed in a way that will
 * repeat in every round (exit 78: a full disk, no file descriptors).
 * `cause` says what, for the others' messages (NULL: nothing; bytes that
 * are not printable ASCII become '?', and it is cut to fit the state's
 * message). When this node's leaving leaves fewer than MIN live nodes in
 * the running round (the members still alive and the nodes waiting for a
 * place), the job cannot go on: always so in a fixed-size job
 * (--nnodes=N). Then the state becomes FAILED with reason `permanent`,
 * SUBJECT this node and a message naming it, its address and the cause, so
 * that every other node ends at once with FAILED (which
 * rdzv_machine_failed_permanent tells apart) instead of waiting for a node
 * that will not come. With enough nodes left (an elastic job above its
 * minimum) the others re-form without it, as after rdzv_stop. Then LEFT. */
int rdzv_stop_permanent(struct rdzv_machine *m, int64_t now_ms, const char *cause);

/* Whether the job state held is FAILED because a node left with a failure
 * that will repeat (rdzv_stop_permanent): the end is then permanent for
 * every node. */
bool rdzv_machine_failed_permanent(const struct rdzv_machine *m);

/* The local worker group of the current round ended on its own. success:
 * this node's part is recorded (the job is FINISHED when every node's is),
 * then FINISHED. failure: a restart of the whole job is requested (it
 * counts against max_restarts; FAILED when they are spent) unless a
 * membership change caused it: the machine first waits fail_grace_ms for
 * one (the round moving on absorbs the failure; the ring successor's death
 * re-forms the round as `dead`), and a member whose heartbeat key is gone
 * when the restart is requested turns it into `dead` too: neither is
 * charged. Not to be called for workers stopped because of ROUND_OVER. */
int rdzv_workers_exited(struct rdzv_machine *m, int64_t now_ms, bool success);

/* One of this node's workers died and is replaced alone, the others
 * staying: a new round with the same nodes is opened (reason `replace`,
 * not charged against max_restarts), so that every node's workers
 * re-form in place with the replacement. Like a failure it comes after a
 * dead successor (that death's round absorbs it) and a member whose
 * heartbeat key is gone turns it into that member's death; once a node
 * has finished, it fails the job as a failure would. Ignored unless this
 * node runs in a round and has not reported its workers' end. */
int rdzv_workers_renew(struct rdzv_machine *m, int64_t now);
/* A replacement that started outside the rounds (the others re-formed
 * without it, rdzv_set_local_procs) is ready: a new round with the same
 * nodes, as rdzv_workers_renew, that counts it. Once a node has finished
 * the job does not need it: the request is dropped instead of failing the
 * job. Ignored as rdzv_workers_renew is. */
int rdzv_workers_grow(struct rdzv_machine *m, int64_t now);
/* The member of node rank `rank` in this node's round is hung (its workers
 * made no progress past the deadline its peers' agents learned, and its
 * agent said nothing: a node frozen whole, or cut off): the round re-forms
 * without it, as for a death (`dead`, not charged), without waiting for
 * its heartbeat key to go stale. A node that thaws finds a later round and
 * joins again as for any death it outlived. Ignored unless this node runs
 * in a round, rank is another member of it, and no exit was reported. */
int rdzv_member_hung(struct rdzv_machine *m, int64_t now, uint32_t rank);
/* This node's workers' store port for the next slot it writes (a fresh
 * worker store per round). The slot of a rejoin is written after the
 * answer to its ticket's ADD, so calling this while handling ROUND_OVER
 * is in time. */
void rdzv_set_port(struct rdzv_machine *m, uint16_t port);
/* How many workers this node brings to the next slot it writes (the next
 * round's first_proc and world_procs sum the members' counts): fewer than
 * cfg.nproc while a replaced worker's new process is not ready to re-form,
 * cfg.nproc again once it is. Timed as rdzv_set_port. Returns 0, or
 * -EINVAL (0, or more than cfg.nproc: nothing changes). */
int rdzv_set_local_procs(struct rdzv_machine *m, uint32_t nproc);

/* Valid after RDZV_ACT_ROUND (see struct rdzv_world); NULL otherwise. */
const struct rdzv_world *rdzv_machine_world(const struct rdzv_machine *m);

/* The latest job state seen (NULL before the first): for logs and tests. */
const struct rdzv_state *rdzv_machine_state(const struct rdzv_machine *m);

#endif
