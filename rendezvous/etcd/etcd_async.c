/*
 * etcd_async.c - the client on a libuv loop (etcd_async.h): the client
 * object, its one wake-up timer, and its end (etcd_request.c has the
 * requests, etcd_awatch.c the watches).
 *
 * Memory is freed only in close callbacks (libuv's rule), so a callback of
 * ours may close the client while a loop of ours is still on the stack:
 * each of those loops checks c->closing (or m->multi) before going on.
 */
#include "etcd_async.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_codec.h"
#include "etcd_curl.h"
#include "etcd_int.h"
#include "timeutil.h"

/* ---- the wake-up timer ---- */

static void on_tick(uv_timer_t *t);

static void tick_arm(struct etcd_async *c)
{
	uint64_t first = 0, now = time_now_ms();

	for (struct etcd_wake *wk = c->wakes; wk; wk = wk->next)
		if (!first || wk->at < first)
			first = wk->at;
	if (!first)
		uv_timer_stop(&c->tick);
	else
		uv_timer_start(&c->tick, on_tick, first > now ? first - now : 0, 0);
}

void etcd_async_unwake(struct etcd_async *c, struct etcd_wake *wk)
{
	if (!wk->at)
		return;
	if (wk->prev)
		wk->prev->next = wk->next;
	else
		c->wakes = wk->next;
	if (wk->next)
		wk->next->prev = wk->prev;
	wk->prev = wk->next = NULL;
	wk->at = 0;
}

void etcd_async_wake(struct etcd_async *c, struct etcd_wake *wk, uint64_t at)
{
	etcd_async_unwake(c, wk);
	wk->at = at ? at : 1;
	wk->next = c->wakes;
	if (wk->next)
		wk->next->prev = wk;
	c->wakes = wk;
	if (!c->closing)
		tick_arm(c);
}

/* Runs the wake-ups that are due, one at a time (each may arm or drop
 * others), then re-arms for the next. */
static void on_tick(uv_timer_t *t)
{
	struct etcd_async *c = t->data;

	while (!c->closing) {
		uint64_t now = time_now_ms();
		struct etcd_wake *wk = c->wakes;

		while (wk && wk->at > now)
			wk = wk->next;
		if (!wk)
			break;
		etcd_async_unwake(c, wk);
		wk->fn(wk);
	}
	if (!c->closing)
		tick_arm(c);
	if (!c->closing)
		etcd_awatch_deliver(c);
}

/* ---- the client ---- */

const struct etcd_cfg *etcd_async_cfg(const struct etcd_async *c)
{
	return &c->cfg;
}

struct etcd_multi *etcd_async_multi(struct etcd_async *c)
{
	return &c->m;
}

size_t etcd_async_last_ep(const struct etcd_async *c)
{
	return c->cur;
}

const char *etcd_async_token(const struct etcd_async *c)
{
	return c->token;
}

void etcd_async_set_token(struct etcd_async *c, char *token)
{
	free(c->token);
	c->token = token;
}

struct etcd_awatch_list *etcd_async_watches(struct etcd_async *c)
{
	return &c->watches;
}

const char *etcd_async_endpoint(const struct etcd_async *c)
{
	return c->cfg.names[c->cur];
}

size_t etcd_async_failures(const struct etcd_async *c, char *buf, size_t len)
{
	size_t n = 0, off = 0;

	if (len)
		buf[0] = '\0';
	for (size_t i = 0; i < c->cfg.n; i++) {
		if (!c->ep_fail[i][0])
			continue;
		if (off < len)
			off += (size_t)snprintf(buf + off, len - off, "%s%s: %s", n ? "; " : "",
						c->cfg.names[i], c->ep_fail[i]);
		n++;
	}
	return n;
}

static void on_multi_after(struct etcd_multi *m)
{
	etcd_awatch_deliver((struct etcd_async *)((char *)m - offsetof(struct etcd_async, m)));
}

int etcd_async_new(uv_loop_t *loop, const struct etcd_options *opt, struct etcd_async **out)
{
	struct etcd_async *c;
	int rc = etcd_global_init();

	*out = NULL;
	etcd_error_clear();
	if (rc < 0)
		return rc;
	if (!(c = calloc(1, sizeof(*c))))
		return etcd_fail(-ENOMEM, "etcd: out of memory");
	rc = etcd_cfg_parse(opt, &c->cfg);
	if (rc == 0 && !(c->ep_fail = calloc(c->cfg.n, sizeof(*c->ep_fail))))
		rc = etcd_fail(-ENOMEM, "etcd: out of memory");
	if (rc == 0 && etcd_multi_init(&c->m, loop) < 0)
		rc = etcd_fail(-ENOMEM, "etcd: out of memory");
	if (rc < 0) {
		free(c->ep_fail);
		etcd_cfg_release(&c->cfg);
		free(c);
		return rc;
	}
	c->loop = loop;
	c->m.after = on_multi_after;
	uv_timer_init(loop, &c->tick);
	c->tick.data = c;
	*out = c;
	return 0;
}

static void client_handle_closed(struct etcd_async *c)
{
	if (--c->handles)
		return;
	if (c->closed)
		c->closed(c->closed_arg);
	etcd_cfg_release(&c->cfg);
	free(c->ep_fail);
	free(c->token);
	free(c);
}

static void on_multi_closed(struct etcd_multi *m)
{
	client_handle_closed((struct etcd_async *)((char *)m - offsetof(struct etcd_async, m)));
}

static void on_tick_closed(uv_handle_t *h)
{
	client_handle_closed(h->data);
}

void etcd_async_close(struct etcd_async *c, void (*closed)(void *arg), void *arg)
{
	if (!c || c->closing)
		return;
	c->closing = true;
	c->closed = closed;
	c->closed_arg = arg;
	etcd_request_drop_all(c);
	etcd_awatch_drop_all(c);
	c->handles = 2;
	etcd_multi_close(&c->m, on_multi_closed);
	uv_close((uv_handle_t *)&c->tick, on_tick_closed);
}
