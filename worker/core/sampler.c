/*
 * sampler.c - distributed sampler with PyTorch's DistributedSampler
 * semantics: padding by repetition or drop_last, rank r takes every
 * num_replicas-th index starting at r, a shuffle seeded by (seed, epoch).
 * The permutation generator is our own (splitmix64 + Fisher-Yates), so the
 * orders differ from torch's but have the same properties.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ddp.h"

static uint64_t sampler_splitmix(uint64_t *state)
{
	uint64_t z = (*state += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* Uniform in [0, bound) without modulo bias (Lemire's method). */
static uint64_t sampler_below(uint64_t *state, uint64_t bound)
{
	uint64_t x = sampler_splitmix(state);
	__uint128_t m = (__uint128_t)x * bound;
	uint64_t low = (uint64_t)m;

	if (low < bound) {
		uint64_t threshold = -bound % bound;

		while (low < threshold) {
			x = sampler_splitmix(state);
			m = (__uint128_t)x * bound;
			low = (uint64_t)m;
		}
	}
	return (uint64_t)(m >> 64);
}

static int sampler_fill(struct ddp_sampler *s)
{
	size_t n = s->dataset_len;
	size_t *perm = malloc(n * sizeof(*perm));
	uint64_t state;

	if (!perm)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		perm[i] = i;
	if (s->shuffle) {
		state = s->seed * 0xD1B54A32D192ED03ull ^ (s->epoch + 0x632BE59BD9B4E019ull);
		for (size_t i = n - 1; i > 0; i--) {
			size_t j = (size_t)sampler_below(&state, (uint64_t)i + 1);
			size_t t = perm[i];

			perm[i] = perm[j];
			perm[j] = t;
		}
	}
	/* Element k of the padded (or truncated) list is perm[k % n]; this rank
	 * takes k = rank, rank + R, rank + 2R, ... below total_size. */
	for (size_t i = 0; i < s->num_samples; i++)
		s->indices[i] = perm[(s->rank + i * s->num_replicas) % n];
	free(perm);
	return 0;
}

int ddp_sampler_init(struct ddp_sampler *s, size_t dataset_len, size_t num_replicas, size_t rank,
		     uint64_t seed, int shuffle, int drop_last)
{
	memset(s, 0, sizeof(*s));
	if (num_replicas == 0 || rank >= num_replicas || dataset_len == 0)
		return -EINVAL;
	if (drop_last && dataset_len % num_replicas)
		s->num_samples = dataset_len / num_replicas;
	else
		s->num_samples = (dataset_len + num_replicas - 1) / num_replicas;
	if (s->num_samples == 0)
		return -EINVAL;
	s->dataset_len = dataset_len;
	s->num_replicas = num_replicas;
	s->rank = rank;
	s->seed = seed;
	s->shuffle = shuffle;
	s->drop_last = drop_last;
	s->total_size = s->num_samples * num_replicas;
	s->indices = malloc(s->num_samples * sizeof(*s->indices));
	if (!s->indices)
		return -ENOMEM;
	return sampler_fill(s);
}

void ddp_sampler_release(struct ddp_sampler *s)
{
	if (!s)
		return;
	free(s->indices);
	s->indices = NULL;
}

int ddp_sampler_set_epoch(struct ddp_sampler *s, uint64_t epoch)
{
	return ddp_sampler_seek(s, epoch, 0);
}

int ddp_sampler_seek(struct ddp_sampler *s, uint64_t epoch, size_t pos)
{
	int rc = 0;

	if (!s->indices || pos > s->num_samples)
		return -EINVAL;
	if (epoch != s->epoch) {
		s->epoch = epoch;
		rc = sampler_fill(s);
	}
	s->pos = pos;
	return rc;
}

int ddp_sampler_next(struct ddp_sampler *s, size_t *index)
{
	if (s->pos >= s->num_samples) {
		int rc = ddp_sampler_set_epoch(s, s->epoch + 1);

		return rc < 0 ? rc : 0;
	}
	*index = s->indices[s->pos++];
	return 1;
}

size_t ddp_sampler_next_batch(struct ddp_sampler *s, size_t *indices, size_t max)
{
	size_t n = 0;

	if (s->pos >= s->num_samples) {
		ddp_sampler_set_epoch(s, s->epoch + 1);
		return 0;
	}
	while (n < max && s->pos < s->num_samples)
		indices[n++] = s->indices[s->pos++];
	return n;
}
