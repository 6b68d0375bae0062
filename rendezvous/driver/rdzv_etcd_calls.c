/*
 * rdzv_etcd_calls.c - each request of the etcd backend (rdzv_etcd_int.h)
 * as a chain of calls of the async client (etcd_async.h), one started from
 * the callback of the one before; the last sets the job's results and
 * tells the backend.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <log.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rdzv_etcd_int.h"
#include "timeutil.h"

/* Folders deeper than "ddprdzv/RUN/" are read with one prefix read. */
#define PREFIX_MIN_SLASHES 3

char *pe_mem_dup(const void *p, size_t n)
{
	char *c = malloc(n + 1);

	if (c) {
		if (n)
			memcpy(c, p, n);
		c[n] = '\0';
	}
	return c;
}

/* ---- jobs ---- */

void pe_job_free(struct ejob *j)
{
	if (!j)
		return;
	for (size_t i = 0; i < j->nkeys; i++)
		free(j->keys[i]);
	free(j->keys);
	if (j->kv) {
		size_t n = j->kind == J_GET ? j->nkeys : 1;

		for (size_t i = 0; i < n; i++)
			etcd_kv_release(&j->kv[i]);
		free(j->kv);
	}
	/* A watch unwatched before its answer is the job's to free. */
	if (j->w && j->w->cancelled)
		free(j->w);
	free(j->value);
	free(j->expected);
	free(j->msg);
	free(j);
}

/* A request with copies of its keys (and value, expected). */
struct ejob *pe_job_new(enum job_kind kind, uint64_t tag, const struct byteview *keys, size_t nkeys)
{
	struct ejob *j = calloc(1, sizeof(*j));

	if (!j)
		return NULL;
	j->kind = kind;
	j->tag = tag;
	j->keys = nkeys ? calloc(nkeys, sizeof(char *)) : NULL;
	j->kv = calloc(nkeys ? nkeys : 1, sizeof(struct etcd_kv));
	if ((nkeys && !j->keys) || !j->kv) {
		pe_job_free(j);
		return NULL;
	}
	for (size_t i = 0; i < nkeys; i++, j->nkeys++)
		if (!(j->keys[i] = pe_mem_dup(keys[i].data, keys[i].len))) {
			pe_job_free(j);
			return NULL;
		}
	return j;
}

/* ---- the calls ---- */

/* The end of j's chain: its status (and message), then the backend. */
static void job_end(struct ejob *j, int rc)
{
	if (rc < 0 && !j->msg)
		j->msg = strdup(etcd_error()[0] ? etcd_error() : strerror(-rc));
	j->status = rc < 0 ? rc : 0;
	j->done = true;
	pe_job_ended(j->be);
}

/* This machine's address towards etcd: the source address a datagram to
 * the endpoint that answered would have (nothing is sent). */
void pe_local_toward(const char *endpoint, char *out, size_t len)
{
	char host[256], *port;
	const char *p = strstr(endpoint, "://");
	struct addrinfo hints = {.ai_socktype = SOCK_DGRAM}, *ai = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int fd = -1;

	out[0] = '\0';
	snprintf(host, sizeof(host), "%s", p ? p + 3 : endpoint);
	port = strrchr(host, ':');
	if (!port)
		return;
	*port++ = '\0';
	if (host[0] == '[' && port[-2] == ']') {
		port[-2] = '\0';
		memmove(host, host + 1, strlen(host));
	}
	if (getaddrinfo(host, port, &hints, &ai) != 0)
		return;
	fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
	    getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
		const void *a = ss.ss_family == AF_INET6
				    ? (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr
				    : (const void *)&((struct sockaddr_in *)&ss)->sin_addr;

		if (!inet_ntop(ss.ss_family, a, out, (socklen_t)len))
			out[0] = '\0';
	}
	if (fd >= 0)
		close(fd);
	freeaddrinfo(ai);
}

/* The common folder of the keys ("ddprdzv/RUN/s/"), when it is deep enough
 * to read at once; 0 otherwise. */
static size_t common_folder(char *const *keys, size_t n)
{
	size_t len = strlen(keys[0]), slashes = 0, cut = 0;

	for (size_t i = 1; i < n; i++) {
		size_t k = 0;

		while (k < len && keys[i][k] == keys[0][k])
			k++;
		len = k;
	}
	for (size_t k = 0; k < len; k++)
		if (keys[0][k] == '/') {
			slashes++;
			cut = k + 1;
		}
	return n >= 2 && slashes >= PREFIX_MIN_SLASHES ? cut : 0;
}

static int kv_cmp(const void *key, const void *kv)
{
	return strcmp(key, ((const struct etcd_kv *)kv)->key);
}

static int kv_copy(struct etcd_kv *to, const struct etcd_kv *from)
{
	*to = *from;
	to->key = strdup(from->key);
	to->value = pe_mem_dup(from->value, from->value ? from->value_len : 0);
	if (to->key && to->value)
		return 0;
	etcd_kv_release(to);
	return -ENOMEM;
}

/* ---- GET ---- */

static void on_get_prefix(void *arg, int status, struct etcd_result *r)
{
	struct ejob *j = arg;
	int rc = status;

	/* kvs come in key order: copy each asked key's entry. */
	for (size_t i = 0; rc == 0 && i < j->nkeys; i++) {
		const struct etcd_kv *kv =
		    bsearch(j->keys[i], r->kvs, r->n, sizeof(*r->kvs), kv_cmp);

		if (kv && (rc = kv_copy(&j->kv[i], kv)) < 0)
			j->msg = strdup("out of memory");
	}
	job_end(j, rc);
}

static void get_next(struct ejob *j);

static void on_get_one(void *arg, int status, struct etcd_result *r)
{
	struct ejob *j = arg;

	if (status < 0) {
		job_end(j, status);
		return;
	}
	if (r->n) {
		j->kv[j->next_key] = r->kvs[0];
		memset(&r->kvs[0], 0, sizeof(r->kvs[0]));
	}
	j->next_key++;
	get_next(j);
}

/* The keys one read after the other. */
static void get_next(struct ejob *j)
{
	int rc;

	if (j->next_key == j->nkeys) {
		job_end(j, 0);
		return;
	}
	rc = etcd_async_range(j->be->c, j->keys[j->next_key], false, on_get_one, j);
	if (rc < 0)
		job_end(j, rc);
}

static int run_get(struct etcd_be *be, struct ejob *j)
{
	size_t cut = common_folder(j->keys, j->nkeys);
	char *prefix;
	int rc;

	if (!cut) {
		get_next(j);
		return 0;
	}
	if (!(prefix = pe_mem_dup(j->keys[0], cut)))
		return -ENOMEM;
	rc = etcd_async_range(be->c, prefix, true, on_get_prefix, j);
	free(prefix);
	return rc;
}

/* ---- CAS ---- */

static bool kv_holds(const struct etcd_kv *kv, const void *v, size_t len)
{
	return kv->key && kv->value_len == len && (!len || !memcmp(kv->value, v, len));
}

/* The key as it is, from a compare-and-set that failed, into *kv. */
static void take_current(struct etcd_result *r, struct etcd_kv *kv)
{
	etcd_kv_release(kv);
	if (r->n) {
		*kv = r->kvs[0];
		memset(&r->kvs[0], 0, sizeof(r->kvs[0]));
	}
}

static void on_cas(void *arg, int status, struct etcd_result *r)
{
	struct ejob *j = arg;

	if (status >= 0) {
		take_current(r, &j->kv[0]);
		/* A transaction retried after a broken connection may find its
		 * own write: that is a swap (the machine accepts it as one). */
		j->swapped = r->succeeded || kv_holds(&j->kv[0], j->value, j->vlen);
	}
	job_end(j, status);
}

static int run_cas(struct etcd_be *be, struct ejob *j)
{
	struct etcd_cmp cmp = {.kind = j->has_expected ? ETCD_CMP_VALUE : ETCD_CMP_ABSENT,
			       .value = j->expected,
			       .value_len = j->elen};

	return etcd_async_cas(be->c, j->keys[0], &cmp, j->value, j->vlen, 0, on_cas, j);
}

/* ---- ADD: read, then compare-and-set on the mod revision read, until no
 * other writer came between (each conflict answers the current value) ---- */

/* The counter's value in kv (0 when absent). */
static int counter_value(struct ejob *j, const struct etcd_kv *kv, int64_t *out)
{
	const char *s = kv->value ? kv->value : "";
	char *end;
	long long v;

	*out = 0;
	if (!kv->key)
		return 0;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || end == s || *end) {
		if (asprintf(&j->msg, "etcd: the counter '%s' holds '%.40s', not a number",
			     j->keys[0], s) < 0)
			j->msg = NULL;
		return -EPROTO;
	}
	*out = v;
	return 0;
}

static void on_add_cas(void *arg, int status, struct etcd_result *r);

/* The next try with the counter as in j->kv[0]. */
static int add_try(struct ejob *j)
{
	struct etcd_kv *kv = &j->kv[0];
	struct etcd_cmp cmp = {.kind = kv->key ? ETCD_CMP_MOD_REVISION : ETCD_CMP_ABSENT,
			       .mod_revision = kv->mod_revision};
	char text[24];
	int64_t v;
	int rc = counter_value(j, kv, &v);

	if (rc < 0)
		return rc;
	if (__builtin_add_overflow(v, j->delta, &j->num)) {
		j->msg = strdup("etcd: a counter of the rendezvous overflowed");
		return -EOVERFLOW;
	}
	snprintf(text, sizeof(text), "%lld", (long long)j->num);
	return etcd_async_cas(j->be->c, j->keys[0], &cmp, text, strlen(text), 0, on_add_cas, j);
}

static void on_add_cas(void *arg, int status, struct etcd_result *r)
{
	struct ejob *j = arg;

	if (status >= 0 && r->succeeded) {
		job_end(j, 0);
		return;
	}
	if (status >= 0) {
		take_current(r, &j->kv[0]);
		status = add_try(j);
	}
	if (status < 0)
		job_end(j, status);
}

static void on_add_read(void *arg, int status, struct etcd_result *r)
{
	struct ejob *j = arg;

	if (status >= 0) {
		take_current(r, &j->kv[0]);
		status = add_try(j);
	}
	if (status < 0)
		job_end(j, status);
}

/* ---- SET, WATCH ---- */

static void on_set(void *arg, int status, struct etcd_result *r)
{
	(void)r;
	job_end(arg, status);
}

static void on_watch_read(void *arg, int status, struct etcd_result *r)
{
	struct ejob *j = arg;
	struct ewatch *w = j->w;

	if (status >= 0 && !w->cancelled) {
		take_current(r, &j->kv[0]);
		/* From the read's revision + 1: no change after it is missed. */
		status = etcd_async_watch(j->be->c, j->keys[0], 0, r->revision + 1, pe_on_event, w,
					  &w->aw);
	}
	job_end(j, status);
}

static int run_job(struct etcd_be *be, struct ejob *j)
{
	switch (j->kind) {
	case J_GET:
		return run_get(be, j);
	case J_CAS:
		return run_cas(be, j);
	case J_ADD:
		return etcd_async_range(be->c, j->keys[0], false, on_add_read, j);
	case J_SET:
		return etcd_async_put(be->c, j->keys[0], j->value, j->vlen,
				      j->session ? be->lease : 0, on_set, j);
	case J_WATCH:
		return etcd_async_range(be->c, j->keys[0], false, on_watch_read, j);
	}
	return -EINVAL;
}

void pe_job_run(struct etcd_be *be, struct ejob *j)
{
	int rc;

	j->be = be;
	j->running = true;
	if ((rc = run_job(be, j)) < 0)
		job_end(j, rc);
}
