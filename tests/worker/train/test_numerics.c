/*
 * test_numerics.c - a rank's numeric identity: its encoding into the words
 * the all-gather moves, the comparison against the job's reference (the
 * lowest rank holding the state, else rank 0), who is refused at the start
 * and at a join, the line that names both sides and the fix, and the BLAS
 * threads a job with a fixed global batch takes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "numerics.h"

#include <stdio.h>
#include <string.h>

static void ident(struct numerics_identity *id, const char *core, const char *host, int node,
		  bool has_state)
{
	memset(id, 0, sizeof(*id));
	snprintf(id->value[NUMERICS_KERNELS], NUMERICS_VALUE_MAX, "cpu");
	snprintf(id->value[NUMERICS_CORE], NUMERICS_VALUE_MAX, "%s", core);
	snprintf(id->value[NUMERICS_THREADS], NUMERICS_VALUE_MAX, "1");
	snprintf(id->value[NUMERICS_BLAS], NUMERICS_VALUE_MAX, "OpenBLAS 0.3.21 DYNAMIC_ARCH");
	numerics_build(id->value[NUMERICS_BUILD], NUMERICS_VALUE_MAX);
	snprintf(id->host, sizeof(id->host), "%s", host);
	id->node = node;
	id->has_state = has_state;
}

static void test_encode_round_trip(void **state)
{
	struct numerics_identity a, b;
	float w[NUMERICS_WORDS];

	(void)state;
	ident(&a, "SkylakeX", "node-a", -1, true);
	snprintf(a.value[NUMERICS_GPU], NUMERICS_VALUE_MAX, "%s", "NVIDIA H100 80GB HBM3 (sm_90)");
	memset(a.value[NUMERICS_MATMUL], 'x', NUMERICS_VALUE_MAX - 1); /* the longest value */
	numerics_encode(&a, w);
	for (size_t i = 0; i < NUMERICS_WORDS; i++)
		assert_true(w[i] >= 0.0f && w[i] < 16777216.0f && w[i] == (float)(uint32_t)w[i]);
	assert_int_equal(numerics_decode(w, &b), 0);
	assert_memory_equal(a.value, b.value, sizeof(a.value));
	assert_string_equal(b.host, "node-a");
	assert_int_equal(b.node, -1);
	assert_true(b.has_state);
	/* A word that is no encoding: a fraction, a negative, past 2^24. */
	w[3] = 0.5f;
	assert_int_equal(numerics_decode(w, &b), -EINVAL);
	w[3] = -1.0f;
	assert_int_equal(numerics_decode(w, &b), -EINVAL);
	w[3] = 16777216.0f;
	assert_int_equal(numerics_decode(w, &b), -EINVAL);
}

static void test_decode_needs_nul(void **state)
{
	struct numerics_identity a, b;
	float w[NUMERICS_WORDS];

	(void)state;
	ident(&a, "Haswell", "h", 0, false);
	numerics_encode(&a, w);
	/* Fill the first field's 96 bytes (32 words), its NUL included. */
	for (int i = 0; i < NUMERICS_VALUE_MAX / 3; i++)
		w[i] = (float)(0x41 | 0x41 << 8 | 0x41 << 16);
	assert_int_equal(numerics_decode(w, &b), -EINVAL);
}

static void test_all_equal(void **state)
{
	struct numerics_identity ids[3];
	struct numerics_mismatch m;

	(void)state;
	for (int r = 0; r < 3; r++)
		ident(&ids[r], "Haswell", "a", r, false);
	assert_int_equal(numerics_compare(ids, 3, &m), 0);
	assert_int_equal(m.ref, 0);
	assert_int_equal(numerics_compare(ids, 0, &m), -EINVAL);
	for (int r = 0; r < 3; r++)
		assert_false(numerics_refused(ids, 3, &m, r));
}

static void test_start_refuses_everyone(void **state)
{
	struct numerics_identity ids[3];
	struct numerics_mismatch m;
	char line[1024];

	(void)state;
	ident(&ids[0], "Haswell", "node-a", 0, false);
	ident(&ids[1], "Haswell", "node-a", 0, false);
	ident(&ids[2], "Sandybridge", "node-b", 1, false);
	assert_int_equal(numerics_compare(ids, 3, &m), 1);
	assert_true(m.at_start);
	assert_int_equal(m.ref, 0);
	assert_int_equal(m.rank, 2);
	assert_int_equal(m.field, NUMERICS_CORE);
	assert_int_equal(m.nmismatch, 1);
	for (int r = 0; r < 3; r++)
		assert_true(numerics_refused(ids, 3, &m, r));
	numerics_describe(ids, &m, line, sizeof(line));
	assert_string_equal(line, "rank 2 (host node-b, node 1) uses OpenBLAS kernel Sandybridge, "
				  "rank 0 (host node-a, node 0) Haswell: set "
				  "OPENBLAS_CORETYPE=Haswell on every node");
}

static void test_join_refuses_the_joiner(void **state)
{
	struct numerics_identity ids[4];
	struct numerics_mismatch m;

	(void)state;
	/* Rank 0 is a fresh process of the joining node, which got rank 0. */
	ident(&ids[0], "Sandybridge", "c", 2, false);
	ident(&ids[1], "Haswell", "a", 0, true);
	ident(&ids[2], "Haswell", "b", 1, true);
	ident(&ids[3], "Haswell", "c", 2, false); /* a joiner that matches */
	assert_int_equal(numerics_compare(ids, 4, &m), 1);
	assert_false(m.at_start);
	assert_int_equal(m.ref, 1); /* the lowest rank holding the state */
	assert_int_equal(m.rank, 0);
	assert_true(numerics_refused(ids, 4, &m, 0));
	assert_false(numerics_refused(ids, 4, &m, 1));
	assert_false(numerics_refused(ids, 4, &m, 2));
	assert_false(numerics_refused(ids, 4, &m, 3));
}

static void test_first_field_named(void **state)
{
	struct numerics_identity ids[2];
	struct numerics_mismatch m;
	char line[1024];

	(void)state;
	ident(&ids[0], "Haswell", "a", -1, false);
	ident(&ids[1], "Haswell", "b", -1, false);
	snprintf(ids[1].value[NUMERICS_THREADS], NUMERICS_VALUE_MAX, "4");
	snprintf(ids[1].value[NUMERICS_BUILD], NUMERICS_VALUE_MAX, "ddp-train 0.0.9, cc 11");
	assert_int_equal(numerics_compare(ids, 2, &m), 1);
	assert_int_equal(m.field, NUMERICS_THREADS);
	numerics_describe(ids, &m, line, sizeof(line));
	assert_string_equal(line, "rank 1 (host b) uses BLAS threads 4, rank 0 (host a) 1: set "
				  "--threads 1 on every rank");
	snprintf(ids[1].value[NUMERICS_THREADS], NUMERICS_VALUE_MAX, "1");
	assert_int_equal(numerics_compare(ids, 2, &m), 1);
	assert_int_equal(m.field, NUMERICS_BUILD);
	numerics_describe(ids, &m, line, sizeof(line));
	assert_non_null(strstr(line, ": run the same ddp-train build (ddp-train "));
	assert_non_null(strstr(line, "compile flags"));
}

/* The build field names the compile flags' hash: a build with other flags
 * (-march=native, another -O) is another build. */
static void test_build_flags(void **state)
{
	char buf[NUMERICS_VALUE_MAX], want[32];

	(void)state;
	numerics_build(buf, sizeof(buf));
	assert_non_null(strstr(numerics_build_flags(), "-O3"));
	snprintf(want, sizeof(want), ", flags %08x", numerics_flags_hash(numerics_build_flags()));
	assert_non_null(strstr(buf, want));
	assert_int_not_equal(numerics_flags_hash("gcc 12.2.0 release 3 -O3"),
			     numerics_flags_hash("gcc 12.2.0 release 3 -march=native -O3"));
}

static void test_gpu_fields(void **state)
{
	struct numerics_identity ids[2];
	struct numerics_mismatch m;
	char line[1024];

	(void)state;
	for (int r = 0; r < 2; r++) {
		memset(&ids[r], 0, sizeof(ids[r]));
		snprintf(ids[r].value[NUMERICS_KERNELS], NUMERICS_VALUE_MAX, "cuda");
		snprintf(ids[r].value[NUMERICS_CUBLAS], NUMERICS_VALUE_MAX, "13.0.0");
		snprintf(ids[r].host, sizeof(ids[r].host), "g%d", r);
		ids[r].node = r;
	}
	snprintf(ids[1].value[NUMERICS_CUBLAS], NUMERICS_VALUE_MAX, "12.4.5");
	assert_int_equal(numerics_compare(ids, 2, &m), 1);
	numerics_describe(ids, &m, line, sizeof(line));
	assert_string_equal(line, "rank 1 (host g1, node 1) uses cuBLAS 12.4.5, rank 0 (host g0, "
				  "node 0) 13.0.0: install the same cuBLAS (13.0.0) on every node");
	numerics_summary(&ids[0], line, sizeof(line));
	assert_string_equal(line, "kernel path cuda, cuBLAS 13.0.0");
}

static void test_blas_threads(void **state)
{
	(void)state;
	assert_int_equal(numerics_blas_threads(0, 96), 1); /* fixed global batch: 1 */
	assert_int_equal(numerics_blas_threads(0, 0), 0);  /* else OpenBLAS's choice */
	assert_int_equal(numerics_blas_threads(3, 96), 3);
	assert_int_equal(numerics_blas_threads(3, 0), 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_encode_round_trip),
	    cmocka_unit_test(test_decode_needs_nul),
	    cmocka_unit_test(test_all_equal),
	    cmocka_unit_test(test_start_refuses_everyone),
	    cmocka_unit_test(test_join_refuses_the_joiner),
	    cmocka_unit_test(test_first_field_named),
	    cmocka_unit_test(test_gpu_fields),
	    cmocka_unit_test(test_build_flags),
	    cmocka_unit_test(test_blas_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
