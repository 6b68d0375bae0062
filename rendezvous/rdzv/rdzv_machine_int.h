/*
 * rdzv_machine_int.h - the rendezvous machine's insides, shared by its files:
 *   rdzv_machine.c  life cycle, entry points, the state held, the timer
 *   rdzv_actions.c  the queue of actions handed to the driver
 *   rdzv_eval.c     what to do next, from the latest state and local facts
 *   rdzv_ops.c      the short request sequences: create, join, world,
 *                   trigger a new round, record done
 *   rdzv_close.c    closing a round (and the census behind the join
 *                   deadline's message)
 *   rdzv_grace.c    a failure's grace: the other members watched until
 *                   each is seen alive (or gone)
 * One operation runs at a time (m->op); each step sends one request and
 * waits for its answer (m->req). Heartbeats and watches run beside it.
 */
#ifndef DDP_RENDEZVOUS_RDZV_INT_H
#define DDP_RENDEZVOUS_RDZV_INT_H

#include "rdzv_machine.h"

#define RDZV_KEY_MAX 320

enum rdzv_mode {
	MODE_IDLE, /* before rdzv_start */
	MODE_JOIN, /* wants a place in a round */
	MODE_RUN,  /* member of round mem_round */
	MODE_END,  /* LEFT, FINISHED or FAILED was reported */
};

enum rdzv_op {
	OP_NONE,
	OP_ALIVE,   /* first write of the heartbeat key */
	OP_CREATE,  /* CAS the state to a new generation */
	OP_JOIN,    /* ADD a ticket, SET the slot */
	OP_WORLD,   /* GET the world of the round just formed */
	OP_CLOSE,   /* census, ranks, CAS world, CAS state */
	OP_CENSUS,  /* census for the join deadline's message */
	OP_TRIGGER, /* census of the running round, CAS state to the next round */
	OP_DONE,    /* mark done, ADD the done counter, maybe CAS finished */
};

/* The census of one round's pool: tickets 1..count, their slots, liveness. */
struct rdzv_census {
	uint64_t gen;
	uint32_t round;
	uint32_t count;
	struct rdzv_slot *slots; /* count entries */
	uint8_t *valid;		 /* slot read and of this round */
	uint8_t *alive;		 /* heartbeat key present and not "done" */
	uint64_t *watch;	 /* watches of slots still being written */
	uint32_t pending;
};

struct rdzv_act {
	struct rdzv_action a;
	struct byteview *keys;
	uint8_t *buf;
	size_t buf_len;
};

struct rdzv_machine {
	struct rdzv_config cfg;
	uint32_t nproc_max; /* cfg.nproc as configured (rdzv_set_local_procs's bound) */
	char *run_id, *node_id, *addr, *job, *job_text, *cmd;
	char prefix[RDZV_RUN_ID_MAX + 16]; /* "ddprdzv/RUN/" */
	enum rdzv_mode mode;
	uint64_t next_id;

	/* actions: v[head..len) are due, v[0..head) were handed out */
	struct rdzv_act *acts;
	size_t acts_head, acts_len, acts_cap;
	int64_t timer_armed;

	/* the latest job state */
	bool st_have, st_present;
	struct rdzv_state st;
	uint8_t st_raw[RDZV_STATE_MAX];
	size_t st_len;
	uint64_t st_watch;

	/* the operation in progress */
	enum rdzv_op op;
	int step;
	uint64_t req;
	int64_t op_deadline;
	uint64_t op_gen;
	uint32_t op_round;
	enum rdzv_reason trig_reason;
	char trig_subject[RDZV_ID_MAX + 1];
	struct rdzv_world_data trig_world; /* a waiter's copy of the running world */
	struct rdzv_census census;
	char *new_world; /* the closer's encoded world, and its length */
	size_t new_world_len;
	struct rdzv_state new_st;
	uint64_t op_ticket; /* OP_JOIN: the ticket taken, and when */
	int64_t op_ticket_at;
	/* the expected bytes of the state CAS in flight (TCPStore answers them
	 * back for an absent key) */
	uint8_t cas_exp[RDZV_STATE_MAX];
	size_t cas_exp_len;
	bool cas_has_exp;

	/* the pool this node holds a ticket in */
	uint64_t my_gen; /* generation of the job this node belongs to, or 0 */
	uint64_t pool_gen;
	uint32_t pool_round;
	uint64_t ticket; /* 0: none */
	int64_t ticket_at, close_at, trig_at, join_deadline;
	/* the WAITING reports of this wait (cfg.report_first_ms): when it
	 * began and when the next census is due (-1: not waiting), and whether
	 * the OP_CENSUS running is one */
	int64_t report_since, report_at;
	bool reporting;
	/* a state (gen, round, phase) in which triggering was declined */
	uint64_t quiet_gen;
	uint32_t quiet_round;
	enum rdzv_phase quiet_phase;

	/* membership of the running round */
	struct rdzv_world_data wd;
	struct rdzv_world world;
	char key_prefix[RDZV_RUN_ID_MAX + 64];
	uint32_t mem_round, mem_rank;
	uint32_t prev_round, prev_rank;
	uint8_t *cached_world; /* the closer's world, so it need not read it back */
	size_t cached_len;
	uint64_t cached_gen;
	uint32_t cached_round;

	/* liveness: this node's heartbeat and the watch on its ring successor */
	uint64_t hb_count;
	int64_t hb_next;
	uint64_t ring_watch;
	uint32_t ring_target;
	bool ring_dead, ring_off;
	uint8_t ring_last[32];
	size_t ring_last_len;
	int64_t ring_deadline;
	/* a waiter's watch on the running round's rank 0 */
	uint64_t coord_watch;
	char coord_id[RDZV_ID_MAX + 1];
	bool coord_gone, coord_done;

	/* RDZV_STORE_OWNED: the watch on RDZV_OWNER_KEY until it names this job */
	uint64_t owner_watch;
	bool owner_ok;
	bool ran;	  /* this node has been in a round (it ran workers) */
	bool cmd_noticed; /* the NOTICE that the command lines differ was given */

	/* local requests */
	bool stop_req;
	bool stop_perm; /* rdzv_stop_permanent: stop_cause says why */
	bool grow; /* the `replace` asked is rdzv_workers_grow's: dropped once a node finished */
	char stop_cause[RDZV_MSG_MAX + 1];
	int64_t stop_deadline;
	int exit_req;	 /* 0, 1 success, 2 failure, 3 renew (rdzv_workers_renew) */
	int64_t fail_at; /* a failure is charged from then on, or -1 */
	/* the failure's grace (rdzv_grace.c): per member of the round */
	uint64_t *gr_watch; /* its heartbeat key's watch (0: self, or none) */
	uint8_t *gr_state;  /* first value awaited, seen, alive since */
	uint64_t *gr_value; /* the first value seen */
	uint32_t gr_n, gr_pending;
	int64_t gr_gone; /* a member whose key vanished, or -1 */
};

/* rdzv_actions.c */
void rdzv_acts_gc(struct rdzv_machine *m); /* frees the actions handed out */
void rdzv_acts_release(struct rdzv_machine *m);
int rdzv_push_kv(struct rdzv_machine *m, enum rdzv_action_kind kind, const char *key,
		 const void *value, size_t vlen, uint64_t *id);
int rdzv_push_cas(struct rdzv_machine *m, const char *key, const void *expected, size_t elen,
		  bool has_expected, const void *value, size_t vlen, uint64_t *id);
int rdzv_push_add(struct rdzv_machine *m, const char *key, int64_t delta, uint64_t *id);
int rdzv_push_simple(struct rdzv_machine *m, enum rdzv_action_kind kind, int64_t at_ms,
		     uint64_t watch, const char *text);
/* A GET of n keys; key i is written by fill(ctx, i, buf, RDZV_KEY_MAX). */
int rdzv_push_get(struct rdzv_machine *m, size_t n,
		  void (*fill)(const struct rdzv_machine *, void *, size_t, char *), void *ctx,
		  uint64_t *id);
int rdzv_push_get1(struct rdzv_machine *m, const char *key, uint64_t *id);
void rdzv_unwatch(struct rdzv_machine *m, uint64_t *watch); /* and zeroes *watch */
/* Writes the run's prefix followed by fmt into buf (RDZV_KEY_MAX bytes). */
void rdzv_key(const struct rdzv_machine *m, char *buf, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* rdzv_machine.c */
/* Ends the machine with FAILED / FINISHED / LEFT and a message. */
int rdzv_end(struct rdzv_machine *m, enum rdzv_action_kind kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Takes a state value (from the watch or a CAS answer) if it is not older
 * than the one held. Returns 0, or what rdzv_end returns. */
int rdzv_take_state(struct rdzv_machine *m, struct rdzv_value v);
int rdzv_take_state_struct(struct rdzv_machine *m, const struct rdzv_state *st);

/* rdzv_eval.c */
/* While this node waits (no operation runs): starts the census behind a
 * WAITING report when one is due. Returns 0 or what rdzv_op_close returns. */
int rdzv_report_due(struct rdzv_machine *m, int64_t now);
int rdzv_evaluate(struct rdzv_machine *m, int64_t now);
int rdzv_ring_event(struct rdzv_machine *m, int64_t now, struct rdzv_value v);
/* RDZV_OWNER_KEY's value: this job's (go on), absent (wait), or another's
 * (REFUSED). */
int rdzv_owner_event(struct rdzv_machine *m, struct rdzv_value v);
void rdzv_coord_event(struct rdzv_machine *m, struct rdzv_value v);
void rdzv_timer_check(struct rdzv_machine *m, int64_t now);
int64_t rdzv_next_deadline(const struct rdzv_machine *m);

/* rdzv_ops.c */
/* CAS the state from the one held to *ns (kept in m->new_st), and take
 * the answer: the new state when swapped, else the current one. */
int rdzv_state_cas(struct rdzv_machine *m, const struct rdzv_state *ns);
int rdzv_state_cas_answer(struct rdzv_machine *m, bool swapped, struct rdzv_value cur);
int rdzv_op_create(struct rdzv_machine *m);
int rdzv_op_join(struct rdzv_machine *m, uint64_t gen, uint32_t round);
int rdzv_op_world(struct rdzv_machine *m, int64_t now);
int rdzv_op_trigger(struct rdzv_machine *m, enum rdzv_reason why, const char *subject);
int rdzv_op_done(struct rdzv_machine *m);
/* Continue the operation in progress with an answer. */
int rdzv_ops_on_get(struct rdzv_machine *m, int64_t now, const struct rdzv_value *v, size_t n);
int rdzv_ops_on_cas(struct rdzv_machine *m, int64_t now, bool swapped, struct rdzv_value cur);
int rdzv_ops_on_add(struct rdzv_machine *m, int64_t now, int64_t value);
int rdzv_ops_on_done(struct rdzv_machine *m, int64_t now);
void rdzv_op_reset(struct rdzv_machine *m);
int rdzv_become_member(struct rdzv_machine *m, struct rdzv_world_data *wd, uint32_t rank);

/* rdzv_grace.c */
/* This node's workers failed: watch the other members (see the file). */
int rdzv_grace_start(struct rdzv_machine *m, int64_t now);
/* A watch event: true when it was one of the grace's (then handled). */
bool rdzv_grace_event(struct rdzv_machine *m, int64_t now, uint64_t watch, struct rdzv_value v);
/* Unwatches and forgets them (the round is over). */
void rdzv_grace_stop(struct rdzv_machine *m);

/* rdzv_close.c */
int rdzv_op_close(struct rdzv_machine *m, bool census_only, int64_t now);
int rdzv_close_on_get(struct rdzv_machine *m, int64_t now, const struct rdzv_value *v, size_t n);
int rdzv_close_on_cas(struct rdzv_machine *m, int64_t now, bool swapped, struct rdzv_value cur);
int rdzv_close_on_key(struct rdzv_machine *m, int64_t now, uint64_t watch, struct rdzv_value v);
int rdzv_close_timer(struct rdzv_machine *m, int64_t now);
void rdzv_census_release(struct rdzv_census *c);

#endif
