/*
 * rdzv_fake.h - simulated agents for the rendezvous machine's tests: an
 * in-memory store with the machine's primitives (GET, CAS with TCPStore's
 * compare_set answers, ADD, SET, session-bound SET, WATCH), a fake clock,
 * and a deterministic scheduler.
 *
 * Each agent has two FIFOs, like one TCP connection: requests on their way
 * to the store and answers/watch events on their way back. A step takes
 * the head of one non-empty FIFO chosen by a seeded PRNG, so interleavings
 * vary with the seed but each connection keeps its order. When nothing is
 * in flight the clock jumps to the earliest timer of a running agent.
 */
#ifndef DDP_TESTS_RDZV_FAKE_H
#define DDP_TESTS_RDZV_FAKE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rdzv_machine.h"

#define FAKE_AGENTS_MAX 1024

struct fake_net;

/* What one agent has seen (the test reads these). */
struct fake_agent {
	int idx;
	struct rdzv_config cfg;
	char run_id[32], node_id[32], addr[32];
	struct rdzv_machine *m;
	bool running; /* started and not ended / killed */
	bool frozen;  /* stopped (SIGSTOP, partition): keeps its session */
	bool killed;
	int rounds, round_overs;
	int notices; /* NOTICE actions, and the last one's text */
	char notice_text[2048];
	bool in_round;		     /* between ROUND and ROUND_OVER */
	enum rdzv_action_kind ended; /* LEFT / FINISHED / FAILED, or 0 */
	char end_text[2048];
	int64_t ended_at, round_at;
	/* the last ROUND */
	uint64_t gen;
	uint32_t round, rank, size, restarts;
	uint64_t first_proc, world_procs;
	char master_addr[64];
	uint16_t master_port;
	char key_prefix[256];
	int64_t timer_at;
	/* test knobs */
	bool die_before_slot; /* dies when its next slot SET reaches the store */
	uint16_t port_step;   /* on ROUND_OVER: rdzv_set_port(port + port_step) */
	/* store traffic this agent caused */
	uint64_t requests, bytes_in;
};

struct fake_net *fake_net_new(uint64_t seed);
void fake_net_free(struct fake_net *net);

/* Adds an agent (not started) with a default config: run id `run_id`, node
 * id "<run_id>-n<i>", address "10.0.<i/250>.<i%250+1>", port 1000+i, 2
 * workers, --nnodes=min:max, short keep-alive defaults of torchrun.
 * Returns the agent; the test may edit a->cfg before fake_start. */
struct fake_agent *fake_add(struct fake_net *net, const char *run_id, uint32_t min, uint32_t max);
void fake_start(struct fake_net *net, struct fake_agent *a);

/* The agent's process dies: its session closes (its session keys vanish). */
void fake_kill(struct fake_net *net, struct fake_agent *a);
/* The agent stops (or is cut off) but its session stays open. */
void fake_freeze(struct fake_net *net, struct fake_agent *a);
void fake_stop(struct fake_net *net, struct fake_agent *a); /* SIGTERM */
/* rdzv_stop_permanent: a's workers failed in a way that will repeat. */
void fake_stop_permanent(struct fake_net *net, struct fake_agent *a, const char *cause);
void fake_workers_exit(struct fake_net *net, struct fake_agent *a, bool success);
/* rdzv_workers_renew: one of a's workers is replaced alone. */
void fake_workers_renew(struct fake_net *net, struct fake_agent *a);
/* rdzv_workers_grow */
void fake_workers_grow(struct fake_net *net, struct fake_agent *a);

/* Runs until pred(net, ctx) holds (checked after every step), nothing is
 * left to do, or the clock would pass now + max_ms. Returns pred's last
 * value. pred may be NULL (run until idle or the time limit). */
bool fake_run(struct fake_net *net, bool (*pred)(struct fake_net *, void *), void *ctx,
	      int64_t max_ms);
int64_t fake_now(const struct fake_net *net);

struct fake_agent *fake_agent(struct fake_net *net, int idx);
int fake_count(const struct fake_net *net);

/* Store access for tests: value of a key (NULL if missing; *len set). */
const uint8_t *fake_get(struct fake_net *net, const char *key, size_t *len);
void fake_set(struct fake_net *net, const char *key, const void *value, size_t len);
void fake_del(struct fake_net *net, const char *key);
/* Keys in the store; total requests served. */
size_t fake_keys(const struct fake_net *net);
uint64_t fake_requests(const struct fake_net *net);

/* Predicates. */
/* Every running agent is in a round, and it is round *(uint32_t *)round_ptr. */
bool fake_all_in_round(struct fake_net *net, void *round_ptr);
bool fake_all_ended(struct fake_net *net, void *unused);

#endif
