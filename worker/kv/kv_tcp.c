/*
 * kv_tcp.c - the kv interface over the TCP store client (store_client.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "kv.h"
#include "store_client.h"

struct kv_tcp {
	struct kv base;
	struct store_client *client;
};

static struct store_client *kv_tcp_client(struct kv *kv)
{
	return ((struct kv_tcp *)kv)->client;
}

static int kv_tcp_set(struct kv *kv, const char *key, const void *value, size_t len)
{
	return store_client_set(kv_tcp_client(kv), key, value, len);
}

static int kv_tcp_get(struct kv *kv, const char *key, uint64_t timeout_ms, void **value,
		      size_t *len)
{
	return store_client_get(kv_tcp_client(kv), key, timeout_ms ? timeout_ms : 1, value, len);
}

static int kv_tcp_add(struct kv *kv, const char *key, int64_t delta, int64_t *result)
{
	int64_t dummy;

	return store_client_add(kv_tcp_client(kv), key, delta, result ? result : &dummy);
}

static int kv_tcp_check(struct kv *kv, const char *const *keys, size_t nkeys)
{
	return store_client_check(kv_tcp_client(kv), keys, nkeys);
}

static int kv_tcp_wait(struct kv *kv, const char *const *keys, size_t nkeys, uint64_t timeout_ms)
{
	return store_client_wait(kv_tcp_client(kv), keys, nkeys, timeout_ms ? timeout_ms : 1);
}

static const char *kv_tcp_error(const struct kv *kv)
{
	return store_client_error(((const struct kv_tcp *)kv)->client);
}

static void kv_tcp_free(struct kv *kv)
{
	store_client_free(kv_tcp_client(kv));
	free(kv);
}

static const struct kv_ops kv_tcp_ops = {
    .set = kv_tcp_set,
    .get = kv_tcp_get,
    .add = kv_tcp_add,
    .check = kv_tcp_check,
    .wait = kv_tcp_wait,
    .error = kv_tcp_error,
    .free = kv_tcp_free,
};

int kv_tcp_new(const char *host, int port, uint64_t timeout_ms, struct kv **out, char *errbuf,
	       size_t errbuf_len)
{
	struct kv_tcp *t = calloc(1, sizeof(*t));
	int rc;

	*out = NULL;
	if (!t)
		return -ENOMEM;
	t->base.ops = &kv_tcp_ops;
	rc = store_client_connect(host, port, timeout_ms, &t->client, errbuf, errbuf_len);
	if (rc < 0) {
		free(t);
		return rc;
	}
	*out = &t->base;
	return 0;
}
