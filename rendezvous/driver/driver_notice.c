/*
 * driver_notice.c - the job's notice board: one key of the job's prefix,
 * "ddprdzv/RUN/notice", that any agent writes a line to (a hang it named)
 * and every agent watches, so that all nodes print the same line within a
 * store round trip. The first value a watch reports is what was there
 * before this session (an earlier notice): it is not told again.
 */
#include "driver_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "log.h"

static int notice_key(const struct rdzv_driver *d, char *buf, size_t len)
{
	int n = snprintf(buf, len, "ddprdzv/%s/notice", d->run_id);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : n;
}

void notice_watch(struct rdzv_driver *d)
{
	char key[RDZV_RUN_ID_MAX + 32];
	int n = notice_key(d, key, sizeof(key));

	d->notice_first = true;
	if (n < 0 || d->ops->watch(d->be, DRV_WATCH_NOTICE,
				   (struct byteview){(uint8_t *)key, (size_t)n}) < 0)
		log_debug(
		    "cannot watch the job's notices: hangs named elsewhere are not told here");
}

bool notice_event(struct rdzv_driver *d, uint64_t watch, int status, struct rdzv_value v)
{
	char text[RDZV_NOTICE_MAX + 1];
	size_t n;

	if (watch != DRV_WATCH_NOTICE)
		return false;
	if (status < 0 || !v.present) {
		d->notice_first = false;
		return true;
	}
	if (d->notice_first) {
		d->notice_first = false;
		return true;
	}
	n = v.bytes.len < RDZV_NOTICE_MAX ? v.bytes.len : RDZV_NOTICE_MAX;
	memcpy(text, v.bytes.data, n);
	text[n] = '\0';
	if (d->ev && d->ev->notice && d->phase == DRV_ON)
		d->ev->notice(d->ev_arg, text);
	return true;
}

bool notice_done(struct rdzv_driver *d, uint64_t tag, int status)
{
	if (tag == DRV_TAG_PUT)
		return true;
	if (tag != DRV_TAG_NOTICE)
		return false;
	if (status < 0)
		log_warn("cannot tell the other nodes a notice: %s", strerror(-status));
	return true;
}

int rdzv_driver_post(struct rdzv_driver *d, const char *text)
{
	char key[RDZV_RUN_ID_MAX + 32];
	int n = notice_key(d, key, sizeof(key));
	size_t len = strlen(text);

	if (d->phase != DRV_ON || !d->be)
		return -ENOTCONN;
	if (n < 0 || len > RDZV_NOTICE_MAX)
		return -EINVAL;
	return d->ops->set(d->be, DRV_TAG_NOTICE, (struct byteview){(uint8_t *)key, (size_t)n},
			   (struct byteview){(const uint8_t *)text, len}, false);
}

static int word_key(const struct rdzv_driver *d, const char *name, char *buf, size_t len)
{
	int n;

	if (!name || !*name || strlen(name) > 64 || strchr(name, '/'))
		return -EINVAL;
	n = snprintf(buf, len, "ddprdzv/%s/n/%s", d->run_id, name);
	return n < 0 || (size_t)n >= len ? -EINVAL : n;
}

int rdzv_driver_put(struct rdzv_driver *d, const char *name, const char *value)
{
	char key[RDZV_RUN_ID_MAX + 96];
	int n = word_key(d, name, key, sizeof(key));

	if (d->phase != DRV_ON || !d->be)
		return -ENOTCONN;
	if (n < 0 || strlen(value) > RDZV_NOTICE_MAX)
		return -EINVAL;
	return d->ops->set(d->be, DRV_TAG_PUT, (struct byteview){(uint8_t *)key, (size_t)n},
			   (struct byteview){(const uint8_t *)value, strlen(value)}, false);
}

int rdzv_driver_get(struct rdzv_driver *d, const char *name, rdzv_driver_got_fn got, void *arg)
{
	char key[RDZV_RUN_ID_MAX + 96];
	int n = word_key(d, name, key, sizeof(key));
	struct byteview k = {(uint8_t *)key, 0};
	int rc;

	if (d->phase != DRV_ON || !d->be)
		return -ENOTCONN;
	if (n < 0)
		return -EINVAL;
	if (d->get_cb)
		return -EBUSY;
	k.len = (size_t)n;
	rc = d->ops->get(d->be, DRV_TAG_GET, &k, 1);
	if (rc == 0) {
		d->get_cb = got;
		d->get_arg = arg;
	}
	return rc;
}

bool notice_got(struct rdzv_driver *d, uint64_t tag, int status, const struct rdzv_value *v,
		size_t n)
{
	char text[RDZV_NOTICE_MAX + 1];
	rdzv_driver_got_fn cb = d->get_cb;
	size_t len;

	if (tag != DRV_TAG_GET)
		return false;
	d->get_cb = NULL;
	if (!cb)
		return true;
	if (status < 0 || n != 1 || !v[0].present) {
		cb(d->get_arg, NULL);
		return true;
	}
	len = v[0].bytes.len < RDZV_NOTICE_MAX ? v[0].bytes.len : RDZV_NOTICE_MAX;
	memcpy(text, v[0].bytes.data, len);
	text[len] = '\0';
	cb(d->get_arg, text);
	return true;
}
