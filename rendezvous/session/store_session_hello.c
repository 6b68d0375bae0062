/*
 * store_session_hello.c - the agent session's handshake (HELLO, AUTH with this
 * node's proof, checking the store's proof in the AUTH reply:
 * docs/protocol.md, "The handshake"), becoming ready, and the pings that
 * notice a dead or frozen store.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "proto_auth.h"
#include "store_session_int.h"

/* ---- pings ---- */

/* A ping tick this late means that this process did not run (SIGSTOP, a VM
 * migration, a swapped-out or overloaded host), not that the store is
 * silent: a loaded machine's scheduling delays are far shorter. */
#define SESS_PAUSE_MS 500

static void ping_tick(uv_timer_t *t);

static void ping_arm(struct store_session *s, uint64_t now, uint64_t delay)
{
	s->ping_due = now + delay;
	uv_timer_start(&s->ping, ping_tick, delay, 0);
}

static uint64_t later(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

static void ping_tick(uv_timer_t *t)
{
	struct store_session *s = t->data;
	if (s->phase != SESS_READY)
		return;
	uint64_t now = sess_now_ms();
	/* After a pause libuv runs the expired timers before it reads the
	 * socket, where the store's answers wait: the silence is counted
	 * from the thaw, so the store gets the whole timeout to be heard. */
	if (now > s->ping_due + SESS_PAUSE_MS)
		s->resumed = now;
	if (!s->ping_out) {
		s->ping_nonce++;
		if (sess_push_ping(s) < 0) {
			ping_arm(s, now, s->opts.ping_interval_ms);
			return;
		}
		s->ping_out = true;
		s->ping_sent = now;
	}
	/* Lost when nothing at all was heard for the timeout since the
	 * waiting ping went out (and since the thaw): a store frozen just
	 * after its last word is noticed ping_timeout_ms after the next
	 * ping, and a store that answers within the timeout is never lost. */
	uint64_t since = later(later(s->last_heard, s->ping_sent), s->resumed);
	uint64_t deadline = since + s->opts.ping_timeout_ms;
	if (now < deadline) {
		ping_arm(s, now, deadline - now);
		return;
	}
	char why[96], secs[32];
	sess_seconds_text(s->opts.ping_timeout_ms, secs, sizeof(secs));
	snprintf(why, sizeof(why), "no answer for %s", secs);
	sess_lost(s, -ETIMEDOUT, why);
	sess_maybe_free(s);
}

void sess_ping_answered(struct store_session *s)
{
	uint64_t now = sess_now_ms();
	uint64_t next = s->ping_sent + s->opts.ping_interval_ms;
	s->ping_out = false;
	ping_arm(s, now, next > now ? next - now : 0);
}

/* ---- the handshake ---- */

static void become_ready(struct store_session *s)
{
	uv_timer_stop(&s->timer);
	s->phase = SESS_READY;
	s->last_heard = sess_now_ms();
	if (s->queued.len) {
		/* Requests issued while connecting, in their order. */
		if (bytebuf_append(&s->out, s->queued.data, s->queued.len) < 0) {
			sess_connect_failed(s, -ENOMEM, "out of memory");
			return;
		}
		bytebuf_release(&s->queued);
	}
	sess_flush(s);
	if (s->opts.ping_interval_ms)
		ping_arm(s, s->last_heard, s->opts.ping_interval_ms);
	s->dispatching++;
	s->on_connect(s, s->arg, 0, "");
	s->dispatching--;
}

int sess_send_hello(struct store_session *s)
{
	proto_auth_nonce(s->client_nonce);
	int rc = proto_put_op(&s->out, PROTO_GEN_V2, PROTO_OP_VALIDATE);
	if (rc == 0)
		rc = proto_put_u32(&s->out, PROTO_VALIDATE_MAGIC);
	if (rc == 0)
		rc = proto_put_op(&s->out, PROTO_GEN_V2, PROTO_OP_S_HELLO);
	if (rc == 0)
		rc = proto_put_i64(&s->out, s->opts.server_idle_timeout_ms);
	if (rc == 0)
		rc = proto_put_bytes(&s->out, s->client_nonce, sizeof(s->client_nonce));
	if (rc == 0)
		s->phase = SESS_HELLO;
	sess_flush(s);
	return rc;
}

static void refuse(struct store_session *s, const char *fmt)
{
	char msg[STORE_SESSION_MSG_MAX];
	snprintf(msg, sizeof(msg), fmt, s->peer);
	sess_connect_failed(s, -EACCES, msg);
}

/* The HELLO reply: answer the store's challenge with this node's proof
 * (the client proves first: docs/protocol.md, "The handshake"). */
static int on_hello(struct store_session *s, uint8_t auth, struct byteview nonce,
		    struct byteview proof)
{
	if (auth == PROTO_SESSION_AUTH_NONE) {
		if (s->opts.token) {
			refuse(s, "the store at %s has no token, so it cannot be this job's store "
				  "(start it with the job's token, or run without one)");
			return 0;
		}
		become_ready(s);
		return 0;
	}
	if (auth != PROTO_SESSION_AUTH_TOKEN || nonce.len != PROTO_SESSION_NONCE_LEN)
		return -EPROTO;
	if (proof.len != 0) {
		refuse(s, "the store at %s speaks an older handshake that gives its proof first "
			  "(run the same ddplaunch or ddp-rdzvd version on every node)");
		return 0;
	}
	if (!s->opts.token) {
		refuse(s, "the store at %s requires the job's token (set --rdzv_token or "
			  "DDP_RDZV_TOKEN)");
		return 0;
	}
	uint8_t mine[PROTO_SESSION_PROOF_LEN];
	memcpy(s->server_nonce, nonce.data, PROTO_SESSION_NONCE_LEN);
	proto_auth_proof(s->opts.token, s->opts.token_len, false, s->client_nonce, s->server_nonce,
			 mine);
	int rc = proto_put_op(&s->out, PROTO_GEN_V2, PROTO_OP_S_AUTH);
	if (rc == 0)
		rc = proto_put_bytes(&s->out, mine, sizeof(mine));
	if (rc < 0)
		return rc;
	s->phase = SESS_AUTH;
	sess_flush(s);
	return 0;
}

/* The AUTH reply: the store accepted this node's proof and gives its own;
 * a store that cannot prove the token is not this job's. */
static void on_auth(struct store_session *s, struct byteview proof)
{
	uint8_t want[PROTO_SESSION_PROOF_LEN];
	proto_auth_proof(s->opts.token, s->opts.token_len, true, s->client_nonce, s->server_nonce,
			 want);
	if (proof.len != PROTO_SESSION_PROOF_LEN || !proto_auth_equal(want, proof.data)) {
		refuse(s, "the store at %s does not know this job's token (it belongs to another "
			  "job, or the tokens differ: check --rdzv_token or DDP_RDZV_TOKEN)");
		return;
	}
	become_ready(s);
}

/* The body of a successful HELLO reply (auth, nonce, proof) or AUTH reply
 * (proof): 1 taken (*off advanced), 0 more bytes needed, < 0 malformed. */
static int take_body(struct store_session *s, const uint8_t *p, size_t len, size_t *off,
		     uint8_t *auth, struct byteview *nonce, struct byteview *proof)
{
	size_t n;
	int rc = 1;
	if (s->phase == SESS_HELLO) {
		rc = proto_take_u8(p + *off, len - *off, auth, &n);
		*off += rc == 1 ? n : 0;
		if (rc == 1)
			rc = proto_take_bytes(p + *off, len - *off, 64, nonce, &n);
		*off += rc == 1 ? n : 0;
	}
	if (rc == 1)
		rc = proto_take_bytes(p + *off, len - *off, 64, proof, &n);
	*off += rc == 1 ? n : 0;
	return rc < 0 ? -EPROTO : rc;
}

/* Parses the handshake reply in s->in: 1 handled (consumed), 0 more bytes
 * needed, < 0 malformed. */
static int handshake_step(struct store_session *s)
{
	const uint8_t *p = s->in.data;
	size_t len = s->in.len, off = 0, n;
	uint8_t tag, auth = 0;
	int64_t status;
	struct byteview nonce = {NULL, 0}, proof = {NULL, 0};
	int rc = proto_take_u8(p, len, &tag, &n);
	if (rc != 1)
		return rc;
	off += n;
	rc = proto_take_i64(p + off, len - off, &status, &n);
	if (rc != 1)
		return rc;
	off += n;
	if (tag != PROTO_SESSION_REPLY)
		return -EPROTO;
	if (status == 0 && (rc = take_body(s, p, len, &off, &auth, &nonce, &proof)) != 1)
		return rc;
	/* The views point into s->in: act on them before consuming. */
	if (s->phase == SESS_HELLO && status != 0)
		rc = -EPROTO;
	else if (s->phase == SESS_HELLO)
		rc = on_hello(s, auth, nonce, proof);
	else if (status == -EACCES)
		refuse(s, "the store at %s refused this node's proof of the token");
	else if (status != 0)
		rc = -EPROTO;
	else
		on_auth(s, proof);
	if (rc < 0)
		return rc;
	if (s->phase != SESS_DEAD)
		bytebuf_consume(&s->in, off);
	return 1;
}

void sess_on_bytes(struct store_session *s)
{
	int rc = 1;
	while (rc == 1 && (s->phase == SESS_HELLO || s->phase == SESS_AUTH) && s->in.len)
		rc = handshake_step(s);
	if (rc < 0) {
		char msg[STORE_SESSION_MSG_MAX];
		snprintf(msg, sizeof(msg),
			 "the server at %s does not speak the agent-session protocol (is it a "
			 "ddp-rdzvd or ddplaunch store?)",
			 s->peer);
		sess_connect_failed(s, -EPROTO, msg);
		return;
	}
	if (s->phase == SESS_READY && s->in.len && sess_parse(s) < 0)
		sess_lost(s, -EPROTO, "it sent bytes that are not a session reply");
}
