/*
 * numerics.c - a rank's numeric identity (numerics.h): what OpenBLAS says of
 * itself, the comparison of every rank's against the job's, and the line
 * that names a difference and its fix.
 */
#include "numerics.h"
#include "train_build_flags.h"

#include <cblas.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef DDP_VERSION
#define DDP_VERSION "unknown"
#endif

static const char *const numerics_names[NUMERICS_NFIELDS] = {
    [NUMERICS_KERNELS] = "kernel path",
    [NUMERICS_CORE] = "OpenBLAS kernel",
    [NUMERICS_THREADS] = "BLAS threads",
    [NUMERICS_BLAS] = "BLAS library",
    [NUMERICS_BUILD] = "ddp-train build",
    [NUMERICS_GPU] = "GPU",
    [NUMERICS_DRIVER] = "CUDA driver",
    [NUMERICS_CUBLAS] = "cuBLAS",
    [NUMERICS_NCCL] = "NCCL",
    [NUMERICS_MATMUL] = "matmul precision",
};

const char *numerics_field_name(int field)
{
	return field >= 0 && field < NUMERICS_NFIELDS ? numerics_names[field] : "?";
}

uint32_t numerics_flags_hash(const char *flags)
{
	uint32_t h = 2166136261u; /* FNV-1a */

	for (const unsigned char *p = (const unsigned char *)flags; *p; p++)
		h = (h ^ *p) * 16777619u;
	return h;
}

const char *numerics_build_flags(void)
{
	return DDP_BUILD_FLAGS;
}

void numerics_build(char *buf, size_t len)
{
	snprintf(buf, len, "ddp-train %s, cc %s, flags %08x", DDP_VERSION, __VERSION__,
		 numerics_flags_hash(DDP_BUILD_FLAGS));
}

int numerics_blas_threads(long long threads, long long global_batch_size)
{
	if (threads > 0)
		return threads > 4096 ? 4096 : (int)threads;
	return global_batch_size > 0 ? 1 : 0;
}

static void numerics_where(struct numerics_identity *id)
{
	const char *g = getenv("GROUP_RANK");

	if (gethostname(id->host, sizeof(id->host)) < 0)
		snprintf(id->host, sizeof(id->host), "?");
	id->host[sizeof(id->host) - 1] = '\0';
	id->node = g && *g ? atoi(g) : -1;
}

/* The configuration without the core's word (a DYNAMIC_ARCH build names
 * the kernel it picked there, which NUMERICS_CORE reports on its own). */
static void numerics_blas_config(const char *config, const char *core, char *buf, size_t len)
{
	size_t n = 0, clen = strlen(core);
	const char *p = config;

	buf[0] = '\0';
	while (*p) {
		const char *end = strchr(p, ' ');
		size_t w = end ? (size_t)(end - p) : strlen(p);

		if (w && !(w == clen && strncmp(p, core, w) == 0) && n + w + 2 < len) {
			n += (size_t)snprintf(buf + n, len - n, "%s%.*s", n ? " " : "", (int)w, p);
		}
		p += w;
		while (*p == ' ')
			p++;
	}
}

void numerics_of_cpu(struct numerics_identity *id)
{
	const char *core = openblas_get_corename();

	memset(id, 0, sizeof(*id));
	snprintf(id->value[NUMERICS_KERNELS], NUMERICS_VALUE_MAX, "cpu");
	snprintf(id->value[NUMERICS_CORE], NUMERICS_VALUE_MAX, "%s", core ? core : "?");
	snprintf(id->value[NUMERICS_THREADS], NUMERICS_VALUE_MAX, "%d", openblas_get_num_threads());
	numerics_blas_config(openblas_get_config(), core ? core : "", id->value[NUMERICS_BLAS],
			     NUMERICS_VALUE_MAX);
	numerics_build(id->value[NUMERICS_BUILD], NUMERICS_VALUE_MAX);
	numerics_where(id);
}

/* The bytes: every field, the host, the node and has_state. */
static void numerics_bytes(const struct numerics_identity *id, unsigned char *b)
{
	size_t off = 0;
	uint32_t node = (uint32_t)id->node;

	memset(b, 0, NUMERICS_BYTES);
	for (int f = 0; f < NUMERICS_NFIELDS; f++, off += NUMERICS_VALUE_MAX)
		memcpy(b + off, id->value[f], strnlen(id->value[f], NUMERICS_VALUE_MAX - 1));
	memcpy(b + off, id->host, strnlen(id->host, NUMERICS_HOST_MAX - 1));
	off += NUMERICS_HOST_MAX;
	for (int k = 0; k < 4; k++)
		b[off + (size_t)k] = (unsigned char)(node >> (8 * k));
	b[off + 4] = id->has_state ? 1 : 0;
}

void numerics_encode(const struct numerics_identity *id, float words[NUMERICS_WORDS])
{
	unsigned char b[NUMERICS_WORDS * 3] = {0};

	numerics_bytes(id, b);
	for (size_t w = 0; w < NUMERICS_WORDS; w++)
		words[w] = (float)((uint32_t)b[3 * w] | (uint32_t)b[3 * w + 1] << 8 |
				   (uint32_t)b[3 * w + 2] << 16);
}

static int numerics_text(const unsigned char *b, size_t max, char *out)
{
	if (memchr(b, 0, max) == NULL)
		return -EINVAL;
	memcpy(out, b, max);
	return 0;
}

int numerics_decode(const float words[NUMERICS_WORDS], struct numerics_identity *id)
{
	unsigned char b[NUMERICS_WORDS * 3];
	size_t off = 0;
	uint32_t node = 0;

	for (size_t w = 0; w < NUMERICS_WORDS; w++) {
		float f = words[w];
		uint32_t v;

		if (!(f >= 0.0f && f < 16777216.0f) || f != (float)(uint32_t)f)
			return -EINVAL;
		v = (uint32_t)f;
		b[3 * w] = (unsigned char)v;
		b[3 * w + 1] = (unsigned char)(v >> 8);
		b[3 * w + 2] = (unsigned char)(v >> 16);
	}
	memset(id, 0, sizeof(*id));
	for (int f = 0; f < NUMERICS_NFIELDS; f++, off += NUMERICS_VALUE_MAX)
		if (numerics_text(b + off, NUMERICS_VALUE_MAX, id->value[f]) < 0)
			return -EINVAL;
	if (numerics_text(b + off, NUMERICS_HOST_MAX, id->host) < 0)
		return -EINVAL;
	off += NUMERICS_HOST_MAX;
	for (int k = 0; k < 4; k++)
		node |= (uint32_t)b[off + (size_t)k] << (8 * k);
	id->node = (int)node;
	id->has_state = b[off + 4] != 0;
	return 0;
}

static int numerics_first_diff(const struct numerics_identity *a, const struct numerics_identity *b)
{
	for (int f = 0; f < NUMERICS_NFIELDS; f++)
		if (strcmp(a->value[f], b->value[f]) != 0)
			return f;
	return -1;
}

int numerics_compare(const struct numerics_identity *ids, int n, struct numerics_mismatch *m)
{
	if (n < 1)
		return -EINVAL;
	memset(m, 0, sizeof(*m));
	m->rank = -1;
	m->at_start = true;
	for (int r = 0; r < n; r++)
		if (ids[r].has_state) {
			m->ref = r;
			m->at_start = false;
			break;
		}
	for (int r = 0; r < n; r++) {
		int f = numerics_first_diff(&ids[m->ref], &ids[r]);

		if (f < 0)
			continue;
		if (m->rank < 0) {
			m->rank = r;
			m->field = f;
		}
		m->nmismatch++;
	}
	return m->nmismatch ? 1 : 0;
}

bool numerics_refused(const struct numerics_identity *ids, int n, const struct numerics_mismatch *m,
		      int rank)
{
	if (rank < 0 || rank >= n || m->nmismatch == 0)
		return false;
	if (m->at_start)
		return true;
	return !ids[rank].has_state && numerics_first_diff(&ids[m->ref], &ids[rank]) >= 0;
}

/* "rank 1 (host b, node 1)" */
static void numerics_who(const struct numerics_identity *id, int rank, char *buf, size_t len)
{
	if (id->node >= 0)
		snprintf(buf, len, "rank %d (host %s, node %d)", rank, id->host, id->node);
	else
		snprintf(buf, len, "rank %d (host %s)", rank, id->host);
}

/* What to set for field f so that every rank has value v. */
static void numerics_fix(int f, const char *v, char *buf, size_t len)
{
	switch (f) {
	case NUMERICS_KERNELS:
		snprintf(buf, len, "set --device %s on every rank", v);
		break;
	case NUMERICS_CORE:
		snprintf(buf, len, "set OPENBLAS_CORETYPE=%s on every node", v);
		break;
	case NUMERICS_THREADS:
		snprintf(buf, len, "set --threads %s on every rank", v);
		break;
	case NUMERICS_MATMUL:
		snprintf(buf, len, "set DDP_MATMUL_PRECISION=%s on every node", v);
		break;
	case NUMERICS_BUILD:
		snprintf(buf, len,
			 "run the same ddp-train build (%s: one version, compiler and compile "
			 "flags; 'flags' hashes them) on every node",
			 v);
		break;
	case NUMERICS_GPU:
		snprintf(buf, len, "run on one GPU model (%s) on every node", v);
		break;
	default:
		snprintf(buf, len, "install the same %s (%s) on every node", numerics_field_name(f),
			 v[0] ? v : "none");
	}
}

void numerics_describe(const struct numerics_identity *ids, const struct numerics_mismatch *m,
		       char *buf, size_t len)
{
	const char *mine = ids[m->rank].value[m->field], *ref = ids[m->ref].value[m->field];
	char a[160], b[160], fix[256];

	numerics_who(&ids[m->rank], m->rank, a, sizeof(a));
	numerics_who(&ids[m->ref], m->ref, b, sizeof(b));
	numerics_fix(m->field, ref, fix, sizeof(fix));
	snprintf(buf, len, "%s uses %s %s, %s %s: %s", a, numerics_field_name(m->field),
		 mine[0] ? mine : "(none)", b, ref[0] ? ref : "(none)", fix);
}

void numerics_summary(const struct numerics_identity *id, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = '\0';
	for (int f = 0; f < NUMERICS_NFIELDS && n + 1 < len; f++) {
		int w;

		if (!id->value[f][0])
			continue;
		w = snprintf(buf + n, len - n, "%s%s %s", n ? ", " : "", numerics_field_name(f),
			     id->value[f]);
		if (w < 0)
			break;
		n += (size_t)w;
	}
}
