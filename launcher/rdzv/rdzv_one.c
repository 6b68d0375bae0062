/*
 * rdzv_one.c - the one-node backend of the rendezvous seam (rdzv.h): every
 * round has this node alone. It owns the workers' store (bound once at
 * --master_addr:--master_port, reset between rounds) and the restart policy
 * (policy.h): a failed group is answered with the next round after the
 * backoff while restarts remain, else with the end. A worker replaced
 * alone (rdzv_renew) opens the next round at once, free: its round number
 * counts restarts and renewals, its restart_count restarts only.
 */
#include "exit_status.h"
#include "opts.h"
#include "policy.h"
#include "rdzv.h"
#include "signames.h"

#include <errno.h>
#include <log.h>
#include <stdio.h>
#include <stdlib.h>

#include "store_server.h"

#define TORCHRUN_DEFAULT_PORT 29500

struct rdzv_one {
	struct rdzv base;
	const struct launch_opts *o;
	int nproc;
	const struct rdzv_events *ev;
	void *ev_arg;
	struct store_server *store;
	int port;
	int round;	   /* restarts made */
	int renewals;	   /* rounds opened for a worker replaced alone */
	int renewals_said; /* renewals when the last round was answered */
	bool in_round;	   /* answered, and its group has not ended yet */
	bool ended;	   /* `ended` was heard */
	uint64_t delay_ms; /* the backoff before the next answer */
	uv_timer_t backoff;
	bool handles; /* backoff is initialised */
	rdzv_joined_fn done;
	void *done_arg;
};

static struct rdzv_one *one_of(struct rdzv *r)
{
	return (struct rdzv_one *)r;
}

static int one_listen(struct rdzv_one *r, int port)
{
	return store_server_listen(r->store, r->o->master_addr, port);
}

/* The port the workers' store asks for (0: any). */
static int one_asked_port(const struct launch_opts *o)
{
	if (o->master_port >= 0)
		return o->master_port;
	return o->standalone ? 0 : TORCHRUN_DEFAULT_PORT;
}

/* Binds the workers' store once and keeps the socket: no probe-then-close
 * window. */
static int one_bind_store(struct rdzv_one *r, uv_loop_t *loop)
{
	const struct launch_opts *o = r->o;
	int asked = one_asked_port(o);
	int rc = store_server_new(loop, NULL, &r->store);

	if (rc)
		return rc;
	rc = one_listen(r, asked);
	if (rc == UV_EADDRINUSE && asked != 0) {
		if (o->strict_port) {
			log_error("port %d is in use by another process; free it or pick another "
				  "--master_port (--strict_port refuses to move)",
				  asked);
			return rc;
		}
		rc = one_listen(r, 0);
		if (!rc)
			log_warn("port %d is in use by another process; using %d instead "
				 "(--strict_port to refuse)",
				 asked, store_server_port(r->store));
	}
	if (rc) {
		log_error("cannot listen on %s:%d for the store: %s (check --master_addr and "
			  "--master_port)",
			  o->master_addr, asked, uv_strerror(rc));
		/* Only a port that may not move is the user's to fix (exit 2). */
		return rc == UV_EADDRINUSE && !o->strict_port ? -EIO : rc;
	}
	r->port = store_server_port(r->store);
	return 0;
}

static int one_attach(struct rdzv *base, uv_loop_t *loop, const struct rdzv_events *ev, void *arg)
{
	struct rdzv_one *r = one_of(base);

	r->ev = ev;
	r->ev_arg = arg;
	uv_timer_init(loop, &r->backoff);
	r->backoff.data = r;
	r->handles = true;
	return one_bind_store(r, loop);
}

static void one_answer(struct rdzv_one *r)
{
	struct rdzv_round res = {
	    .round = r->round + r->renewals,
	    .restart_count = r->round,
	    .group_rank = 0,
	    .group_world_size = 1,
	    .rank_base = 0,
	    .local_procs = r->nproc,
	    .world_size = r->nproc,
	    .master_addr = r->o->master_addr,
	    .master_port = r->port,
	    .reason = r->round + r->renewals == 0      ? "start"
		      : r->renewals > r->renewals_said ? "replace"
						       : "restart",
	};
	rdzv_joined_fn done = r->done;

	r->renewals_said = r->renewals;

	/* torch 2.x workers key the store without an attempt prefix: a
	 * restarted group must not find the last group's keys (its gloo
	 * addresses, its barrier counts) nor its connections. */
	if (res.round > 0)
		store_server_reset(r->store, NULL, 0);
	r->done = NULL;
	r->in_round = true;
	done(r->done_arg, 0, &res);
}

static void on_backoff(uv_timer_t *t)
{
	one_answer(t->data);
}

static int one_join(struct rdzv *base, rdzv_joined_fn done, void *arg)
{
	struct rdzv_one *r = one_of(base);
	uint64_t delay = r->delay_ms;

	if (r->ended)
		return -ECANCELED;
	r->done = done;
	r->done_arg = arg;
	r->delay_ms = 0;
	if (delay)
		uv_timer_start(&r->backoff, on_backoff, delay, 0);
	else
		one_answer(r);
	return 0;
}

static void one_end(struct rdzv_one *r, enum rdzv_outcome how)
{
	r->ended = true;
	r->ev->ended(r->ev_arg, how, NULL);
}

/* A restart remains: the next round after the backoff. */
static void one_restart(struct rdzv_one *r, const struct policy *p)
{
	uint64_t delay = policy_backoff_ms(p, ++r->round);

	if (delay)
		log_warn("restarting the worker group in %.3g s (the backoff, --backoff): restart "
			 "%d of %d",
			 delay / 1000.0, r->round, p->max_restarts);
	else
		log_warn("restarting the worker group: restart %d of %d", r->round,
			 p->max_restarts);
	r->delay_ms = delay;
}

static bool one_group_ended(struct rdzv *base, const struct rdzv_group_end *g)
{
	struct rdzv_one *r = one_of(base);
	const struct launch_opts *o = r->o;
	struct policy p = {o->max_restarts, o->backoff_initial, o->backoff_max};
	enum policy_decision d =
	    policy_decide(&p, r->round, g->failed, g->permanent, g->stop_signal > 0);

	r->in_round = false;
	if (g->round_over && g->stop_signal <= 0)
		return true; /* stopped for a renewal's round: the next one, free */
	if (d == POLICY_SUCCEEDED) {
		one_end(r, RDZV_OUT_FINISHED);
		return false;
	}
	g->show_summary(g->arg);
	if (d == POLICY_RESTART) {
		one_restart(r, &p);
		return true;
	}
	if (d == POLICY_STOPPED) {
		log_error("stopped by %s", signame_name(g->stop_signal));
		one_end(r, RDZV_OUT_STOPPED);
	} else if (g->permanent) {
		log_error("not restarting: the failure above will repeat at every restart "
			  "(exit status %d: fix the cause, then run again)",
			  DDP_EXIT_PERMANENT);
		one_end(r, RDZV_OUT_PERMANENT);
	} else {
		if (o->max_restarts > 0)
			log_error("no restart left (--max_restarts=%d)", o->max_restarts);
		one_end(r, RDZV_OUT_FAILED);
	}
	return false;
}

static void on_renewed(uv_timer_t *t)
{
	struct rdzv_one *r = t->data;

	if (!r->ended)
		r->ev->round_over(r->ev_arg, "a worker is replaced alone");
}

/* The next round comes at once, with the same store (reset when it is
 * answered), and costs no restart; round_over says so from the loop. */
static int one_renew(struct rdzv *base)
{
	struct rdzv_one *r = one_of(base);

	if (r->ended || !r->in_round)
		return -ECANCELED;
	r->renewals++;
	uv_timer_start(&r->backoff, on_renewed, 0, 0);
	return 0;
}

static void one_signal(struct rdzv *base, int sig)
{
	struct rdzv_one *r = one_of(base);

	log_warn("got %s; passing it on to the workers", signame_name(sig));
	if (r->in_round || r->ended)
		return; /* the group's end says it */
	/* Waiting out the backoff: no worker runs to pass the signal on to. */
	uv_timer_stop(&r->backoff);
	r->done = NULL;
	one_end(r, RDZV_OUT_STOPPED);
}

static void handle_free_noop(uv_handle_t *h)
{
}

static void one_shutdown(struct rdzv *base, int exit_status)
{
	struct rdzv_one *r = one_of(base);

	(void)exit_status;
	r->ended = true;
	if (r->handles && !uv_is_closing((uv_handle_t *)&r->backoff))
		uv_close((uv_handle_t *)&r->backoff, handle_free_noop);
	if (r->store)
		store_server_close(r->store, NULL, NULL);
	r->store = NULL;
}

static void one_free(struct rdzv *base)
{
	free(one_of(base));
}

static const struct rdzv_ops one_ops = {
    .attach = one_attach,
    .join = one_join,
    .group_ended = one_group_ended,
    .renew = one_renew,
    .signal = one_signal,
    .shutdown = one_shutdown,
    .free = one_free,
};

int rdzv_one_check_port(const struct launch_opts *o, char *err, size_t errlen)
{
	struct store_server *s = NULL;
	int asked = one_asked_port(o);
	uv_loop_t loop;
	int rc;

	if (!o->strict_port || asked == 0 || uv_loop_init(&loop))
		return 0; /* a port that may move, or nothing to probe with */
	rc = store_server_new(&loop, NULL, &s);
	if (rc == 0) {
		rc = store_server_listen(s, o->master_addr, asked);
		store_server_close(s, NULL, NULL);
		uv_run(&loop, UV_RUN_DEFAULT);
	}
	uv_loop_close(&loop);
	if (rc != UV_EADDRINUSE)
		return 0; /* anything else is the run's to say */
	snprintf(err, errlen,
		 "port %d is in use by another process; free it or pick another --master_port "
		 "(--strict_port refuses to move)",
		 asked);
	return -EADDRINUSE;
}

int rdzv_one_new(const struct launch_opts *o, int nproc, struct rdzv **out)
{
	struct rdzv_one *r = calloc(1, sizeof(*r));

	if (!r)
		return -ENOMEM;
	r->base.ops = &one_ops;
	r->o = o;
	r->nproc = nproc;
	*out = &r->base;
	return 0;
}
