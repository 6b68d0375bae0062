/*
 * data.h - the trainer's data sets, in host memory: the UCI handwritten
 * digits (a CSV file, gzip-compressed or not) and a synthetic classification
 * problem of any size, plus a deterministic train / held-out split.
 */
#ifndef DDP_WORKER_TRAIN_DATA_H
#define DDP_WORKER_TRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

struct dataset {
	float *x;   /* n x features, row-major */
	int32_t *y; /* n labels in [0, classes) */
	size_t n;
	int features;
	int classes;
};

/* Reads a CSV of `features` numbers then one integer label per line (gzip
 * or plain text, detected by zlib) from `fd`, which it takes over (closed
 * on return), scaling every feature by `scale` (1/16 for the digits).
 * Blank lines are skipped. Labels must be in [0, 1000); classes = largest
 * label + 1. Returns 0, or -EIO / -errno (reading), -EINVAL (a malformed
 * line: *bad_line, if not NULL, receives its 1-based number, else 0),
 * -ENODATA (no sample at all: an empty file or blank lines only), -ENOMEM.
 * On failure `ds` is left empty. */
int data_load_csv_fd(int fd, int features, float scale, struct dataset *ds, size_t *bad_line);

/* data_load_csv_fd on `path`, which must be a regular file
 * (file_open_regular: -EISDIR for a directory, -EINVAL with *bad_line 0
 * for a FIFO, device or socket, which are never read; -ENOENT ...). */
int data_load_csv(const char *path, int features, float scale, struct dataset *ds,
		  size_t *bad_line);

/* A synthetic problem: x ~ N(0, 1)^features, label = argmax of a fixed random
 * linear map of x (plus a small noise), all from `seed`. Any size. */
int data_synthetic(size_t n, int features, int classes, uint64_t seed, struct dataset *ds);

/* Splits `all` into train and held-out sets: a permutation drawn from
 * `seed`, the last round(n * held_out_fraction) samples held out. Copies the
 * data; `all` is unchanged. fraction in [0, 1). */
int data_split(const struct dataset *all, double held_out_fraction, uint64_t seed,
	       struct dataset *train, struct dataset *held_out);

/* Frees the arrays and zeroes the struct; an empty struct is allowed. */
void data_release(struct dataset *ds);

#endif
