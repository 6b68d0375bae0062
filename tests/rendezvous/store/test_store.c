/*
 * test_store.c - unit tests of the store semantics (rendezvous/store/store.h).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store.h"

#define BV(s) ((struct byteview){(const uint8_t *)(s), strlen(s)})

struct wakes {
	int count;
	struct store_owner *last;
	struct store *store;
	bool cancel_rest; /* cancel the owner's other waits from the callback */
};

static void on_wake(void *ctx, struct store_owner *owner)
{
	struct wakes *w = ctx;
	w->count++;
	w->last = owner;
	if (w->cancel_rest)
		store_owner_cancel(w->store, owner);
}

struct fixture {
	struct store *store;
	struct wakes wakes;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	assert_int_equal(store_new(1 << 20, on_wake, &f->wakes, &f->store), 0);
	f->wakes.store = f->store;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	store_free(f->store);
	free(f);
	return 0;
}

static void assert_value(struct store *s, const char *key, const char *want)
{
	struct byteview v;
	assert_int_equal(store_get(s, BV(key), &v), 1);
	assert_int_equal(v.len, strlen(want));
	if (v.len)
		assert_memory_equal(v.data, want, v.len);
}

static void test_set_get_delete(void **state)
{
	struct store *s = ((struct fixture *)*state)->store;
	struct byteview v;
	assert_int_equal(store_get(s, BV("k"), &v), 0);
	assert_int_equal(store_set(s, BV("k"), BV("v1")), 0);
	assert_value(s, "k", "v1");
	assert_int_equal(store_set(s, BV("k"), BV("longer value")), 0);
	assert_value(s, "k", "longer value");
	assert_int_equal(store_set(s, BV(""), BV("")), 0); /* empty key and value */
	assert_value(s, "", "");
	assert_int_equal(store_num_keys(s), 2);
	assert_int_equal(store_delete(s, BV("k")), 1);
	assert_int_equal(store_delete(s, BV("k")), 0);
	assert_int_equal(store_num_keys(s), 1);
	assert_int_equal(store_delete(s, BV("")), 1);
	assert_int_equal(store_num_keys(s), 0);
	assert_int_equal(store_bytes_used(s), 0);
	/* Binary bytes with NULs are kept whole. */
	const uint8_t bin[] = {0, 1, 0, 255};
	struct byteview bk = {bin, 4};
	assert_int_equal(store_set(s, bk, bk), 0);
	assert_int_equal(store_get(s, bk, &v), 1);
	assert_int_equal(v.len, 4);
	assert_memory_equal(v.data, bin, 4);
}

static void test_many_keys(void **state)
{
	struct store *s = ((struct fixture *)*state)->store;
	char key[32], val[32];
	for (int i = 0; i < 5000; i++) {
		snprintf(key, sizeof(key), "key/%d", i);
		snprintf(val, sizeof(val), "%d", i * 7);
		assert_int_equal(store_set(s, BV(key), BV(val)), 0);
	}
	assert_int_equal(store_num_keys(s), 5000);
	for (int i = 0; i < 5000; i++) {
		snprintf(key, sizeof(key), "key/%d", i);
		snprintf(val, sizeof(val), "%d", i * 7);
		assert_value(s, key, val);
	}
	for (int i = 0; i < 5000; i += 2) {
		snprintf(key, sizeof(key), "key/%d", i);
		assert_int_equal(store_delete(s, BV(key)), 1);
	}
	assert_int_equal(store_num_keys(s), 2500);
}

static void test_add(void **state)
{
	struct store *s = ((struct fixture *)*state)->store;
	int64_t r = 0;
	assert_int_equal(store_add(s, BV("c"), 5, &r), 0);
	assert_int_equal(r, 5);
	assert_value(s, "c", "5");
	assert_int_equal(store_add(s, BV("c"), -7, &r), 0);
	assert_int_equal(r, -2);
	assert_value(s, "c", "-2");
	assert_int_equal(store_add(s, BV("c"), 0, &r), 0);
	assert_int_equal(r, -2);
	/* Values set as text count, as torch's stoll reads them. */
	assert_int_equal(store_set(s, BV("t"), BV(" 40abc")), 0);
	assert_int_equal(store_add(s, BV("t"), 2, &r), 0);
	assert_int_equal(r, 42);
	assert_int_equal(store_set(s, BV("bad"), BV("x1")), 0);
	assert_int_equal(store_add(s, BV("bad"), 1, &r), -EINVAL);
	assert_value(s, "bad", "x1");
	/* Past INT64_MAX the sum wraps, as torch 2.15's server does. */
	assert_int_equal(store_set(s, BV("big"), BV("9223372036854775807")), 0);
	assert_int_equal(store_add(s, BV("big"), 1, &r), 0);
	assert_int_equal(r, INT64_MIN);
	assert_value(s, "big", "-9223372036854775808");
	assert_int_equal(store_add(s, BV("big"), -1, &r), 0);
	assert_int_equal(r, INT64_MAX);
	assert_int_equal(store_add(s, BV("big"), INT64_MAX, &r), 0);
	assert_int_equal(r, -2);
	/* A stored text out of the int64 range is still refused (std::stoll). */
	assert_int_equal(store_set(s, BV("huge"), BV("99999999999999999999")), 0);
	assert_int_equal(store_add(s, BV("huge"), 0, &r), -ERANGE);
	assert_int_equal(store_set(s, BV("min"), BV("-9223372036854775808")), 0);
	assert_int_equal(store_add(s, BV("min"), 0, &r), 0);
	assert_int_equal(r, INT64_MIN);
}

static void test_compare_set(void **state)
{
	struct store *s = ((struct fixture *)*state)->store;
	struct byteview cur;
	/* Missing key, non-empty expected: nothing stored, expected returned. */
	assert_int_equal(store_compare_set(s, BV("k"), BV("e"), BV("d"), &cur), 0);
	assert_int_equal(cur.len, 1);
	assert_memory_equal(cur.data, "e", 1);
	assert_int_equal(store_num_keys(s), 0);
	/* Missing key, empty expected: desired stored. */
	assert_int_equal(store_compare_set(s, BV("k"), BV(""), BV("x"), &cur), 0);
	assert_memory_equal(cur.data, "x", 1);
	assert_value(s, "k", "x");
	/* Present, not equal: unchanged, current returned. */
	assert_int_equal(store_compare_set(s, BV("k"), BV("y"), BV("z"), &cur), 0);
	assert_memory_equal(cur.data, "x", 1);
	assert_value(s, "k", "x");
	/* Present, equal: replaced. */
	assert_int_equal(store_compare_set(s, BV("k"), BV("x"), BV("w"), &cur), 0);
	assert_memory_equal(cur.data, "w", 1);
	assert_value(s, "k", "w");
	/* Present with an empty value, expected empty: replaced. */
	assert_int_equal(store_set(s, BV("e"), BV("")), 0);
	assert_int_equal(store_compare_set(s, BV("e"), BV(""), BV("n"), &cur), 0);
	assert_value(s, "e", "n");
}

static void test_check_and_wait(void **state)
{
	struct fixture *f = *state;
	struct store *s = f->store;
	struct store_owner a = STORE_OWNER_INIT, b = STORE_OWNER_INIT;
	struct byteview keys[] = {BV("x"), BV("y")};
	assert_int_equal(store_check(s, keys, 2), 0);
	assert_int_equal(store_wait(s, &a, keys, 2), 0);
	assert_int_equal(store_wait(s, &b, keys + 1, 1), 0);
	assert_int_equal(store_waiter_count(s), 2);
	assert_int_equal(store_num_keys(s), 0); /* placeholders are not keys */
	assert_int_equal(store_set(s, BV("x"), BV("1")), 0);
	assert_int_equal(f->wakes.count, 0);
	int64_t r;
	assert_int_equal(store_add(s, BV("y"), 1, &r), 0); /* add creates and wakes */
	assert_int_equal(f->wakes.count, 2);
	assert_int_equal(store_waiter_count(s), 0);
	assert_null(a.waiters);
	assert_null(b.waiters);
	assert_int_equal(store_check(s, keys, 2), 1);
	/* Everything present: answered at once, nothing registered. */
	assert_int_equal(store_wait(s, &a, keys, 2), 1);
	assert_int_equal(store_waiter_count(s), 0);
	/* An empty key list is ready. */
	assert_int_equal(store_wait(s, &a, NULL, 0), 1);
}

static void test_wait_duplicate_keys_and_append(void **state)
{
	struct fixture *f = *state;
	struct store *s = f->store;
	struct store_owner a = STORE_OWNER_INIT;
	struct byteview keys[] = {BV("d"), BV("d"), BV("e")};
	assert_int_equal(store_set(s, BV("e"), BV("")), 0);
	assert_int_equal(store_wait(s, &a, keys, 3), 0);
	assert_int_equal(store_append(s, BV("d"), BV("ab")), 0); /* append creates, wakes */
	assert_int_equal(f->wakes.count, 1);
	assert_ptr_equal(f->wakes.last, &a);
	assert_int_equal(store_append(s, BV("d"), BV("cd")), 0);
	assert_value(s, "d", "abcd");
	assert_int_equal(store_waiter_count(s), 0);
}

static void test_cancel(void **state)
{
	struct fixture *f = *state;
	struct store *s = f->store;
	struct store_owner a = STORE_OWNER_INIT;
	struct byteview k1[] = {BV("p"), BV("q")};
	struct byteview k2[] = {BV("r")};
	size_t before = store_bytes_used(s);
	assert_int_equal(store_wait(s, &a, k1, 2), 0);
	assert_int_equal(store_wait(s, &a, k2, 1), 0);
	assert_true(store_bytes_used(s) > before); /* waits are accounted */
	assert_int_equal(store_owner_cancel(s, &a), 2);
	assert_null(a.waiters);
	assert_int_equal(store_waiter_count(s), 0);
	assert_int_equal(store_bytes_used(s), before);
	assert_int_equal(store_set(s, BV("p"), BV("1")), 0);
	assert_int_equal(store_set(s, BV("q"), BV("1")), 0);
	assert_int_equal(store_set(s, BV("r"), BV("1")), 0);
	assert_int_equal(f->wakes.count, 0);
	assert_int_equal(store_owner_cancel(s, &a), 0);
}

static void test_cancel_from_callback(void **state)
{
	struct fixture *f = *state;
	struct store *s = f->store;
	struct store_owner a = STORE_OWNER_INIT;
	struct byteview k1[] = {BV("m")};
	struct byteview k2[] = {BV("m"), BV("n")};
	assert_int_equal(store_wait(s, &a, k2, 2), 0);
	assert_int_equal(store_wait(s, &a, k1, 1), 0);
	f->wakes.cancel_rest = true;
	assert_int_equal(store_set(s, BV("m"), BV("1")), 0);
	assert_int_equal(f->wakes.count, 1);
	assert_int_equal(store_waiter_count(s), 0);
	assert_int_equal(store_set(s, BV("n"), BV("1")), 0);
	assert_int_equal(f->wakes.count, 1);
}

static void test_queue(void **state)
{
	struct fixture *f = *state;
	struct store *s = f->store;
	struct store_owner a = STORE_OWNER_INIT, b = STORE_OWNER_INIT;
	struct byteview q[] = {BV("q")};
	assert_int_equal(store_queue_len(s, BV("q")), 0);
	assert_int_equal(store_wait(s, &a, q, 1), 0);
	assert_int_equal(store_wait(s, &b, q, 1), 0);
	assert_int_equal(store_queue_push(s, BV("q"), BV("one")), 0);
	assert_int_equal(f->wakes.count, 1); /* one item wakes one waiter */
	assert_int_equal(store_queue_push(s, BV("q"), BV("two")), 0);
	assert_int_equal(f->wakes.count, 2);
	assert_int_equal(store_queue_len(s, BV("q")), 2);
	assert_int_equal(store_check(s, q, 1), 1); /* a non-empty queue exists */
	assert_int_equal(store_num_keys(s), 0);
	int64_t before;
	uint8_t *item;
	size_t len;
	assert_int_equal(store_queue_pop(s, BV("q"), &before, &item, &len), 0);
	assert_int_equal(before, 2);
	assert_int_equal(len, 3);
	assert_memory_equal(item, "one", 3);
	free(item);
	assert_int_equal(store_queue_pop(s, BV("q"), &before, &item, &len), 0);
	assert_memory_equal(item, "two", 3);
	free(item);
	assert_int_equal(store_queue_pop(s, BV("q"), &before, &item, &len), 0);
	assert_int_equal(before, 0);
	assert_null(item);
	assert_int_equal(store_check(s, q, 1), 0);
	assert_int_equal(store_bytes_used(s), 0);
}

static void test_barrier(void **state)
{
	struct fixture *f = *state;
	struct store *s = f->store;
	struct store_owner a = STORE_OWNER_INIT, b = STORE_OWNER_INIT, c = STORE_OWNER_INIT;
	int64_t n = 0;
	/* world 3: two arrivals wait, the third releases all three. */
	assert_int_equal(store_barrier(s, &a, BV("/b"), 3, &n), 0);
	assert_int_equal(n, 1);
	assert_value(s, "/b", "1"); /* the counter is a key, as in torch */
	assert_int_equal(store_num_keys(s), 1);
	assert_int_equal(store_barrier(s, &b, BV("/b"), 3, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(f->wakes.count, 0); /* counting wakes nobody */
	assert_int_equal(store_waiter_count(s), 2);
	assert_int_equal(store_barrier(s, &c, BV("/b"), 3, &n), 1);
	assert_int_equal(n, 3);
	assert_int_equal(f->wakes.count, 2);
	assert_int_equal(store_waiter_count(s), 0);
	assert_null(a.waiters);
	assert_null(b.waiters);
	/* Past its world size a key releases each later arrival at once. */
	assert_int_equal(store_barrier(s, &a, BV("/b"), 3, &n), 1);
	assert_int_equal(n, 4);
	assert_value(s, "/b", "4");
	/* World sizes of 1, 0 and below release at once. */
	assert_int_equal(store_barrier(s, &a, BV("one"), 1, &n), 1);
	assert_int_equal(store_barrier(s, &a, BV("zero"), 0, &n), 1);
	assert_int_equal(store_barrier(s, &a, BV("neg"), -5, &n), 1);
	/* A cancelled arrival still counts (torch keeps the count). */
	assert_int_equal(store_barrier(s, &a, BV("t"), 2, &n), 0);
	assert_int_equal(store_owner_cancel(s, &a), 1);
	assert_int_equal(store_barrier(s, &b, BV("t"), 2, &n), 1);
	assert_int_equal(n, 2);
	assert_int_equal(f->wakes.count, 2);
	/* A set of the key wakes its barrier waiters, as torch's does. */
	assert_int_equal(store_barrier(s, &a, BV("u"), 5, &n), 0);
	assert_int_equal(store_set(s, BV("u"), BV("0")), 0);
	assert_int_equal(f->wakes.count, 3);
	assert_ptr_equal(f->wakes.last, &a);
	/* A plain wait on the key is answered once it exists. */
	struct byteview keys[] = {BV("v")};
	assert_int_equal(store_wait(s, &b, keys, 1), 0);
	assert_int_equal(store_barrier(s, &a, BV("v"), 2, &n), 0);
	assert_int_equal(f->wakes.count, 3); /* the first arrival creates without waking */
	assert_int_equal(store_barrier(s, &c, BV("v"), 2, &n), 1);
	assert_int_equal(f->wakes.count, 5);
	/* A counter key holding a non-number, or an out of range one. */
	assert_int_equal(store_set(s, BV("x"), BV("abc")), 0);
	assert_int_equal(store_barrier(s, &a, BV("x"), 2, &n), -EINVAL);
	assert_int_equal(store_set(s, BV("x"), BV("99999999999999999999")), 0);
	assert_int_equal(store_barrier(s, &a, BV("x"), 2, &n), -ERANGE);
	assert_int_equal(store_waiter_count(s), 0);
}

static void test_barrier_limit(void **state)
{
	struct store *s;
	assert_int_equal(store_new(64, NULL, NULL, &s), 0);
	struct store_owner a = STORE_OWNER_INIT;
	int64_t n = 0;
	/* No room for the waiter: refused, and the count did not move. */
	assert_int_equal(store_barrier(s, &a, BV("b"), 2, &n), -ENOSPC);
	assert_int_equal(store_num_keys(s), 0);
	assert_int_equal(store_bytes_used(s), 0);
	/* A releasing arrival needs no waiter. */
	assert_int_equal(store_barrier(s, &a, BV("b"), 1, &n), 1);
	assert_int_equal(store_bytes_used(s), 2);
	store_free(s);
}

struct key_list {
	int n;
	char keys[8][16];
	int stop_at;
};

static int collect_key(void *ctx, struct byteview key)
{
	struct key_list *l = ctx;
	if (l->n == l->stop_at)
		return -ECANCELED;
	assert_true(l->n < 8 && key.len < 16);
	memcpy(l->keys[l->n], key.data, key.len);
	l->keys[l->n][key.len] = '\0';
	l->n++;
	return 0;
}

static int cmp_key(const void *a, const void *b)
{
	return strcmp(a, b);
}

static void test_foreach_key(void **state)
{
	struct store *s = ((struct fixture *)*state)->store;
	struct store_owner a = STORE_OWNER_INIT;
	struct byteview keys[] = {BV("waited")};
	assert_int_equal(store_set(s, BV("/a"), BV("1")), 0);
	assert_int_equal(store_set(s, BV("/bb"), BV("")), 0);
	assert_int_equal(store_set(s, BV(""), BV("empty key")), 0);
	assert_int_equal(store_set(s, BV("gone"), BV("x")), 0);
	assert_int_equal(store_delete(s, BV("gone")), 1);
	assert_int_equal(store_queue_push(s, BV("q"), BV("item")), 0);
	assert_int_equal(store_wait(s, &a, keys, 1), 0);
	struct key_list l = {.stop_at = -1};
	assert_int_equal(store_foreach_key(s, collect_key, &l), 0);
	/* Keys with a value only: not queues, deleted or waited-on names. */
	assert_int_equal(l.n, 3);
	assert_int_equal(l.n, store_num_keys(s));
	qsort(l.keys, (size_t)l.n, sizeof(l.keys[0]), cmp_key);
	assert_string_equal(l.keys[0], "");
	assert_string_equal(l.keys[1], "/a");
	assert_string_equal(l.keys[2], "/bb");
	struct key_list stop = {.stop_at = 1};
	assert_int_equal(store_foreach_key(s, collect_key, &stop), -ECANCELED);
	assert_int_equal(stop.n, 1);
	store_owner_cancel(s, &a);
}

static bool keep_agent(void *ctx, struct byteview key)
{
	return key.len >= 6 && memcmp(key.data, "agent/", 6) == 0;
}

static void test_clear(void **state)
{
	struct fixture *f = *state;
	struct store *s = f->store;
	size_t empty = store_bytes_used(s);
	int64_t r;
	assert_int_equal(store_set(s, BV("/default_pg/0//cpu//0/1"), BV("old address")), 0);
	assert_int_equal(store_add(s, BV("/default_pg/store_based_barrier_key:1"), 2, &r), 0);
	assert_int_equal(store_set(s, BV("agent/keep"), BV("kept")), 0);
	assert_int_equal(store_queue_push(s, BV("/q"), BV("item")), 0);
	assert_int_equal(store_queue_push(s, BV("agent/q"), BV("kept item")), 0);
	size_t kept_bytes = store_bytes_used(s);
	/* A wait stays registered through a clear (its owner cancels it). */
	struct store_owner a = STORE_OWNER_INIT;
	struct byteview keys[] = {BV("/late")};
	assert_int_equal(store_wait(s, &a, keys, 1), 0);
	assert_int_equal(store_clear(s, keep_agent, NULL), 3);
	assert_int_equal(store_num_keys(s), 1);
	assert_value(s, "agent/keep", "kept");
	struct byteview v;
	assert_int_equal(store_get(s, BV("/default_pg/0//cpu//0/1"), &v), 0);
	assert_int_equal(store_queue_len(s, BV("/q")), 0);
	assert_int_equal(store_queue_len(s, BV("agent/q")), 1);
	assert_int_equal(store_waiter_count(s), 1);
	assert_int_equal(store_set(s, BV("/late"), BV("1")), 0);
	assert_int_equal(f->wakes.count, 1);
	assert_true(store_bytes_used(s) < kept_bytes);
	/* Without a keep function everything goes, to the last byte. */
	assert_int_equal(store_clear(s, NULL, NULL), 3);
	assert_int_equal(store_num_keys(s), 0);
	assert_int_equal(store_queue_len(s, BV("agent/q")), 0);
	assert_int_equal(store_bytes_used(s), empty);
	assert_int_equal(store_clear(s, NULL, NULL), 0);
	/* The store works on afterwards. */
	assert_int_equal(store_add(s, BV("/default_pg/store_based_barrier_key:1"), 1, &r), 0);
	assert_int_equal(r, 1);
}

static void test_byte_limit(void **state)
{
	struct store *s;
	assert_int_equal(store_new(100, NULL, NULL, &s), 0);
	char big[101];
	memset(big, 'v', 100);
	big[100] = '\0';
	assert_int_equal(store_set(s, BV("k"), BV(big)), -ENOSPC); /* 1 + 100 > 100 */
	assert_int_equal(store_num_keys(s), 0);
	assert_int_equal(store_bytes_used(s), 0);
	big[90] = '\0';
	assert_int_equal(store_set(s, BV("k"), BV(big)), 0);
	assert_int_equal(store_bytes_used(s), 91);
	assert_int_equal(store_append(s, BV("k"), BV("0123456789")), -ENOSPC);
	assert_int_equal(store_queue_push(s, BV("qq"), BV("0123456789")), -ENOSPC);
	assert_int_equal(store_bytes_used(s), 91);
	struct store_owner a = STORE_OWNER_INIT;
	struct byteview keys[] = {BV("w")};
	assert_int_equal(store_wait(s, &a, keys, 1), -ENOSPC);
	/* Replacing with a smaller value frees room. */
	assert_int_equal(store_set(s, BV("k"), BV("s")), 0);
	assert_int_equal(store_bytes_used(s), 2);
	int64_t r;
	assert_int_equal(store_add(s, BV("n"), 12345, &r), 0);
	assert_int_equal(store_bytes_used(s), 2 + 1 + 5);
	store_free(s);
}

static void test_free_with_waiters(void **state)
{
	struct store *s;
	assert_int_equal(store_new(1 << 20, NULL, NULL, &s), 0);
	struct store_owner a = STORE_OWNER_INIT;
	struct byteview keys[] = {BV("a"), BV("b"), BV("c")};
	assert_int_equal(store_wait(s, &a, keys, 3), 0);
	assert_int_equal(store_wait(s, &a, keys + 1, 1), 0);
	assert_int_equal(store_queue_push(s, BV("x"), BV("1")), 0);
	store_free(s); /* no leak under ASan, no callback */
}

struct change_log {
	int n;
	enum store_change change[16];
	char text[16][64]; /* "key:old:new" */
	struct store_owner *owner[16];
};

static struct change_log changes;

static void on_change(void *ctx, struct store_owner *owner, enum store_change change,
		      struct byteview key, struct byteview old_value, struct byteview new_value)
{
	assert_true(changes.n < 16);
	changes.change[changes.n] = change;
	changes.owner[changes.n] = owner;
	snprintf(changes.text[changes.n], sizeof(changes.text[0]), "%.*s:%.*s:%.*s", (int)key.len,
		 (const char *)key.data, (int)old_value.len, (const char *)old_value.data,
		 (int)new_value.len, (const char *)new_value.data);
	changes.n++;
}

static void expect_change(int i, enum store_change change, const char *text)
{
	assert_true(i < changes.n);
	assert_int_equal(changes.change[i], change);
	assert_string_equal(changes.text[i], text);
}

static void test_watch(void **state)
{
	struct store *s = ((struct fixture *)*state)->store;
	struct store_owner a = STORE_OWNER_INIT, b = STORE_OWNER_INIT;
	memset(&changes, 0, sizeof(changes));
	store_set_watch_callback(s, on_change);
	size_t before = store_bytes_used(s);
	assert_int_equal(store_watch(s, &a, BV("w")), 0);
	assert_int_equal(store_watch(s, &b, BV("other")), 0);
	assert_int_equal(store_num_keys(s), 0);
	assert_int_equal(store_set(s, BV("w"), BV("1")), 0);
	expect_change(0, STORE_KEY_CREATED, "w::1");
	assert_ptr_equal(changes.owner[0], &a);
	assert_int_equal(store_set(s, BV("w"), BV("2")), 0);
	expect_change(1, STORE_KEY_UPDATED, "w:1:2");
	int64_t r;
	assert_int_equal(store_add(s, BV("w"), 5, &r), 0);
	expect_change(2, STORE_KEY_UPDATED, "w:2:7");
	struct byteview cur;
	assert_int_equal(store_compare_set(s, BV("w"), BV("no"), BV("x"), &cur), 0);
	assert_int_equal(changes.n, 3); /* nothing stored, nothing told */
	assert_int_equal(store_compare_set(s, BV("w"), BV("7"), BV("x"), &cur), 0);
	expect_change(3, STORE_KEY_UPDATED, "w:7:x");
	assert_int_equal(store_append(s, BV("w"), BV("y")), 0);
	expect_change(4, STORE_KEY_UPDATED, "w:x:xy");
	assert_int_equal(store_delete(s, BV("w")), 1);
	expect_change(5, STORE_KEY_DELETED, "w:xy:");
	assert_int_equal(store_delete(s, BV("w")), 0);
	assert_int_equal(changes.n, 6);
	assert_int_equal(store_owner_unwatch(s, &a), 1);
	assert_null(a.watches);
	assert_int_equal(store_set(s, BV("w"), BV("3")), 0);
	assert_int_equal(changes.n, 6);
	assert_int_equal(store_delete(s, BV("w")), 1);
	assert_int_equal(store_owner_unwatch(s, &b), 1);
	assert_int_equal(store_bytes_used(s), before);
	/* A watch left in place is freed with the store (ASan checks). */
	assert_int_equal(store_watch(s, &a, BV("left")), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_set_get_delete, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_many_keys, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_add, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_compare_set, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_check_and_wait, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_wait_duplicate_keys_and_append, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_cancel, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_cancel_from_callback, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_queue, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_watch, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_barrier, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_foreach_key, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_clear, setup, teardown),
	    cmocka_unit_test(test_barrier_limit),
	    cmocka_unit_test(test_byte_limit),
	    cmocka_unit_test(test_free_with_waiters),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
