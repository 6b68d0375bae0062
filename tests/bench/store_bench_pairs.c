/*
 * store_bench_pairs.c - K connections, one thread each, doing set+get pairs
 * on their own key for a fixed time. All connections are opened first; the
 * server's CPU time is read just before the threads start and just after the
 * last one stops.
 */
#include "store_bench.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "timeutil.h"

struct pairs_shared {
	pthread_mutex_t lock;
	pthread_cond_t go_cond;
	int go; /* under lock: 1 = run, -1 = give up */
	atomic_int stop;
	size_t value_len;
};

struct pairs_worker {
	struct pairs_shared *shared;
	struct sb_conn *conn;
	pthread_t thread;
	int index;
	int rc;
	uint64_t pairs;
	struct sb_hist hist;
};

static void *pairs_thread(void *arg)
{
	struct pairs_worker *w = arg;
	char key[48], value[256];

	snprintf(key, sizeof(key), "/bench/pairs/%d", w->index);
	memset(value, 'v', sizeof(value));
	pthread_mutex_lock(&w->shared->lock);
	while (w->shared->go == 0)
		pthread_cond_wait(&w->shared->go_cond, &w->shared->lock);
	pthread_mutex_unlock(&w->shared->lock);
	while (!atomic_load_explicit(&w->shared->stop, memory_order_relaxed)) {
		uint64_t t0 = time_now_ns();

		w->rc = sb_conn_set(w->conn, key, value, w->shared->value_len);
		if (w->rc == 0)
			w->rc = sb_conn_get(w->conn, key, w->shared->value_len);
		if (w->rc < 0)
			break;
		sb_hist_add(&w->hist, time_now_ns() - t0);
		w->pairs++;
	}
	return NULL;
}

static int open_all(struct pairs_worker *workers, int conns, enum sb_wire wire, int port)
{
	for (int i = 0; i < conns; i++) {
		int rc = sb_conn_open(wire, port, 10000, &workers[i].conn);

		if (rc < 0)
			return rc;
	}
	return 0;
}

static void summarize(const struct pairs_worker *w, int conns, double seconds, int64_t cpu_ns,
		      struct sb_pairs_result *out)
{
	static struct sb_hist all;

	memset(&all, 0, sizeof(all));
	memset(out, 0, sizeof(*out));
	for (int i = 0; i < conns; i++) {
		sb_hist_merge(&all, &w[i].hist);
		out->ops += 2 * w[i].pairs;
	}
	out->seconds = seconds;
	out->ops_per_s = (double)out->ops / seconds;
	out->p50_us = (double)sb_hist_quantile(&all, 0.50) / 1e3;
	out->p99_us = (double)sb_hist_quantile(&all, 0.99) / 1e3;
	out->cpu_ns_per_op = out->ops ? (double)cpu_ns / (double)out->ops : 0;
}

static void release(struct pairs_shared *shared, int go)
{
	pthread_mutex_lock(&shared->lock);
	shared->go = go;
	pthread_cond_broadcast(&shared->go_cond);
	pthread_mutex_unlock(&shared->lock);
}

static int run_threads(struct pairs_worker *w, struct pairs_shared *shared, int conns,
		       const struct sb_server *server, double seconds, struct sb_pairs_result *out)
{
	int64_t cpu0, cpu1;
	uint64_t t0, t1;
	int started = 0, rc = 0;

	for (; started < conns; started++) {
		rc = -pthread_create(&w[started].thread, NULL, pairs_thread, &w[started]);
		if (rc < 0)
			break;
	}
	if (rc < 0) {
		atomic_store(&shared->stop, 1);
		release(shared, -1);
		for (int i = 0; i < started; i++)
			pthread_join(w[i].thread, NULL);
		return rc;
	}
	cpu0 = sb_proc_cpu_ns(server->pid);
	t0 = time_now_ns();
	release(shared, 1);
	while (time_now_ns() - t0 < (uint64_t)(seconds * 1e9))
		usleep(5000);
	atomic_store(&shared->stop, 1);
	for (int i = 0; i < conns; i++) {
		pthread_join(w[i].thread, NULL);
		if (w[i].rc < 0 && rc == 0)
			rc = w[i].rc;
	}
	t1 = time_now_ns();
	cpu1 = sb_proc_cpu_ns(server->pid);
	summarize(w, conns, (double)(t1 - t0) / 1e9, cpu1 - cpu0, out);
	return rc;
}

int sb_pairs_run(const struct sb_server *server, enum sb_wire wire, int conns, double seconds,
		 size_t value_len, struct sb_pairs_result *out)
{
	struct pairs_shared shared = {.value_len = value_len};
	struct pairs_worker *w = calloc((size_t)conns, sizeof(*w));
	int rc;

	if (!w)
		return -ENOMEM;
	if (value_len > 256)
		value_len = shared.value_len = 256;
	pthread_mutex_init(&shared.lock, NULL);
	pthread_cond_init(&shared.go_cond, NULL);
	for (int i = 0; i < conns; i++) {
		w[i].shared = &shared;
		w[i].index = i;
	}
	rc = open_all(w, conns, wire, server->port);
	if (rc == 0)
		rc = run_threads(w, &shared, conns, server, seconds, out);
	for (int i = 0; i < conns; i++)
		sb_conn_free(w[i].conn);
	pthread_cond_destroy(&shared.go_cond);
	pthread_mutex_destroy(&shared.lock);
	free(w);
	return rc;
}
