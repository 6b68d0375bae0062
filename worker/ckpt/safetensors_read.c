/*
 * safetensors_read.c - reads and validates a safetensors file before any
 * tensor is used: a regular file, the header length, the JSON, each
 * entry's dtype, shape and offsets, that the tensors fill the data section
 * exactly (no overlap, no gap, nothing after the last one: the format's own
 * rule), that the metadata is a map of strings, and every stored checksum.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "fileutil.h"
#include "safetensors.h"

static const struct {
	const char *name;
	int dtype;
	size_t esize;
} st_dtypes[] = {
    {"F32", DDP_FLOAT32, 4}, {"F64", DDP_FLOAT64, 8}, {"F16", -1, 2},	  {"BF16", -1, 2},
    {"I64", -1, 8},	     {"I32", -1, 4},	      {"I16", -1, 2},	  {"I8", -1, 1},
    {"U8", -1, 1},	     {"U16", -1, 2},	      {"U32", -1, 4},	  {"U64", -1, 8},
    {"BOOL", -1, 1},	     {"F8_E4M3", -1, 1},      {"F8_E5M2", -1, 1},
};

static int st_read_file(const char *path, char **buf, size_t *len, char *err, size_t errlen)
{
	struct stat st;
	size_t got = 0;
	mode_t mode = 0;
	int fd = file_open_regular(path, &mode), rc = 0;

	if (fd == -EISDIR || fd == -EINVAL) {
		/* Never read: a FIFO would block, /dev/zero never ends. */
		snprintf(err, errlen, "%s, not a safetensors file", file_kind(mode));
		return fd;
	}
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		goto out;
	}
	*buf = malloc((size_t)st.st_size + 1);
	if (!*buf) {
		rc = -ENOMEM;
		goto out;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, *buf + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			goto out;
		}
		if (n == 0)
			break; /* shrank while read: parsed as the shorter file */
		got += (size_t)n;
	}
	*len = got;
out:
	close(fd);
	return rc;
}

static int st_parse_entry(const char *name, json_t *v, size_t data_len, struct st_entry *e,
			  char *err, size_t errlen)
{
	json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape");
	json_t *offs = json_object_get(v, "data_offsets");
	size_t i, numel = 1;

	e->name = strdup(name);
	if (!e->name)
		return -ENOMEM;
	if (!json_is_string(dt) || !json_is_array(shape) || !json_is_array(offs) ||
	    json_array_size(offs) != 2 || json_array_size(shape) > ST_MAX_NDIM)
		goto bad;
	e->dtype = -2;
	for (i = 0; i < sizeof(st_dtypes) / sizeof(st_dtypes[0]); i++) {
		if (strcmp(json_string_value(dt), st_dtypes[i].name) == 0) {
			e->dtype = st_dtypes[i].dtype;
			e->esize = st_dtypes[i].esize;
			snprintf(e->dtype_str, sizeof(e->dtype_str), "%s", st_dtypes[i].name);
		}
	}
	if (e->dtype == -2)
		goto bad;
	e->ndim = (int)json_array_size(shape);
	for (int d = 0; d < e->ndim; d++) {
		json_t *x = json_array_get(shape, (size_t)d);

		if (!json_is_integer(x) || json_integer_value(x) < 0 ||
		    json_integer_value(x) > (json_int_t)1 << 40)
			goto bad;
		e->shape[d] = json_integer_value(x);
		numel *= (size_t)e->shape[d];
		if (numel > ((size_t)1 << 44))
			goto bad;
	}
	if (!json_is_integer(json_array_get(offs, 0)) || !json_is_integer(json_array_get(offs, 1)))
		goto bad;
	json_int_t b = json_integer_value(json_array_get(offs, 0));
	json_int_t en = json_integer_value(json_array_get(offs, 1));
	if (b < 0 || en < b || (size_t)en > data_len || (size_t)(en - b) != numel * e->esize)
		goto bad;
	e->begin = (size_t)b;
	e->end = (size_t)en;
	return 0;
bad:
	snprintf(err, errlen, "tensor '%s' has a bad dtype, shape or data_offsets", name);
	return -EINVAL;
}

static int st_cmp_begin(const void *a, const void *b)
{
	const struct st_entry *x = *(const struct st_entry *const *)a;
	const struct st_entry *y = *(const struct st_entry *const *)b;

	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	return x->end < y->end ? -1 : x->end > y->end;
}

/* The tensors, in offset order, cover the data section exactly: no two
 * share bytes, no bytes between them, none after the last. */
static int st_check_layout(struct ddp_ckpt *ck, size_t data_len, char *err, size_t errlen)
{
	const struct st_entry **order = malloc((ck->ntensors + 1) * sizeof(*order));
	size_t expect = 0;
	int rc = 0;

	if (!order)
		return -ENOMEM;
	for (size_t i = 0; i < ck->ntensors; i++)
		order[i] = &ck->t[i];
	qsort(order, ck->ntensors, sizeof(*order), st_cmp_begin);
	for (size_t i = 0; i < ck->ntensors && rc == 0; i++) {
		if (order[i]->begin < expect) {
			snprintf(err, errlen, "tensors '%s' and '%s' overlap", order[i - 1]->name,
				 order[i]->name);
			rc = -EINVAL;
		} else if (order[i]->begin > expect) {
			snprintf(err, errlen, "%zu bytes before tensor '%s' belong to no tensor",
				 order[i]->begin - expect, order[i]->name);
			rc = -EINVAL;
		}
		expect = order[i]->end;
	}
	if (rc == 0 && expect != data_len) {
		snprintf(err, errlen,
			 "%zu bytes after the last tensor belong to no tensor (trailing data)",
			 data_len - expect);
		rc = -EINVAL;
	}
	free(order);
	return rc;
}

/* "__metadata__" is a map of strings (what PyTorch and Hugging Face read). */
static int st_check_meta(const json_t *meta, char *err, size_t errlen)
{
	const char *key;
	json_t *v;

	if (!json_is_object(meta)) {
		snprintf(err, errlen, "'__metadata__' is not an object");
		return -EINVAL;
	}
	json_object_foreach((json_t *)meta, key, v)
	{
		if (!json_is_string(v)) {
			snprintf(err, errlen, "metadata '%s' is not a string", key);
			return -EINVAL;
		}
	}
	return 0;
}

/* Checks each tensor that has a stored checksum; a tensor without one (a
 * file written by another program) stays unverified. */
static int st_verify(struct ddp_ckpt *ck, char *err, size_t errlen)
{
	for (size_t i = 0; ck->meta && i < ck->ntensors; i++) {
		struct st_entry *e = &ck->t[i];
		size_t klen = strlen(ST_SUM_PREFIX) + strlen(e->name) + 1;
		char *key = malloc(klen), got[ST_SUM_HEX + 1];
		const char *want;

		if (!key)
			return -ENOMEM;
		snprintf(key, klen, ST_SUM_PREFIX "%s", e->name);
		want = json_string_value(json_object_get(ck->meta, key));
		free(key);
		if (!want)
			continue;
		snprintf(got, sizeof(got), "%016llx",
			 (unsigned long long)XXH3_64bits(ck->data + e->begin, e->end - e->begin));
		if (strcmp(want, got) != 0) {
			snprintf(err, errlen,
				 "tensor '%s' does not match its checksum (stored %.20s, computed "
				 "%s): the file is corrupt, use another checkpoint",
				 e->name, want, got);
			return -EINVAL;
		}
		e->verified = 1;
	}
	return 0;
}

static int st_parse(struct ddp_ckpt *ck, char *err, size_t errlen)
{
	uint64_t hlen;
	json_t *root, *v;
	json_error_t jerr;
	const char *key;
	int rc = 0;

	if (ck->len < 8)
		goto bad;
	memcpy(&hlen, ck->file, 8);
	hlen = le64toh(hlen);
	if (hlen > ST_MAX_HEADER || hlen > ck->len - 8)
		goto bad;
	ck->data = ck->file + 8 + hlen;
	root = json_loadb(ck->file + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_object(root)) {
		json_decref(root);
		goto bad;
	}
	ck->t = calloc(json_object_size(root) + 1, sizeof(*ck->t));
	if (!ck->t) {
		json_decref(root);
		return -ENOMEM;
	}
	json_object_foreach(root, key, v)
	{
		if (strcmp(key, "__metadata__") == 0) {
			ck->meta = json_incref(v);
			continue;
		}
		if (!json_is_object(v)) {
			rc = -EINVAL;
			snprintf(err, errlen, "entry '%s' is not an object", key);
			break;
		}
		rc = st_parse_entry(key, v, ck->len - 8 - (size_t)hlen, &ck->t[ck->ntensors++], err,
				    errlen);
		if (rc < 0)
			break;
	}
	json_decref(root);
	if (rc == 0 && ck->meta)
		rc = st_check_meta(ck->meta, err, errlen);
	if (rc == 0)
		rc = st_check_layout(ck, ck->len - 8 - (size_t)hlen, err, errlen);
	if (rc == 0)
		rc = st_verify(ck, err, errlen);
	return rc;
bad:
	snprintf(err, errlen, "not a safetensors file (bad header length or JSON)");
	return -EINVAL;
}

void ddp_ckpt_free(struct ddp_ckpt *ck)
{
	if (!ck)
		return;
	for (size_t i = 0; ck->t && i < ck->ntensors; i++)
		free(ck->t[i].name);
	free(ck->t);
	json_decref(ck->meta);
	free(ck->file);
	free(ck->path);
	free(ck);
}

int ddp_ckpt_open(const char *path, struct ddp_ckpt **out, char *errbuf, size_t errbuf_len)
{
	struct ddp_ckpt *ck = calloc(1, sizeof(*ck));
	char err[512] = "";
	int rc;

	*out = NULL;
	if (!ck)
		return -ENOMEM;
	ck->path = strdup(path);
	rc = ck->path ? st_read_file(path, &ck->file, &ck->len, err, sizeof(err)) : -ENOMEM;
	if (rc == 0)
		rc = st_parse(ck, err, sizeof(err));
	if (rc < 0) {
		if (errbuf && errbuf_len)
			snprintf(errbuf, errbuf_len, "checkpoint '%s': %s", path,
				 err[0] ? err : strerror(-rc));
		ddp_ckpt_free(ck);
		return rc;
	}
	*out = ck;
	return 0;
}

const char *ddp_ckpt_meta(const struct ddp_ckpt *ck, const char *key)
{
	json_t *v = ck->meta ? json_object_get(ck->meta, key) : NULL;

	return json_is_string(v) ? json_string_value(v) : NULL;
}

size_t ddp_ckpt_num_tensors(const struct ddp_ckpt *ck)
{
	return ck->ntensors;
}

int ddp_ckpt_tensor(const struct ddp_ckpt *ck, size_t i, struct ddp_tensor *t)
{
	const struct st_entry *e;

	if (i >= ck->ntensors)
		return -ERANGE;
	e = &ck->t[i];
	memset(t, 0, sizeof(*t));
	t->name = e->name;
	t->dtype = e->dtype >= 0 ? (enum ddp_dtype)e->dtype : DDP_FLOAT32;
	t->ndim = e->ndim;
	memcpy(t->shape, e->shape, sizeof(t->shape));
	t->data = (void *)(ck->data + e->begin);
	return e->dtype >= 0 ? 0 : -ENOTSUP;
}

int ddp_ckpt_tensor_verified(const struct ddp_ckpt *ck, size_t i)
{
	return i < ck->ntensors ? ck->t[i].verified : -ERANGE;
}
