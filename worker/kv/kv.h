/*
 * kv.h - the store as libddp's internals see it: a small key-value interface
 * with two implementations, the TCP store (store_client.h) and a store kept
 * in a shared file (file:// init method).
 *
 * Keys are used exactly as given (callers add the run/attempt namespace).
 * Every call returns >= 0 or a negative errno; kv_error() describes the last
 * failure. A kv is used by one thread at a time.
 */
#ifndef DDP_WORKER_KV_H
#define DDP_WORKER_KV_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct kv;

struct kv_ops {
	int (*set)(struct kv *kv, const char *key, const void *value, size_t len);
	/* Waits up to timeout_ms for key; *value malloc'ed, NUL-terminated. */
	int (*get)(struct kv *kv, const char *key, uint64_t timeout_ms, void **value, size_t *len);
	int (*add)(struct kv *kv, const char *key, int64_t delta, int64_t *result);
	/* 1 if every key exists, 0 if not. */
	int (*check)(struct kv *kv, const char *const *keys, size_t nkeys);
	/* Waits up to timeout_ms until every key exists (-ETIMEDOUT). */
	int (*wait)(struct kv *kv, const char *const *keys, size_t nkeys, uint64_t timeout_ms);
	const char *(*error)(const struct kv *kv);
	void (*free)(struct kv *kv);
};

struct kv {
	const struct kv_ops *ops;
	/* NULL, or a flag that ends kv_get's and kv_wait's waits: polled
	 * every KV_CANCEL_POLL_MS, -ECANCELED once set (ddp_reform's "a later
	 * round superseded this one"). The owner sets it after creation. */
	const atomic_int *cancel;
};

/* How often a wait looks at kv->cancel: a wait is cut into slices this
 * long (the TCP store cancels each timed-out slice on the server, so the
 * connection stays usable). */
#define KV_CANCEL_POLL_MS 50

/* TCP store at host:port (retries a refused connect until timeout_ms). */
int kv_tcp_new(const char *host, int port, uint64_t timeout_ms, struct kv **out, char *errbuf,
	       size_t errbuf_len);
/* Store kept in the file at path (created if missing), shared by every rank
 * through fcntl record locks. */
int kv_file_new(const char *path, struct kv **out, char *errbuf, size_t errbuf_len);

static inline int kv_set(struct kv *kv, const char *key, const void *value, size_t len)
{
	return kv->ops->set(kv, key, value, len);
}

/* Waits up to timeout_ms for key; -ECANCELED as soon as kv->cancel is set. */
int kv_get(struct kv *kv, const char *key, uint64_t timeout_ms, void **value, size_t *len);

static inline int kv_add(struct kv *kv, const char *key, int64_t delta, int64_t *result)
{
	return kv->ops->add(kv, key, delta, result);
}

static inline int kv_check(struct kv *kv, const char *const *keys, size_t nkeys)
{
	return kv->ops->check(kv, keys, nkeys);
}

/* Waits up to timeout_ms until every key exists (-ETIMEDOUT);
 * -ECANCELED as soon as kv->cancel is set. */
int kv_wait(struct kv *kv, const char *const *keys, size_t nkeys, uint64_t timeout_ms);

/* 1 when kv->cancel is set. */
static inline int kv_cancelled(const struct kv *kv)
{
	return kv->cancel && atomic_load(kv->cancel);
}

static inline const char *kv_error(const struct kv *kv)
{
	return kv->ops->error(kv);
}

static inline void kv_free(struct kv *kv)
{
	if (kv)
		kv->ops->free(kv);
}

/* Every rank sets "<prefix>/<r>" for its own r (value: `value`), then waits
 * for all world_size of them. On -ETIMEDOUT, errbuf names the ranks whose
 * key never appeared ("ranks 2, 3 never arrived at <what>"). If values is
 * not NULL, values[r]/lens[r] receive malloc'ed copies of every rank's value
 * (caller frees each). */
int kv_exchange(struct kv *kv, const char *prefix, int rank, int world_size, const void *value,
		size_t len, uint64_t timeout_ms, const char *what, void **values, size_t *lens,
		char *errbuf, size_t errbuf_len);

#endif
