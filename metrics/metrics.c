/* The Prometheus text format, written (metrics.h). */
#include "metrics.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void metrics_out_init(struct metrics_out *o)
{
	memset(o, 0, sizeof(*o));
}

void metrics_out_release(struct metrics_out *o)
{
	free(o->buf);
	memset(o, 0, sizeof(*o));
}

const char *metrics_out_text(const struct metrics_out *o, size_t *len)
{
	if (o->err || !o->buf) {
		*len = 0;
		return o->err ? NULL : "";
	}
	*len = o->len;
	return o->buf;
}

static int out_reserve(struct metrics_out *o, size_t more)
{
	size_t cap = o->cap ? o->cap : 1024;
	char *nb;

	if (o->len + more + 1 <= o->cap)
		return 0;
	while (cap < o->len + more + 1)
		cap *= 2;
	nb = realloc(o->buf, cap);
	if (!nb)
		return -ENOMEM;
	o->buf = nb;
	o->cap = cap;
	return 0;
}

static void out_put(struct metrics_out *o, const char *s, size_t n)
{
	if (o->err)
		return;
	if ((o->err = out_reserve(o, n)))
		return;
	memcpy(o->buf + o->len, s, n);
	o->len += n;
	o->buf[o->len] = '\0';
}

static void out_str(struct metrics_out *o, const char *s)
{
	out_put(o, s, strlen(s));
}

/* s with each of `special` escaped by a backslash, '\n' as "\n". */
static void out_escaped(struct metrics_out *o, const char *s, bool quotes)
{
	for (; *s; s++) {
		if (*s == '\\')
			out_put(o, "\\\\", 2);
		else if (*s == '\n')
			out_put(o, "\\n", 2);
		else if (*s == '"' && quotes)
			out_put(o, "\\\"", 2);
		else
			out_put(o, s, 1);
	}
}

/* Prometheus' value: integers exactly, else the shortest form that reads
 * back the same. */
static void out_value(struct metrics_out *o, double v)
{
	char num[40];

	if (isnan(v)) {
		snprintf(num, sizeof(num), "NaN");
	} else if (isinf(v)) {
		snprintf(num, sizeof(num), v > 0 ? "+Inf" : "-Inf");
	} else if (v == floor(v) && fabs(v) < 9007199254740992.0) {
		snprintf(num, sizeof(num), "%.0f", v);
	} else {
		for (int prec = 1; prec <= 17; prec++) {
			snprintf(num, sizeof(num), "%.*g", prec, v);
			if (strtod(num, NULL) == v)
				break;
		}
	}
	out_str(o, num);
}

static bool name_ok(const char *s, bool colon)
{
	if (!*s || (*s >= '0' && *s <= '9'))
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '_' || (colon && *s == ':')))
			return false;
	return true;
}

static bool ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), t = strlen(tail);

	return n >= t && !strcmp(s + n - t, tail);
}

static const char *const type_names[] = {
    [METRICS_COUNTER] = "counter",
    [METRICS_GAUGE] = "gauge",
    [METRICS_HISTOGRAM] = "histogram",
};

int metrics_family(struct metrics_out *o, const char *name, enum metrics_type type,
		   const char *help)
{
	size_t n = strlen(name);

	if (o->err)
		return o->err;
	if (!name_ok(name, true) || n >= sizeof(o->family) || (unsigned)type > METRICS_HISTOGRAM ||
	    (type == METRICS_COUNTER) != ends_with(name, "_total"))
		return o->err = -EINVAL;
	memcpy(o->family, name, n + 1);
	o->type = type;
	/* The 0.0.4 text format names a counter's family with its _total
	 * (OpenMetrics would drop it), as promtool expects. */
	out_str(o, "# HELP ");
	out_str(o, name);
	out_str(o, " ");
	out_escaped(o, help, false);
	out_str(o, "\n# TYPE ");
	out_str(o, name);
	out_str(o, " ");
	out_str(o, type_names[type]);
	out_str(o, "\n");
	return o->err;
}

static int out_labels(struct metrics_out *o, const struct metrics_label *labels, size_t nlabels,
		      const char *le)
{
	if (!nlabels && !le)
		return 0;
	out_str(o, "{");
	for (size_t i = 0; i < nlabels; i++) {
		if (!name_ok(labels[i].name, false) || !strncmp(labels[i].name, "__", 2) ||
		    (le && !strcmp(labels[i].name, "le")))
			return o->err = -EINVAL;
		out_str(o, i ? "," : "");
		out_str(o, labels[i].name);
		out_str(o, "=\"");
		out_escaped(o, labels[i].value ? labels[i].value : "", true);
		out_str(o, "\"");
	}
	if (le) {
		out_str(o, nlabels ? ",le=\"" : "le=\"");
		out_str(o, le);
		out_str(o, "\"");
	}
	out_str(o, "}");
	return o->err;
}

static int out_line(struct metrics_out *o, const char *suffix, const struct metrics_label *labels,
		    size_t nlabels, const char *le, double value)
{
	out_str(o, o->family);
	out_str(o, suffix);
	if (out_labels(o, labels, nlabels, le))
		return o->err;
	out_str(o, " ");
	out_value(o, value);
	out_str(o, "\n");
	return o->err;
}

int metrics_sample(struct metrics_out *o, const struct metrics_label *labels, size_t nlabels,
		   double value)
{
	if (o->err)
		return o->err;
	if (!o->family[0] || o->type == METRICS_HISTOGRAM)
		return o->err = -EINVAL;
	return out_line(o, "", labels, nlabels, NULL, value);
}

int metrics_hist_init(struct metrics_hist *h, const double *bounds, size_t nbounds)
{
	memset(h, 0, sizeof(*h));
	if (nbounds > METRICS_HIST_MAX_BOUNDS)
		return -EINVAL;
	for (size_t i = 0; i < nbounds; i++) {
		if (isnan(bounds[i]) || isinf(bounds[i]) || (i && bounds[i] <= bounds[i - 1]))
			return -EINVAL;
		h->bounds[i] = bounds[i];
	}
	h->nbounds = nbounds;
	return 0;
}

int metrics_single(struct metrics_out *o, const char *name, enum metrics_type type,
		   const char *help, double value)
{
	int rc = metrics_family(o, name, type, help);

	return rc ? rc : metrics_sample(o, NULL, 0, value);
}

static size_t hist_bucket(const struct metrics_hist *h, double v)
{
	size_t i = 0;

	while (i < h->nbounds && v > h->bounds[i])
		i++;
	return i;
}

void metrics_hist_observe(struct metrics_hist *h, double v)
{
	h->counts[hist_bucket(h, v)]++;
	h->sum += v;
	h->count++;
}

void metrics_hist_observe_n(struct metrics_hist *h, double sum, uint64_t n)
{
	if (!n)
		return;
	h->counts[hist_bucket(h, sum / (double)n)] += n;
	h->sum += sum;
	h->count += n;
}

int metrics_hist_write(struct metrics_out *o, const struct metrics_label *labels, size_t nlabels,
		       const struct metrics_hist *h)
{
	uint64_t cum = 0;
	char le[40];

	if (o->err)
		return o->err;
	if (!o->family[0] || o->type != METRICS_HISTOGRAM)
		return o->err = -EINVAL;
	for (size_t i = 0; i <= h->nbounds; i++) {
		struct metrics_out tmp;

		cum += h->counts[i];
		if (i == h->nbounds) {
			snprintf(le, sizeof(le), "+Inf");
		} else {
			/* The bound as out_value prints it. */
			metrics_out_init(&tmp);
			out_value(&tmp, h->bounds[i]);
			if (tmp.err) {
				metrics_out_release(&tmp);
				return o->err = tmp.err;
			}
			snprintf(le, sizeof(le), "%s", tmp.buf);
			metrics_out_release(&tmp);
		}
		if (out_line(o, "_bucket", labels, nlabels, le, (double)cum))
			return o->err;
	}
	if (out_line(o, "_sum", labels, nlabels, NULL, h->sum))
		return o->err;
	return out_line(o, "_count", labels, nlabels, NULL, (double)h->count);
}
