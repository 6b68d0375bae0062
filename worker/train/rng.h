/*
 * rng.h - a small deterministic random number generator (xoshiro256**
 * seeded through splitmix64) whose whole state is four integers, so a
 * checkpoint can save and restore it exactly. Pure; no I/O.
 */
#ifndef DDP_WORKER_TRAIN_RNG_H
#define DDP_WORKER_TRAIN_RNG_H

#include <stdint.h>

struct rng {
	uint64_t s[4];
};

/* Seeds the generator; the same seed always gives the same sequence. */
void rng_seed(struct rng *rng, uint64_t seed);

/* Uniform in [0, 1) with 24 random bits (exact in float). */
float rng_uniform(struct rng *rng);

/* Standard normal (Box-Muller; uses two draws per call, no caching, so the
 * state alone describes the generator). */
float rng_normal(struct rng *rng);

/* Uniform integer in [0, n), n > 0, without modulo bias. */
uint64_t rng_below(struct rng *rng, uint64_t n);

#endif
