/*
 * safetensors.c - safetensors files: u64 little-endian header length, a
 * JSON header ({"__metadata__": {str: str}, name: {"dtype", "shape",
 * "data_offsets": [begin, end]}}, padded with spaces to a multiple of 8),
 * then the tensors' bytes back to back. Each tensor's checksum (xxHash's
 * XXH3_64bits) is stored in the metadata as "xxh3_64:NAME" (a string, as
 * the format requires, so PyTorch and Hugging Face read the file as any
 * other). Written through a temporary file, fsync and rename.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "safetensors.h"

static const char *st_dtype_name(enum ddp_dtype d)
{
	return d == DDP_FLOAT64 ? "F64" : "F32";
}

static int st_validate_names(const struct ddp_tensor *t, size_t n, const struct ddp_meta *meta,
			     size_t nmeta, char *err, size_t errlen)
{
	for (size_t i = 0; i < n; i++) {
		if (!t[i].name || !*t[i].name || strlen(t[i].name) >= ST_MAX_NAME ||
		    strcmp(t[i].name, "__metadata__") == 0 || ddp_dtype_size(t[i].dtype) == 0 ||
		    t[i].ndim < 0 || t[i].ndim > ST_MAX_NDIM) {
			snprintf(err, errlen,
				 "tensor %zu has an empty, reserved or over-long name, or a "
				 "bad dtype/shape",
				 i);
			return -EINVAL;
		}
		for (size_t j = 0; j < i; j++) {
			if (strcmp(t[i].name, t[j].name) == 0) {
				snprintf(err, errlen, "tensor name '%s' appears twice", t[i].name);
				return -EINVAL;
			}
		}
	}
	for (size_t i = 0; i < nmeta; i++) {
		if (!meta[i].key ||
		    strncmp(meta[i].key, ST_SUM_PREFIX, strlen(ST_SUM_PREFIX)) == 0) {
			snprintf(err, errlen,
				 "metadata key '%s' is missing or reserved (the '" ST_SUM_PREFIX
				 "' keys hold the checksums)",
				 meta[i].key ? meta[i].key : "(null)");
			return -EINVAL;
		}
	}
	return 0;
}

static size_t st_numel(const int64_t *shape, int ndim)
{
	size_t n = 1;

	for (int d = 0; d < ndim; d++)
		n *= (size_t)shape[d];
	return n;
}

/* Builds the header JSON text (padded); *out malloc'ed. */
static int st_header(const struct ddp_tensor *t, size_t n, const struct ddp_meta *meta,
		     size_t nmeta, char **out, size_t *len)
{
	json_t *root = json_object(), *m = json_object();
	size_t off = 0;
	char *text;
	int rc = -ENOMEM;

	if (!root || !m)
		goto out;
	for (size_t i = 0; i < nmeta; i++)
		json_object_set_new(m, meta[i].key,
				    json_string(meta[i].value ? meta[i].value : ""));
	if (nmeta || n)
		json_object_set(root, "__metadata__", m);
	for (size_t i = 0; i < n; i++) {
		size_t bytes = st_numel(t[i].shape, t[i].ndim) * ddp_dtype_size(t[i].dtype);
		json_t *e = json_object(), *shape = json_array();
		char key[sizeof(ST_SUM_PREFIX) + ST_MAX_NAME], sum[ST_SUM_HEX + 1];

		snprintf(key, sizeof(key), ST_SUM_PREFIX "%s", t[i].name);
		snprintf(sum, sizeof(sum), "%016llx",
			 (unsigned long long)XXH3_64bits(t[i].data, bytes));
		json_object_set_new(m, key, json_string(sum));

		for (int d = 0; d < t[i].ndim; d++)
			json_array_append_new(shape, json_integer(t[i].shape[d]));
		json_object_set_new(e, "dtype", json_string(st_dtype_name(t[i].dtype)));
		json_object_set_new(e, "shape", shape);
		json_object_set_new(e, "data_offsets",
				    json_pack("[II]", (json_int_t)off, (json_int_t)(off + bytes)));
		json_object_set_new(root, t[i].name, e);
		off += bytes;
	}
	text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (!text)
		goto out;
	*len = strlen(text);
	*out = realloc(text, (*len + 8) & ~(size_t)7);
	if (!*out) {
		free(text);
		goto out;
	}
	while (*len % 8)
		(*out)[(*len)++] = ' ';
	rc = 0;
out:
	json_decref(m);
	json_decref(root);
	return rc;
}

static int st_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int st_fsync_dir(const char *path)
{
	char *copy = strdup(path);
	int fd, rc = 0;

	if (!copy)
		return -ENOMEM;
	fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fsync(fd) < 0)
		rc = -errno;
	if (fd >= 0)
		close(fd);
	free(copy);
	return rc;
}

int ddp_ckpt_write(const char *path, const struct ddp_tensor *tensors, size_t ntensors,
		   const struct ddp_meta *meta, size_t nmeta, char *errbuf, size_t errbuf_len)
{
	char tmp[4096], *hdr = NULL, e[256] = "";
	size_t hlen = 0;
	uint64_t h64;
	int fd = -1, rc;

	rc = st_validate_names(tensors, ntensors, meta, nmeta, e, sizeof(e));
	if (rc == 0)
		rc = st_header(tensors, ntensors, meta, nmeta, &hdr, &hlen);
	if (rc < 0)
		goto out;
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = -errno;
		goto out;
	}
	h64 = htole64(hlen);
	rc = st_write_all(fd, &h64, 8);
	if (rc == 0)
		rc = st_write_all(fd, hdr, hlen);
	for (size_t i = 0; i < ntensors && rc == 0; i++)
		rc = st_write_all(fd, tensors[i].data,
				  st_numel(tensors[i].shape, tensors[i].ndim) *
				      ddp_dtype_size(tensors[i].dtype));
	if (rc == 0 && fsync(fd) < 0)
		rc = -errno;
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	fd = -1;
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -errno;
	if (rc == 0)
		rc = st_fsync_dir(path);
	else
		unlink(tmp);
out:
	if (rc < 0 && errbuf && errbuf_len)
		snprintf(errbuf, errbuf_len, "cannot write checkpoint '%s': %s", path,
			 e[0] ? e : strerror(-rc));
	if (fd >= 0)
		close(fd);
	free(hdr);
	return rc;
}
