#include "opts_values.h"
#include "signames.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int optval_long(const char *s, long min, long max, long *out)
{
	char *end;
	long v;

	if (!s || !*s)
		return -EINVAL;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

int optval_double(const char *s, double *out)
{
	char *end;
	double v;

	if (!s || !*s)
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || !isfinite(v) || v < 0)
		return -EINVAL;
	*out = v;
	return 0;
}

int optval_bool(const char *s, bool *out)
{
	static const char *const yes[] = {"1", "true", "yes", "on"};
	static const char *const no[] = {"0", "false", "no", "off"};

	if (!s) {
		*out = true;
		return 0;
	}
	for (size_t i = 0; i < 4; i++) {
		if (!strcasecmp(s, yes[i])) {
			*out = true;
			return 0;
		}
		if (!strcasecmp(s, no[i])) {
			*out = false;
			return 0;
		}
	}
	return -EINVAL;
}

int opts_parse_streams(const char *text, struct opts_streams *s)
{
	struct opts_streams r = {.all = -1};
	const char *p = text;
	long rank, mask;
	char *end;

	if (!text || !*text)
		return -EINVAL;
	if (!strchr(text, ':')) {
		if (optval_long(text, 0, 3, &mask))
			return -EINVAL;
		r.all = (int)mask;
		*s = r;
		return 0;
	}
	while (*p) {
		rank = strtol(p, &end, 10);
		if (end == p || *end != ':' || rank < 0 || r.n >= 64)
			return -EINVAL;
		p = end + 1;
		mask = strtol(p, &end, 10);
		if (end == p || mask < 0 || mask > 3 || (*end && *end != ','))
			return -EINVAL;
		r.rank[r.n] = (int)rank;
		r.mask[r.n++] = (int)mask;
		p = *end ? end + 1 : end;
	}
	*s = r;
	return 0;
}

int opts_streams_mask(const struct opts_streams *s, int lr)
{
	for (int i = 0; i < s->n; i++)
		if (s->rank[i] == lr)
			return s->mask[i];
	return s->all < 0 ? 0 : s->all;
}

/* "0,2,3": non-negative integers separated by commas. */
int optval_filter(const char *s)
{
	const char *p = s;
	char *end;

	if (!s || !*s)
		return -EINVAL;
	for (;;) {
		long v = strtol(p, &end, 10);

		if (end == p || v < 0 || !isdigit((unsigned char)*p))
			return -EINVAL;
		if (!*end)
			return 0;
		if (*end != ',')
			return -EINVAL;
		p = end + 1;
	}
}

bool opts_rank_shown(const struct launch_opts *o, int lr)
{
	const char *p = o->local_ranks_filter;
	char *end;

	if (!p)
		return true;
	while (*p) {
		if (strtol(p, &end, 10) == lr)
			return true;
		p = *end ? end + 1 : end;
	}
	return false;
}

int optval_signals(struct launch_opts *o, const char *s)
{
	int sigs[OPTS_MAX_SIGNALS], n = 0;
	char name[32];

	if (!s || !*s)
		return -EINVAL;
	while (*s) {
		size_t len = strcspn(s, ", ");

		if (len == 0 || len >= sizeof(name) || n >= OPTS_MAX_SIGNALS)
			return -EINVAL;
		memcpy(name, s, len);
		name[len] = '\0';
		sigs[n] = signame_parse(name);
		if (sigs[n] <= 0 || sigs[n] == SIGKILL || sigs[n] == SIGSTOP)
			return -EINVAL;
		n++;
		s += len;
		s += strspn(s, ", ");
	}
	memcpy(o->signals, sigs, sizeof(sigs[0]) * (size_t)n);
	o->nsignals = n;
	return 0;
}

int optval_backoff(struct launch_opts *o, const char *s)
{
	char buf[64];
	char *colon;
	double a, b;

	if (!s || strlen(s) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, s);
	colon = strchr(buf, ':');
	if (colon)
		*colon = '\0';
	if (optval_double(buf, &a))
		return -EINVAL;
	b = a;
	if (colon && optval_double(colon + 1, &b))
		return -EINVAL;
	if (b < a)
		return -EINVAL;
	o->backoff_initial = a;
	o->backoff_max = b;
	return 0;
}

int optval_nnodes(struct launch_opts *o, const char *s)
{
	char buf[64];
	char *colon;
	long a, b;

	if (!s || strlen(s) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, s);
	colon = strchr(buf, ':');
	if (colon)
		*colon = '\0';
	if (optval_long(buf, 1, 1 << 20, &a))
		return -EINVAL;
	b = a;
	if (colon && optval_long(colon + 1, 1, 1 << 20, &b))
		return -EINVAL;
	if (b < a)
		return -EINVAL;
	o->nnodes_min = (int)a;
	o->nnodes_max = (int)b;
	return 0;
}

bool optval_nproc_spec(const char *s)
{
	long v;

	return s && (!strcmp(s, "gpu") || !strcmp(s, "cpu") || !strcmp(s, "auto") ||
		     !optval_long(s, 1, 4096, &v));
}

int opts_visible_gpus(const char *cvd, int ndev)
{
	int n = 0;

	if (!cvd)
		return ndev;
	while (*cvd == ' ')
		cvd++;
	if (!*cvd || *cvd == '-')
		return 0;
	for (const char *p = cvd; *p; p++)
		if (*p == ',' && p[1] && p[1] != ',')
			n++;
	return n + 1 < ndev ? n + 1 : ndev;
}
