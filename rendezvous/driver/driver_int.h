/*
 * driver_int.h - the multi-node driver's state, shared by its files:
 *   driver.c         life cycle, the machine's actions and answers, rounds
 *   driver_config.c  the configuration: copied, checked, given to the
 *                    machine and to the backend
 *   driver_wait.c    the word while the store does not answer
 *   driver_keeper.c  the stores this node hosts: the rendezvous store (and
 *                    keeping it for the agents still connected at the end)
 *                    and each round's workers' store
 */
#ifndef DDP_RENDEZVOUS_DRIVER_INT_H
#define DDP_RENDEZVOUS_DRIVER_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "rdzv_machine.h"
#include "driver.h"
#include "rdzv_prims.h"

struct store_server;

/* A store an agent hosts holds this key (driver_keeper.c); a standalone
 * ddp-rdzvd does not: each session reads it once connected, so that a lost
 * store is named for what it was. Its request's tag is the driver's own
 * (the machine's start at 1). */
#define DRV_HOSTED_KEY	 "ddprdzv/hosted_by"
#define DRV_HOSTED_VALUE "ddplaunch agent"
#define DRV_TAG_HOSTED	 UINT64_MAX
/* The job's notice board (driver_notice.c): its set's tag and its watch's
 * id, the driver's own like DRV_TAG_HOSTED. */
#define DRV_TAG_NOTICE	 (UINT64_MAX - 1)
#define DRV_WATCH_NOTICE (UINT64_MAX - 2)
#define DRV_TAG_PUT	 (UINT64_MAX - 3)
#define DRV_TAG_GET	 (UINT64_MAX - 4)
/* rdzv_driver_publish's writes: answered to nobody. */
#define DRV_TAG_STATUS (UINT64_MAX - 5)
enum drv_store_kind { DRV_STORE_UNKNOWN, DRV_STORE_AGENT, DRV_STORE_STANDALONE };

enum drv_phase {
	DRV_IDLE,	/* before rdzv_driver_attach */
	DRV_CONNECTING, /* the session is being opened */
	DRV_ON,		/* the machine runs */
	DRV_ENDED,	/* FINISHED, LEFT or FAILED was reported */
};

struct rdzv_driver {
	struct rdzv_driver_config c; /* its strings are the driver's copies */
	int nproc_now; /* workers the next slot counts (rdzv_driver_set_nproc), or 0: c.nproc */
	const char *run_id, *token, *local_addr; /* c's, for short */
	bool is_host;
	bool host_by_rule; /* c10d without is_host: hosting was inferred */
	bool store_here;   /* the store's host is this machine (rdzv_host_is_self) */
	char bind_lit[RDZV_DRIVER_HOST_MAX + 1]; /* the store host's address (a literal
						    when it resolves) */
	char peer[RDZV_DRIVER_HOST_MAX + 16];

	uv_loop_t *loop;
	const struct rdzv_driver_events *ev;
	void *ev_arg;
	const struct rdzv_prims_ops *ops;
	void *be;
	struct rdzv_machine *m;
	enum drv_phase phase;
	bool draining, shutdown;
	bool leaving; /* rdzv_driver_leave: no round is given any more */
	int exit_status;
	int64_t fail_grace_ms; /* the machine's fail_grace_ms, for the log */

	uv_timer_t timer;		       /* the machine's one timer; while connecting, the
						  reminder that the store does not answer */
	int64_t timer_due;		       /* drv_now() when the machine's timer should fire */
	uv_prepare_t prepare;		       /* records polled_at */
	int64_t polled_at;		       /* drv_now() when the loop last waited for I/O */
	int rejoins;			       /* sessions reopened after losing the store */
	enum drv_store_kind store_kind;	       /* what the session reached (DRV_HOSTED_KEY) */
	char owner[RDZV_DRIVER_HOST_MAX + 64]; /* drv_store_owner's text */
	char lost_msg[RDZV_PRIMS_MSG_MAX];     /* why, while rejoining */
	int64_t wait_since;		       /* drv_now() when the connecting began */
	uint64_t wait_delay;		       /* ms until the next reminder */
	bool handles;			       /* timer, linger and prepare are initialised */
	char addr[RDZV_ADDR_MAX + 1];
	char node_id[RDZV_ID_MAX + 1];

	/* the next round, once formed, until the agent asks for it */
	rdzv_driver_joined_fn join_cb;
	void *join_arg;
	bool have_round;
	struct rdzv_driver_round round;
	char master_addr[RDZV_ADDR_MAX + 1];
	char subject[RDZV_ID_MAX + 1]; /* round.subject */

	/* the stores this node hosts */
	struct store_server *rstore;	    /* the rendezvous store, or NULL */
	struct store_server *wstore, *wold; /* workers' store: next/current round, previous */
	uv_timer_t linger;		    /* the end: waits for the rstore's clients */
	uint64_t linger_since;
	bool kept;		   /* this process is the child that keeps the store */
	bool notice_first;	   /* the notice watch's first value is still to come */
	rdzv_driver_got_fn get_cb; /* rdzv_driver_get's, while one waits */
	void *get_arg;
};

/* driver.c */
int64_t drv_now(void);
/* Ends the rendezvous with a failure (once): `ended` unless shut down. */
void drv_fail(struct rdzv_driver *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* driver_wait.c */
/* The first word that the store does not answer, or that this node waits
 * for others, comes after DRV_WAIT_FIRST_MS, the next ones when the time
 * waited has doubled, at most DRV_WAIT_MAX_MS apart, until the session
 * connects (the round forms) or the join deadline. */
#define DRV_WAIT_FIRST_MS 3000u
#define DRV_WAIT_MAX_MS	  60000u
/* Until the session is open the machine's timer is free: it reminds, on
 * d->timer, while d->phase is DRV_CONNECTING (etcd included: the backend's
 * last_error names each endpoint with its last attempt's error). */
void drv_wait_start(struct rdzv_driver *d);

/* driver_keeper.c */
/* Hosts the rendezvous store at bind_lit:c.port (updates c.port when 0).
 * Returns 0 (d->rstore may be NULL: c10d found the port taken and joins
 * the store there, or, hosting by the rule, could not bind and joins as a
 * client, as torchrun does), -EADDRINUSE (static: refused, the owner named)
 * or another error, reported. */
int keeper_host(struct rdzv_driver *d);
/* A fresh workers' store for the next round on this node's address; its
 * port. Returns the port or a negative errno (reported). */
int keeper_new_wstore(struct rdzv_driver *d);
/* The round starts: only this round's nodes (and loopback) may use the
 * workers' store when the job has a token; the previous round's store goes. */
void keeper_round(struct rdzv_driver *d, const struct rdzv_world *w);
/* Everything the driver holds closes; a hosted store waits for its
 * clients (see rdzv_driver_shutdown), unless `at_once` (rdzv_driver_kill). */
void keeper_close_all(struct rdzv_driver *d, bool at_once);

/* driver_notice.c */
/* Watches the job's notice key (once the session is open). */
void notice_watch(struct rdzv_driver *d);
/* The notice watch's event, or the notice set's answer: true when it was
 * theirs (told to ev->notice), false for the machine's. */
bool notice_event(struct rdzv_driver *d, uint64_t watch, int status, struct rdzv_value v);
bool notice_done(struct rdzv_driver *d, uint64_t tag, int status);
bool notice_got(struct rdzv_driver *d, uint64_t tag, int status, const struct rdzv_value *v,
		size_t n);

/* driver_config.c */
/* Copies cfg's strings into d->c (-ENOMEM, -EINVAL for a host too long). */
int drv_config_copy(struct rdzv_driver *d, const struct rdzv_driver_config *cfg);
/* Wipes and frees the copies. */
void drv_config_release(struct rdzv_driver *d);
/* The machine's configuration but for the node's id, address, port and
 * failure grace, known only once connected. */
void drv_machine_config(const struct rdzv_driver *d, struct rdzv_config *out);
/* What can never work, refused before anything is bound or connected. */
int drv_check(const struct rdzv_driver *d, char *err, size_t errlen);
/* The backend's configuration (but the loop and the host to connect to). */
void drv_prims_config(struct rdzv_driver *d, struct rdzv_prims_config *pc);

#endif
