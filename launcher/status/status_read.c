/*
 * status_read.c - `ddplaunch status`'s reading (status_read.h): the job
 * state (ddprdzv/ID/state), the world of its last formed round (w/GEN.ROUND,
 * or the round before while one forms) and each member's status record
 * (RDZV_STATUS_KEY_FMT, STATUS_BATCH keys per get), one get after the other
 * through the rendezvous primitives, whichever the backend. A job that is not there is said in one
 * line; so is a store that cannot be reached or read (a failed request is
 * followed by lost(), which says why: the request's own failure is not said
 * again).
 */
#include "status_read.h"
#include "status_view.h"

#include <errno.h>
#include <inttypes.h>
#include <log.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver.h"

enum { TAG_STATE = 1, TAG_WORLD, TAG_RECORDS };

struct status_reader {
	uv_loop_t loop;
	const struct status_read_opts *o;
	void *be; /* the backend, NULL once closed or lost */
	uv_timer_t again;
	uv_signal_t sigint;
	int exit_status;
	bool ended; /* status_end ran: what the backend's close cancels is quiet */
	struct status_snap snap;
	size_t rec_next, rec_n; /* the records' batch being read: first node, count */
	uint32_t world_round;	/* the round whose world is being read */
	int world_tries;
};

static void status_read(struct status_reader *c);

/* Once: the backend's close runs a pending request's callback with
 * -ECANCELED from inside the call, which ends up here again. */
static void status_end(struct status_reader *c, int exit_status)
{
	void *be = c->be;

	if (c->ended)
		return;
	c->ended = true;
	c->exit_status = exit_status;
	c->be = NULL;
	if (be)
		c->o->ops->close(be);
	status_snap_release(&c->snap); /* after the cancelled callbacks ran */
	uv_close((uv_handle_t *)&c->again, NULL);
	uv_close((uv_handle_t *)&c->sigint, NULL);
}

/* A request the backend did not take, or one that failed: a failure the
 * session's loss explains is said by lost(), which follows. */
static void status_failed(struct status_reader *c, const char *what, int status)
{
	if (c->ended || (status == -ECONNRESET && c->be))
		return;
	log_error("cannot read %s from %s%s%s: %s", what, c->o->backend ? c->o->backend : "",
		  c->o->backend ? " at " : "", c->o->endpoint, strerror(-status));
	status_end(c, 1);
}

static void on_again(uv_timer_t *t)
{
	status_read(t->data);
}

/* The screen is written whole, in one write: a terminal never shows half
 * of a redraw. */
static void status_show(struct status_reader *c)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (f) {
		if (c->o->watch > 0 && !c->o->json)
			fputs("\033[H\033[2J", f); /* redraw from the top */
		if (c->o->json)
			status_render_json(f, &c->snap);
		else
			status_render_text(f, &c->snap, time(NULL));
		if (fclose(f) == 0 && buf) {
			fwrite(buf, 1, len, stdout);
			fflush(stdout);
		}
		free(buf);
	}
	status_snap_release(&c->snap);
	if (c->o->watch > 0)
		uv_timer_start(&c->again, on_again, (uint64_t)(c->o->watch * 1000), 0);
	else
		status_end(c, 0);
}

static void get(struct status_reader *c, uint64_t tag, const struct byteview *k, size_t n,
		const char *what)
{
	int rc = c->o->ops->get(c->be, tag, k, n);

	if (rc < 0)
		status_failed(c, what, rc);
}

/* The nodes' records, STATUS_BATCH keys per get: one reply stays small
 * (a record is up to 4 KiB) however many nodes the job has. */
#define STATUS_BATCH 256

static void read_records(struct status_reader *c)
{
	size_t n = c->snap.nnodes - c->rec_next;
	struct byteview *keys;
	char(*names)[RDZV_RUN_ID_MAX + RDZV_ID_MAX + 32];

	if (n > STATUS_BATCH)
		n = STATUS_BATCH;
	if (!n) {
		status_show(c);
		return;
	}
	keys = calloc(n, sizeof(*keys));
	names = calloc(n, sizeof(*names));
	if (!keys || !names) {
		free(keys);
		free(names);
		status_show(c); /* what was read so far */
		return;
	}
	for (size_t i = 0; i < n; i++) {
		snprintf(names[i], sizeof(names[i]), RDZV_STATUS_KEY_FMT, c->o->run_id,
			 c->snap.nodes[c->rec_next + i].id);
		keys[i] = (struct byteview){(const uint8_t *)names[i], strlen(names[i])};
	}
	c->rec_n = n;
	get(c, TAG_RECORDS, keys, n, "the nodes' status");
	free(names); /* the request copied the keys */
	free(keys);
}

static void on_records(struct status_reader *c, const struct rdzv_value *v, size_t n)
{
	for (size_t i = 0; i < n && i < c->rec_n; i++)
		if (v[i].present)
			c->snap.nodes[c->rec_next + i].rec =
			    json_loadb((const char *)v[i].bytes.data, v[i].bytes.len, 0, NULL);
	c->rec_next += c->rec_n;
	c->rec_n = 0;
	read_records(c);
}

static void read_world(struct status_reader *c, uint32_t round)
{
	char key[RDZV_RUN_ID_MAX + 64];
	struct byteview k;

	snprintf(key, sizeof(key), "ddprdzv/%s/w/%" PRIu64 ".%" PRIu32, c->o->run_id,
		 c->snap.st.gen, round);
	k = (struct byteview){(const uint8_t *)key, strlen(key)};
	c->world_round = round;
	get(c, TAG_WORLD, &k, 1, "the job's nodes");
}

static void on_world(struct status_reader *c, const struct rdzv_value *v)
{
	struct rdzv_world_data w = {0};

	if (!v->present) {
		/* A round being formed has no world yet: its last one's. */
		if (c->world_round > 1 && c->world_tries++ < 3)
			read_world(c, c->world_round - 1);
		else
			read_records(c);
		return;
	}
	if (rdzv_world_decode(v->bytes.data, v->bytes.len, RDZV_NODES_MAX, &w) == 0) {
		c->snap.world_round = w.round;
		c->snap.nodes = calloc(w.size ? w.size : 1, sizeof(*c->snap.nodes));
		for (uint32_t i = 0; c->snap.nodes && i < w.size; i++) {
			snprintf(c->snap.nodes[i].id, sizeof(c->snap.nodes[i].id), "%s",
				 w.members[i].id);
			snprintf(c->snap.nodes[i].addr, sizeof(c->snap.nodes[i].addr), "%s",
				 w.members[i].addr);
			c->snap.nodes[i].nproc = w.members[i].nproc;
		}
		c->snap.nnodes = c->snap.nodes ? w.size : 0;
	}
	rdzv_world_data_release(&w);
	read_records(c);
}

static void on_state(struct status_reader *c, const struct rdzv_value *v)
{
	const char *b = c->o->backend;

	if (!v->present) {
		log_error("no job with run id '%s' at %s%s%s (check --rdzv_id and "
			  "--rdzv_endpoint)",
			  c->o->run_id, b ? b : "", b ? " " : "", c->o->endpoint);
		status_end(c, 1);
		return;
	}
	if (rdzv_state_decode(v->bytes.data, v->bytes.len, &c->snap.st) < 0) {
		log_error("the state of run id '%s' at %s%s%s is not one this ddplaunch reads",
			  c->o->run_id, b ? b : "", b ? " " : "", c->o->endpoint);
		status_end(c, 1);
		return;
	}
	c->world_tries = 0;
	read_world(c, c->snap.st.round);
}

static void on_got(void *drv, uint64_t tag, int status, const struct rdzv_value *v, size_t n)
{
	static const char *what[] = {"", "the job's state", "the job's nodes", "the nodes' status"};
	struct status_reader *c = drv;

	if (c->ended)
		return;
	if (status < 0 || (tag != TAG_RECORDS && n != 1)) {
		status_failed(c, what[tag <= TAG_RECORDS ? tag : 0], status < 0 ? status : -EPROTO);
		return;
	}
	if (tag == TAG_STATE)
		on_state(c, v);
	else if (tag == TAG_WORLD)
		on_world(c, v);
	else
		on_records(c, v, n);
}

static void status_read(struct status_reader *c)
{
	char key[RDZV_RUN_ID_MAX + 32];
	struct byteview k;

	status_snap_release(&c->snap);
	memset(&c->snap.st, 0, sizeof(c->snap.st));
	c->snap.world_round = 0;
	c->rec_next = c->rec_n = 0;
	snprintf(key, sizeof(key), "ddprdzv/%s/state", c->o->run_id);
	k = (struct byteview){(const uint8_t *)key, strlen(key)};
	get(c, TAG_STATE, &k, 1, "the job's state");
}

static void on_connected(void *drv, int status, const char *msg)
{
	struct status_reader *c = drv;

	if (c->ended)
		return;
	if (status < 0) {
		c->be = NULL; /* it is gone */
		log_error("%s", msg && *msg ? msg : strerror(-status));
		status_end(c, 1);
		return;
	}
	status_read(c);
}

/* What to do about etcd's refusal or silence (the message names the
 * endpoints and what each said). */
static const char *etcd_hint(int status)
{
	if (status == -EACCES || status == -EPERM)
		return " (give etcd's user as --rdzv_conf=user=NAME and its password in "
		       "$" RDZV_PRIMS_ETCD_PASSWORD_ENV ", as for the agents)";
	if (status == -ETIMEDOUT || status == -ECONNREFUSED || status == -EHOSTUNREACH ||
	    status == -ECONNRESET || status == -ENETUNREACH)
		return " (check that etcd runs there and that --rdzv_endpoint lists its client "
		       "URLs, port 2379 by default)";
	return "";
}

static void on_lost(void *drv, int status, const char *msg)
{
	struct status_reader *c = drv;

	c->be = NULL;
	if (c->ended)
		return;
	log_error("%s%s", msg && *msg ? msg : strerror(-status),
		  c->o->backend ? etcd_hint(status) : "");
	status_end(c, 1);
}

/* Never asked for: a reader only gets. */
static void on_cased(void *drv, uint64_t tag, int status, bool swapped, struct rdzv_value cur)
{
}
static void on_added(void *drv, uint64_t tag, int status, int64_t value)
{
}
static void on_done(void *drv, uint64_t tag, int status)
{
}
static void on_event(void *drv, uint64_t watch, int status, struct rdzv_value v)
{
}

static const struct rdzv_prims_sink status_sink = {
    .connected = on_connected,
    .lost = on_lost,
    .got = on_got,
    .cased = on_cased,
    .added = on_added,
    .done = on_done,
    .event = on_event,
};

static void on_sigint(uv_signal_t *h, int sig)
{
	status_end(h->data, 0);
}

int status_read_run(struct status_read_opts *o)
{
	struct status_reader c = {.o = o};
	int rc;

	c.snap.run_id = o->run_id;
	c.snap.endpoint = o->endpoint;
	c.snap.backend = o->backend;
	uv_loop_init(&c.loop);
	o->cfg.loop = &c.loop;
	o->cfg.read_only = true;
	uv_timer_init(&c.loop, &c.again);
	uv_signal_init(&c.loop, &c.sigint);
	c.again.data = c.sigint.data = &c;
	uv_signal_start(&c.sigint, on_sigint, SIGINT);
	rc = o->ops->open(&o->cfg, &status_sink, &c, &c.be);
	if (rc < 0) {
		log_error("status: cannot reach %s%s%s: %s", o->backend ? o->backend : "",
			  o->backend ? " at " : "", o->endpoint, strerror(-rc));
		c.be = NULL;
		status_end(&c, 1);
	}
	uv_run(&c.loop, UV_RUN_DEFAULT);
	uv_loop_close(&c.loop);
	return c.exit_status;
}
