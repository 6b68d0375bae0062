/*
 * store_bench_storm_api.c - the barrier storm through our C client
 * (store_client.h), one thread per client: connect (validate + ping), add,
 * the N-th adder sets the release key, wait.
 */
#include "store_bench.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "timeutil.h"
#include "store_client.h"

struct api_storm {
	const struct sb_server *server;
	int clients;
	uint64_t timeout_ms;
	uint64_t t0;
	char count_key[64], release_key[64];
	atomic_int released, failed;
	_Atomic uint64_t t_last, t_connected;
};

static void atomic_max(_Atomic uint64_t *v, uint64_t x)
{
	uint64_t old = atomic_load(v);

	while (old < x && !atomic_compare_exchange_weak(v, &old, x))
		;
}

static void *api_client(void *arg)
{
	struct api_storm *st = arg;
	const char *keys[1] = {st->release_key};
	struct store_client *client = NULL;
	int64_t count = 0;
	int rc;

	rc = store_client_connect("127.0.0.1", st->server->port, st->timeout_ms, &client, NULL, 0);
	if (rc == 0) {
		atomic_max(&st->t_connected, time_now_ns());
		rc = store_client_add(client, st->count_key, 1, &count);
	}
	if (rc == 0 && count == st->clients)
		rc = store_client_set(client, st->release_key, "1", 1);
	if (rc == 0)
		rc = store_client_wait(client, keys, 1, st->timeout_ms);
	if (rc == 0) {
		atomic_max(&st->t_last, time_now_ns());
		atomic_fetch_add(&st->released, 1);
	} else {
		atomic_fetch_add(&st->failed, 1);
	}
	store_client_free(client);
	return NULL;
}

int sb_storm_api(const struct sb_server *server, int clients, uint64_t timeout_ms,
		 struct sb_storm_result *out)
{
	static unsigned run;
	struct api_storm st = {.server = server, .clients = clients, .timeout_ms = timeout_ms};
	pthread_t *threads = calloc((size_t)clients, sizeof(*threads));
	pthread_attr_t attr;
	int64_t cpu0, cpu1;
	int started = 0, rc = 0;

	memset(out, 0, sizeof(*out));
	if (!threads)
		return -ENOMEM;
	run++;
	snprintf(st.count_key, sizeof(st.count_key), "/bench/apistorm/%d/%u/count", clients, run);
	snprintf(st.release_key, sizeof(st.release_key), "/bench/apistorm/%d/%u/go", clients, run);
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	cpu0 = sb_proc_cpu_ns(server->pid);
	st.t0 = time_now_ns();
	for (; started < clients; started++) {
		rc = -pthread_create(&threads[started], &attr, api_client, &st);
		if (rc < 0)
			break;
	}
	/* if a thread could not start, the count never reaches N: the others
	 * time out and are joined all the same */
	for (int i = 0; i < started; i++)
		pthread_join(threads[i], NULL);
	cpu1 = sb_proc_cpu_ns(server->pid);
	out->clients = clients;
	out->released = atomic_load(&st.released);
	/* a storm that did not release everyone is reported as its whole time */
	out->seconds =
	    (double)((out->released == clients ? atomic_load(&st.t_last) : time_now_ns()) - st.t0) /
	    1e9;
	out->connect_s =
	    atomic_load(&st.t_connected) ? (double)(atomic_load(&st.t_connected) - st.t0) / 1e9 : 0;
	out->cpu_ns_per_op = (double)(cpu1 - cpu0) / (2.0 * clients);
	pthread_attr_destroy(&attr);
	free(threads);
	return rc;
}
