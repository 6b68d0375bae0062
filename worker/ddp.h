/*
 * ddp.h - libddp, the C API of a data-parallel training program.
 *
 * A worker started by ddplaunch calls ddp_init() (which reads the launcher's
 * environment, connects to the store and builds a communicator), then uses
 * the collectives, the distributed sampler, the gradient reducer and the
 * checkpoint functions below, and finally ddp_free().
 *
 * Errors: every fallible function returns >= 0 on success or a negative
 * errno; ddp_error() then holds a lowercase message naming the thing and the
 * fix (for example which ranks never arrived). The common codes:
 *   -ETIMEDOUT    a deadline passed (the message names the missing ranks)
 *   -ECONNRESET   a peer rank died or closed its connection (named)
 *   -ECANCELED    the communicator was aborted (ddp_abort or an earlier error)
 *   -EINVAL       bad arguments or inconsistent ranks (names the mismatch)
 *   -EIO          a device/backend failure, or an I/O error on a file
 *   -ENOMEM
 * After a collective fails the communicator is aborted: every later
 * collective returns -ECANCELED. A collective in flight when a peer dies
 * fails within a second, never at the deadline: -ECONNRESET when this rank
 * saw the death itself (a shared-memory peer whose process is gone, a TCP
 * peer's closed or reset connection), -ECANCELED when another rank of the
 * communicator saw it first; the message names the rank. Two ways to
 * recover: restart the group (the launcher does, for a program that exits),
 * or re-form the communicator in place with ddp_reform() for the new
 * membership, redo the interrupted step there and go on (see
 * worker/README.md, "Failures").
 *
 * Environment read by ddp_init (besides the launcher's RANK, WORLD_SIZE,
 * LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
 * TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT):
 *   DDP_BACKEND=cpu|nccl|auto    force a backend
 *   DDP_CPU_TRANSPORT=shm|ring|hier|auto   force the CPU transport
 *   DDP_TIMEOUT_MS=N             deadline of every wait (default 300 s):
 *                                milliseconds, or with a unit: 500ms, 90s,
 *                                5min, 2h (1 ms to 30 days; anything else
 *                                makes ddp_init fail with -EINVAL)
 *   DDP_SHM_CHUNK_BYTES=N        shared-memory slot per rank (default 4 MiB)
 *   DDP_SHM_ARENA_BYTES=N        address space of each rank's arena for
 *                                ddp_mem_alloc (default 1 GiB; 0: none)
 *   DDP_RING_ADDR=IPV4           address the TCP ring listens on (default:
 *                                the local address that routes to the store)
 *   DDP_AGENT_FD=N               set by ddplaunch: the agent channel, a
 *   DDP_AGENT_PID=P              socket whose peer is process P (the
 *                                launcher); the first ddp_init takes it
 *                                (only a socket to P: a socket of the
 *                                program's own on N is left alone), keeps
 *                                it for the life of the process (a later
 *                                ddp_init after ddp_free uses it again),
 *                                removes both variables from the
 *                                environment and marks the fd
 *                                close-on-exec (children never take it),
 *                                and says on it that this worker can be
 *                                resized in place (see ddp_resizable,
 *                                ddp_next_round; one context at a time)
 *   DDP_AWAIT_ROUND=1            set by ddplaunch for a replacement started
 *                                outside the rounds (the others re-form
 *                                without it): ddp_init takes its round
 *                                from the agent channel (as ddp_rejoin),
 *                                builds in it, and sets RANK, WORLD_SIZE,
 *                                LOCAL_WORLD_SIZE, GROUP_RANK,
 *                                GROUP_WORLD_SIZE and DDP_ROUND to it;
 *                                -ENOTSUP without a channel
 *
 * Memory: "device memory" means what ddp_device_memory() says. With the CPU
 * backend every buffer is host memory; with the NCCL backend the buffers of
 * collectives and of the reducer's parameters/gradients are CUDA device
 * pointers. Checkpoint and sampler functions always use host memory.
 *
 * Threads: a context is used by one application thread. Collectives run on
 * the context's communication thread in the order they were issued, so the
 * reducer's asynchronous bucket all-reduces and blocking collectives issued
 * meanwhile (e.g. SyncBatchNorm statistics) keep the same order on every
 * rank. Every rank must issue the same collectives in the same order.
 */
#ifndef DDP_WORKER_DDP_H
#define DDP_WORKER_DDP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the library's API: libddp is built with hidden visibility, so these
 * functions are the only symbols libddp.so exports. */
#ifndef DDP_API
#if defined(__GNUC__) && __GNUC__ >= 4
#define DDP_API __attribute__((visibility("default")))
#else
#define DDP_API
#endif
#endif

struct ddp_ctx;

enum ddp_dtype {
	DDP_FLOAT32 = 0,
	DDP_FLOAT64 = 1,
};

enum ddp_op {
	DDP_SUM = 0,
	DDP_AVG = 1, /* sum, then divided by the world size (on the reducing rank) */
	DDP_MAX = 2,
};

enum ddp_backend_kind {
	DDP_BACKEND_AUTO = 0, /* NCCL if built with CUDA and a GPU is usable, else CPU */
	DDP_BACKEND_CPU = 1,
	DDP_BACKEND_NCCL = 2,
};

/* CPU backend transport. AUTO: shared memory when every rank is on this node
 * (LOCAL_WORLD_SIZE == WORLD_SIZE); with several nodes of several ranks,
 * HIER (shared memory in each node, TCP ring between the nodes' local rank
 * 0); else the flat TCP ring over all ranks. */
enum ddp_transport {
	DDP_TRANSPORT_AUTO = 0,
	DDP_TRANSPORT_SHM = 1,
	DDP_TRANSPORT_RING = 2,
	DDP_TRANSPORT_HIER = 3,
};

/* Size in bytes of one element of `dtype` (0 for an unknown dtype). */
DDP_API size_t ddp_dtype_size(enum ddp_dtype dtype);

/* Default deadline of every wait (store, collectives): 300 s. DDP_TIMEOUT_MS
 * in the environment overrides it when the options leave timeout_ms at 0. */
#define DDP_DEFAULT_TIMEOUT_MS 300000u

struct ddp_options {
	/* NULL or "env://": store at MASTER_ADDR:MASTER_PORT.
	 * "tcp://HOST:PORT": store there. "file:///PATH": a store kept in a
	 * shared file (file locking; the last rank out removes it). */
	const char *init_method;
	/* -1: from RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE
	 * (LOCAL_* default to RANK / WORLD_SIZE when unset). */
	int rank;
	int world_size;
	int local_rank;
	int local_world_size;
	/* NULL: TORCHELASTIC_RUN_ID, else "none". */
	const char *run_id;
	/* -1: TORCHELASTIC_RESTART_COUNT, or DDP_ROUND - 1 when larger (the
	 * launcher's rendezvous round across nodes: a group re-formed after a
	 * node died, left or joined is a later attempt too, although it used no
	 * restart), else 0. Keys live under
	 * "/ddp/<run_id>/attempt_<attempt>/" so an earlier attempt's values are
	 * never read. */
	int attempt;
	/* DDP_BACKEND_AUTO: the DDP_BACKEND environment variable ("cpu",
	 * "nccl") when set, else automatic. */
	enum ddp_backend_kind backend;
	/* DDP_TRANSPORT_AUTO: DDP_CPU_TRANSPORT ("shm", "ring", "hier") when set. */
	enum ddp_transport transport;
	/* 0: DDP_TIMEOUT_MS from the environment, else DDP_DEFAULT_TIMEOUT_MS.
	 * At most 30 days (a larger value is taken as 30 days). */
	uint64_t timeout_ms;
};

/* Fills `opts` with the defaults described above (everything from the
 * environment). */
DDP_API void ddp_options_init(struct ddp_options *opts);

/* Connects to the store, checks that every rank arrived (within the timeout;
 * on -ETIMEDOUT the message names the ranks that never arrived) and builds
 * the communicator. opts may be NULL (= ddp_options_init defaults). On
 * failure *out is NULL and a message is written to errbuf (if not NULL).
 * The caller frees the context with ddp_free(). */
DDP_API int ddp_init(const struct ddp_options *opts, struct ddp_ctx **out, char *errbuf,
		     size_t errbuf_len);

/* Waits for queued collectives, leaves the store and frees everything.
 * NULL is allowed. */
DDP_API void ddp_free(struct ddp_ctx *ctx);

/* Aborts the communicator: queued, running and later collectives fail at
 * once with -ECANCELED (peers see this rank as gone and fail too), until
 * ddp_reform. For the launcher's notice that the round is over while a
 * collective waits. Safe from any thread and async-signal-safe (an atomic
 * flag and the transport's own abort: futex wake, shutdown(2)), but not
 * concurrently with ddp_reform or ddp_free. NULL is allowed. */
DDP_API void ddp_abort(struct ddp_ctx *ctx);

/* Rebuilds the communicator in place for a new membership, without leaving
 * the process: opts (NULL: ddp_options_init, i.e. the environment, read as
 * ddp_init reads it) give the new rank, world size, local sizes, store
 * (init_method) and namespace (run_id, attempt: use a new attempt, or a new
 * store, for every round, so no value of an earlier round is read).
 *
 * First the old communicator is aborted (every collective still queued or
 * running fails with -ECANCELED), its communication thread joined, and its
 * store connection, sockets, shared-memory mappings and pidfds closed;
 * then the new one is built as ddp_init builds it: every rank of the new
 * membership calls ddp_reform (or, a joining process, ddp_init) with the
 * same world size, store and namespace. The application's memory is not
 * touched: buffers from ddp_mem_alloc stay valid (and keep their in-place
 * path on shared memory) when the new communicator uses the same backend
 * and transport; free them first if it may not. Call from the thread that
 * owns the context, after every ddp_work of the old communicator was
 * waited for; free reducers before and create them again after (their
 * creation checks the model and broadcasts rank 0's parameters, which a
 * joining rank needs).
 *
 * Returns 0, or a negative errno with errbuf (if not NULL) and ddp_error
 * naming the cause (e.g. -ETIMEDOUT naming the ranks of the new membership
 * that never arrived). After a failure the context has no communicator:
 * its collectives return -ECANCELED; call ddp_reform again or ddp_free.
 * The codes that tell what to do next:
 *   -ESTALE      superseded (below): take the later round and re-form again
 *   -ECANCELED   aborted: a wait of the set-up was cancelled otherwise
 *   -ETIMEDOUT, -ECONNRESET ...  the new membership did not form (a rank
 *                never arrived or died meanwhile: ddp_rejoin_retryable)
 *   -EINVAL, -ENOMEM  bad options, no memory
 * ddp_rejoin (below) is the loop most programs want instead.
 *
 * Under ddplaunch (ddp_resizable), a later round the agent sends while
 * ddp_reform runs, or one already waiting when it starts, supersedes it:
 * its waits (the store's connect, the other ranks' keys, the transport's
 * set-up, NCCL's communicator creation) notice within about 50 ms and it
 * returns -ESTALE, errbuf "superseded by round R"; take that round with
 * ddp_next_round and call ddp_reform again. A round heard after the new
 * communicator is complete aborts it instead (ddp_reform returns 0; its
 * first collective fails with -ECANCELED), as it aborts any
 * communicator. */
DDP_API int ddp_reform(struct ddp_ctx *ctx, const struct ddp_options *opts, char *errbuf,
		       size_t errbuf_len);

/* A new round from the launcher, for a worker that is resized in place.
 * opts is ready for ddp_reform (new rank, world and local sizes, the new
 * round's store as init_method, which points into this struct: pass this
 * struct's opts, not a copy's; attempt = round - 1). */
struct ddp_round {
	struct ddp_options opts;
	int round;	      /* the launcher's rendezvous round (DDP_ROUND) */
	int group_rank;	      /* this node's rank among the nodes */
	int group_world_size; /* nodes in the round */
	/* "tcp://" + an address of up to 255 bytes (the agent channel's
	 * limit, common/agent_wire.h) + ":PORT" */
	char init_method[272];
};

/* 1 when this worker can be resized in place (ddp_init found ddplaunch's
 * agent channel, DDP_AGENT_FD, and told the agent so), else 0. Then, on a
 * membership change (a node died, left or joined), the agent does not
 * restart this process: it sends the new round, which aborts the
 * communicator (collectives in flight or later return -ECANCELED) and
 * waits for ddp_next_round. A worker of any program without libddp, or
 * whose context was freed, is restarted as before. */
DDP_API int ddp_resizable(const struct ddp_ctx *ctx);

/* resizable 0: tells the agent that this program does not re-form in place
 * (it exits on a collective error), so that on a membership change the
 * agent stops and restarts it, unchanged from before, with no failure
 * counted; ddp_resizable then returns 0 and ddp_next_round -ENOTSUP. Call
 * it right after ddp_init. resizable 1 says "resizable" again. Returns 0,
 * or -ENOTSUP when there is no agent channel. */
DDP_API int ddp_set_resizable(struct ddp_ctx *ctx, int resizable);

/* Tells the agent that a replica's state differed from the others' after
 * step `step` (a program's replica check): rank `rank`, healed (it took
 * the majority's state) or not (the run stops), `tensor` the first tensor
 * that differed (1-255 bytes, no space or control byte). The agent lists
 * it in summary.json's "replicas". Returns 0, -ENOTSUP (no agent
 * channel), -ERANGE (step or rank past 2^31-1, a name the channel's
 * grammar refuses) or -EPIPE (the agent is gone). */
DDP_API int ddp_agent_replica(struct ddp_ctx *ctx, uint64_t step, int rank, int healed,
			      const char *tensor);

/* Tells the agent that rank `rank` of node `node` was named slow at step
 * `step` (cause 1: its compute, 2: its link) or cleared (cause 0), being
 * `slower` times as slow as the others (a program's straggler detector).
 * The agent lists it in summary.json's "stragglers" and on /metrics.
 * Returns 0, -ENOTSUP (no agent channel), -EINVAL (another cause),
 * -ERANGE (step, rank or node past 2^31-1 or negative, slower negative,
 * not finite or past 21474836) or -EPIPE (the agent is gone). */
DDP_API int ddp_agent_straggler(struct ddp_ctx *ctx, uint64_t step, int rank, int node, int cause,
				double slower);

/* Waits up to timeout_ms (0: the context's timeout) for a round the
 * launcher sent that was not taken yet, and fills *out; then call
 * ddp_reform(ctx, &out->opts, ...) and redo the interrupted step. Only the
 * latest round heard is kept. Before returning 0 it tells the agent
 * "took R" on the channel: this process re-forms in round R (the agent
 * treats a worker sent round R that exits with a status, not a signal,
 * before saying so as one that does not re-form in place: it restarts the
 * node's group in that round and charges nothing; a death by a signal is a
 * death, replaced alone or charged: launcher/agent/agent_decide.h).
 * Returns 0, -ENOTSUP (no agent channel: exit, and the
 * launcher restarts the worker), -ETIMEDOUT, -EPIPE (the agent is gone) or
 * -EINVAL. A round heard while ddp_reform runs supersedes it (-ESTALE,
 * see ddp_reform): call ddp_next_round again. */
DDP_API int ddp_next_round(struct ddp_ctx *ctx, struct ddp_round *out, uint64_t timeout_ms);

/* Re-joins the launcher's membership in place, after a collective failed
 * in a resizable worker (ddp_resizable): waits for the next round
 * (ddp_next_round, up to timeout_ms each time, 0: the context's timeout),
 * re-forms the communicator for it (ddp_reform), then runs after(ctx, arg)
 * (NULL: nothing). It tries again with the next round, for as long as
 * rounds come, when the membership changed again meanwhile: a round
 * superseded the re-formation (-ESTALE), the re-formation failed with a
 * code ddp_rejoin_retryable accepts (a rank never arrived or died), or
 * after() failed after one of its collectives on ctx failed. On success
 * *out (if not NULL) is the round joined, and ddp_rank, ddp_world_size and
 * ddp_attempt give the new membership.
 *
 * after() is the application's part of a re-formation: typically the
 * hand-over of the training state to the ranks that lack it (a process
 * that joined, a rank a step behind), with collectives on ctx, which has
 * the new membership. It runs on the calling thread once per round that
 * re-formed (so maybe several times, each on a fresh communicator), and
 * must not call ddp_rejoin, ddp_reform or ddp_free. It returns >= 0 when
 * done, or a negative errno: after a failed collective on ctx (the
 * membership changed again) ddp_rejoin takes the next round; otherwise
 * (-EPROTO: a peer's state is another job's; -ENOMEM; a file's -EIO ...)
 * the code is fatal and ddp_rejoin returns it unchanged.
 *
 * Returns 0, or:
 *   -ENOTSUP     not resizable (no agent channel, or ddp_set_resizable 0):
 *                exit, and the launcher restarts the worker
 *   -EPIPE       the agent is gone (the launcher ended)
 *   -ETIMEDOUT   no round came within timeout_ms (errbuf also names the
 *                failure that made it wait, if any)
 *   -EINVAL      ctx NULL
 *   any other    a fatal code, passed through: ddp_reform's (-ENOMEM,
 *                -EINVAL for bad options ...) or after()'s
 * (never -ESTALE: superseded rounds are taken inside). errbuf (if not
 * NULL) and ddp_error name the cause. The context is left as ddp_reform
 * leaves it: without a communicator after a failed re-formation (call
 * ddp_rejoin again or ddp_free), with the new one after an after() that
 * failed fatally. */
DDP_API int ddp_rejoin(struct ddp_ctx *ctx, struct ddp_round *out, uint64_t timeout_ms,
		       int (*after)(struct ddp_ctx *ctx, void *arg), void *arg, char *errbuf,
		       size_t errbuf_len);

/* 1 when rc, returned by ddp_reform or by a collective, means that the
 * membership changed (a later round, a rank gone or never arrived, the
 * communicator aborted): -ESTALE, -ECANCELED, -ECONNRESET, -ECONNABORTED,
 * -ECONNREFUSED, -EPIPE, -ENOTCONN, -ETIMEDOUT, -EHOSTUNREACH and
 * -ENETUNREACH (NCCL's peer errors are -ECONNRESET; its -EIO is a device
 * failure, as a checkpoint's -EIO is a disk's). 0 for anything else. What
 * ddp_rejoin decides with, for a program's own loop around its collectives
 * (a step that failed so: ddp_rejoin, then redo it). */
DDP_API int ddp_rejoin_retryable(int rc);

/* What became of a program's promise that its result is a 1-rank run's
 * bits (ddp-train's numeric identity, worker/train/numerics.h): kept
 * (every rank computes alike), dropped (a difference the user accepted) or
 * refused (this rank was refused, and exits). */
enum ddp_numerics {
	DDP_NUMERICS_KEPT,
	DDP_NUMERICS_DROPPED,
	DDP_NUMERICS_REFUSED,
};

/* Tells the launcher's agent (the channel's "numerics" line,
 * docs/protocol.md) for its summary (summary.json "numerics"): promise and
 * one line of text (kept: the identity; dropped: the difference accepted;
 * refused: why), cut to 900 bytes, bytes outside printable ASCII written
 * as '?'. The agent keeps each worker's latest. Returns 0, -ENOTSUP (no
 * agent channel: not under ddplaunch), -EPIPE (the agent is gone) or
 * -EINVAL (ctx or text NULL, an unknown promise). */
DDP_API int ddp_say_numerics(struct ddp_ctx *ctx, enum ddp_numerics promise, const char *text);

DDP_API int ddp_rank(const struct ddp_ctx *ctx);
DDP_API int ddp_world_size(const struct ddp_ctx *ctx);
DDP_API int ddp_local_rank(const struct ddp_ctx *ctx);
DDP_API int ddp_local_world_size(const struct ddp_ctx *ctx);
/* The restart attempt (TORCHELASTIC_RESTART_COUNT) this context belongs to. */
DDP_API int ddp_attempt(const struct ddp_ctx *ctx);
/* "cpu-shm", "cpu-ring", "nccl", ... (static string). */
DDP_API const char *ddp_backend_name(const struct ddp_ctx *ctx);
/* 1 if collective buffers must be CUDA device pointers, 0 for host memory. */
DDP_API int ddp_device_memory(const struct ddp_ctx *ctx);
/* The CUDA device the backend uses, or -1 for the CPU backend. */
DDP_API int ddp_device(const struct ddp_ctx *ctx);
/* Message of the last error on this context ("" if none); valid until the
 * next call on the context. */
DDP_API const char *ddp_error(const struct ddp_ctx *ctx);

/* ---- collectives (blocking; buffers in the backend's memory) ---- */

/* In place: buf[i] = op over ranks of buf[i]. Bit-identical result on every
 * rank; the same from run to run for the same world size. count may be 0. */
DDP_API int ddp_allreduce(struct ddp_ctx *ctx, void *buf, size_t count, enum ddp_dtype dtype,
			  enum ddp_op op);
/* Copies root's buf to every rank's buf. */
DDP_API int ddp_broadcast(struct ddp_ctx *ctx, void *buf, size_t count, enum ddp_dtype dtype,
			  int root);
/* recv (world_size * count elements) = concatenation of every rank's send
 * (count elements), in rank order. send and recv must not overlap. */
DDP_API int ddp_allgather(struct ddp_ctx *ctx, const void *send, void *recv, size_t count,
			  enum ddp_dtype dtype);
/* Returns once every rank has entered the barrier. */
DDP_API int ddp_barrier(struct ddp_ctx *ctx);

/* ---- memory for collectives ---- */

/* Allocates `bytes` in the backend's memory (device memory with NCCL).
 * With the shared-memory CPU transport the block lives in this rank's
 * arena, which the node's other ranks have mapped: an all-reduce whose
 * buffers all come from ddp_mem_alloc (same sizes on every rank) then runs
 * in place, without staging copies. Falls back to ordinary memory when the
 * arena is full. Free with ddp_mem_free. */
DDP_API int ddp_mem_alloc(struct ddp_ctx *ctx, size_t bytes, void **out);
/* NULL is allowed. */
DDP_API void ddp_mem_free(struct ddp_ctx *ctx, void *ptr);

/* ---- the application's CUDA stream ---- */

/* Tells libddp which CUDA stream the application's kernels run on:
 * cuda_stream is a cudaStream_t (void * here, so that this header needs no
 * CUDA header) of the device ddp_device() names; NULL means the legacy
 * default stream, which is also the setting after ddp_init.
 *
 * With the NCCL backend, a collective on memory that is not from
 * ddp_mem_alloc (the application's own tensors), and every copy the reducer
 * makes (ddp_reducer_grad_ready, ddp_reducer_finish), first waits for the
 * work queued on this stream so far (an event, not a device-wide
 * synchronisation), and the stream waits for the reducer's copies before
 * its later kernels run; a bucket reduced in place (see ddp_reducer_new)
 * waits for the events ddp_reducer_grad_ready recorded. So gradients are
 * read once written, and buckets all-reduce while the rest of the backward
 * pass runs.
 *
 * Call it from the application thread after ddp_init, before the
 * collectives that must be ordered after that stream's kernels, and again
 * whenever the stream changes: queued asynchronous work (ddp_allreduce_async,
 * the reducer's buckets) that has not started yet orders itself after the
 * stream set when it starts. The stream must stay valid until it is
 * replaced or reset with NULL, or until ddp_free: reset it before
 * destroying the stream.
 *
 * The CPU backend has no streams: its collectives are synchronous on host
 * memory; it accepts any value and ignores it. Returns 0 (-EINVAL if ctx is
 * NULL). */
DDP_API int ddp_set_compute_stream(struct ddp_ctx *ctx, void *cuda_stream);

/* ---- asynchronous collectives ---- */

struct ddp_work;

/* Queues an all-reduce on the communication thread and returns at once;
 * *out is a handle that ddp_work_wait() completes and frees. buf must stay
 * valid and untouched until then. */
DDP_API int ddp_allreduce_async(struct ddp_ctx *ctx, void *buf, size_t count, enum ddp_dtype dtype,
				enum ddp_op op, struct ddp_work **out);
/* Waits for the operation, frees the handle and returns its result. */
DDP_API int ddp_work_wait(struct ddp_work *work);

/* ---- progress, for the launcher's agent ---- */

/*
 * Under ddplaunch each worker has a progress page (a shared page of memory
 * its agent reads; DDP_PROGRESS_FILE names it, and the first ddp_init maps
 * it for the life of the process and removes the variable from the
 * environment). libddp writes it with plain stores and the vDSO's clock,
 * no system call per collective: the communicator's round (ddp_attempt()
 * + 1, which is the launcher's DDP_ROUND for a worker re-formed in place),
 * rank and world; every collective it runs (its op, its number in the
 * round's communicator, from 1, the same on every rank of the round; its
 * bytes; the gradient bucket the reducer hands it; when it
 * entered and left; on the CPU transports, the rank whose data it waits
 * for, and a heartbeat at least every 100 ms while it waits), and the
 * phases it knows: STARTUP until the first communicator,
 * COMPUTE after every ddp_init or ddp_reform, COLLECTIVE inside a
 * collective issued in COMPUTE, REFORM in ddp_next_round, ddp_reform and
 * ddp_rejoin, HANDOVER while ddp_rejoin's after() runs, SHUTDOWN in
 * ddp_free. A collective issued in another phase (a checkpoint's barrier)
 * keeps that phase, so the agent does not time a save as a collective.
 * Without the variable, or if the page cannot be mapped (a debug line
 * says why), nothing is written and nothing fails: progress is a report,
 * never a condition for training.
 *
 * The phases are common/progress.h's (the page's layout), repeated here so
 * that this header stands alone.
 */
#ifndef DDP_PROGRESS_PHASE_DEFINED
#define DDP_PROGRESS_PHASE_DEFINED
enum ddp_progress_phase {
	DDP_PHASE_NONE = 0,   /* nothing reported yet */
	DDP_PHASE_STARTUP,    /* before its first round: rendezvous, transport set-up */
	DDP_PHASE_REFORM,     /* re-forming in place: waiting for or joining a round */
	DDP_PHASE_HANDOVER,   /* giving or taking state */
	DDP_PHASE_COMPUTE,    /* in a step, outside any collective */
	DDP_PHASE_COLLECTIVE, /* inside the collective (op, seq) */
	DDP_PHASE_CHECKPOINT, /* saving or loading a checkpoint */
	DDP_PHASE_EVAL,	      /* evaluating */
	DDP_PHASE_FINAL,      /* the final save */
	DDP_PHASE_SHUTDOWN,   /* training is over, tearing down */
	DDP_PHASE_COUNT
};
#endif

/* What the program does now, until it says otherwise (or libddp changes it
 * as above): STARTUP, REFORM, HANDOVER, COMPUTE, CHECKPOINT, EVAL, FINAL or
 * SHUTDOWN; COMPUTE again after the part. Returns 0 (also without a page),
 * or -EINVAL for NONE, COLLECTIVE (libddp's own) or an unknown phase. ctx
 * may be NULL (the page is the process's). */
DDP_API int ddp_progress_phase(struct ddp_ctx *ctx, enum ddp_progress_phase phase);

/* A committed training step: step, the number of steps committed so far;
 * step_ns, its duration; compute_ns and wait_ns, its time outside and
 * inside collectives; shards, the virtual shards this rank computed in it
 * (0 outside shard mode). Returns 0 (also without a page). ctx may be
 * NULL. */
DDP_API int ddp_progress_step(struct ddp_ctx *ctx, uint64_t step, uint64_t step_ns,
			      uint64_t compute_ns, uint64_t wait_ns, uint32_t shards);

/* ---- key-value access to the job's store (namespaced by run and attempt) ---- */

/* Sets key (under this attempt's namespace) to value. */
DDP_API int ddp_store_set(struct ddp_ctx *ctx, const char *key, const void *value, size_t len);
/* Waits (up to the context's timeout) for key and returns a malloc'ed,
 * NUL-terminated copy of its value; the caller frees *value. */
DDP_API int ddp_store_get(struct ddp_ctx *ctx, const char *key, void **value, size_t *len);

/* ---- distributed sampler (pure; PyTorch's DistributedSampler semantics) ---- */

/*
 * Each rank gets a disjoint share of ceil(n / replicas) indices (drop_last:
 * floor), padded by repeating indices from the start of the (shuffled) list
 * when n is not divisible. The shuffle is a permutation seeded by
 * (seed, epoch): every rank computes the same permutation, and the epoch
 * advances by itself when an epoch is exhausted, so forgetting set_epoch is
 * impossible. The position (epoch, pos) can be saved and restored.
 */
struct ddp_sampler {
	size_t dataset_len;
	size_t num_replicas;
	size_t rank;
	uint64_t seed;
	int shuffle;
	int drop_last;
	size_t num_samples; /* indices per rank per epoch */
	size_t total_size;  /* num_samples * num_replicas */
	uint64_t epoch;
	size_t pos;	 /* next index of this epoch to hand out */
	size_t *indices; /* this rank's num_samples indices for `epoch` */
};

/* Returns -EINVAL if replicas == 0, rank >= replicas, or there would be no
 * sample per rank with drop_last. Epoch 0, position 0. */
DDP_API int ddp_sampler_init(struct ddp_sampler *s, size_t dataset_len, size_t num_replicas,
			     size_t rank, uint64_t seed, int shuffle, int drop_last);
DDP_API void ddp_sampler_release(struct ddp_sampler *s);
/* Moves to the start of `epoch`. */
DDP_API int ddp_sampler_set_epoch(struct ddp_sampler *s, uint64_t epoch);
/* Writes the next index to *index and returns 1, or returns 0 at the end of
 * the epoch after advancing to the start of the next epoch. */
DDP_API int ddp_sampler_next(struct ddp_sampler *s, size_t *index);
/* Fills up to max indices; returns how many (0 = epoch ended, advanced). */
DDP_API size_t ddp_sampler_next_batch(struct ddp_sampler *s, size_t *indices, size_t max);
/* Restores a saved (epoch, pos); -EINVAL if pos > num_samples. */
DDP_API int ddp_sampler_seek(struct ddp_sampler *s, uint64_t epoch, size_t pos);

/* ---- gradient reducer (DDP's bucketed all-reduce) ---- */

#define DDP_BUCKET_CAP_DEFAULT	     (25u << 20) /* bytes, like DDP's bucket_cap_mb=25 */
#define DDP_FIRST_BUCKET_CAP_DEFAULT (1u << 20)	 /* like DDP's first bucket of 1 MiB */

/* A parameter or buffer as the reducer sees it. Pointers are in the
 * backend's memory and must stay valid for the reducer's life. name and
 * shape are checked to match across ranks. */
struct ddp_param {
	const char *name;
	enum ddp_dtype dtype;
	int ndim;
	int64_t shape[8];
	void *data;	   /* the values (broadcast from rank 0 at start) */
	void *grad;	   /* the gradient (averaged across ranks); NULL for buffers */
	int requires_grad; /* 0: frozen, excluded from reduction */
};

struct ddp_reducer_options {
	size_t bucket_cap_bytes;       /* 0: DDP_BUCKET_CAP_DEFAULT */
	size_t first_bucket_cap_bytes; /* 0: DDP_FIRST_BUCKET_CAP_DEFAULT */
};

struct ddp_reducer;

/* Number of elements of a parameter (product of its shape; 1 for ndim 0). */
DDP_API size_t ddp_param_numel(const struct ddp_param *p);

/* Checks that every rank has the same parameter and buffer names, dtypes and
 * shapes (-EINVAL naming the first mismatch, on every rank), broadcasts
 * params' data and buffers from rank 0, and plans buckets: trainable params
 * in reverse order, a bucket closed when it would exceed its cap (the first
 * bucket's cap is first_bucket_cap_bytes). params and buffers arrays are
 * copied; names are copied. opts may be NULL.
 *
 * A bucket holds consecutive trainable params. When their grads lie back to
 * back in parameter order (one flat gradient buffer, as llm.c and ddp-train
 * keep), the bucket is that range of memory and is all-reduced in place: no
 * bucket buffer, no copy in or out (from ddp_mem_alloc memory the
 * shared-memory transport also skips its staging copies). Otherwise the
 * bucket has a buffer of its own. Results are the same bits either way. */
DDP_API int ddp_reducer_new(struct ddp_ctx *ctx, const struct ddp_param *params, size_t nparams,
			    const struct ddp_param *buffers, size_t nbuffers,
			    const struct ddp_reducer_options *opts, struct ddp_reducer **out);
DDP_API void ddp_reducer_free(struct ddp_reducer *r);

/* Number of buckets, and which bucket a parameter is in (-1: frozen). */
DDP_API size_t ddp_reducer_num_buckets(const struct ddp_reducer *r);
DDP_API int ddp_reducer_bucket_of(const struct ddp_reducer *r, size_t param_index);

/* Call before each backward pass. sync = 0 is no_sync (gradient accumulation
 * step): nothing is reduced until a backward with sync = 1. */
DDP_API int ddp_reducer_prepare(struct ddp_reducer *r, int sync);
/* Marks params[param_index]'s gradient final for this backward pass; when a
 * bucket's gradients are all final its all-reduce (avg) is started on the
 * communication thread, overlapping the rest of the backward pass. Frozen
 * params are ignored. A gradient marked final must not be written again
 * before ddp_reducer_finish returns (in place, its bucket is being
 * all-reduced where it lies). */
DDP_API int ddp_reducer_grad_ready(struct ddp_reducer *r, size_t param_index);
/* Starts the buckets not yet started, waits for all of them and writes the
 * averaged gradients back to each param's grad (in place: they are there). */
DDP_API int ddp_reducer_finish(struct ddp_reducer *r);
/* Broadcasts the buffers (e.g. BatchNorm running statistics) from rank 0,
 * as DDP does before each forward pass. */
DDP_API int ddp_reducer_sync_buffers(struct ddp_reducer *r);

struct ddp_reducer_stats {
	uint64_t steps;		/* finished synchronised backward passes */
	double comm_seconds;	/* time buckets spent in all-reduce */
	double wait_seconds;	/* time ddp_reducer_finish blocked (exposed communication) */
	uint64_t bytes_reduced; /* gradient bytes all-reduced */
	uint64_t early_buckets; /* buckets started by grad_ready, before finish
				 * (the all-reduces that overlapped backward) */
};
DDP_API void ddp_reducer_get_stats(const struct ddp_reducer *r, struct ddp_reducer_stats *st);

/* ---- checkpoints (safetensors files, host memory) ---- */

/* A named tensor in host memory. For saving, data points to numel*size bytes;
 * for loading, data is the destination. */
struct ddp_tensor {
	const char *name;
	enum ddp_dtype dtype;
	int ndim;
	int64_t shape[8];
	void *data;
};

/* Metadata: string pairs stored in the safetensors "__metadata__" map (the
 * trainer keeps step, epoch, sampler position, LR schedule and RNG state
 * there). */
struct ddp_meta {
	const char *key;
	const char *value;
};

/* Writes a safetensors file: PATH.tmp, fsync, rename to PATH, fsync the
 * directory, so an interrupted write leaves the previous PATH intact.
 * Names must be unique, non-empty and shorter than 4096 bytes. Each
 * tensor's checksum (xxHash XXH3_64bits of its bytes, 16 lowercase hex
 * digits) goes into the metadata as "xxh3_64:NAME", so metadata keys may
 * not start with "xxh3_64:". Pure file I/O: no ranks involved. errbuf gets
 * a message on failure. */
DDP_API int ddp_ckpt_write(const char *path, const struct ddp_tensor *tensors, size_t ntensors,
			   const struct ddp_meta *meta, size_t nmeta, char *errbuf,
			   size_t errbuf_len);

/* A safetensors file read into memory. */
struct ddp_ckpt;

/* Reads and validates a safetensors file: a regular file (a directory,
 * FIFO or device is refused unread), header JSON, dtypes F32/F64 and others
 * by size, the tensors filling the data section exactly (no overlap, gap or
 * trailing bytes), metadata values all strings, and every tensor that has
 * a stored checksum ("xxh3_64:NAME", as ddp_ckpt_write stores them)
 * matching it. A file without checksums (written by PyTorch or another
 * tool) opens; its tensors are unverified (ddp_ckpt_tensor_verified).
 * -EINVAL with a message for a malformed or corrupt file or one that is not
 * a regular file (-EISDIR for a directory), -ENOENT if missing. */
DDP_API int ddp_ckpt_open(const char *path, struct ddp_ckpt **out, char *errbuf, size_t errbuf_len);
DDP_API void ddp_ckpt_free(struct ddp_ckpt *ck);
/* Metadata value for key, or NULL. Valid until ddp_ckpt_free. */
DDP_API const char *ddp_ckpt_meta(const struct ddp_ckpt *ck, const char *key);
DDP_API size_t ddp_ckpt_num_tensors(const struct ddp_ckpt *ck);
/* The i-th tensor (in file order): its name and shape in *t, t->data
 * pointing into the checkpoint's memory (not necessarily aligned: copy it
 * out). -ERANGE past the end; -ENOTSUP (t still filled, dtype meaningless)
 * for a dtype other than F32/F64. */
DDP_API int ddp_ckpt_tensor(const struct ddp_ckpt *ck, size_t i, struct ddp_tensor *t);
/* 1 if the i-th tensor's bytes matched the checksum stored with it, 0 if
 * the file stores none for it (it was not verified); -ERANGE past the end. */
DDP_API int ddp_ckpt_tensor_verified(const struct ddp_ckpt *ck, size_t i);

enum ddp_load_flags {
	DDP_LOAD_STRICT = 0,	/* refuse missing/unexpected/mismatched tensors */
	DDP_LOAD_NON_STRICT = 1 /* load what matches, report the rest */
};

/* Result of ddp_ckpt_load(): each list is a malloc'ed ", "-separated string
 * of names (NULL when empty); report is a printable multi-line summary
 * (NULL when there is nothing to say: every tensor matched without a prefix
 * change; when some did not, it names those loaded too). Free with
 * ddp_load_report_release(). */
struct ddp_load_report {
	int prefix_stripped; /* 1: the file's names carried "module." (or ours did) */
	size_t nloaded;
	size_t nmissing, nunexpected, nmismatched;
	char *missing;
	char *unexpected;
	char *mismatched;
	char *report;
	char *loaded; /* the tensors that matched (copied unless a strict load refused) */
};
DDP_API void ddp_load_report_release(struct ddp_load_report *rep);

/* Copies the checkpoint's tensors into `tensors` by name. A "module." prefix
 * on either side is ignored (reported once in report). Strict: if any tensor
 * is missing from the file, unexpected in the file, or has another
 * dtype/shape, nothing is copied and -EINVAL is returned with the lists in
 * rep and in the error message. Non-strict (as PyTorch's strict=False): the
 * matching tensors are copied, the others are not touched (they keep
 * whatever the caller put there, e.g. a fresh initialisation), and the
 * lists are reported. rep may be NULL. */
DDP_API int ddp_ckpt_load(const struct ddp_ckpt *ck, const struct ddp_tensor *tensors,
			  size_t ntensors, enum ddp_load_flags flags, struct ddp_load_report *rep,
			  char *errbuf, size_t errbuf_len);

/* Collective checkpoint save: rank 0 writes (ddp_ckpt_write), then an
 * all-reduce of its status, a barrier: the file is complete on return on
 * every rank, and no rank returns 0 unless every rank entered the save (one
 * that died before makes every rank fail, so all can re-form). Non-zero
 * ranks' tensors are not read. A failed write returns rank 0's negative errno on
 * every rank (-ENOSPC for a full disk), with a message naming the file. */
DDP_API int ddp_checkpoint_save(struct ddp_ctx *ctx, const char *path,
				const struct ddp_tensor *tensors, size_t ntensors,
				const struct ddp_meta *meta, size_t nmeta);
/* Collective load: a barrier (so rank 0's last save is complete), then every
 * rank opens the file and loads as ddp_ckpt_load. *ck_out (if not NULL)
 * receives the open checkpoint for reading metadata; free it. */
DDP_API int ddp_checkpoint_load(struct ddp_ctx *ctx, const char *path,
				const struct ddp_tensor *tensors, size_t ntensors,
				enum ddp_load_flags flags, struct ddp_load_report *rep,
				struct ddp_ckpt **ck_out);

#ifdef __cplusplus
}
#endif

#endif
