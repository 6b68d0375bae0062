/*
 * kv.c - helpers over the kv interface shared by ddp_init and the backends.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"
#include "timeutil.h"

/* The next slice of a wait that ends at deadline: at most
 * KV_CANCEL_POLL_MS when the wait can be cancelled. 0: the deadline has
 * passed. */
static uint64_t kv_slice_ms(const struct kv *kv, uint64_t deadline)
{
	uint64_t left = time_left_ms(deadline);

	return kv->cancel && left > KV_CANCEL_POLL_MS ? KV_CANCEL_POLL_MS : left;
}

int kv_get(struct kv *kv, const char *key, uint64_t timeout_ms, void **value, size_t *len)
{
	uint64_t deadline = time_now_ms() + timeout_ms, slice;
	int rc;

	if (!kv->cancel)
		return kv->ops->get(kv, key, timeout_ms, value, len);
	do {
		if (kv_cancelled(kv))
			return -ECANCELED;
		slice = kv_slice_ms(kv, deadline);
		rc = kv->ops->get(kv, key, slice ? slice : 1, value, len);
	} while (rc == -ETIMEDOUT && time_left_ms(deadline) > 0);
	return rc;
}

int kv_wait(struct kv *kv, const char *const *keys, size_t nkeys, uint64_t timeout_ms)
{
	uint64_t deadline = time_now_ms() + timeout_ms, slice;
	int rc;

	if (!kv->cancel)
		return kv->ops->wait(kv, keys, nkeys, timeout_ms);
	do {
		if (kv_cancelled(kv))
			return -ECANCELED;
		slice = kv_slice_ms(kv, deadline);
		rc = kv->ops->wait(kv, keys, nkeys, slice ? slice : 1);
	} while (rc == -ETIMEDOUT && time_left_ms(deadline) > 0);
	return rc;
}

/* Writes "timed out waiting at WHAT: rank(s) A, B never arrived" to errbuf. */
static void kv_name_missing(struct kv *kv, const char *prefix, int world_size, const char *what,
			    char *errbuf, size_t errbuf_len)
{
	char list[256] = "", key[512];
	size_t off = 0;
	int nmissing = 0;

	for (int r = 0; r < world_size; r++) {
		const char *one[1] = {key};

		snprintf(key, sizeof(key), "%s/%d", prefix, r);
		if (kv_check(kv, one, 1) == 1)
			continue;
		if (off < sizeof(list))
			off += (size_t)snprintf(list + off, sizeof(list) - off, "%s%d",
						nmissing ? ", " : "", r);
		nmissing++;
	}
	snprintf(errbuf, errbuf_len,
		 "timed out waiting at %s: %s %s never arrived (check that every rank started; "
		 "DDP_TIMEOUT_MS sets the deadline)",
		 what, nmissing == 1 ? "rank" : "ranks", list);
}

int kv_exchange(struct kv *kv, const char *prefix, int rank, int world_size, const void *value,
		size_t len, uint64_t timeout_ms, const char *what, void **values, size_t *lens,
		char *errbuf, size_t errbuf_len)
{
	char key[512];
	const char **keys = NULL;
	char *keybuf = NULL;
	int rc, r;

	snprintf(key, sizeof(key), "%s/%d", prefix, rank);
	rc = kv_set(kv, key, value, len);
	if (rc < 0) {
		snprintf(errbuf, errbuf_len, "store: cannot set '%s': %s", key, kv_error(kv));
		return rc;
	}
	keys = calloc((size_t)world_size, sizeof(*keys));
	keybuf = malloc((size_t)world_size * 512);
	if (!keys || !keybuf) {
		rc = -ENOMEM;
		goto out;
	}
	for (r = 0; r < world_size; r++) {
		snprintf(keybuf + (size_t)r * 512, 512, "%s/%d", prefix, r);
		keys[r] = keybuf + (size_t)r * 512;
	}
	rc = kv_wait(kv, keys, (size_t)world_size, timeout_ms);
	if (rc == -ETIMEDOUT) {
		kv_name_missing(kv, prefix, world_size, what, errbuf, errbuf_len);
		goto out;
	}
	if (rc < 0) {
		snprintf(errbuf, errbuf_len, "store: waiting at %s failed: %s", what, kv_error(kv));
		goto out;
	}
	for (r = 0; values && r < world_size; r++) {
		rc = kv_get(kv, keys[r], timeout_ms, &values[r], &lens[r]);
		if (rc < 0) {
			snprintf(errbuf, errbuf_len, "store: cannot read '%s': %s", keys[r],
				 kv_error(kv));
			while (r-- > 0)
				free(values[r]);
			goto out;
		}
	}
out:
	free(keys);
	free(keybuf);
	return rc;
}
