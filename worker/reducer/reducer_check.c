/*
 * reducer_check.c - checks that every rank built the same model: each rank
 * publishes a signature (one line per parameter and buffer: kind, name,
 * dtype, shape) through the store; every rank reads all of them and reports
 * the first line where the lowest-numbered differing rank departs from rank
 * 0, so every rank fails with the same message.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctx.h"
#include "reducer_check.h"

static int sig_append(char **buf, size_t *len, size_t *cap, const char *kind,
		      const struct ddp_param *p)
{
	char line[1024];
	int n = snprintf(line, sizeof(line), "%s '%s' %s [", kind, p->name,
			 p->dtype == DDP_FLOAT64 ? "float64" : "float32");

	for (int d = 0; d < p->ndim; d++)
		n += snprintf(line + n, sizeof(line) - (size_t)n, "%s%lld", d ? ", " : "",
			      (long long)p->shape[d]);
	n += snprintf(line + n, sizeof(line) - (size_t)n, "]\n");
	if (*len + (size_t)n + 1 > *cap) {
		size_t nc = (*cap + (size_t)n + 1) * 2;
		char *nb = realloc(*buf, nc);

		if (!nb)
			return -ENOMEM;
		*buf = nb;
		*cap = nc;
	}
	memcpy(*buf + *len, line, (size_t)n + 1);
	*len += (size_t)n;
	return 0;
}

static int sig_build(const struct ddp_param *params, size_t nparams,
		     const struct ddp_param *buffers, size_t nbuffers, char **out, size_t *len)
{
	size_t cap = 0;
	int rc = 0;

	*out = NULL;
	*len = 0;
	for (size_t i = 0; i < nparams && rc == 0; i++)
		rc = sig_append(out, len, &cap, "parameter", &params[i]);
	for (size_t i = 0; i < nbuffers && rc == 0; i++)
		rc = sig_append(out, len, &cap, "buffer", &buffers[i]);
	if (rc == 0 && !*out)
		*out = strdup("");
	return *out ? rc : -ENOMEM;
}

/* Copies line `i` of sig (without its newline) into line. */
static void sig_line(const char *sig, size_t i, char *line, size_t len)
{
	const char *end;

	while (i-- > 0 && sig) {
		sig = strchr(sig, '\n');
		if (sig)
			sig++;
	}
	if (!sig || !*sig) {
		snprintf(line, len, "nothing");
		return;
	}
	end = strchr(sig, '\n');
	snprintf(line, len, "%.*s", (int)(end ? (size_t)(end - sig) : strlen(sig)), sig);
}

static void sig_describe(struct ddp_ctx *ctx, const char *ref, const char *other, int rank)
{
	size_t line = 0, i = 0;
	char a[256], b[256];

	while (ref[i] && ref[i] == other[i]) {
		if (ref[i] == '\n')
			line++;
		i++;
	}
	sig_line(ref, line, a, sizeof(a));
	sig_line(other, line, b, sizeof(b));
	snprintf(ctx->err, sizeof(ctx->err),
		 "the model differs between ranks: at entry %zu rank 0 has %s but rank %d has "
		 "%s; build the same model on every rank",
		 line + 1, a, rank, b);
}

int reducer_check_ranks(struct ddp_ctx *ctx, const struct ddp_param *params, size_t nparams,
			const struct ddp_param *buffers, size_t nbuffers)
{
	void **vals = calloc((size_t)ctx->world_size, sizeof(*vals));
	size_t *lens = calloc((size_t)ctx->world_size, sizeof(*lens)), len;
	char key[320], *sig = NULL;
	int rc = sig_build(params, nparams, buffers, nbuffers, &sig, &len);

	if (rc < 0 || !vals || !lens) {
		rc = -ENOMEM;
		goto out;
	}
	snprintf(key, sizeof(key), "%s/reducer_%d/signature", ctx->prefix, ctx->nreducers++);
	pthread_mutex_lock(&ctx->kv_lock);
	rc = kv_exchange(ctx->kv, key, ctx->rank, ctx->world_size, sig, len, ctx->timeout_ms,
			 "the reducer's model check", vals, lens, ctx->err, sizeof(ctx->err));
	pthread_mutex_unlock(&ctx->kv_lock);
	if (rc < 0)
		goto out;
	for (int r = 1; r < ctx->world_size; r++) {
		if (rc == 0 && strcmp(vals[0], vals[r]) != 0) {
			sig_describe(ctx, vals[0], vals[r], r);
			rc = -EINVAL;
		}
	}
	for (int r = 0; r < ctx->world_size; r++)
		free(vals[r]);
out:
	free(sig);
	free(vals);
	free(lens);
	return rc;
}
