/*
 * store_bench_selftest.c - unit tests of the load generator's pure parts:
 * the frames it sends must be byte for byte what torch's clients send
 * (vectors captured from torch 1.13's client, shared/reference
 * pytorch-facts.md; the 2.x handshake from the 2.x sources), and the
 * latency histogram must place quantiles within its bucket width.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "store_bench.h"

static void expect_frame(struct bytebuf *buf, const uint8_t *want, size_t len)
{
	assert_int_equal(buf->len, len);
	assert_memory_equal(buf->data, want, len);
	buf->len = 0;
}

static void test_v1_frames_match_torch_113(void **state)
{
	static const uint8_t set[] = {0x00, 2, 0, 0, 0, 0, 0, 0, 0, '/',
				      'k',  1, 0, 0, 0, 0, 0, 0, 0, 'v'};
	static const uint8_t get[] = {0x02, 2, 0, 0, 0, 0, 0, 0, 0, '/', 'k'};
	static const uint8_t wait[] = {0x05, 1, 0, 0, 0, 0, 0, 0,   0,	2,
				       0,    0, 0, 0, 0, 0, 0, '/', 'k'};
	static const uint8_t add[] = {0x03, 2, 0, 0, 0, 0, 0, 0, 0, '/',
				      'c',  5, 0, 0, 0, 0, 0, 0, 0};
	static const uint8_t num_keys[] = {0x06};
	struct bytebuf buf = {0};

	assert_int_equal(sb_frame_set(&buf, PROTO_GEN_V1, "/k", "v", 1), 0);
	expect_frame(&buf, set, sizeof(set));
	assert_int_equal(sb_frame_get(&buf, PROTO_GEN_V1, "/k"), 0);
	expect_frame(&buf, get, sizeof(get));
	assert_int_equal(sb_frame_wait(&buf, PROTO_GEN_V1, "/k"), 0);
	expect_frame(&buf, wait, sizeof(wait));
	assert_int_equal(sb_frame_add(&buf, PROTO_GEN_V1, "/c", 5), 0);
	expect_frame(&buf, add, sizeof(add));
	assert_int_equal(sb_frame_num_keys(&buf, PROTO_GEN_V1), 0);
	expect_frame(&buf, num_keys, sizeof(num_keys));
	bytebuf_release(&buf);
	(void)state;
}

static void test_v2_hello_and_add(void **state)
{
	/* VALIDATE 0x3C85F7CE, PING nonce 7, then ADD (4 in the 2.x numbering) */
	static const uint8_t want[] = {0x00, 0xCE, 0xF7, 0x85, 0x3C, 0x0D, 7,	 0,   0, 0,
				       0x04, 1,	   0,	 0,    0,    0,	   0,	 0,   0, 'c',
				       0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
	struct bytebuf buf = {0};

	assert_int_equal(sb_frame_hello(&buf, 7), 0);
	assert_int_equal(sb_frame_add(&buf, PROTO_GEN_V2, "c", -1), 0);
	expect_frame(&buf, want, sizeof(want));
	bytebuf_release(&buf);
	(void)state;
}

static void test_hist_quantiles(void **state)
{
	static struct sb_hist hist;

	memset(&hist, 0, sizeof(hist));
	for (uint64_t i = 1; i <= 1000; i++)
		sb_hist_add(&hist, i * 1000); /* 1 us .. 1 ms */
	assert_int_equal(hist.total, 1000);
	/* within 4 % of the exact quantile (buckets are at most ~3 % wide) */
	assert_in_range(sb_hist_quantile(&hist, 0.50), 480000, 520000);
	assert_in_range(sb_hist_quantile(&hist, 0.99), 950000, 1030000);
	assert_in_range(sb_hist_quantile(&hist, 0.0), 960, 1040);
	memset(&hist, 0, sizeof(hist));
	sb_hist_add(&hist, 42); /* small values are exact */
	assert_int_equal(sb_hist_quantile(&hist, 0.5), 42);
	(void)state;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_v1_frames_match_torch_113),
	    cmocka_unit_test(test_v2_hello_and_add),
	    cmocka_unit_test(test_hist_quantiles),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
