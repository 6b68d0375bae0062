/* Who waits on whom when a hang is named (hang_waiters.h). Pure. */
#include "hang_waiters.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "hang_judge.h"

#define WAIT_KIND "wait1 "

static uint64_t ms_since(uint64_t now, uint64_t then)
{
	return then && now > then ? (now - then) / 1000000u : 0;
}

static bool is_inside(const struct ddp_progress *p)
{
	return p->seq && p->left_ns < p->entered_ns;
}

/* Inside a collective of the hang's round now: in S, before it or after
 * (a culprit stuck outside any collective after S: the others wait in the
 * next). */
static struct hang_waiter inside_now(struct hang_waiter w, const struct ddp_progress *cur,
				     uint64_t seq, uint64_t now)
{
	w.state = cur->seq == seq ? HANG_W_WAITS : cur->seq < seq ? HANG_W_BEHIND : HANG_W_PAST;
	w.waits_on = cur->waiting_on;
	w.for_ms = ms_since(now, cur->entered_ns);
	return w;
}

struct hang_waiter hang_waiter_of(int rank, const struct ddp_progress *cur,
				  const struct ddp_progress *inside, uint64_t inside_ns, int round,
				  uint64_t seq, uint64_t now_ns)
{
	struct hang_waiter w = {.rank = rank, .state = HANG_W_UNKNOWN, .waits_on = -1};
	bool here;

	if (!cur || cur->magic != DDP_PROGRESS_MAGIC)
		return w;
	here = cur->round == round;
	w.op = cur->op;
	w.phase = cur->phase;
	w.seq = cur->seq;
	if (here && is_inside(cur))
		return inside_now(w, cur, seq, now_ns);
	/* Seen waiting in S, gone from it since: the cut (or the culprit's
	 * thaw) ended it between the watch's last read and now. */
	if (inside && inside->magic == DDP_PROGRESS_MAGIC && inside->round == round &&
	    inside->seq == seq && !(here && cur->seq > seq)) {
		w.state = HANG_W_WAITED;
		w.op = inside->op;
		w.seq = seq;
		w.waits_on = inside->waiting_on;
		w.for_ms = ms_since(inside_ns, inside->entered_ns);
		return w;
	}
	if (here && cur->seq >= seq && seq) {
		w.state = HANG_W_DONE;
		return w;
	}
	if (here && cur->phase == DDP_PHASE_COMPUTE) {
		w.state = HANG_W_COMPUTING;
		w.for_ms =
		    ms_since(now_ns, cur->left_ns > cur->phase_ns ? cur->left_ns : cur->phase_ns);
		return w;
	}
	w.state = HANG_W_ELSEWHERE;
	w.for_ms = ms_since(now_ns, cur->phase_ns);
	return w;
}

const char *hang_waiter_state_name(enum hang_waiter_state s)
{
	static const char *const names[HANG_W_COUNT] = {
	    [HANG_W_UNKNOWN] = "unknown",     [HANG_W_WAITS] = "waits",
	    [HANG_W_WAITED] = "waited",	      [HANG_W_BEHIND] = "behind",
	    [HANG_W_COMPUTING] = "computing", [HANG_W_DONE] = "done",
	    [HANG_W_ELSEWHERE] = "elsewhere", [HANG_W_PAST] = "past",
	};

	return (unsigned)s < HANG_W_COUNT ? names[s] : "unknown";
}

/* Writes the notice with the first k waiters; its length (snprintf's). */
static size_t encode_k(const struct hang_ref *ref, int node, const struct hang_waiter *w, int k,
		       char *buf, size_t len)
{
	size_t n = 0;
	int r;

	r = snprintf(buf, len, WAIT_KIND "%d %d %" PRIu64 " %d %d", ref->round, ref->rank, ref->seq,
		     node, k);
	n = r > 0 ? (size_t)r : 0;
	for (int i = 0; i < k; i++) {
		r = snprintf(n < len ? buf + n : NULL, n < len ? len - n : 0,
			     " %d,%u,%d,%" PRIu32 ",%" PRIu32 ",%" PRIu64 ",%" PRIu64, w[i].rank,
			     (unsigned)w[i].state, w[i].waits_on, w[i].op, w[i].phase, w[i].seq,
			     w[i].for_ms);
		n += r > 0 ? (size_t)r : 0;
	}
	return n;
}

int hang_waiters_encode(const struct hang_ref *ref, int node, const struct hang_waiter *w, int n,
			char *buf, size_t len)
{
	for (int k = n; k >= 0; k--)
		if (encode_k(ref, node, w, k, buf, len) < len)
			return k;
	if (len)
		buf[0] = '\0';
	return -ENOSPC;
}

static int decode_one(const char **p, struct hang_waiter *w)
{
	unsigned state;
	int used = -1;

	if (sscanf(*p, " %d,%u,%d,%" SCNu32 ",%" SCNu32 ",%" SCNu64 ",%" SCNu64 "%n", &w->rank,
		   &state, &w->waits_on, &w->op, &w->phase, &w->seq, &w->for_ms, &used) != 7 ||
	    used < 0)
		return -EINVAL;
	if (w->rank < 0 || state >= HANG_W_COUNT || w->waits_on < -1 || w->op >= DDP_OP_COUNT ||
	    w->phase >= DDP_PHASE_COUNT)
		return -EINVAL;
	w->state = (enum hang_waiter_state)state;
	*p += used;
	return 0;
}

int hang_waiters_decode(const char *text, struct hang_ref *ref, int *node, struct hang_waiter *w,
			int max)
{
	const char *p;
	int n, used = -1;

	if (strncmp(text, WAIT_KIND, strlen(WAIT_KIND)))
		return -ENOENT;
	p = text + strlen(WAIT_KIND);
	if (sscanf(p, "%d %d %" SCNu64 " %d %d%n", &ref->round, &ref->rank, &ref->seq, node, &n,
		   &used) != 5 ||
	    used < 0)
		return -EINVAL;
	if (ref->round < 0 || ref->rank < 0 || *node < 0 || n < 0 || n > max)
		return -EINVAL;
	p += used;
	for (int i = 0; i < n; i++)
		if (decode_one(&p, &w[i]))
			return -EINVAL;
	while (isspace((unsigned char)*p))
		p++;
	return *p ? -EINVAL : n;
}

/* printf into buf at *pos, kept within len. */
static void put(char *buf, size_t len, size_t *pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void put(char *buf, size_t len, size_t *pos, const char *fmt, ...)
{
	va_list ap;
	int r;

	if (*pos >= len)
		return;
	va_start(ap, fmt);
	r = vsnprintf(buf + *pos, len - *pos, fmt, ap);
	va_end(ap);
	if (r > 0)
		*pos = *pos + (size_t)r < len ? *pos + (size_t)r : len - 1;
}

/* "waits on rank 5 in allreduce #812 for 1.10 s" and the like. */
static void wait_words(const struct hang_waiter *w, const char *verb, char *buf, size_t len,
		       size_t *pos)
{
	if (w->waits_on >= 0)
		put(buf, len, pos, "%s on rank %d in %s #%" PRIu64 " for %.2f s", verb, w->waits_on,
		    hang_op_name(w->op), w->seq, w->for_ms / 1e3);
	else
		put(buf, len, pos, "%s in %s #%" PRIu64 " for %.2f s", verb, hang_op_name(w->op),
		    w->seq, w->for_ms / 1e3);
}

void hang_waiter_words(const struct hang_waiter *w, uint64_t seq, char *buf, size_t len,
		       size_t *pos)
{
	put(buf, len, pos, "rank %d ", w->rank);
	switch (w->state) {
	case HANG_W_WAITS:
		wait_words(w, "waits", buf, len, pos);
		if (w->waits_on < 0)
			put(buf, len, pos, " (its transport does not know on whom)");
		break;
	case HANG_W_WAITED:
		wait_words(w, "waited", buf, len, pos);
		put(buf, len, pos, " (it has left it since)");
		break;
	case HANG_W_BEHIND:
		put(buf, len, pos, "is not yet at #%" PRIu64 ": ", seq);
		wait_words(w, "waits", buf, len, pos);
		break;
	case HANG_W_PAST:
		put(buf, len, pos, "is past #%" PRIu64 ": ", seq);
		wait_words(w, "waits", buf, len, pos);
		break;
	case HANG_W_COMPUTING:
		put(buf, len, pos, "is computing, not yet at #%" PRIu64 " (for %.2f s)", seq,
		    w->for_ms / 1e3);
		break;
	case HANG_W_DONE:
		put(buf, len, pos, "is done with #%" PRIu64 " (now in %s)", seq,
		    hang_phase_name(w->phase));
		break;
	case HANG_W_ELSEWHERE:
		put(buf, len, pos, "is in %s (for %.2f s)", hang_phase_name(w->phase),
		    w->for_ms / 1e3);
		break;
	default:
		put(buf, len, pos, "has no progress page");
		break;
	}
}

int hang_waiters_line(const struct hang_ref *ref, int node, const struct hang_waiter *w, int n,
		      char *buf, size_t len)
{
	size_t pos = 0;

	if (len)
		buf[0] = '\0';
	put(buf, len, &pos, "waiters of hang %d.%d.%" PRIu64 " (rank %d) on node %d: ", ref->round,
	    ref->rank, ref->seq, ref->rank, node);
	for (int i = 0; i < n; i++) {
		if (i)
			put(buf, len, &pos, "; ");
		hang_waiter_words(&w[i], ref->seq, buf, len, &pos);
	}
	if (!n)
		put(buf, len, &pos, "none");
	return (int)pos;
}
