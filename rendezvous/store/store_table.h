/*
 * store_table.h - the hash table under the store: byte keys to entries,
 * chained, doubling as it grows. Internal to the store (store.c).
 */
#ifndef DDP_RENDEZVOUS_STORE_TABLE_H
#define DDP_RENDEZVOUS_STORE_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bytes.h"

struct store_link;
struct store_watch;
struct store_item;
struct store_owner;

/* One key. It lives while it has a value, a non-empty queue, waiters or
 * watchers. */
struct store_entry {
	struct store_entry *next; /* hash chain */
	uint64_t hash;
	uint8_t *value; /* malloc'ed; NULL when empty or absent */
	size_t value_len;
	bool present;		     /* has a value (set/add/append...) */
	struct store_link *waiters;  /* waits that miss this key */
	struct store_watch *watches; /* owners told about every change */
	struct store_item *qhead;    /* queue, oldest first */
	struct store_item *qtail;
	size_t qlen;
	struct store_owner *bound; /* the session that owns it (store_lease.h) */
	struct store_entry *bprev; /* that owner's list of bound keys */
	struct store_entry *bnext;
	size_t key_len;
	uint8_t key[];
};

struct store_table {
	struct store_entry **buckets;
	size_t mask;  /* buckets - 1; buckets is a power of two */
	size_t count; /* entries */
	uint64_t seed;
};

/* Returns 0 or -ENOMEM. */
int store_table_init(struct store_table *table, uint64_t seed);

/* Frees the buckets only (entries are the caller's). */
void store_table_release(struct store_table *table);

struct store_entry *store_table_find(const struct store_table *table, struct byteview key);

/* Creates a zeroed entry for a key known to be absent and links it in.
 * Returns NULL on -ENOMEM. */
struct store_entry *store_table_insert(struct store_table *table, struct byteview key);

/* Unlinks the entry (the caller frees it). */
void store_table_remove(struct store_table *table, struct store_entry *entry);

#endif
