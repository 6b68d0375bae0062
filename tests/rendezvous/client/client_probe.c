/*
 * client_probe.c - runs every operation of our C client against a store at
 * HOST:PORT and checks each result; exit 0 when all passed. With "v1" it
 * speaks torch 1.13's framing: test_torch_server.py points it at torch
 * 1.13's own TCPStore server; with "v2", after the common operations, the
 * 2.x-only ones (list_keys, barrier).
 *
 * usage: client_probe HOST PORT v1|v2
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_client.h"

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "client_probe: line %d: %s failed (%s)\n", __LINE__,       \
				#cond, store_client_error(c));                                     \
			return 1;                                                                  \
		}                                                                                  \
	} while (0)

static int probe(struct store_client *c)
{
	void *v = NULL;
	size_t len = 0;
	int64_t n = 0;
	CHECK(store_client_ping(c) == 0);
	/* torch's Python client puts "/" before its keys: share them so. */
	CHECK(store_client_set(c, "/from_c", "hello", 5) == 0);
	CHECK(store_client_get(c, "/from_c", 5000, &v, &len) == 0);
	CHECK(len == 5 && memcmp(v, "hello", 5) == 0);
	free(v);
	CHECK(store_client_add(c, "/counter", 3, &n) == 0 && n == 3);
	CHECK(store_client_add(c, "/counter", -1, &n) == 0 && n == 2);
	CHECK(store_client_compare_set(c, "/cas", "", 0, "x", 1, &v, &len) == 0);
	CHECK(len == 1 && memcmp(v, "x", 1) == 0);
	free(v);
	CHECK(store_client_compare_set(c, "/cas", "y", 1, "z", 1, &v, &len) == 0);
	CHECK(len == 1 && memcmp(v, "x", 1) == 0);
	free(v);
	const char *keys[] = {"/from_c", "/counter"};
	CHECK(store_client_check(c, keys, 2) == 1);
	CHECK(store_client_wait(c, keys, 2, 5000) == 0);
	CHECK(store_client_get(c, "/from_python", 20000, &v, &len) == 0);
	CHECK(len == 2 && memcmp(v, "py", 2) == 0);
	free(v);
	CHECK(store_client_num_keys(c, &n) == 0 && n >= 4);
	CHECK(store_client_delete(c, "/cas") == 1);
	CHECK(store_client_delete(c, "/cas") == 0);
	const void *vals[] = {"1", "22"};
	size_t lens[] = {1, 2};
	const char *mkeys[] = {"/m1", "/m2"};
	CHECK(store_client_multi_set(c, mkeys, vals, lens, 2) == 0);
	void *got[2];
	size_t glen[2];
	CHECK(store_client_multi_get(c, mkeys, 2, 5000, got, glen) == 0);
	CHECK(glen[0] == 1 && glen[1] == 2 && memcmp(got[1], "22", 2) == 0);
	free(got[0]);
	free(got[1]);
	const char *missing[] = {"/never"};
	CHECK(store_client_wait(c, missing, 1, 300) == -ETIMEDOUT);
	return 0;
}

/* torch 2.x only: list_keys, barrier (with a timeout, then reuse). */
static int probe_v2(struct store_client *c)
{
	char **keys = NULL;
	size_t n = 0;
	int found = 0;
	CHECK(store_client_list_keys(c, &keys, &n) == 0);
	for (size_t i = 0; i < n; i++)
		found += !strcmp(keys[i], "/from_c") + !strcmp(keys[i], "/counter");
	store_client_free_keys(keys, n);
	CHECK(found == 2);
	CHECK(store_client_barrier(c, "/probe_b1", 1, 5000) == 0);
	CHECK(store_client_barrier(c, "/probe_b2", 2, 300) == -ETIMEDOUT);
	CHECK(store_client_ping(c) == 0); /* usable after the timeout */
	void *v = NULL;
	size_t len = 0;
	CHECK(store_client_get(c, "/probe_b2", 5000, &v, &len) == 0);
	CHECK(len == 1 && memcmp(v, "1", 1) == 0); /* the arrival counted */
	free(v);
	CHECK(store_client_barrier(c, "/probe_b2", 2, 5000) == 0);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: client_probe HOST PORT v1|v2\n");
		return 2;
	}
	enum store_client_proto proto =
	    strcmp(argv[3], "v1") == 0 ? STORE_CLIENT_PROTO_V1 : STORE_CLIENT_PROTO_V2;
	struct store_client *c = NULL;
	char err[512];
	if (store_client_connect_proto(argv[1], atoi(argv[2]), 20000, proto, &c, err,
				       sizeof(err))) {
		fprintf(stderr, "client_probe: %s\n", err);
		return 1;
	}
	int rc = probe(c);
	if (rc == 0 && proto == STORE_CLIENT_PROTO_V2)
		rc = probe_v2(c);
	if (rc == 0 && proto == STORE_CLIENT_PROTO_V1) {
		char **keys = NULL;
		size_t n = 0;
		if (store_client_list_keys(c, &keys, &n) != -EOPNOTSUPP) {
			fprintf(stderr, "client_probe: list_keys in 1.13 framing did not refuse\n");
			rc = 1;
		}
	}
	store_client_free(c);
	if (rc == 0)
		printf("client_probe: all operations passed (%s)\n", argv[3]);
	return rc;
}
