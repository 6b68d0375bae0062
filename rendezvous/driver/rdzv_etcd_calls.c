/*
 * rdzv_etcd_calls.c - the etcd backend's worker thread (rdzv_etcd_int.h):
 * its queue, and the blocking calls of etcd_client.h each job makes. The
 * loop never waits for it; a job's results are written before its `done`
 * flag (under the mutex) and read by the loop after.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <log.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
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
	etcd_watch_free(j->ew);
	/* A watch unwatched before its answer is the job's to free. */
	if (j->w && j->w->cancelled && !j->w->polling)
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

/* Hands j to the worker (ahead of the others when urgent); a request also
 * joins the FIFO of answers. */
void pe_job_submit(struct etcd_be *be, struct ejob *j, bool urgent)
{
	if (j->kind != J_KEEPALIVE && j->kind != J_REVOKE) {
		if (be->fifo_tail)
			be->fifo_tail->fnext = j;
		else
			be->fifo = j;
		be->fifo_tail = j;
	}
	pthread_mutex_lock(&be->mu);
	if (urgent) {
		j->next = be->q_head;
		be->q_head = j;
		if (!be->q_tail)
			be->q_tail = j;
	} else {
		if (be->q_tail)
			be->q_tail->next = j;
		else
			be->q_head = j;
		be->q_tail = j;
	}
	pthread_cond_signal(&be->cv);
	pthread_mutex_unlock(&be->mu);
}

/* ---- the worker's side: the etcd calls ---- */

static int job_fail(struct ejob *j, int rc)
{
	j->msg = strdup(etcd_error()[0] ? etcd_error() : strerror(-rc));
	return rc;
}

static bool unavailable(int rc)
{
	return rc == -ETIMEDOUT || rc == -ECONNREFUSED || rc == -ECONNRESET ||
	       rc == -EHOSTUNREACH || rc == -EAGAIN;
}

/* This machine's address towards etcd: the source address a datagram to
 * the endpoint that answered would have (nothing is sent). */
static void local_toward(const char *endpoint, char *out, size_t len)
{
	char host[256], *port;
	const char *p = strstr(endpoint, "://");
	struct addrinfo hints = {.ai_socktype = SOCK_DGRAM}, *ai = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int fd = -1;

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

/* Waits up to ms unless the backend is closing; false when it is. */
static bool pause_unless_quit(struct etcd_be *be, int64_t ms)
{
	struct timespec ts;
	bool quit;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&be->mu);
	while (!be->quit && pthread_cond_timedwait(&be->cv, &be->mu, &ts) == 0)
		;
	quit = be->quit;
	pthread_mutex_unlock(&be->mu);
	return !quit;
}

/* The client, and the session's lease: while no endpoint answers, tried
 * again until the connect deadline (the nodes may start before etcd). */
static int run_open(struct etcd_be *be, struct ejob *j)
{
	int64_t ttl = 0;
	int rc;

	if (be->opt.user && !be->opt.password) {
		if (asprintf(&j->msg,
			     "etcd user '%s' needs a password: set %s (or password= in "
			     "--rdzv_conf, visible to every local user)",
			     be->opt.user, RDZV_PRIMS_ETCD_PASSWORD_ENV) < 0)
			j->msg = NULL;
		return -EINVAL;
	}
	rc = etcd_client_new(&be->opt, &be->c);

	while (rc == 0) {
		rc = etcd_lease_grant(be->c, LEASE_TTL_S, &be->lease, &ttl);
		if (rc == 0 || !unavailable(rc) ||
		    (int64_t)time_now_ms() >= be->connect_deadline_ms)
			break;
		log_debug("etcd at %s: no answer yet (%s); trying again", be->peer, etcd_error());
		if (!pause_unless_quit(be, 100))
			return -ECANCELED;
	}
	if (rc < 0)
		return job_fail(j, rc);
	j->num = ttl;
	local_toward(etcd_client_endpoint(be->c), be->local, sizeof(be->local));
	return 0;
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

static int run_get_prefix(struct etcd_be *be, struct ejob *j, size_t cut)
{
	char *prefix = pe_mem_dup(j->keys[0], cut);
	struct etcd_kv *kvs = NULL;
	size_t n = 0;
	int rc = prefix ? etcd_get_prefix(be->c, prefix, &kvs, &n, NULL) : -ENOMEM;

	free(prefix);
	if (rc < 0)
		return job_fail(j, rc);
	/* kvs come in key order: copy each asked key's entry. */
	for (size_t i = 0; i < j->nkeys && rc == 0; i++) {
		const struct etcd_kv *kv = bsearch(j->keys[i], kvs, n, sizeof(*kvs), kv_cmp);

		if (kv)
			rc = kv_copy(&j->kv[i], kv);
	}
	etcd_kvs_free(kvs, n);
	if (rc < 0)
		j->msg = strdup("out of memory");
	return rc;
}

static int run_get(struct etcd_be *be, struct ejob *j)
{
	size_t cut = common_folder(j->keys, j->nkeys);

	if (cut)
		return run_get_prefix(be, j, cut);
	for (size_t i = 0; i < j->nkeys; i++) {
		int rc = etcd_get(be->c, j->keys[i], &j->kv[i], NULL);

		if (rc < 0)
			return job_fail(j, rc);
	}
	return 0;
}

static bool kv_holds(const struct etcd_kv *kv, const void *v, size_t len)
{
	return kv->key && kv->value_len == len && (!len || !memcmp(kv->value, v, len));
}

static int run_cas(struct etcd_be *be, struct ejob *j)
{
	struct etcd_cmp cmp = {.kind = j->has_expected ? ETCD_CMP_VALUE : ETCD_CMP_ABSENT,
			       .value = j->expected,
			       .value_len = j->elen};
	int rc = etcd_cas(be->c, j->keys[0], &cmp, j->value, j->vlen, 0, &j->kv[0]);

	if (rc < 0)
		return job_fail(j, rc);
	/* A transaction retried after a broken connection may find its own
	 * write: that is a swap (the machine accepts it as one). */
	j->swapped = rc == 1 || kv_holds(&j->kv[0], j->value, j->vlen);
	return 0;
}

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

/* ADD: read, then compare-and-set on the mod revision read, until no
 * other writer came between (each conflict answers the current value). */
static int run_add(struct etcd_be *be, struct ejob *j)
{
	struct etcd_kv *kv = &j->kv[0];
	int rc = etcd_get(be->c, j->keys[0], kv, NULL);

	while (rc >= 0) {
		struct etcd_cmp cmp = {.kind = kv->key ? ETCD_CMP_MOD_REVISION : ETCD_CMP_ABSENT,
				       .mod_revision = kv->mod_revision};
		char text[24];
		int64_t v;

		if ((rc = counter_value(j, kv, &v)) < 0)
			return rc;
		if (__builtin_add_overflow(v, j->delta, &j->num)) {
			j->msg = strdup("etcd: a counter of the rendezvous overflowed");
			return -EOVERFLOW;
		}
		snprintf(text, sizeof(text), "%lld", (long long)j->num);
		etcd_kv_release(kv);
		rc = etcd_cas(be->c, j->keys[0], &cmp, text, strlen(text), 0, kv);
		if (rc == 1)
			return 0;
	}
	return job_fail(j, rc);
}

static int run_set(struct etcd_be *be, struct ejob *j)
{
	int rc = etcd_put(be->c, j->keys[0], j->value, j->vlen, j->session ? be->lease : 0, NULL);

	return rc < 0 ? job_fail(j, rc) : 0;
}

static int run_watch(struct etcd_be *be, struct ejob *j)
{
	int64_t rev = 0;
	int rc = etcd_get(be->c, j->keys[0], &j->kv[0], &rev);

	if (rc >= 0)
		rc = etcd_watch_new(be->c, j->keys[0], 0, rev + 1, &j->ew);
	return rc < 0 ? job_fail(j, rc) : 0;
}

static int run_keepalive(struct etcd_be *be, struct ejob *j)
{
	int rc = etcd_lease_keepalive(be->c, be->lease, NULL);

	if (rc == -ENOENT) {
		if (asprintf(&j->msg,
			     "etcd: this node's session (lease %llx) expired: it did not reach "
			     "etcd at %s within %d s (frozen, or cut off), so its keys are gone",
			     (unsigned long long)be->lease, be->peer, LEASE_TTL_S) < 0)
			j->msg = NULL;
		return rc;
	}
	return rc < 0 ? job_fail(j, rc) : 0;
}

static int run_job(struct etcd_be *be, struct ejob *j)
{
	switch (j->kind) {
	case J_OPEN:
		return run_open(be, j);
	case J_GET:
		return run_get(be, j);
	case J_CAS:
		return run_cas(be, j);
	case J_ADD:
		return run_add(be, j);
	case J_SET:
		return run_set(be, j);
	case J_WATCH:
		return run_watch(be, j);
	case J_KEEPALIVE:
		return run_keepalive(be, j);
	case J_REVOKE:
		/* Its keys vanish at once; a lease already gone is as good. */
		if (be->lease && etcd_lease_revoke(be->c, be->lease) < 0)
			log_debug("etcd: revoking the session's lease: %s", etcd_error());
		else
			log_debug("etcd: the session's lease %llx is revoked",
				  (unsigned long long)be->lease);
		return 0;
	}
	return -EINVAL;
}

/* Takes jobs until the backend is closing and nothing is left; once it is
 * closing, only the revoke is still made. */
static void *worker_main(void *arg)
{
	struct etcd_be *be = arg;

	pthread_mutex_lock(&be->mu);
	for (;;) {
		struct ejob *j = be->q_head;

		if (!j) {
			if (be->quit)
				break;
			pthread_cond_wait(&be->cv, &be->mu);
			continue;
		}
		be->q_head = j->next;
		if (!be->q_head)
			be->q_tail = NULL;
		j->next = NULL;
		if (!be->quit || j->kind == J_REVOKE) {
			pthread_mutex_unlock(&be->mu);
			j->status = be->c || j->kind == J_OPEN ? run_job(be, j) : -ENOTCONN;
			pthread_mutex_lock(&be->mu);
		} else {
			j->status = -ECANCELED;
		}
		j->done = true;
		if (j->kind == J_KEEPALIVE || j->kind == J_REVOKE) {
			j->next = be->idone;
			be->idone = j;
		}
		uv_async_send(&be->async);
	}
	be->worker_exited = true;
	pthread_mutex_unlock(&be->mu);
	uv_async_send(&be->async);
	return NULL;
}

/* The worker starts with every signal blocked: the loop's thread takes
 * them (and the watch threads it starts inherit the mask). */
int pe_worker_start(struct etcd_be *be)
{
	sigset_t all, old;
	int rc;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = -pthread_create(&be->worker, NULL, worker_main, be);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	be->worker_started = rc == 0;
	return rc;
}
