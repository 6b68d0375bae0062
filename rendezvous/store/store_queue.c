/*
 * store_queue.c - named queues (torch 2.x QUEUE_PUSH / QUEUE_POP / QUEUE_LEN).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

int store_queue_push(struct store *store, struct byteview key, struct byteview value)
{
	struct store_entry *e;
	int rc = store_entry_get(store, key, value.len, &e);
	if (rc < 0)
		return rc;
	struct store_item *it = malloc(sizeof(*it) + value.len);
	if (!it) {
		store_entry_gc(store, e);
		return -ENOMEM;
	}
	it->next = NULL;
	it->len = value.len;
	if (value.len)
		memcpy(it->data, value.data, value.len);
	if (e->qtail)
		e->qtail->next = it;
	else
		e->qhead = it;
	e->qtail = it;
	e->qlen++;
	store->bytes += value.len;
	store_entry_wake(store, e, true);
	return 0;
}

int store_queue_pop(struct store *store, struct byteview key, int64_t *len_before, uint8_t **item,
		    size_t *item_len)
{
	struct store_entry *e = store_table_find(&store->table, key);
	*len_before = e ? (int64_t)e->qlen : 0;
	*item = NULL;
	*item_len = 0;
	if (!e || e->qlen == 0)
		return 0;
	struct store_item *it = e->qhead;
	uint8_t *copy = malloc(it->len ? it->len : 1);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, it->data, it->len);
	e->qhead = it->next;
	if (!e->qhead)
		e->qtail = NULL;
	e->qlen--;
	store->bytes -= it->len;
	*item = copy;
	*item_len = it->len;
	free(it);
	store_entry_gc(store, e);
	return 0;
}

int64_t store_queue_len(const struct store *store, struct byteview key)
{
	const struct store_entry *e = store_table_find(&store->table, key);
	return e ? (int64_t)e->qlen : 0;
}

size_t store_entry_drop_queue(struct store_entry *e)
{
	size_t bytes = 0;
	while (e->qhead) {
		struct store_item *it = e->qhead;
		e->qhead = it->next;
		bytes += it->len;
		free(it);
	}
	e->qtail = NULL;
	e->qlen = 0;
	return bytes;
}
