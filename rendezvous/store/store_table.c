/*
 * store_table.c - chained hash table of store entries.
 */
#include "store_table.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define TABLE_MIN_BUCKETS 64

/* Seeded multiply-xorshift hash over 8-byte words, with a final avalanche;
 * the seed differs per process so colliding keys cannot be precomputed. */
static uint64_t table_hash(uint64_t seed, struct byteview key)
{
	const uint64_t m = 0x9E3779B97F4A7C15ull;
	uint64_t h = seed ^ (key.len * m);
	size_t i = 0;
	for (; i + 8 <= key.len; i += 8) {
		h = (h ^ bytes_load_u64(key.data + i)) * m;
		h ^= h >> 29;
	}
	uint64_t tail = 0;
	for (size_t j = 0; i + j < key.len; j++)
		tail |= (uint64_t)key.data[i + j] << (8 * j);
	h = (h ^ tail) * m;
	h ^= h >> 33;
	h *= 0xFF51AFD7ED558CCDull;
	h ^= h >> 33;
	h *= 0xC4CEB9FE1A85EC53ull;
	h ^= h >> 33;
	return h;
}

int store_table_init(struct store_table *table, uint64_t seed)
{
	table->buckets = calloc(TABLE_MIN_BUCKETS, sizeof(*table->buckets));
	if (!table->buckets)
		return -ENOMEM;
	table->mask = TABLE_MIN_BUCKETS - 1;
	table->count = 0;
	table->seed = seed;
	return 0;
}

void store_table_release(struct store_table *table)
{
	free(table->buckets);
	table->buckets = NULL;
}

struct store_entry *store_table_find(const struct store_table *table, struct byteview key)
{
	uint64_t h = table_hash(table->seed, key);
	struct store_entry *e = table->buckets[h & table->mask];
	for (; e; e = e->next)
		if (e->hash == h && e->key_len == key.len &&
		    (key.len == 0 || memcmp(e->key, key.data, key.len) == 0))
			return e;
	return NULL;
}

/* Doubles the buckets; on allocation failure the table just stays denser. */
static void table_grow(struct store_table *table)
{
	size_t n = (table->mask + 1) * 2;
	struct store_entry **buckets = calloc(n, sizeof(*buckets));
	if (!buckets)
		return;
	for (size_t i = 0; i <= table->mask; i++) {
		struct store_entry *e = table->buckets[i];
		while (e) {
			struct store_entry *next = e->next;
			e->next = buckets[e->hash & (n - 1)];
			buckets[e->hash & (n - 1)] = e;
			e = next;
		}
	}
	free(table->buckets);
	table->buckets = buckets;
	table->mask = n - 1;
}

struct store_entry *store_table_insert(struct store_table *table, struct byteview key)
{
	struct store_entry *e = calloc(1, sizeof(*e) + key.len);
	if (!e)
		return NULL;
	if (key.len)
		memcpy(e->key, key.data, key.len);
	e->key_len = key.len;
	e->hash = table_hash(table->seed, key);
	if (table->count >= table->mask + 1)
		table_grow(table);
	struct store_entry **head = &table->buckets[e->hash & table->mask];
	e->next = *head;
	*head = e;
	table->count++;
	return e;
}

void store_table_remove(struct store_table *table, struct store_entry *entry)
{
	struct store_entry **p = &table->buckets[entry->hash & table->mask];
	while (*p && *p != entry)
		p = &(*p)->next;
	if (*p) {
		*p = entry->next;
		table->count--;
	}
}
