/*
 * kv_file.c - a key-value store kept in one shared file (the file:// init
 * method), for clusters whose only common ground is a shared file system.
 *
 * The file is a log of records "u32 key length, u32 value length, key,
 * value", the lengths little-endian whatever the host's order (ranks on
 * different hosts share the file); the last record of a key wins. Readers take a
 * shared fcntl lock, writers an exclusive one (fcntl locks work over NFS,
 * and taking one revalidates the client's cache). Waiting polls the file
 * with a growing interval, capped at 20 ms, until the deadline. A users
 * counter is kept in the file: the last kv_free() of the job removes it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kv.h"
#include "timeutil.h"

#define KV_FILE_USERS_KEY "__ddp_file_store_users__"
#define KV_FILE_MAX_BYTES (256u << 20)

struct kv_file {
	struct kv base;
	int fd;
	char *path;
	char err[512];
};

static int kv_file_lock(struct kv_file *f, short type)
{
	struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};

	while (fcntl(f->fd, F_SETLKW, &fl) < 0) {
		if (errno != EINTR)
			return -errno;
	}
	return 0;
}

static void kv_file_unlock(struct kv_file *f)
{
	struct flock fl = {.l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};

	fcntl(f->fd, F_SETLK, &fl);
}

/* Reads the whole file (lock held by the caller) into a malloc'ed buffer. */
static int kv_file_slurp(struct kv_file *f, char **buf, size_t *len)
{
	struct stat st;
	size_t got = 0;
	char *b;

	if (fstat(f->fd, &st) < 0)
		return -errno;
	if ((uint64_t)st.st_size > KV_FILE_MAX_BYTES)
		return -EFBIG;
	b = malloc((size_t)st.st_size + 1);
	if (!b)
		return -ENOMEM;
	while (got < (size_t)st.st_size) {
		ssize_t n = pread(f->fd, b + got, (size_t)st.st_size - got, (off_t)got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	*buf = b;
	*len = got;
	return 0;
}

static uint32_t kv_file_get_le32(const char *p)
{
	const unsigned char *b = (const unsigned char *)p;

	return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static void kv_file_put_le32(char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (char)(v >> (8 * i));
}

/* Walks the log's complete records: returns the offset just past the last
 * one (a torn tail, from a writer killed mid-append, ends the log) and, when
 * key is not NULL, sets *found and points *val into buf at key's last value. */
static size_t kv_file_scan(const char *buf, size_t len, const char *key, int *found,
			   const char **val, size_t *vlen)
{
	size_t klen = key ? strlen(key) : 0, off = 0;

	while (len - off >= 8) {
		uint32_t kl = kv_file_get_le32(buf + off), vl = kv_file_get_le32(buf + off + 4);

		if ((uint64_t)kl + vl > len - off - 8)
			break;
		if (key && kl == klen && memcmp(buf + off + 8, key, klen) == 0) {
			*val = buf + off + 8 + kl;
			*vlen = vl;
			*found = 1;
		}
		off += 8 + (size_t)kl + vl;
	}
	return off;
}

/* Finds the last record of key in buf; *val points into buf. 1 if found. */
static int kv_file_find(const char *buf, size_t len, const char *key, const char **val,
			size_t *vlen)
{
	int found = 0;

	kv_file_scan(buf, len, key, &found, val, vlen);
	return found;
}

/* Where the next record goes: the end of the log, after cutting off a torn
 * record a killed writer may have left (else later records would be read
 * as its missing bytes). Exclusive lock held by the caller. */
static int kv_file_end(struct kv_file *f, off_t *end)
{
	char *buf = NULL;
	size_t len;
	int rc = kv_file_slurp(f, &buf, &len);

	if (rc < 0)
		return rc;
	*end = (off_t)kv_file_scan(buf, len, NULL, NULL, NULL, NULL);
	free(buf);
	if ((size_t)*end != len && ftruncate(f->fd, *end) < 0)
		return -errno;
	return 0;
}

/* Appends a record; exclusive lock held by the caller. */
static int kv_file_append(struct kv_file *f, const char *key, const void *value, size_t len)
{
	uint32_t kl = (uint32_t)strlen(key), vl = (uint32_t)len;
	size_t total = 8 + (size_t)kl + len, done = 0;
	off_t end;
	char *rec;
	int rc = kv_file_end(f, &end);

	if (rc < 0)
		return rc;
	rec = malloc(total);
	if (!rec)
		return -ENOMEM;
	kv_file_put_le32(rec, kl);
	kv_file_put_le32(rec + 4, vl);
	memcpy(rec + 8, key, kl);
	if (len)
		memcpy(rec + 8 + kl, value, len);
	while (done < total) {
		ssize_t n = pwrite(f->fd, rec + done, total - done, end + (off_t)done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			break;
		}
		done += (size_t)n;
	}
	free(rec);
	return rc;
}

static int kv_file_set(struct kv *kv, const char *key, const void *value, size_t len)
{
	struct kv_file *f = (struct kv_file *)kv;
	int rc = kv_file_lock(f, F_WRLCK);

	if (rc < 0)
		return rc;
	rc = kv_file_append(f, key, value, len);
	kv_file_unlock(f);
	if (rc < 0)
		snprintf(f->err, sizeof(f->err), "file store '%s': cannot write: %s", f->path,
			 strerror(-rc));
	return rc;
}

/* One look at the file: 1 and a malloc'ed copy if key exists, else 0. */
static int kv_file_lookup(struct kv_file *f, const char *key, void **value, size_t *len)
{
	const char *val;
	size_t vlen;
	char *buf = NULL;
	size_t blen;
	int rc = kv_file_lock(f, F_RDLCK);

	if (rc < 0)
		return rc;
	rc = kv_file_slurp(f, &buf, &blen);
	kv_file_unlock(f);
	if (rc < 0)
		return rc;
	rc = kv_file_find(buf, blen, key, &val, &vlen);
	if (rc == 1 && value) {
		char *copy = malloc(vlen + 1);

		if (!copy) {
			rc = -ENOMEM;
		} else {
			memcpy(copy, val, vlen);
			copy[vlen] = '\0';
			*value = copy;
			*len = vlen;
		}
	}
	free(buf);
	return rc;
}

static void kv_file_pause(unsigned *interval_us)
{
	struct timespec ts = {0, (long)*interval_us * 1000};

	nanosleep(&ts, NULL);
	if (*interval_us < 20000)
		*interval_us *= 2;
}

static int kv_file_get(struct kv *kv, const char *key, uint64_t timeout_ms, void **value,
		       size_t *len)
{
	struct kv_file *f = (struct kv_file *)kv;
	uint64_t deadline = time_now_ms() + timeout_ms;
	unsigned interval = 250;

	for (;;) {
		int rc = kv_file_lookup(f, key, value, len);

		if (rc < 0)
			return rc;
		if (rc == 1)
			return 0;
		if (time_left_ms(deadline) == 0) {
			snprintf(f->err, sizeof(f->err), "file store '%s': key '%s' not set",
				 f->path, key);
			return -ETIMEDOUT;
		}
		kv_file_pause(&interval);
	}
}

static int kv_file_add(struct kv *kv, const char *key, int64_t delta, int64_t *result)
{
	struct kv_file *f = (struct kv_file *)kv;
	const char *val;
	size_t vlen, blen;
	char *buf = NULL, num[32];
	int64_t cur = 0;
	int rc = kv_file_lock(f, F_WRLCK);

	if (rc < 0)
		return rc;
	rc = kv_file_slurp(f, &buf, &blen);
	if (rc < 0)
		goto out;
	if (kv_file_find(buf, blen, key, &val, &vlen)) {
		char tmp[32];

		if (vlen >= sizeof(tmp)) {
			rc = -EPROTO;
			goto out;
		}
		memcpy(tmp, val, vlen);
		tmp[vlen] = '\0';
		cur = strtoll(tmp, NULL, 10);
	}
	cur += delta;
	snprintf(num, sizeof(num), "%lld", (long long)cur);
	rc = kv_file_append(f, key, num, strlen(num));
	if (rc == 0 && result)
		*result = cur;
out:
	kv_file_unlock(f);
	free(buf);
	return rc;
}

static int kv_file_check(struct kv *kv, const char *const *keys, size_t nkeys)
{
	struct kv_file *f = (struct kv_file *)kv;

	for (size_t i = 0; i < nkeys; i++) {
		int rc = kv_file_lookup(f, keys[i], NULL, NULL);

		if (rc <= 0)
			return rc;
	}
	return 1;
}

static int kv_file_wait(struct kv *kv, const char *const *keys, size_t nkeys, uint64_t timeout_ms)
{
	struct kv_file *f = (struct kv_file *)kv;
	uint64_t deadline = time_now_ms() + timeout_ms;
	unsigned interval = 250;

	for (;;) {
		int rc = kv_file_check(kv, keys, nkeys);

		if (rc < 0)
			return rc;
		if (rc == 1)
			return 0;
		if (time_left_ms(deadline) == 0) {
			snprintf(f->err, sizeof(f->err), "file store '%s': keys not set in time",
				 f->path);
			return -ETIMEDOUT;
		}
		kv_file_pause(&interval);
	}
}

static const char *kv_file_error(const struct kv *kv)
{
	return ((const struct kv_file *)kv)->err;
}

static void kv_file_free(struct kv *kv)
{
	struct kv_file *f = (struct kv_file *)kv;
	int64_t users = 1;

	/* The last user removes the file, under the lock, so that a later job
	 * with the same path never reads this job's keys. */
	if (kv_file_add(kv, KV_FILE_USERS_KEY, -1, &users) == 0 && users <= 0)
		unlink(f->path);
	close(f->fd);
	free(f->path);
	free(f);
}

static const struct kv_ops kv_file_ops = {
    .set = kv_file_set,
    .get = kv_file_get,
    .add = kv_file_add,
    .check = kv_file_check,
    .wait = kv_file_wait,
    .error = kv_file_error,
    .free = kv_file_free,
};

int kv_file_new(const char *path, struct kv **out, char *errbuf, size_t errbuf_len)
{
	struct kv_file *f = calloc(1, sizeof(*f));
	int rc;

	*out = NULL;
	if (!f)
		return -ENOMEM;
	f->base.ops = &kv_file_ops;
	f->fd = -1;
	f->path = strdup(path);
	if (f->path)
		f->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (!f->path || f->fd < 0) {
		rc = f->path ? -errno : -ENOMEM;
		snprintf(errbuf, errbuf_len,
			 "cannot open the file store '%s': %s (check that the directory exists "
			 "and is shared by every node)",
			 path, strerror(-rc));
		goto fail;
	}
	rc = kv_file_add(&f->base, KV_FILE_USERS_KEY, 1, NULL);
	if (rc < 0) {
		snprintf(errbuf, errbuf_len, "cannot lock the file store '%s': %s", path,
			 strerror(-rc));
		goto fail;
	}
	*out = &f->base;
	return 0;
fail:
	if (f->fd >= 0)
		close(f->fd);
	free(f->path);
	free(f);
	return rc;
}
