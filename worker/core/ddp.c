/*
 * ddp.c - context life cycle: options from the launcher's environment,
 * store connection (env://, tcp://, file://), arrival of every rank, backend
 * choice; accessors and the blocking collective entry points.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctx.h"
#include "progress_writer.h"
#include "timeutil.h"

int ddp_parse_timeout(const char *s, uint64_t *ms)
{
	static const struct {
		const char *unit;
		uint64_t ms;
	} units[] = {{"", 1}, {"ms", 1}, {"s", 1000}, {"min", 60000}, {"h", 3600000}};
	uint64_t n = 0;
	const char *p = s;

	if (*p < '0' || *p > '9')
		return -EINVAL;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (n > DDP_MAX_TIMEOUT_MS)
			return -EINVAL; /* far past the limit: stop before overflowing */
		n = n * 10 + (uint64_t)(*p - '0');
	}
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(p, units[i].unit) != 0)
			continue;
		if (n == 0 || n > DDP_MAX_TIMEOUT_MS / units[i].ms)
			return -EINVAL;
		*ms = n * units[i].ms;
		return 0;
	}
	return -EINVAL;
}

static int ddp_env_int(const char *name, int fallback)
{
	const char *v = getenv(name);
	char *end;
	long n;

	if (!v || !*v)
		return fallback;
	n = strtol(v, &end, 10);
	return (*end || n < 0 || n > 1 << 24) ? -2 : (int)n;
}

void ddp_options_init(struct ddp_options *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->rank = opts->world_size = opts->local_rank = opts->local_world_size = -1;
	opts->attempt = -1;
}

/* DDP_BACKEND and DDP_CPU_TRANSPORT, where the options leave AUTO. */
static int ddp_resolve_choices(struct ddp_options *o, char *err, size_t errlen)
{
	const char *t;

	if (o->backend == DDP_BACKEND_AUTO && (t = getenv("DDP_BACKEND")) && *t) {
		if (strcmp(t, "cpu") == 0) {
			o->backend = DDP_BACKEND_CPU;
		} else if (strcmp(t, "nccl") == 0) {
			o->backend = DDP_BACKEND_NCCL;
		} else if (strcmp(t, "auto") != 0) {
			snprintf(err, errlen, "DDP_BACKEND='%s' is not cpu, nccl or auto", t);
			return -EINVAL;
		}
	}
	if (o->transport == DDP_TRANSPORT_AUTO && (t = getenv("DDP_CPU_TRANSPORT")) && *t) {
		if (strcmp(t, "shm") == 0) {
			o->transport = DDP_TRANSPORT_SHM;
		} else if (strcmp(t, "ring") == 0) {
			o->transport = DDP_TRANSPORT_RING;
		} else if (strcmp(t, "hier") == 0) {
			o->transport = DDP_TRANSPORT_HIER;
		} else if (strcmp(t, "auto") != 0) {
			snprintf(err, errlen,
				 "DDP_CPU_TRANSPORT='%s' is not shm, ring, hier or auto", t);
			return -EINVAL;
		}
	}
	return 0;
}

/* Resolves -1 fields from the environment; -EINVAL with a message. */
static int ddp_resolve(struct ddp_options *o, char *err, size_t errlen)
{
	if (o->rank < 0)
		o->rank = ddp_env_int("RANK", -1);
	if (o->world_size < 0)
		o->world_size = ddp_env_int("WORLD_SIZE", -1);
	if (o->rank < 0 || o->world_size <= 0 || o->rank >= o->world_size) {
		snprintf(err, errlen,
			 "RANK and WORLD_SIZE are unset or invalid (RANK=%s WORLD_SIZE=%s); start "
			 "the program with ddplaunch or set them",
			 getenv("RANK") ? getenv("RANK") : "unset",
			 getenv("WORLD_SIZE") ? getenv("WORLD_SIZE") : "unset");
		return -EINVAL;
	}
	if (o->local_rank < 0)
		o->local_rank = ddp_env_int("LOCAL_RANK", o->rank);
	if (o->local_world_size < 0)
		o->local_world_size = ddp_env_int("LOCAL_WORLD_SIZE", o->world_size);
	if (o->attempt < 0) {
		int round = ddp_env_int("DDP_ROUND", 0);

		o->attempt = ddp_env_int("TORCHELASTIC_RESTART_COUNT", 0);
		if (round - 1 > o->attempt)
			o->attempt = round - 1;
	}
	/* LOCAL_RANK may pass LOCAL_WORLD_SIZE: a worker keeps its local rank
	 * (its device) in a round where a sibling is being replaced and the
	 * node's live workers are fewer (the launcher's agent_inplace.c). */
	if (o->local_rank < 0 || o->local_world_size <= 0 || o->attempt < 0) {
		snprintf(err, errlen,
			 "LOCAL_RANK, LOCAL_WORLD_SIZE or TORCHELASTIC_RESTART_COUNT is invalid");
		return -EINVAL;
	}
	if (!o->run_id)
		o->run_id = getenv("TORCHELASTIC_RUN_ID");
	if (!o->run_id || !*o->run_id)
		o->run_id = "none";
	if (ddp_resolve_choices(o, err, errlen) < 0)
		return -EINVAL;
	if (o->timeout_ms == 0) {
		const char *v = getenv("DDP_TIMEOUT_MS");

		o->timeout_ms = DDP_DEFAULT_TIMEOUT_MS;
		if (v && *v && ddp_parse_timeout(v, &o->timeout_ms) < 0) {
			snprintf(err, errlen,
				 "DDP_TIMEOUT_MS='%.40s' is not a duration: give milliseconds "
				 "(60000) or a whole number with a unit (500ms, 90s, 5min, 2h), "
				 "from 1 ms to 30 days; unset it for the default %u s",
				 v, DDP_DEFAULT_TIMEOUT_MS / 1000);
			return -EINVAL;
		}
	}
	/* Deadlines are now + timeout: keep the sum far from overflowing. */
	if (o->timeout_ms > DDP_MAX_TIMEOUT_MS)
		o->timeout_ms = DDP_MAX_TIMEOUT_MS;
	return 0;
}

/* A failed connect that a later slice may get past. */
static bool ddp_connect_retryable(int rc)
{
	return rc == -ECONNREFUSED || rc == -ETIMEDOUT || rc == -ECONNRESET ||
	       rc == -EHOSTUNREACH || rc == -ENETUNREACH || rc == -EAGAIN;
}

/* Connects to the TCP store, retrying a refused connect until the
 * deadline. In a re-formation (an agent channel) it tries in slices of
 * KV_CANCEL_POLL_MS, so that one that a later round superseded stops at
 * once (-ECANCELED). */
static int ddp_connect_tcp(struct ddp_ctx *ctx, const char *host, int port, char *err,
			   size_t errlen)
{
	uint64_t deadline = time_now_ms() + ctx->timeout_ms, slice;
	int rc;

	if (!ctx->chan.started)
		return kv_tcp_new(host, port, ctx->timeout_ms, &ctx->kv, err, errlen);
	do {
		if (atomic_load(&ctx->chan.superseded))
			return -ECANCELED;
		slice = time_left_ms(deadline);
		slice = slice > KV_CANCEL_POLL_MS ? KV_CANCEL_POLL_MS : slice;
		rc = kv_tcp_new(host, port, slice ? slice : 1, &ctx->kv, err, errlen);
	} while (ddp_connect_retryable(rc) && time_left_ms(deadline) > 0);
	if (rc < 0 && ddp_connect_retryable(rc))
		snprintf(err, errlen, "cannot reach the store at %s:%d after %llu ms: %s", host,
			 port, (unsigned long long)ctx->timeout_ms, strerror(-rc));
	return rc;
}

/* Connects to the store named by the init method. *host receives the
 * store's host (static or inside `hostbuf`). */
static int ddp_connect_store(struct ddp_ctx *ctx, const char *method, char *hostbuf, size_t hostlen,
			     char *err, size_t errlen)
{
	const char *colon;
	int port;

	if (method && strncmp(method, "file://", 7) == 0) {
		/* No store host: the transports find this node's address
		 * themselves (never loopback by default: the file may be on a
		 * filesystem that several hosts share). */
		hostbuf[0] = '\0';
		return kv_file_new(method + 7, &ctx->kv, err, errlen);
	}
	if (method && strncmp(method, "tcp://", 6) == 0) {
		colon = strrchr(method + 6, ':');
		if (!colon || colon == method + 6 || (size_t)(colon - method - 6) >= hostlen)
			goto bad;
		memcpy(hostbuf, method + 6, (size_t)(colon - method - 6));
		hostbuf[colon - method - 6] = '\0';
		port = atoi(colon + 1);
	} else if (!method || strcmp(method, "env://") == 0) {
		const char *a = getenv("MASTER_ADDR");

		port = ddp_env_int("MASTER_PORT", -1);
		if (!a || !*a || port <= 0) {
			snprintf(err, errlen,
				 "MASTER_ADDR or MASTER_PORT is unset; start the program with "
				 "ddplaunch or set them (or use init_method tcp:// or file://)");
			return -EINVAL;
		}
		snprintf(hostbuf, hostlen, "%s", a);
	} else {
		goto bad;
	}
	if (port <= 0 || port > 65535)
		goto bad;
	return ddp_connect_tcp(ctx, hostbuf, port, err, errlen);
bad:
	snprintf(err, errlen, "init method '%s' is not env://, tcp://HOST:PORT or file:///PATH",
		 method);
	return -EINVAL;
}

static int ddp_make_backend(struct ddp_ctx *ctx, const struct ddp_options *o, const char *host,
			    struct ddp_backend *prev, char *err, size_t errlen)
{
	struct ddp_backend_params p = {
	    .rank = ctx->rank,
	    .world_size = ctx->world_size,
	    .local_rank = ctx->local_rank,
	    .local_world_size = ctx->local_world_size,
	    .nodes_even = ctx->nodes_even,
	    .kv = ctx->kv,
	    .timeout_ms = ctx->timeout_ms,
	    .transport = o->transport,
	    .master_addr = host[0] ? host : NULL,
	    .prev = prev,
	    .cancel = ctx->chan.started ? &ctx->chan.superseded : NULL,
	};
	char prefix[320];

	snprintf(prefix, sizeof(prefix), "%s/backend", ctx->prefix);
	p.prefix = prefix;
#ifdef DDP_HAVE_NCCL
	if (o->backend == DDP_BACKEND_NCCL ||
	    (o->backend == DDP_BACKEND_AUTO && backend_nccl_usable()))
		return backend_nccl_new(&p, &ctx->backend, err, errlen);
#else
	if (o->backend == DDP_BACKEND_NCCL) {
		snprintf(err, errlen,
			 "the nccl backend was asked for but libddp was built without CUDA; "
			 "unset DDP_BACKEND or rebuild with -Dcuda=enabled");
		return -ENOTSUP;
	}
#endif
	return backend_cpu_new(&p, &ctx->backend, err, errlen);
}

/* Every rank announces itself with its world size and its node's; checks
 * that the world sizes agree, and notes whether every node has as many
 * ranks (ctx->nodes_even: not so in a round where a node's replaced worker
 * has not joined yet). */
static int ddp_arrive(struct ddp_ctx *ctx, char *err, size_t errlen)
{
	char key[320], mine[64];
	void **vals = calloc((size_t)ctx->world_size, sizeof(*vals));
	size_t *lens = calloc((size_t)ctx->world_size, sizeof(*lens));
	int rc;

	if (!vals || !lens) {
		rc = -ENOMEM;
		goto out;
	}
	snprintf(key, sizeof(key), "%s/arrive", ctx->prefix);
	snprintf(mine, sizeof(mine), "%d %d", ctx->world_size, ctx->local_world_size);
	rc = kv_exchange(ctx->kv, key, ctx->rank, ctx->world_size, mine, strlen(mine),
			 ctx->timeout_ms, "initialisation (ddp_init)", vals, lens, err, errlen);
	ctx->nodes_even = true;
	for (int r = 0; rc >= 0 && r < ctx->world_size; r++) {
		int world = -1, local = -1;

		if (sscanf((char *)vals[r], "%d %d", &world, &local) != 2 ||
		    world != ctx->world_size) {
			snprintf(err, errlen,
				 "rank %d says WORLD_SIZE/LOCAL_WORLD_SIZE = '%s' but rank %d "
				 "says '%s'; start every rank with the same world size",
				 r, (char *)vals[r], ctx->rank, mine);
			rc = -EINVAL;
		} else if (local != ctx->local_world_size) {
			ctx->nodes_even = false;
		}
	}
	for (int r = 0; rc >= 0 && r < ctx->world_size; r++)
		free(vals[r]);
out:
	free(vals);
	free(lens);
	return rc;
}

/* Takes the resolved options' membership and namespace into ctx. */
static void ddp_set_membership(struct ddp_ctx *ctx, const struct ddp_options *o)
{
	ctx->rank = o->rank;
	ctx->world_size = o->world_size;
	ctx->local_rank = o->local_rank;
	ctx->local_world_size = o->local_world_size;
	ctx->attempt = o->attempt;
	ctx->timeout_ms = o->timeout_ms;
	snprintf(ctx->prefix, sizeof(ctx->prefix), "/ddp/%s/attempt_%d", o->run_id, o->attempt);
}

/* Store, arrival, backend (taking over prev's memory), communication
 * thread: what ddp_init and ddp_reform share. */
static int ddp_build(struct ddp_ctx *ctx, const struct ddp_options *o, struct ddp_backend *prev,
		     char *err, size_t errlen)
{
	char host[256];
	int rc;

	rc = ddp_connect_store(ctx, o->init_method, host, sizeof(host), err, errlen);
	if (rc < 0)
		return rc;
	/* In a re-formation, a later round ends the waits of the set-up (and
	 * only of the set-up: the communication thread shares the store). */
	if (ctx->chan.started)
		ctx->kv->cancel = &ctx->chan.superseded;
	rc = ddp_arrive(ctx, err, errlen);
	if (rc >= 0)
		rc = ddp_make_backend(ctx, o, host, prev, err, errlen);
	ctx->kv->cancel = NULL;
	if (rc < 0)
		return rc;
	ctx->progress_seq = 0;
	rc = comm_start(ctx);
	if (rc < 0)
		snprintf(err, errlen, "cannot start the communication thread: %s", strerror(-rc));
	else
		progress_round(ctx->attempt + 1, ctx->rank, ctx->world_size);
	return rc;
}

static void ddp_report(const struct ddp_options *o, const char *what, const char *err, char *errbuf,
		       size_t errbuf_len)
{
	if (!errbuf || !errbuf_len)
		return;
	if (o->rank >= 0)
		snprintf(errbuf, errbuf_len, "%s (rank %d): %s", what, o->rank, err);
	else
		snprintf(errbuf, errbuf_len, "%s: %s", what, err);
}

/* The agent channel's reader heard a new round: the collective in flight
 * ends (agent_chan.h). */
static void ddp_chan_abort(void *ctx)
{
	ddp_abort(ctx);
}

static void ddp_unbuild(struct ddp_ctx *ctx);

static void setenv_int(const char *name, int value)
{
	char v[16];

	snprintf(v, sizeof(v), "%d", value);
	setenv(name, v, 1);
}

/* The round's membership into the environment, for the program (and its
 * children) to read as if it had been started in it. */
static void ddp_export_round(const struct ddp_ctx *ctx, const struct ddp_round *r)
{
	setenv_int("RANK", ctx->rank);
	setenv_int("WORLD_SIZE", ctx->world_size);
	setenv_int("LOCAL_WORLD_SIZE", ctx->local_world_size);
	setenv_int("GROUP_RANK", r->group_rank);
	setenv_int("GROUP_WORLD_SIZE", r->group_world_size);
	setenv_int("DDP_ROUND", r->round);
	unsetenv("DDP_AWAIT_ROUND");
}

/* DDP_AWAIT_ROUND=1: the launcher started this process outside any round
 * (it replaces a worker that died while the others re-formed without it).
 * Says "resizable" on the agent channel, which asks the launcher for a
 * round that takes it in, and forms in that round as ddp_rejoin does (a
 * later round superseding it is taken in turn). -ENOTSUP without a
 * channel. */
static int ddp_init_awaiting(struct ddp_ctx *ctx, const struct ddp_options *o, char *err,
			     size_t errlen)
{
	struct ddp_round r;
	int rc;

	agent_chan_open(&ctx->chan, ddp_chan_abort, ctx);
	if (!ctx->chan.started) {
		snprintf(err, errlen,
			 "DDP_AWAIT_ROUND=1 but there is no agent channel from ddplaunch to take "
			 "the round from; unset DDP_AWAIT_ROUND");
		return -ENOTSUP;
	}
	/* No communicator yet: one whose collectives fail at once, which
	 * ddp_rejoin's ddp_reform replaces. */
	ddp_unbuild(ctx);
	rc = ddp_rejoin(ctx, &r, o->timeout_ms, NULL, NULL, err, errlen);
	if (rc < 0)
		return rc;
	ddp_export_round(ctx, &r);
	return 0;
}

int ddp_init(const struct ddp_options *opts, struct ddp_ctx **out, char *errbuf, size_t errbuf_len)
{
	struct ddp_options o;
	struct ddp_ctx *ctx;
	char err[1024] = "";
	int rc;

	*out = NULL;
	if (opts)
		o = *opts;
	else
		ddp_options_init(&o);
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	pthread_mutex_init(&ctx->kv_lock, NULL);
	progress_open();
	progress_phase(DDP_PHASE_STARTUP);
	rc = ddp_resolve(&o, err, sizeof(err));
	if (rc < 0)
		goto fail;
	ddp_set_membership(ctx, &o);
	if (getenv("DDP_AWAIT_ROUND") && strcmp(getenv("DDP_AWAIT_ROUND"), "1") == 0) {
		rc = ddp_init_awaiting(ctx, &o, err, sizeof(err));
		if (rc < 0)
			goto fail;
		*out = ctx;
		return 0;
	}
	rc = ddp_build(ctx, &o, NULL, err, sizeof(err));
	if (rc < 0)
		goto fail;
	agent_chan_open(&ctx->chan, ddp_chan_abort, ctx);
	*out = ctx;
	return 0;
fail:
	ddp_report(&o, "ddp_init", err, errbuf, errbuf_len);
	ddp_free(ctx);
	return rc;
}

/* Ends the old communicator: every collective fails at once, the
 * communication thread finishes the queue (each item -ECANCELED) and is
 * joined. The backend is returned, not closed: the new one takes over the
 * application's memory from it first. */
static struct ddp_backend *ddp_teardown(struct ddp_ctx *ctx)
{
	struct ddp_backend *old = ctx->backend;

	ddp_abort(ctx);
	comm_stop(ctx);
	ctx->backend = NULL;
	pthread_mutex_lock(&ctx->kv_lock);
	kv_free(ctx->kv);
	ctx->kv = NULL;
	pthread_mutex_unlock(&ctx->kv_lock);
	ctx->first_err[0] = '\0';
	return old;
}

/* After a failed re-formation: no backend, and a communication thread on
 * which every collective fails at once (-ECANCELED), so that the context
 * can still be re-formed again or freed. */
static void ddp_unbuild(struct ddp_ctx *ctx)
{
	if (ctx->backend)
		ctx->backend->ops->close(ctx->backend);
	ctx->backend = NULL;
	if (!ctx->comm.started && comm_start(ctx) == 0)
		atomic_store(&ctx->comm.aborted, 1);
}

int ddp_reform(struct ddp_ctx *ctx, const struct ddp_options *opts, char *errbuf, size_t errbuf_len)
{
	struct ddp_options o;
	struct ddp_backend *old;
	char err[1024] = "";
	int rc, by;

	if (!ctx)
		return -EINVAL;
	if (opts)
		o = *opts;
	else
		ddp_options_init(&o);
	rc = ddp_resolve(&o, err, sizeof(err));
	if (rc < 0)
		goto fail;
	progress_phase(DDP_PHASE_REFORM);
	agent_chan_reforming(&ctx->chan, true);
	old = ddp_teardown(ctx);
	ddp_set_membership(ctx, &o);
	rc = ddp_build(ctx, &o, old, err, sizeof(err));
	/* A failed build is unbuilt before a round may abort again: a round
	 * heard then calls ddp_abort, which must not meet a backend being
	 * closed (its contract: not concurrently with ddp_reform). */
	if (rc < 0)
		ddp_unbuild(ctx);
	by = agent_chan_reforming(&ctx->chan, false);
	if (old)
		old->ops->close(old);
	if (rc >= 0) {
		ctx->err[0] = '\0';
		/* Built just as a later round came: its first collective fails,
		 * as a collective in flight does when a round is heard. */
		if (by)
			ddp_abort(ctx);
		return 0;
	}
	/* Whatever the wait that noticed it returned (-ECANCELED from the
	 * store or a transport, or a failure of its own just then), the
	 * cause is the later round: a code of its own, so that no caller
	 * reads the message to tell it from an abort. */
	if (by) {
		rc = -ESTALE;
		snprintf(err, sizeof(err), "superseded by round %d (take it with ddp_next_round)",
			 by);
	}
fail:
	ddp_report(&o, "ddp_reform", err, errbuf, errbuf_len);
	snprintf(ctx->err, sizeof(ctx->err), "%.1500s", errbuf && errbuf_len ? errbuf : err);
	return rc;
}

void ddp_free(struct ddp_ctx *ctx)
{
	if (!ctx)
		return;
	progress_phase(DDP_PHASE_SHUTDOWN);
	agent_chan_close(&ctx->chan);
	comm_stop(ctx);
	if (ctx->backend)
		ctx->backend->ops->close(ctx->backend);
	kv_free(ctx->kv);
	pthread_mutex_destroy(&ctx->kv_lock);
	free(ctx);
}

/* No lock and no allocation: an atomic flag and the backend's abort
 * (atomics and a futex wake, shutdown(2), or an atomic flag for NCCL), so
 * it may be called from a signal handler. */
void ddp_abort(struct ddp_ctx *ctx)
{
	if (!ctx)
		return;
	atomic_store(&ctx->comm.aborted, 1);
	if (ctx->backend)
		ctx->backend->ops->abort(ctx->backend);
}

int ddp_rank(const struct ddp_ctx *ctx)
{
	return ctx->rank;
}

int ddp_world_size(const struct ddp_ctx *ctx)
{
	return ctx->world_size;
}

int ddp_local_rank(const struct ddp_ctx *ctx)
{
	return ctx->local_rank;
}

int ddp_local_world_size(const struct ddp_ctx *ctx)
{
	return ctx->local_world_size;
}

int ddp_attempt(const struct ddp_ctx *ctx)
{
	return ctx->attempt;
}

const char *ddp_backend_name(const struct ddp_ctx *ctx)
{
	return ctx->backend ? ctx->backend->ops->name : "none";
}

int ddp_device_memory(const struct ddp_ctx *ctx)
{
	return ctx->backend ? ctx->backend->ops->device_memory : 0;
}

int ddp_device(const struct ddp_ctx *ctx)
{
	return ctx->backend ? ctx->backend->device : -1;
}

int ddp_set_compute_stream(struct ddp_ctx *ctx, void *cuda_stream)
{
	const struct ddp_backend_ops *ops;

	if (!ctx || !ctx->backend)
		return -EINVAL;
	ops = ctx->backend->ops;
	return ops->set_compute_stream ? ops->set_compute_stream(ctx->backend, cuda_stream) : 0;
}

const char *ddp_error(const struct ddp_ctx *ctx)
{
	return ctx->err;
}
