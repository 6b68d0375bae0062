/*
 * fuzz_store.c - libFuzzer target over the codec and the store semantics.
 *
 * The input is the byte stream of client connections. It is fed to two
 * connections' decoders (A, then B, interleaved in chunk sizes derived from
 * the input itself), every decoded request is run against one store with
 * small limits, and A disconnects half-way. Invariants: no crash, no leak,
 * no undefined behaviour; the byte accounting stays under its limit; after
 * both owners are gone, no wait is left; a listing names exactly the keys
 * counted. When A disconnects, the store is cleared as between two worker
 * groups (keys starting with "k" kept) while B may still wait. Watches
 * (torch 1.13 WATCH_KEY) are exercised too, and so are the agent-session
 * queries: session keys (expired when their owner goes), the exact
 * compare-and-set, per-key watch and unwatch.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"
#include "store.h"
#include "store_lease.h"

#define FUZZ_MAX_BYTES 4096

struct fuzz_conn {
	struct proto_decoder dec;
	struct store_owner owner;
	struct bytebuf out;
	int dead;
};

static int wakes;

static void fuzz_wake(void *ctx, struct store_owner *owner)
{
	wakes++;
}

/* Reads every byte it is shown, so ASan checks the views are valid. */
static void fuzz_notify(void *ctx, struct store_owner *owner, enum store_change change,
			struct byteview key, struct byteview old_value, struct byteview new_value)
{
	unsigned sum = (unsigned)change;
	for (size_t i = 0; i < key.len; i++)
		sum += key.data[i];
	for (size_t i = 0; i < old_value.len; i++)
		sum += old_value.data[i];
	for (size_t i = 0; i < new_value.len; i++)
		sum += new_value.data[i];
	wakes += (int)(sum & 1);
}

static int fuzz_count_key(void *ctx, struct byteview key)
{
	for (size_t i = 0; i < key.len; i++)
		wakes += key.data[i] & 1; /* touch every byte */
	(*(int64_t *)ctx)++;
	return 0;
}

static bool fuzz_keep(void *ctx, struct byteview key)
{
	return key.len > 0 && key.data[0] == 'k';
}

/* The multi-key, queue, listing and barrier queries. */
static int fuzz_exec_more(struct store *s, const struct proto_request *r)
{
	struct byteview v = {NULL, 0};
	int64_t n = 0;
	uint8_t *item = NULL;
	size_t len = 0;
	int rc = 0;
	switch (r->op) {
	case PROTO_OP_MULTI_GET:
		for (size_t i = 0; i < r->nfields; i++)
			store_get(s, r->fields[i], &v);
		break;
	case PROTO_OP_MULTI_SET:
		for (size_t i = 0; i + 1 < r->nfields && rc == 0; i += 2)
			rc = store_set(s, r->fields[i], r->fields[i + 1]);
		break;
	case PROTO_OP_QUEUE_POP:
		rc = store_queue_pop(s, r->fields[0], &n, &item, &len);
		free(item);
		break;
	case PROTO_OP_QUEUE_LEN:
		store_queue_len(s, r->fields[0]);
		break;
	case PROTO_OP_LIST_KEYS:
		if (store_foreach_key(s, fuzz_count_key, &n) < 0 || n != store_num_keys(s))
			abort();
		break;
	default:
		break;
	}
	return rc;
}

/* The agent-session queries (their semantics, not the server's framing). */
static int fuzz_exec_session(struct store *s, struct fuzz_conn *c, const struct proto_request *r)
{
	struct byteview v = {NULL, 0};
	bool swapped, present;
	int64_t n = 0;
	switch (r->op) {
	case PROTO_OP_S_GET:
		for (size_t i = 0; i < r->nfields; i++)
			store_get(s, r->fields[i], &v);
		return 0;
	case PROTO_OP_S_CAS:
		return store_cas(s, r->fields[0], r->integer != 0, r->fields[1], r->fields[2],
				 &swapped, &present, &v);
	case PROTO_OP_S_ADD:
		store_add(s, r->fields[0], r->integer, &n); /* errors are in-band */
		return 0;
	case PROTO_OP_S_SET:
		return store_set(s, r->fields[0], r->fields[1]);
	case PROTO_OP_S_SET_SESSION:
		return store_set_bound(s, &c->owner, r->fields[0], r->fields[1]);
	case PROTO_OP_S_WATCH:
		return store_watching(s, &c->owner, r->fields[0])
			   ? 0
			   : store_watch(s, &c->owner, r->fields[0]);
	case PROTO_OP_S_UNWATCH:
		store_unwatch(s, &c->owner, r->fields[0]);
		return 0;
	default:
		return 0;
	}
}

static int fuzz_exec(struct store *s, struct fuzz_conn *c, const struct proto_request *r)
{
	struct byteview v = {NULL, 0};
	int64_t n = 0;
	int rc = 0;
	switch (r->op) {
	case PROTO_OP_SET:
	case PROTO_OP_APPEND:
	case PROTO_OP_QUEUE_PUSH:
		rc = r->op == PROTO_OP_SET	? store_set(s, r->fields[0], r->fields[1])
		     : r->op == PROTO_OP_APPEND ? store_append(s, r->fields[0], r->fields[1])
						: store_queue_push(s, r->fields[0], r->fields[1]);
		break;
	case PROTO_OP_COMPARE_SET:
		rc = store_compare_set(s, r->fields[0], r->fields[1], r->fields[2], &v);
		if (rc == 0)
			proto_put_bytes(&c->out, v.data, v.len);
		break;
	case PROTO_OP_GET:
		store_get(s, r->fields[0], &v);
		proto_put_bytes(&c->out, v.data, v.len);
		break;
	case PROTO_OP_ADD:
		rc = store_add(s, r->fields[0], r->integer, &n);
		break;
	case PROTO_OP_CHECK:
		proto_put_u8(&c->out, (uint8_t)store_check(s, r->fields, r->nfields));
		break;
	case PROTO_OP_WAIT:
		rc = store_wait(s, &c->owner, r->fields, r->nfields);
		break;
	case PROTO_OP_DELETE_KEY:
		store_delete(s, r->fields[0]);
		break;
	case PROTO_OP_WATCH_KEY:
		rc = store_watch(s, &c->owner, r->fields[0]);
		break;
	case PROTO_OP_CANCEL_WAIT:
		store_owner_cancel(s, &c->owner);
		break;
	case PROTO_OP_BARRIER:
		rc = store_barrier(s, &c->owner, r->fields[0], r->integer, &n);
		break;
	default:
		rc = r->op >= PROTO_OP_S_HELLO ? fuzz_exec_session(s, c, r) : fuzz_exec_more(s, r);
		break;
	}
	if (store_bytes_used(s) > FUZZ_MAX_BYTES)
		abort();
	c->out.len = 0;
	return rc;
}

/* Feeds one chunk; a bad frame or a failed op "closes" the connection. */
static void fuzz_feed(struct store *s, struct fuzz_conn *c, const uint8_t *p, size_t len)
{
	while (len > 0 && !c->dead) {
		size_t used = 0;
		const struct proto_request *req = NULL;
		int rc = proto_decoder_feed(&c->dec, p, len, &used, &req);
		if (used > len)
			abort();
		p += used;
		len -= used;
		if (rc == 1)
			rc = fuzz_exec(s, c, req);
		if (rc < 0) {
			c->dead = 1;
			store_owner_cancel(s, &c->owner);
			store_owner_unwatch(s, &c->owner);
			store_owner_expire(s, &c->owner);
		}
	}
	if (!c->dead && proto_decoder_idle(&c->dec))
		proto_decoder_trim(&c->dec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct proto_limits limits = {
	    .max_key_len = 64,
	    .max_value_len = 512,
	    .max_keys_per_request = 16,
	    .max_request_bytes = 2048,
	};
	struct store *s;
	if (store_new(FUZZ_MAX_BYTES, fuzz_wake, NULL, &s) < 0)
		return 0;
	store_set_watch_callback(s, fuzz_notify);
	struct fuzz_conn conns[2];
	for (int i = 0; i < 2; i++) {
		memset(&conns[i], 0, sizeof(conns[i]));
		proto_decoder_init(&conns[i].dec, &limits);
	}
	/* Chunk sizes come from the data, so splits are explored too. */
	size_t pos[2] = {0, 0}, k = 0;
	while (pos[0] < size || pos[1] < size) {
		int i = (int)(k & 1);
		size_t chunk = 1 + (size ? data[(k * 7) % size] % 13 : 0);
		k++;
		if (pos[i] >= size)
			continue;
		if (chunk > size - pos[i])
			chunk = size - pos[i];
		fuzz_feed(s, &conns[i], data + pos[i], chunk);
		pos[i] += chunk;
		if (i == 0 && pos[0] >= size / 2 && !conns[0].dead) {
			conns[0].dead = 1; /* A disconnects half-way */
			store_owner_cancel(s, &conns[0].owner);
			store_owner_unwatch(s, &conns[0].owner);
			store_owner_expire(s, &conns[0].owner);
			store_clear(s, fuzz_keep, NULL);
		}
	}
	for (int i = 0; i < 2; i++) {
		store_owner_cancel(s, &conns[i].owner);
		store_owner_unwatch(s, &conns[i].owner);
		store_owner_expire(s, &conns[i].owner);
		proto_decoder_release(&conns[i].dec);
		bytebuf_release(&conns[i].out);
	}
	if (store_waiter_count(s) != 0 || store_bytes_used(s) > FUZZ_MAX_BYTES)
		abort();
	store_free(s);
	return 0;
}
