/*
 * store_bench_hist.c - a log-linear latency histogram: values below
 * SB_HIST_SUB ns are exact; above, each power of two is split into
 * SB_HIST_SUB/2 buckets, so a bucket is at most ~3 % wide. Fixed size, no
 * allocation: one per thread, merged at the end.
 */
#include "store_bench.h"

static unsigned bucket_of(uint64_t ns)
{
	unsigned shift;
	unsigned idx;

	if (ns < SB_HIST_SUB)
		return (unsigned)ns;
	/* shift so that the value lands in [SB_HIST_SUB/2, SB_HIST_SUB) */
	shift = (unsigned)(63 - __builtin_clzll(ns)) - 5;
	idx = (shift + 1) * (SB_HIST_SUB / 2) + (unsigned)(ns >> shift) - SB_HIST_SUB / 2;
	return idx < SB_HIST_BUCKETS ? idx : SB_HIST_BUCKETS - 1;
}

static uint64_t bucket_mid(unsigned idx)
{
	unsigned shift, sub;

	if (idx < SB_HIST_SUB)
		return idx;
	shift = idx / (SB_HIST_SUB / 2) - 1;
	sub = idx % (SB_HIST_SUB / 2) + SB_HIST_SUB / 2;
	return ((uint64_t)sub << shift) + (((uint64_t)1 << shift) >> 1);
}

void sb_hist_add(struct sb_hist *hist, uint64_t ns)
{
	hist->count[bucket_of(ns)]++;
	hist->total++;
}

void sb_hist_merge(struct sb_hist *into, const struct sb_hist *from)
{
	for (unsigned i = 0; i < SB_HIST_BUCKETS; i++)
		into->count[i] += from->count[i];
	into->total += from->total;
}

uint64_t sb_hist_quantile(const struct sb_hist *hist, double q)
{
	uint64_t want = (uint64_t)(q * (double)hist->total), seen = 0;

	if (hist->total == 0)
		return 0;
	for (unsigned i = 0; i < SB_HIST_BUCKETS; i++) {
		seen += hist->count[i];
		if (seen > want)
			return bucket_mid(i);
	}
	return bucket_mid(SB_HIST_BUCKETS - 1);
}
