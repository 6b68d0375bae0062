/*
 * test_etcd_live.c - the etcd client against a real etcd, started by
 * test_etcd.py (etcd_cluster.py) which runs this program once per scenario:
 *
 *   basic          one member: put/get, compare-and-set, prefixes, leases
 *                  (expiry seen as a watch event, keep-alive, revoke),
 *                  watches (latency, replay, the fd), errors, a dead
 *                  endpoint before a live one
 *   auth           one member with authentication on (user/password)
 *   tls            one member with TLS and client certificates
 *   kill-follower  three members: the client's member (a follower) is killed;
 *                  then the leader (no quorum), then the last member
 *   kill-leader    three members: the client's member, the leader, is killed
 *   freeze-follower  three members: the client's member is stopped (SIGSTOP)
 *
 * Environment: ETCD_ENDPOINTS, ETCD_PIDS (member PIDs in endpoint order),
 * ETCD_LEADER (index of the leader), ETCD_CA / ETCD_CERT / ETCD_KEY,
 * ETCD_USER / ETCD_PASSWORD. Measured latencies are printed as
 * "latency NAME: ..." lines.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "etcd_cluster_env.h"
#include "etcd_client.h"
#include "timeutil.h"

static char endpoints[1024];
static char *member_ep[3];
static pid_t member_pid[3];
static int leader_index = -1;
static int key_serial;

/* A key of its own for each use, so tests never see each other's keys. */
static const char *fresh_key(const char *what)
{
	static char buf[128];
	snprintf(buf, sizeof(buf), "test/%d/%s/%d", (int)getpid(), what, key_serial++);
	return buf;
}

static size_t discard(char *p, size_t size, size_t n, void *userdata)
{
	return size * n;
}

static double now_ms(void)
{
	return (double)time_now_ns() / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void report(const char *name, double *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	printf("latency %s: n=%zu min=%.2f ms p50=%.2f ms p90=%.2f ms max=%.2f ms\n", name, n, v[0],
	       v[n / 2], v[n * 9 / 10], v[n - 1]);
	fflush(stdout);
}

static struct etcd_client *client_for(const char *eps, int timeout_ms)
{
	struct etcd_options o = {
	    .endpoints = eps,
	    .timeout_ms = timeout_ms,
	    .ca_file = getenv("ETCD_CA"),
	    .cert_file = getenv("ETCD_CERT"),
	    .key_file = getenv("ETCD_KEY"),
	    .user = getenv("ETCD_USER"),
	    .password = getenv("ETCD_PASSWORD"),
	};
	struct etcd_client *c;
	int rc = etcd_client_new(&o, &c);
	if (rc < 0)
		fail_msg("etcd_client_new: %d %s", rc, etcd_error());
	return c;
}

static struct etcd_client *client(void)
{
	return client_for(endpoints, 5000);
}

#define OK(expr)                                                                                   \
	do {                                                                                       \
		int rc_ = (expr);                                                                  \
		if (rc_ < 0)                                                                       \
			fail_msg("%s: %d (%s)", #expr, rc_, etcd_error());                         \
	} while (0)

/* Waits up to timeout_ms for the next event and checks its type/key. */
static void expect_event(struct etcd_watch *w, int timeout_ms, enum etcd_event_type type,
			 const char *key, const char *value, struct etcd_event *out)
{
	struct etcd_event ev;
	int rc = etcd_watch_next(w, timeout_ms, &ev);
	if (rc <= 0)
		fail_msg("no event for '%s' within %d ms: %d (%s)", key, timeout_ms, rc,
			 etcd_error());
	assert_int_equal(ev.type, type);
	assert_string_equal(ev.kv.key, key);
	if (value)
		assert_string_equal(ev.kv.value, value);
	if (out)
		*out = ev;
	else
		etcd_event_release(&ev);
}

/* ---- basic ---- */

static void test_put_get_delete(void **state)
{
	struct etcd_client *c = client();
	const char *k = strdup(fresh_key("kv"));
	static const char bin[] = {'a', 0, 'b', (char)0xff, 0};
	struct etcd_kv kv;
	int64_t rev, read_rev;
	OK(etcd_put(c, k, "hello", 5, 0, &rev));
	assert_true(rev > 0);
	assert_int_equal(etcd_get(c, k, &kv, &read_rev), 1);
	assert_string_equal(kv.key, k);
	assert_int_equal(kv.value_len, 5);
	assert_memory_equal(kv.value, "hello", 5);
	assert_int_equal(kv.mod_revision, rev);
	assert_int_equal(kv.version, 1);
	assert_true(read_rev >= rev);
	etcd_kv_release(&kv);

	OK(etcd_put(c, k, bin, sizeof(bin), 0, NULL));
	assert_int_equal(etcd_get(c, k, &kv, NULL), 1);
	assert_int_equal(kv.value_len, sizeof(bin));
	assert_memory_equal(kv.value, bin, sizeof(bin));
	etcd_kv_release(&kv);
	OK(etcd_put(c, k, "", 0, 0, NULL));
	assert_int_equal(etcd_get(c, k, &kv, NULL), 1);
	assert_int_equal(kv.value_len, 0);
	etcd_kv_release(&kv);

	assert_int_equal(etcd_delete(c, k), 1);
	assert_int_equal(etcd_delete(c, k), 0);
	assert_int_equal(etcd_get(c, k, &kv, NULL), 0);
	assert_null(kv.key);
	assert_int_equal(etcd_put(c, "", "x", 1, 0, NULL), -EINVAL);
	free((void *)k);
	etcd_client_free(c);
}

static void test_cas(void **state)
{
	struct etcd_client *c = client();
	char *k = strdup(fresh_key("cas"));
	struct etcd_cmp absent = {.kind = ETCD_CMP_ABSENT};
	struct etcd_cmp rev = {.kind = ETCD_CMP_MOD_REVISION};
	struct etcd_cmp val = {.kind = ETCD_CMP_VALUE, .value = "two", .value_len = 3};
	struct etcd_kv cur;
	int64_t r1, r2;
	assert_int_equal(etcd_cas(c, k, &absent, "one", 3, 0, &cur), 1);
	r1 = cur.mod_revision;
	assert_true(r1 > 0);
	etcd_kv_release(&cur);
	/* Taken: the conflict returns the current value. */
	assert_int_equal(etcd_cas(c, k, &absent, "other", 5, 0, &cur), 0);
	assert_string_equal(cur.value, "one");
	assert_int_equal(cur.mod_revision, r1);
	etcd_kv_release(&cur);

	rev.mod_revision = r1;
	assert_int_equal(etcd_cas(c, k, &rev, "two", 3, 0, &cur), 1);
	r2 = cur.mod_revision;
	assert_true(r2 > r1);
	etcd_kv_release(&cur);
	assert_int_equal(etcd_cas(c, k, &rev, "stale", 5, 0, &cur), 0);
	assert_string_equal(cur.value, "two");
	assert_int_equal(cur.mod_revision, r2);
	etcd_kv_release(&cur);

	assert_int_equal(etcd_cas(c, k, &val, "three", 5, 0, NULL), 1);
	assert_int_equal(etcd_cas(c, k, &val, "four", 4, 0, &cur), 0);
	assert_string_equal(cur.value, "three");
	etcd_kv_release(&cur);

	/* A condition on a key that does not exist fails with it absent. */
	assert_int_equal(etcd_delete(c, k), 1);
	assert_int_equal(etcd_cas(c, k, &val, "x", 1, 0, &cur), 0);
	assert_null(cur.key);
	assert_int_equal(cur.mod_revision, 0);
	free(k);
	etcd_client_free(c);
}

static void test_prefix(void **state)
{
	struct etcd_client *c = client();
	char pre[160], k[192];
	struct etcd_kv *kvs;
	size_t n;
	int64_t rev;
	snprintf(pre, sizeof(pre), "%s/", fresh_key("prefix"));
	for (int i = 3; i >= 1; i--) {
		snprintf(k, sizeof(k), "%s%d", pre, i);
		OK(etcd_put(c, k, "v", 1, 0, NULL));
	}
	/* Just past the prefix: not part of it. */
	snprintf(k, sizeof(k), "%.*s0", (int)strlen(pre) - 1, pre);
	OK(etcd_put(c, k, "no", 2, 0, NULL));
	OK(etcd_get_prefix(c, pre, &kvs, &n, &rev));
	assert_int_equal(n, 3);
	for (size_t i = 0; i < n; i++) {
		snprintf(k, sizeof(k), "%s%zu", pre, i + 1);
		assert_string_equal(kvs[i].key, k);
	}
	assert_true(rev >= kvs[2].mod_revision);
	etcd_kvs_free(kvs, n);
	etcd_client_free(c);
}

/* The key's DELETE event from an expiring lease, waited for on a watch (no
 * sleeping), within the TTL plus etcd's expiry check slack. */
static void test_lease_expiry(void **state)
{
	struct etcd_client *c = client();
	char *k = strdup(fresh_key("lease"));
	struct etcd_watch *w;
	int64_t id, ttl, rev, t;
	double t0, dt;
	OK(etcd_lease_grant(c, 2, &id, &ttl));
	assert_true(ttl >= 2);
	OK(etcd_put(c, k, "alive", 5, id, &rev));
	t0 = now_ms();
	OK(etcd_watch_new(c, k, 0, rev + 1, &w));
	expect_event(w, (int)ttl * 1000 + 3000, ETCD_EVENT_DELETE, k, NULL, NULL);
	dt = now_ms() - t0;
	printf("latency lease-expiry (TTL %" PRId64 " s): key deleted %.0f ms after the put\n", ttl,
	       dt);
	assert_true(dt > (double)ttl * 1000 - 600);
	assert_int_equal(etcd_lease_keepalive(c, id, &t), -ENOENT);
	assert_int_equal(etcd_get(c, k, &(struct etcd_kv){0}, NULL), 0);
	etcd_watch_free(w);
	free(k);
	etcd_client_free(c);
}

static void test_lease_keepalive_revoke(void **state)
{
	struct etcd_client *c = client();
	char *k = strdup(fresh_key("keep"));
	struct etcd_watch *w;
	struct etcd_event ev;
	struct etcd_kv kv;
	int64_t id, ttl, rev;
	double t0;
	OK(etcd_lease_grant(c, 3, &id, &ttl));
	OK(etcd_put(c, k, "v", 1, id, &rev));
	OK(etcd_watch_new(c, k, 0, rev + 1, &w));
	/* 6 x 700 ms > the TTL: kept alive, no delete comes. The watch's own
	 * timeout is the clock; each renewal has 2.3 s to spare (a loaded
	 * machine, valgrind: 2 s with a TTL of 2 was seen to expire). */
	for (int i = 0; i < 6; i++) {
		assert_int_equal(etcd_watch_next(w, 700, &ev), 0);
		OK(etcd_lease_keepalive(c, id, &ttl));
		assert_true(ttl >= 3);
	}
	assert_int_equal(etcd_get(c, k, &kv, NULL), 1);
	assert_int_equal(kv.lease, id);
	etcd_kv_release(&kv);
	t0 = now_ms();
	OK(etcd_lease_revoke(c, id));
	expect_event(w, 2000, ETCD_EVENT_DELETE, k, NULL, NULL);
	printf("latency revoke -> delete event: %.2f ms\n", now_ms() - t0);
	assert_int_equal(etcd_get(c, k, &kv, NULL), 0);
	assert_int_equal(etcd_lease_keepalive(c, id, NULL), -ENOENT);
	assert_int_equal(etcd_lease_revoke(c, id), -ENOENT);
	assert_non_null(strstr(etcd_error(), "lease not found"));
	etcd_watch_free(w);
	free(k);
	etcd_client_free(c);
}

static void test_watch_latency(void **state)
{
	struct etcd_client *c = client();
	char *k = strdup(fresh_key("watch"));
	struct etcd_watch *w;
	double lat[40], t0;
	int64_t rev;
	char v[16];
	assert_int_equal(etcd_get(c, k, &(struct etcd_kv){0}, &rev), 0);
	/* The first put right after etcd_watch_new(): the event comes once the
	 * stream is up, and from revision rev + 1 it cannot be missed. */
	t0 = now_ms();
	OK(etcd_watch_new(c, k, 0, rev + 1, &w));
	OK(etcd_put(c, k, "first", 5, 0, NULL));
	expect_event(w, 2000, ETCD_EVENT_PUT, k, "first", NULL);
	printf("latency watch set-up + first event: %.2f ms\n", now_ms() - t0);
	for (int i = 0; i < 40; i++) {
		snprintf(v, sizeof(v), "v%d", i);
		t0 = now_ms();
		OK(etcd_put(c, k, v, strlen(v), 0, NULL));
		expect_event(w, 2000, ETCD_EVENT_PUT, k, v, NULL);
		lat[i] = now_ms() - t0;
	}
	report("watch notify (put sent -> event received)", lat, 40);
	assert_int_equal(etcd_delete(c, k), 1);
	expect_event(w, 2000, ETCD_EVENT_DELETE, k, NULL, NULL);
	etcd_watch_free(w);
	free(k);
	etcd_client_free(c);
}

static void test_watch_replay_prefix(void **state)
{
	struct etcd_client *c = client();
	char pre[160], k[192];
	struct etcd_watch *w;
	struct etcd_event ev;
	int64_t first = 0, rev;
	snprintf(pre, sizeof(pre), "%s/", fresh_key("replay"));
	for (int i = 0; i < 3; i++) {
		snprintf(k, sizeof(k), "%s%d", pre, i);
		OK(etcd_put(c, k, "x", 1, 0, &rev));
		if (!first)
			first = rev;
	}
	/* From the first write's revision: all three, in order, once. */
	OK(etcd_watch_new(c, pre, ETCD_WATCH_PREFIX, first, &w));
	for (int i = 0; i < 3; i++) {
		snprintf(k, sizeof(k), "%s%d", pre, i);
		expect_event(w, 2000, ETCD_EVENT_PUT, k, "x", &ev);
		assert_int_equal(ev.kv.mod_revision, first + i);
		etcd_event_release(&ev);
	}
	/* Nothing more until the next write; then exactly that. */
	assert_int_equal(etcd_watch_next(w, 0, &ev), 0);
	assert_int_equal(etcd_watch_next(w, 200, &ev), 0);
	snprintf(k, sizeof(k), "%s9", pre);
	OK(etcd_put(c, k, "y", 1, 0, NULL));
	assert_int_equal(etcd_watch_next(w, 2000, &ev), 1);
	assert_string_equal(ev.kv.key, k);
	etcd_event_release(&ev);
	assert_int_equal(etcd_watch_next(w, 0, &ev), 0);
	etcd_watch_free(w);
	etcd_client_free(c);
}

/* Compacts the history up to rev with a request of the test's own (the
 * client has no compaction: the rendezvous never compacts). */
static void compact(int64_t rev)
{
	char url[1200], body[96];
	CURL *e = curl_easy_init();
	long status = 0;
	assert_non_null(e);
	snprintf(url, sizeof(url), "http://%s/v3/kv/compaction", member_ep[0]);
	snprintf(body, sizeof(body), "{\"revision\":\"%" PRId64 "\",\"physical\":true}", rev);
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(e, CURLOPT_PROXY, "");
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
	assert_int_equal(curl_easy_perform(e), CURLE_OK);
	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
	assert_int_equal(status, 200);
	curl_easy_cleanup(e);
}

/* A watch from a compacted revision ends with -ESTALE, saying so. */
static void test_watch_compacted(void **state)
{
	struct etcd_client *c = client();
	char *k = strdup(fresh_key("compact"));
	struct etcd_watch *w;
	struct etcd_event ev;
	int64_t r1, r3;
	int rc;
	OK(etcd_put(c, k, "1", 1, 0, &r1));
	OK(etcd_put(c, k, "2", 1, 0, NULL));
	OK(etcd_put(c, k, "3", 1, 0, &r3));
	compact(r3);
	OK(etcd_watch_new(c, k, 0, r1, &w));
	rc = etcd_watch_next(w, 3000, &ev);
	printf("watch from a compacted revision: %d: %s\n", rc, etcd_error());
	assert_int_equal(rc, -ESTALE);
	assert_non_null(strstr(etcd_error(), "compacted"));
	/* The end stays: the next call says the same. */
	assert_int_equal(etcd_watch_next(w, 0, &ev), -ESTALE);
	etcd_watch_free(w);
	free(k);
	etcd_client_free(c);
}

static void test_latency_put_cas_get(void **state)
{
	struct etcd_client *c = client();
	char *k = strdup(fresh_key("lat"));
	double put[100], cas[100], get[100];
	struct etcd_kv cur;
	int64_t rev = 0;
	for (int i = 0; i < 100; i++) {
		double t0 = now_ms();
		OK(etcd_put(c, k, "value", 5, 0, &rev));
		put[i] = now_ms() - t0;
	}
	for (int i = 0; i < 100; i++) {
		struct etcd_cmp cmp = {.kind = ETCD_CMP_MOD_REVISION, .mod_revision = rev};
		double t0 = now_ms();
		assert_int_equal(etcd_cas(c, k, &cmp, "value", 5, 0, &cur), 1);
		cas[i] = now_ms() - t0;
		rev = cur.mod_revision;
		etcd_kv_release(&cur);
	}
	for (int i = 0; i < 100; i++) {
		struct etcd_kv kv;
		double t0 = now_ms();
		assert_int_equal(etcd_get(c, k, &kv, NULL), 1);
		get[i] = now_ms() - t0;
		etcd_kv_release(&kv);
	}
	report("put", put, 100);
	report("compare-and-set", cas, 100);
	report("get", get, 100);
	free(k);
	etcd_client_free(c);
}

/* A port nobody listens on (bound, then closed without listening). */
static int dead_port(void);

static void test_errors(void **state)
{
	struct etcd_client *c = client(), *bad;
	struct etcd_options o = {.endpoints = " , "};
	int64_t id;
	assert_int_equal(etcd_lease_keepalive(c, 12345, NULL), -ENOENT);
	assert_int_equal(etcd_put(c, fresh_key("err"), "x", 1, 12345, NULL), -ENOENT);
	assert_non_null(strstr(etcd_error(), "lease not found"));
	assert_int_equal(etcd_lease_grant(c, 0, &id, NULL), -EINVAL);
	assert_int_equal(etcd_client_new(&o, &bad), -EINVAL);
	assert_non_null(strstr(etcd_error(), "no endpoint"));
	o.endpoints = "127.0.0.1";
	assert_int_equal(etcd_client_new(&o, &bad), -EINVAL);
	o.endpoints = "127.0.0.1:1";
	o.user = "root";
	assert_int_equal(etcd_client_new(&o, &bad), -EINVAL);
	/* Credentials for a cluster without authentication: used without. */
	o.endpoints = endpoints;
	o.password = "pw";
	OK(etcd_client_new(&o, &bad));
	OK(etcd_put(bad, fresh_key("noauth"), "x", 1, 0, NULL));
	etcd_client_free(bad);
	etcd_client_free(c);
}

/* A dead endpoint listed first: each call moves past it (connection
 * refused) and then stays on the live one. */
static void test_dead_endpoint_first(void **state)
{
	char eps[1200];
	struct etcd_client *c;
	double t0, first;
	snprintf(eps, sizeof(eps), "127.0.0.1:%d,%s", dead_port(), endpoints);
	c = client_for(eps, 3000);
	t0 = now_ms();
	OK(etcd_put(c, fresh_key("dead"), "x", 1, 0, NULL));
	first = now_ms() - t0;
	assert_string_equal(etcd_client_endpoint(c), endpoints);
	printf("latency failover past a refused endpoint: %.2f ms\n", first);
	etcd_client_free(c);
}

/* Only dead endpoints: the call gives up at its deadline, naming each. */
static void test_all_dead(void **state)
{
	char eps[64];
	int p1 = dead_port(), p2 = dead_port();
	struct etcd_client *c;
	struct etcd_watch *w;
	struct etcd_event ev;
	double t0, dt;
	int rc;
	snprintf(eps, sizeof(eps), "127.0.0.1:%d,127.0.0.1:%d", p1, p2);
	c = client_for(eps, 800);
	t0 = now_ms();
	rc = etcd_put(c, "k", "x", 1, 0, NULL);
	dt = now_ms() - t0;
	printf("all endpoints dead: %d after %.0f ms: %s\n", rc, dt, etcd_error());
	assert_int_equal(rc, -ECONNREFUSED);
	assert_true(dt >= 790 && dt < 1800);
	snprintf(eps, sizeof(eps), "127.0.0.1:%d (connection refused)", p1);
	assert_non_null(strstr(etcd_error(), eps));
	snprintf(eps, sizeof(eps), "127.0.0.1:%d (connection refused)", p2);
	assert_non_null(strstr(etcd_error(), eps));
	snprintf(eps, sizeof(eps), "127.0.0.1:%d,127.0.0.1:%d", p1, p2);
	/* A watch gives up the same way; and frees at once mid-reconnect. */
	t0 = now_ms();
	OK(etcd_watch_new(c, "k", 0, 0, &w));
	rc = etcd_watch_next(w, 3000, &ev);
	dt = now_ms() - t0;
	assert_int_equal(rc, -ECONNREFUSED);
	assert_true(dt < 1800);
	assert_non_null(strstr(etcd_error(), "watch of 'k' lost"));
	etcd_watch_free(w);
	c = (etcd_client_free(c), client_for(eps, 60000));
	OK(etcd_watch_new(c, "k", 0, 0, &w));
	assert_int_equal(etcd_watch_next(w, 100, &ev), 0);
	t0 = now_ms();
	etcd_watch_free(w);
	dt = now_ms() - t0;
	printf("watch freed while reconnecting in %.2f ms\n", dt);
	assert_true(dt < 200);
	etcd_client_free(c);
}

static int dead_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	close(fd);
	return ntohs(a.sin_port);
}

/* ---- auth ---- */

static void test_auth(void **state)
{
	struct etcd_client *c = client();
	struct etcd_options o = {.endpoints = endpoints, .timeout_ms = 5000};
	char *k = strdup(fresh_key("auth"));
	struct etcd_client *anon, *wrong;
	struct etcd_watch *w;
	struct etcd_kv kv;
	int64_t rev;
	double t0;
	OK(etcd_put(c, k, "secret", 6, 0, &rev));
	assert_int_equal(etcd_get(c, k, &kv, NULL), 1);
	etcd_kv_release(&kv);
	OK(etcd_watch_new(c, k, 0, rev + 1, &w));
	OK(etcd_put(c, k, "again", 5, 0, NULL));
	expect_event(w, 2000, ETCD_EVENT_PUT, k, "again", NULL);
	/* The members run with --auth-token-ttl 1: after 2.5 s of quiet (the
	 * watch's timeout is the clock) the token has expired, and the next call
	 * renews it by itself; the watch opened before goes on. */
	assert_int_equal(etcd_watch_next(w, 2500, &(struct etcd_event){0}), 0);
	t0 = now_ms();
	OK(etcd_put(c, k, "later", 5, 0, NULL));
	printf("put with an expired token (renewed): %.2f ms\n", now_ms() - t0);
	expect_event(w, 2000, ETCD_EVENT_PUT, k, "later", NULL);
	etcd_watch_free(w);

	OK(etcd_client_new(&o, &anon));
	t0 = now_ms();
	assert_int_equal(etcd_get(anon, k, &kv, NULL), -EACCES);
	printf("no credentials: %.0f ms: %s\n", now_ms() - t0, etcd_error());
	assert_true(now_ms() - t0 < 1500);
	etcd_client_free(anon);

	o.user = "root";
	o.password = "wrong";
	OK(etcd_client_new(&o, &wrong));
	t0 = now_ms();
	assert_int_equal(etcd_get(wrong, k, &kv, NULL), -EACCES);
	printf("wrong password: %.0f ms: %s\n", now_ms() - t0, etcd_error());
	assert_non_null(strstr(etcd_error(), "authentication as 'root'"));
	assert_true(now_ms() - t0 < 1500);
	etcd_client_free(wrong);
	free(k);
	etcd_client_free(c);
}

/* ---- tls ---- */

static void test_tls(void **state)
{
	struct etcd_client *c = client(), *untrusted;
	struct etcd_options o = {.endpoints = endpoints, .timeout_ms = 5000};
	char *k = strdup(fresh_key("tls")), eps[1100];
	struct etcd_watch *w;
	int64_t rev;
	double t0;
	int rc;
	assert_non_null(strstr(etcd_client_endpoint(c), "127.0.0.1"));
	OK(etcd_put(c, k, "over tls", 8, 0, &rev));
	OK(etcd_watch_new(c, k, 0, rev + 1, &w));
	OK(etcd_put(c, k, "again", 5, 0, NULL));
	expect_event(w, 2000, ETCD_EVENT_PUT, k, "again", NULL);
	etcd_watch_free(w);

	/* The system store does not know the test's CA: refused at once. */
	o.cert_file = getenv("ETCD_CERT");
	o.key_file = getenv("ETCD_KEY");
	snprintf(eps, sizeof(eps), "https://%s", endpoints);
	o.endpoints = eps;
	OK(etcd_client_new(&o, &untrusted));
	t0 = now_ms();
	rc = etcd_put(untrusted, k, "x", 1, 0, NULL);
	printf("untrusted server certificate: %d after %.0f ms: %s\n", rc, now_ms() - t0,
	       etcd_error());
	assert_true(rc < 0);
	assert_true(now_ms() - t0 < 1500);
	etcd_client_free(untrusted);
	free(k);
	etcd_client_free(c);
}

/* ---- three members ---- */

static void kill_member(int i)
{
	int fd = pidfd_open(member_pid[i], 0);
	struct pollfd p;
	assert_true(fd >= 0);
	assert_int_equal(pidfd_send_signal(fd, SIGKILL, NULL, 0), 0);
	/* Readable once the process has exited (its sockets are closed). */
	p = (struct pollfd){.fd = fd, .events = POLLIN};
	assert_int_equal(poll(&p, 1, 10000), 1);
	close(fd);
	printf("killed member %d (%s, pid %d%s)\n", i, member_ep[i], (int)member_pid[i],
	       i == leader_index ? ", the leader" : "");
}

/* The endpoint list with member `first` first, then the others in order. */
static void order_from(int first, int second, int third, char *eps, size_t len)
{
	snprintf(eps, len, "%s,%s,%s", member_ep[first], member_ep[second], member_ep[third]);
}

/* Puts, then checks the watch delivers it; returns the put's latency. */
static double put_and_see(struct etcd_client *c, struct etcd_watch *w, const char *k, const char *v,
			  double *watch_ms)
{
	double t0 = now_ms(), put;
	OK(etcd_put(c, k, v, strlen(v), 0, NULL));
	put = now_ms() - t0;
	expect_event(w, 6000, ETCD_EVENT_PUT, k, v, NULL);
	*watch_ms = now_ms() - t0;
	return put;
}

static void test_kill_follower(void **state)
{
	int f1 = leader_index == 0 ? 1 : 0, f2 = 3 - leader_index - f1, l = leader_index;
	char eps[1024], *k = strdup(fresh_key("failover"));
	struct etcd_client *c, *quick;
	struct etcd_watch *w;
	struct etcd_event ev;
	double put, seen, t0, dt;
	int64_t rev;
	int rc;
	order_from(f1, f2, l, eps, sizeof(eps));
	c = client_for(eps, 5000);
	OK(etcd_put(c, k, "before", 6, 0, &rev));
	assert_string_equal(etcd_client_endpoint(c), member_ep[f1]);
	OK(etcd_watch_new(c, k, 0, rev + 1, &w));
	put = put_and_see(c, w, k, "warm", &seen);

	kill_member(f1);
	put = put_and_see(c, w, k, "after-follower", &seen);
	printf("latency failover (client's member, a follower, killed): put %.2f ms, watch "
	       "resumed and delivered %.2f ms after the put was sent\n",
	       put, seen);
	assert_string_equal(etcd_client_endpoint(c), member_ep[f2]);

	/* One of three left: no quorum, so writes fail within the deadline,
	 * naming every endpoint. */
	kill_member(l);
	quick = client_for(eps, 2000);
	t0 = now_ms();
	rc = etcd_put(quick, k, "no-quorum", 9, 0, NULL);
	dt = now_ms() - t0;
	printf("no quorum: %d after %.0f ms: %s\n", rc, dt, etcd_error());
	assert_true(rc < 0);
	assert_true(dt < 3000);
	for (int i = 0; i < 3; i++)
		assert_non_null(strstr(etcd_error(), member_ep[i]));
	etcd_client_free(quick);
	/* The surviving member lost its leader: the watch is cancelled there
	 * (require-leader) and, with nowhere else to go, ends within the
	 * client's timeout. */
	t0 = now_ms();
	rc = etcd_watch_next(w, 15000, &ev);
	printf("watch without quorum: %d after %.0f ms: %s\n", rc, now_ms() - t0, etcd_error());
	assert_true(rc < 0);

	kill_member(f2);
	quick = client_for(eps, 1500);
	t0 = now_ms();
	rc = etcd_put(quick, k, "none", 4, 0, NULL);
	dt = now_ms() - t0;
	printf("all members killed: %d after %.0f ms: %s\n", rc, dt, etcd_error());
	assert_int_equal(rc, -ECONNREFUSED);
	assert_true(dt < 2500);
	for (int i = 0; i < 3; i++)
		assert_non_null(strstr(etcd_error(), member_ep[i]));
	etcd_client_free(quick);
	etcd_watch_free(w);
	free(k);
	etcd_client_free(c);
}

static void signal_member(int i, int sig)
{
	int fd = pidfd_open(member_pid[i], 0);
	assert_true(fd >= 0);
	assert_int_equal(pidfd_send_signal(fd, sig, NULL, 0), 0);
	close(fd);
}

/* A member that freezes (SIGSTOP: its connections stay open, nothing
 * answers): calls move on after their first attempt's cap, and the watch
 * on it notices through its liveness check and resumes elsewhere. */
static void test_freeze_follower(void **state)
{
	int f1 = leader_index == 0 ? 1 : 0, f2 = 3 - leader_index - f1, l = leader_index;
	char eps[1024], *k = strdup(fresh_key("freeze"));
	struct etcd_client *c;
	struct etcd_watch *w;
	double put, seen;
	int64_t rev;
	order_from(f1, f2, l, eps, sizeof(eps));
	c = client_for(eps, 5000);
	OK(etcd_put(c, k, "before", 6, 0, &rev));
	OK(etcd_watch_new(c, k, 0, rev + 1, &w));
	put = put_and_see(c, w, k, "warm", &seen);
	signal_member(f1, SIGSTOP);
	printf("froze member %d (%s), a follower\n", f1, member_ep[f1]);
	put = put_and_see(c, w, k, "after-freeze", &seen);
	printf("latency frozen follower: put %.2f ms, watch delivered %.2f ms after the put was "
	       "sent\n",
	       put, seen);
	assert_true(put < 2000);
	assert_true(seen < 6000);
	assert_string_equal(etcd_client_endpoint(c), member_ep[f2]);
	signal_member(f1, SIGCONT);
	etcd_watch_free(w);
	free(k);
	etcd_client_free(c);
}

static void test_kill_leader(void **state)
{
	int l = leader_index, f1 = l == 0 ? 1 : 0, f2 = 3 - l - f1;
	char eps[1024], *k = strdup(fresh_key("leader"));
	struct etcd_client *c;
	struct etcd_watch *w;
	double put, seen;
	int64_t rev;
	order_from(l, f1, f2, eps, sizeof(eps));
	c = client_for(eps, 8000);
	OK(etcd_put(c, k, "before", 6, 0, &rev));
	assert_string_equal(etcd_client_endpoint(c), member_ep[l]);
	OK(etcd_watch_new(c, k, 0, rev + 1, &w));
	put = put_and_see(c, w, k, "warm", &seen);
	kill_member(l);
	put = put_and_see(c, w, k, "after-leader", &seen);
	printf("latency failover (client's member, the leader, killed; includes the election): put "
	       "%.2f ms, watch delivered %.2f ms after the put was sent\n",
	       put, seen);
	etcd_watch_free(w);
	free(k);
	etcd_client_free(c);
}

/* ---- main ---- */

static void read_env(void)
{
	struct etcd_cluster_env env;

	etcd_cluster_env_read(&env, "test_etcd_live");
	snprintf(endpoints, sizeof(endpoints), "%s", env.endpoints);
	memcpy(member_ep, env.member_ep, sizeof(member_ep));
	memcpy(member_pid, env.member_pid, sizeof(member_pid));
	leader_index = env.leader_index;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest basic[] = {
	    cmocka_unit_test(test_put_get_delete),
	    cmocka_unit_test(test_cas),
	    cmocka_unit_test(test_prefix),
	    cmocka_unit_test(test_lease_expiry),
	    cmocka_unit_test(test_lease_keepalive_revoke),
	    cmocka_unit_test(test_watch_latency),
	    cmocka_unit_test(test_watch_replay_prefix),
	    cmocka_unit_test(test_watch_compacted),
	    cmocka_unit_test(test_latency_put_cas_get),
	    cmocka_unit_test(test_errors),
	    cmocka_unit_test(test_dead_endpoint_first),
	    cmocka_unit_test(test_all_dead),
	};
	const struct CMUnitTest auth[] = {cmocka_unit_test(test_auth)};
	const struct CMUnitTest tls[] = {cmocka_unit_test(test_tls)};
	const struct CMUnitTest kill_follower[] = {cmocka_unit_test(test_kill_follower)};
	const struct CMUnitTest kill_leader[] = {cmocka_unit_test(test_kill_leader)};
	const struct CMUnitTest freeze[] = {cmocka_unit_test(test_freeze_follower)};
	const char *what = argc > 1 ? argv[1] : "";
	read_env();
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(what, "basic"))
		return cmocka_run_group_tests_name("basic", basic, NULL, NULL);
	if (!strcmp(what, "auth"))
		return cmocka_run_group_tests_name("auth", auth, NULL, NULL);
	if (!strcmp(what, "tls"))
		return cmocka_run_group_tests_name("tls", tls, NULL, NULL);
	if (!strcmp(what, "kill-follower") && leader_index >= 0)
		return cmocka_run_group_tests_name("kill-follower", kill_follower, NULL, NULL);
	if (!strcmp(what, "kill-leader") && leader_index >= 0)
		return cmocka_run_group_tests_name("kill-leader", kill_leader, NULL, NULL);
	if (!strcmp(what, "freeze-follower") && leader_index >= 0)
		return cmocka_run_group_tests_name("freeze-follower", freeze, NULL, NULL);
	fprintf(stderr,
		"usage: test_etcd_live basic|auth|tls|kill-follower|kill-leader|freeze-follower "
		"(kill-* need ETCD_PIDS and ETCD_LEADER)\n");
	return 2;
}
