/*
 * trainer_numerics.c - every rank's numeric identity (numerics.h) compared
 * with the job's, at the start and at every re-formation, in one
 * all-gather; and what the run records of it.
 *
 * With --global_batch_size a difference refuses the rank(s) that bring it:
 * at the start the whole job (no step is taken), at a join the ranks that
 * joined (they exit 78; the ranks that hold the state go on, and their
 * next collective fails on the refused ranks' exit, so they re-form
 * without them). --allow_numeric_mismatch accepts it and drops the
 * promise of a 1-rank run's bits, which the run says at its end. Without
 * a fixed global batch nothing is promised: a warning.
 */
#include "numerics.h"
#include "trainer.h"

#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int numerics_mine(const struct trainer *t, struct numerics_identity *id)
{
	int ret = 0;

#ifdef DDP_TRAIN_CUDA
	if (t->ops != &kernel_ops_cpu)
		ret = numerics_of_gpu(id);
	else
#endif
		numerics_of_cpu(id);
	id->has_state = t->has_state;
	return ret;
}

/* Every rank's identity, in rank order. */
static int numerics_gather(struct trainer *t, const struct numerics_identity *mine,
			   struct numerics_identity *ids)
{
	size_t n = (size_t)t->world;
	float *send = malloc(NUMERICS_WORDS * sizeof(float));
	float *recv = malloc(n * NUMERICS_WORDS * sizeof(float));
	int ret = -ENOMEM;

	if (!send || !recv)
		goto out;
	numerics_encode(mine, send);
	ret = ddp_allgather(t->ddp, send, recv, NUMERICS_WORDS, DDP_FLOAT32);
	for (size_t r = 0; ret == 0 && r < n; r++)
		if (numerics_decode(recv + r * NUMERICS_WORDS, &ids[r]) < 0) {
			log_error("rank %zu's numeric identity is not in this ddp-train's layout: "
				  "run one ddp-train build on every node",
				  r);
			ret = NUMERICS_REFUSED;
		}
out:
	free(send);
	free(recv);
	return ret;
}

/* A difference found: said by the two ranks it names; refused, accepted
 * or only warned about. */
static int numerics_decide(struct trainer *t, const struct numerics_identity *ids,
			   const struct numerics_mismatch *m)
{
	bool named = t->rank == m->rank || t->rank == m->ref;
	char line[1024];

	numerics_describe(ids, m, line, sizeof(line));
	if (t->cfg.global_batch_size == 0) {
		if (named)
			log_warn("%s (without --global_batch_size no rank count gives the same "
				 "bits anyway, but these ranks compute a batch differently)",
				 line);
		return 0;
	}
	if (t->cfg.allow_numeric_mismatch) {
		if (named)
			log_warn("%s; --allow_numeric_mismatch: going on without the promise of a "
				 "1-rank run's bits",
				 line);
		if (!t->numerics.dropped) {
			t->numerics.dropped = true;
			t->numerics.step = t->step;
			snprintf(t->numerics.why, sizeof(t->numerics.why), "%s", line);
		}
		return 0;
	}
	if (numerics_refused(ids, t->world, m, t->rank)) {
		if (named)
			log_error(
			    "%s, or --allow_numeric_mismatch to drop the bit-identity promise",
			    line);
		ddp_say_numerics(t->ddp, DDP_NUMERICS_REFUSED, line);
		return NUMERICS_REFUSED;
	}
	if (t->rank == m->ref)
		log_warn("step %llu: refusing %d rank(s) that joined: %s, or "
			 "--allow_numeric_mismatch to drop the bit-identity promise",
			 (unsigned long long)t->step, m->nmismatch, line);
	return 0;
}

/* The launcher's summary hears where the promise stands now (not under
 * ddplaunch: nothing; without a fixed global batch nothing is promised). */
static void numerics_tell(const struct trainer *t)
{
	if (!t->ddp || t->cfg.global_batch_size == 0)
		return;
	if (t->numerics.dropped)
		ddp_say_numerics(t->ddp, DDP_NUMERICS_DROPPED, t->numerics.why);
	else
		ddp_say_numerics(t->ddp, DDP_NUMERICS_KEPT, t->numerics.ident);
}

int trainer_numerics_check(struct trainer *t)
{
	struct numerics_identity mine, *ids;
	struct numerics_mismatch m;
	int ret = numerics_mine(t, &mine);

	if (ret < 0) {
		log_error("cannot read this rank's GPU, driver and library versions");
		return ret;
	}
	if (!t->ddp || t->world == 1) {
		numerics_summary(&mine, t->numerics.ident, sizeof(t->numerics.ident));
		numerics_tell(t);
		return 0;
	}
	ids = calloc((size_t)t->world, sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	ret = numerics_gather(t, &mine, ids);
	if (ret == 0 && numerics_compare(ids, t->world, &m) == 1)
		ret = numerics_decide(t, ids, &m);
	if (ret == 0) {
		t->numerics.checked = true;
		numerics_summary(&ids[m.ref], t->numerics.ident, sizeof(t->numerics.ident));
		numerics_tell(t);
	}
	free(ids);
	return ret;
}

/* s as the inside of a JSON string. */
static void numerics_json(const char *s, char *buf, size_t len)
{
	size_t n = 0;

	for (; *s && n + 7 < len; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			n += (size_t)snprintf(buf + n, len - n, "\\%c", c);
		else if (c < 0x20)
			n += (size_t)snprintf(buf + n, len - n, "\\u%04x", c);
		else
			buf[n++] = (char)c;
	}
	buf[n] = '\0';
}

void trainer_numerics_report(struct trainer *t)
{
	const struct numerics_record *r = &t->numerics;
	char ident[1100], why[2100], rec[3600];

	/* Without a fixed global batch nothing was promised. */
	if (t->rank != 0 || !t->shards)
		return;
	if (r->dropped)
		log_warn("numerics: the promise of a 1-rank run's bits was dropped at step %llu "
			 "(--allow_numeric_mismatch): %s",
			 (unsigned long long)r->step, r->why);
	else
		log_info("numerics: the bits of a 1-rank run, promised: %s %s",
			 r->checked ? "every rank had" : "the one rank had", r->ident);
	if (!t->rank0_duties)
		return;
	numerics_json(r->ident, ident, sizeof(ident));
	numerics_json(r->why, why, sizeof(why));
	snprintf(rec, sizeof(rec),
		 "{\"kind\": \"numerics\", \"promise\": \"%s\", \"identity\": \"%s\", "
		 "\"why\": \"%s\", \"step\": %llu, \"world\": %d}\n",
		 r->dropped ? "dropped" : "kept", ident, why,
		 (unsigned long long)(r->dropped ? r->step : t->step), t->world);
	metrics_log_raw(&t->metrics, NULL, rec);
}
