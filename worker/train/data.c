/*
 * data.c - loading, generating and splitting the trainer's data sets.
 */
#include "data.h"

#include "fileutil.h"
#include "rng.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

/* Longest accepted CSV line; the digits lines are ~150 bytes. */
#define DATA_LINE_MAX 65536

static int data_alloc(struct dataset *ds, size_t n, int features, int classes)
{
	memset(ds, 0, sizeof(*ds));
	ds->x = malloc(sizeof(float) * (n ? n : 1) * (size_t)features);
	ds->y = malloc(sizeof(int32_t) * (n ? n : 1));
	if (!ds->x || !ds->y) {
		data_release(ds);
		return -ENOMEM;
	}
	ds->n = n;
	ds->features = features;
	ds->classes = classes;
	return 0;
}

void data_release(struct dataset *ds)
{
	free(ds->x);
	free(ds->y);
	memset(ds, 0, sizeof(*ds));
}

/* Grows x/y to hold at least `need` rows. */
static int data_reserve(struct dataset *ds, size_t *cap, size_t need)
{
	float *x;
	int32_t *y;
	size_t ncap = *cap ? *cap : 256;

	if (need <= *cap)
		return 0;
	while (ncap < need)
		ncap *= 2;
	x = realloc(ds->x, sizeof(float) * ncap * (size_t)ds->features);
	if (!x)
		return -ENOMEM;
	ds->x = x;
	y = realloc(ds->y, sizeof(int32_t) * ncap);
	if (!y)
		return -ENOMEM;
	ds->y = y;
	*cap = ncap;
	return 0;
}

/* Parses one line into row (features values, scaled) and *label. */
static int data_parse_line(char *line, int features, float scale, float *row, int32_t *label)
{
	char *p = line, *end;

	for (int i = 0; i <= features; i++) {
		double v = strtod(p, &end);

		if (end == p)
			return -EINVAL;
		p = end;
		while (*p == ' ' || *p == '\t')
			p++;
		if (i < features) {
			if (*p != ',')
				return -EINVAL;
			p++;
			row[i] = (float)v * scale;
		} else {
			if (v != (double)(int32_t)v || v < 0 || v >= 1000)
				return -EINVAL;
			*label = (int32_t)v;
		}
	}
	while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
		p++;
	return *p ? -EINVAL : 0;
}

static int data_read_lines(gzFile gz, int features, float scale, struct dataset *ds,
			   size_t *bad_line)
{
	char *line = malloc(DATA_LINE_MAX);
	size_t cap = 0, lineno = 0;
	int ret = line ? 0 : -ENOMEM;

	while (ret == 0 && gzgets(gz, line, DATA_LINE_MAX)) {
		lineno++;
		if (line[strspn(line, " \t\r\n")] == '\0')
			continue;
		ret = data_reserve(ds, &cap, ds->n + 1);
		if (ret == 0)
			ret = data_parse_line(line, features, scale,
					      ds->x + ds->n * (size_t)features, &ds->y[ds->n]);
		if (ret == -EINVAL && bad_line)
			*bad_line = lineno;
		if (ret == 0) {
			if (ds->y[ds->n] + 1 > ds->classes)
				ds->classes = ds->y[ds->n] + 1;
			ds->n++;
		}
	}
	free(line);
	return ret;
}

int data_load_csv_fd(int fd, int features, float scale, struct dataset *ds, size_t *bad_line)
{
	gzFile gz;
	int ret, errnum;

	memset(ds, 0, sizeof(*ds));
	if (bad_line)
		*bad_line = 0;
	if (features <= 0) {
		close(fd);
		return -EINVAL;
	}
	ds->features = features;
	gz = gzdopen(fd, "rb");
	if (!gz) {
		close(fd);
		return -ENOMEM;
	}
	ret = data_read_lines(gz, features, scale, ds, bad_line);
	if (ret == 0) {
		gzerror(gz, &errnum);
		if (errnum == Z_ERRNO)
			ret = errno ? -errno : -EIO;
		else if (errnum != Z_OK && errnum != Z_STREAM_END)
			ret = -EIO;
	}
	gzclose(gz);
	if (ret == 0 && ds->n == 0)
		ret = -ENODATA;
	if (ret < 0)
		data_release(ds);
	return ret;
}

int data_load_csv(const char *path, int features, float scale, struct dataset *ds, size_t *bad_line)
{
	int fd = file_open_regular(path, NULL);

	if (fd < 0) {
		memset(ds, 0, sizeof(*ds));
		if (bad_line)
			*bad_line = 0;
		return fd;
	}
	return data_load_csv_fd(fd, features, scale, ds, bad_line);
}

int data_synthetic(size_t n, int features, int classes, uint64_t seed, struct dataset *ds)
{
	struct rng rng;
	float *w;
	int ret;

	if (features <= 0 || classes <= 1)
		return -EINVAL;
	ret = data_alloc(ds, n, features, classes);
	if (ret < 0)
		return ret;
	w = malloc(sizeof(float) * (size_t)features * classes);
	if (!w) {
		data_release(ds);
		return -ENOMEM;
	}
	rng_seed(&rng, seed);
	for (size_t i = 0; i < (size_t)features * classes; i++)
		w[i] = rng_normal(&rng);
	for (size_t s = 0; s < n; s++) {
		float *x = ds->x + s * (size_t)features, best = -1e30f;

		for (int f = 0; f < features; f++)
			x[f] = rng_normal(&rng);
		for (int c = 0; c < classes; c++) {
			float z = 0.25f * rng_normal(&rng) * sqrtf((float)features);

			for (int f = 0; f < features; f++)
				z += w[(size_t)c * features + f] * x[f];
			if (c == 0 || z > best) {
				best = z;
				ds->y[s] = c;
			}
		}
	}
	free(w);
	return 0;
}

static void data_copy_rows(const struct dataset *src, const size_t *idx, size_t n,
			   struct dataset *dst)
{
	size_t f = (size_t)src->features;

	for (size_t i = 0; i < n; i++) {
		memcpy(dst->x + i * f, src->x + idx[i] * f, sizeof(float) * f);
		dst->y[i] = src->y[idx[i]];
	}
}

int data_split(const struct dataset *all, double held_out_fraction, uint64_t seed,
	       struct dataset *train, struct dataset *held_out)
{
	struct rng rng;
	size_t *perm, n_held;
	int ret;

	memset(train, 0, sizeof(*train));
	memset(held_out, 0, sizeof(*held_out));
	if (!(held_out_fraction >= 0.0 && held_out_fraction < 1.0))
		return -EINVAL;
	n_held = (size_t)(all->n * held_out_fraction + 0.5);
	perm = malloc(sizeof(*perm) * (all->n ? all->n : 1));
	if (!perm)
		return -ENOMEM;
	for (size_t i = 0; i < all->n; i++)
		perm[i] = i;
	rng_seed(&rng, seed);
	for (size_t i = all->n; i > 1; i--) {
		size_t j = rng_below(&rng, i), t = perm[i - 1];

		perm[i - 1] = perm[j];
		perm[j] = t;
	}
	ret = data_alloc(train, all->n - n_held, all->features, all->classes);
	if (ret == 0)
		ret = data_alloc(held_out, n_held, all->features, all->classes);
	if (ret == 0) {
		data_copy_rows(all, perm, all->n - n_held, train);
		data_copy_rows(all, perm + (all->n - n_held), n_held, held_out);
	} else {
		data_release(train);
	}
	free(perm);
	return ret;
}
