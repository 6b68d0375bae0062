/*
 * rng.c - xoshiro256** (Blackman & Vigna) seeded with splitmix64.
 */
#include "rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void rng_seed(struct rng *rng, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		rng->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

/* Next 64 random bits. */
static uint64_t rng_next(struct rng *rng)
{
	uint64_t *s = rng->s;
	uint64_t result = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return result;
}

float rng_uniform(struct rng *rng)
{
	return (float)(rng_next(rng) >> 40) * (1.0f / 16777216.0f);
}

float rng_normal(struct rng *rng)
{
	/* 1 - u keeps the log argument in (0, 1]. */
	double u1 = 1.0 - (double)(rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
	double u2 = (double)(rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);

	return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

uint64_t rng_below(struct rng *rng, uint64_t n)
{
	/* Reject the top partial range so every residue is equally likely. */
	uint64_t limit = UINT64_MAX - UINT64_MAX % n;
	uint64_t x;

	do {
		x = rng_next(rng);
	} while (x >= limit);
	return x % n;
}
