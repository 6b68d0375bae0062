/*
 * rdzv_grace.c - a failure's grace: this node's workers failed, perhaps
 * because a peer died before the store could tell (fail_grace_ms). While
 * it runs the node watches every other member's heartbeat key: a key that
 * vanishes is a death (the round re-forms as `dead`, not charged); once
 * every other member's key has changed since (each is alive after the
 * failure) nobody died and the failure is charged at once, without waiting
 * for the rest of the grace. This node beats at once, so that a peer whose
 * workers failed too sees it alive without waiting a keep_alive_interval.
 * Only when the grace is longer than keep_alive_interval: a shorter one
 * ends before a live member could show itself.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_machine_int.h"

enum { GR_FIRST, GR_SEEN, GR_ALIVE };

void rdzv_grace_stop(struct rdzv_machine *m)
{
	for (uint32_t i = 0; m->gr_watch && i < m->gr_n; i++)
		rdzv_unwatch(m, &m->gr_watch[i]);
	free(m->gr_watch);
	free(m->gr_state);
	free(m->gr_value);
	m->gr_watch = NULL;
	m->gr_state = NULL;
	m->gr_value = NULL;
	m->gr_n = m->gr_pending = 0;
	m->gr_gone = -1;
}

int rdzv_grace_start(struct rdzv_machine *m, int64_t now)
{
	char key[RDZV_KEY_MAX];
	uint32_t n = m->world.size;

	if (m->cfg.fail_grace_ms <= m->cfg.keep_alive_interval_ms || n < 2)
		return 0;
	rdzv_grace_stop(m);
	m->gr_watch = calloc(n, sizeof(*m->gr_watch));
	m->gr_state = calloc(n, sizeof(*m->gr_state));
	m->gr_value = calloc(n, sizeof(*m->gr_value));
	if (!m->gr_watch || !m->gr_state || !m->gr_value)
		return -ENOMEM;
	m->gr_n = n;
	for (uint32_t i = 0; i < n; i++) {
		if (i == m->mem_rank) {
			m->gr_state[i] = GR_ALIVE;
			continue;
		}
		m->gr_pending++;
		rdzv_key(m, key, "a/%s", m->world.members[i].id);
		int rc = rdzv_push_kv(m, RDZV_ACT_WATCH, key, NULL, 0, &m->gr_watch[i]);
		if (rc < 0)
			return rc;
	}
	if (m->hb_next >= 0)
		m->hb_next = now;
	return 0;
}

static uint64_t beat_of(struct rdzv_value v)
{
	uint64_t n = 0;

	if (rdzv_parse_u64(v.bytes.data, v.bytes.len, UINT64_MAX, &n) < 0)
		n = UINT64_MAX;
	return n;
}

static void member_event(struct rdzv_machine *m, int64_t now, uint32_t i, struct rdzv_value v)
{
	bool done = v.present && v.bytes.len == 4 && memcmp(v.bytes.data, "done", 4) == 0;

	if (m->gr_state[i] == GR_ALIVE)
		return;
	if (!v.present) {
		m->gr_gone = (int64_t)i;
		return;
	}
	if (m->gr_state[i] == GR_FIRST && !done) {
		m->gr_state[i] = GR_SEEN;
		m->gr_value[i] = beat_of(v);
		return;
	}
	if (!done && beat_of(v) == m->gr_value[i])
		return;
	m->gr_state[i] = GR_ALIVE;
	if (--m->gr_pending == 0 && m->exit_req == 2)
		m->fail_at = now; /* everyone is alive: nobody's death caused it */
}

bool rdzv_grace_event(struct rdzv_machine *m, int64_t now, uint64_t watch, struct rdzv_value v)
{
	for (uint32_t i = 0; m->gr_watch && i < m->gr_n; i++) {
		if (m->gr_watch[i] != watch)
			continue;
		if (m->mode == MODE_RUN)
			member_event(m, now, i, v);
		return true;
	}
	return false;
}
