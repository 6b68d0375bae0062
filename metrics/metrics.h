/*
 * metrics.h - a small metrics registry: Prometheus' text exposition format
 * (version 0.0.4), written into a growing buffer. Pure: no I/O, no clock;
 * the program that owns the numbers (an agent, ddp-rdzvd) writes them all
 * at each scrape, so nothing is registered ahead and nothing is shared
 * between threads.
 *
 * One family at a time: metrics_family() writes its # HELP and # TYPE
 * lines, then metrics_sample() (or metrics_hist_write() for a histogram)
 * writes its samples. Names follow Prometheus' conventions, which the
 * caller keeps and metrics_family() checks: [a-zA-Z_:][a-zA-Z0-9_:]*,
 * base units in the name (_seconds, _bytes), counters end in _total.
 * Label values are escaped (backslash, double quote, newline), HELP text
 * too (backslash, newline).
 *
 * Errors: a function returns 0 or a negative errno (-EINVAL for a name
 * that breaks the rules, -ENOMEM); after an error the buffer keeps what
 * was written before it, and every later call returns the same error
 * (check once, at metrics_out_text()).
 */
#ifndef DDP_METRICS_METRICS_H
#define DDP_METRICS_METRICS_H

#include <stddef.h>
#include <stdint.h>

/* The Content-Type of the text format. */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

enum metrics_type {
	METRICS_COUNTER,
	METRICS_GAUGE,
	METRICS_HISTOGRAM,
};

struct metrics_label {
	const char *name;  /* [a-zA-Z_][a-zA-Z0-9_]*, not starting with __ */
	const char *value; /* any UTF-8 */
};

/* The text being written; owned by the caller (metrics_out_init,
 * metrics_out_release). */
struct metrics_out {
	char *buf;
	size_t len, cap;
	int err;	  /* the first error, sticky */
	char family[128]; /* the family being written */
	enum metrics_type type;
};

void metrics_out_init(struct metrics_out *o);
void metrics_out_release(struct metrics_out *o);

/* The text so far (NUL-terminated) and its length, or NULL with *len 0 and
 * the first error in o->err. The pointer is valid until the next call. */
const char *metrics_out_text(const struct metrics_out *o, size_t *len);

/* Starts a family: "# HELP name help" and "# TYPE name type". A counter's
 * name must end in _total (its samples carry that name). */
int metrics_family(struct metrics_out *o, const char *name, enum metrics_type type,
		   const char *help);

/* One sample of the current family (not a histogram): name{labels} value.
 * nlabels may be 0 (labels NULL). Integers within 2^53 print exactly;
 * NaN and the infinities as Prometheus spells them. */
int metrics_sample(struct metrics_out *o, const struct metrics_label *labels, size_t nlabels,
		   double value);

/* A family of one unlabelled sample: metrics_family() then
 * metrics_sample(o, NULL, 0, value). */
int metrics_single(struct metrics_out *o, const char *name, enum metrics_type type,
		   const char *help, double value);

/* A histogram's buckets: upper bounds in increasing order (the +Inf bucket
 * is implied) and a count per bucket (not cumulative; counts[nbounds] is
 * the +Inf bucket's), their sum and count. */
#define METRICS_HIST_MAX_BOUNDS 16
struct metrics_hist {
	size_t nbounds;
	double bounds[METRICS_HIST_MAX_BOUNDS];
	uint64_t counts[METRICS_HIST_MAX_BOUNDS + 1];
	double sum;
	uint64_t count;
};

/* Empty histogram over `bounds` (nbounds <= METRICS_HIST_MAX_BOUNDS, in
 * increasing order). Returns 0 or -EINVAL. */
int metrics_hist_init(struct metrics_hist *h, const double *bounds, size_t nbounds);

/* Counts one observation. */
void metrics_hist_observe(struct metrics_hist *h, double v);

/* Counts n observations (n >= 1) whose values sum to `sum` when only the
 * sum is known: _sum and _count stay exact, and all n fall in the bucket
 * of their mean. O(1) whatever n is. */
void metrics_hist_observe_n(struct metrics_hist *h, double sum, uint64_t n);

/* The current family's (METRICS_HISTOGRAM) samples for h with `labels`:
 * name_bucket{labels,le="B"} (cumulative), name_sum, name_count. */
int metrics_hist_write(struct metrics_out *o, const struct metrics_label *labels, size_t nlabels,
		       const struct metrics_hist *h);

#endif
