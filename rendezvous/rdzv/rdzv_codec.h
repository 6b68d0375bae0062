/*
 * rdzv_codec.h - the rendezvous' values in the store and the rank
 * assignment (pure: no I/O, no clock). docs/rendezvous.md has the key
 * layout and the protocol; this header is the byte-level contract.
 *
 * Three values are encoded, each as versioned text that a person can read
 * with `ddp-store get`:
 *  - the job state (one small key per run id, changed by compare-and-set):
 *      "rdzv3 GEN ROUND PHASE MIN MAX EXPECT SIZE RESTARTS MAX_RESTARTS REASON
 *       SUBJECT COORD JOB CMD JOBLEN MSGLEN\n" followed by JOBLEN bytes of the
 *      job's description, then MSGLEN bytes of message;
 *  - a node's slot (what a joiner tells the closer of a round):
 *      "rdzvs1 GEN ROUND ID ADDR PORT NPROC NODE_RANK PREV_ROUND PREV_RANK\n";
 *  - the world of a round (written once, by its closer):
 *      "rdzvw1 GEN ROUND N MASTER_PORT\n" then N lines "ID ADDR NPROC\n" in
 *      group-rank order (the master address is rank 0's ADDR);
 *  - the owner of a store that a node hosts for its own job (key
 *    RDZV_OWNER_KEY):
 *      "rdzvo1 RUN_ID JOB JOBLEN\n" followed by JOBLEN bytes of description.
 * Fields are separated by one space; numbers are decimal without sign or
 * leading zeros; "-" stands for an empty id or "no node rank". Ids and
 * addresses are printable ASCII without spaces or '/'.
 *
 * The decoders are fed untrusted bytes (anyone who can reach the store can
 * write them): every length is checked against the limits below before
 * anything is allocated, every field against its range, and anything else
 * is -EINVAL with the output left unusable (zeroed). They never read past
 * `len` and never need NUL termination, so each is a fuzz entry point as it
 * stands (tests/rendezvous/rdzv/fuzz_rdzv.c).
 */
#ifndef DDP_RENDEZVOUS_RDZV_CODEC_H
#define DDP_RENDEZVOUS_RDZV_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RDZV_ID_MAX	   64  /* node ids */
#define RDZV_ADDR_MAX	   255 /* node addresses (a host name at most) */
#define RDZV_RUN_ID_MAX	   128 /* run ids */
#define RDZV_MSG_MAX	   512 /* a failed job's message */
#define RDZV_JOB_MAX	   200 /* a job's description (for messages) */
#define RDZV_OWNER_MAX	   512 /* an encoded owner record */
#define RDZV_OWNER_KEY	   "ddprdzv/owner"
#define RDZV_NODES_MAX	   65536 /* nodes in a job (--nnodes' MAX) */
#define RDZV_NPROC_MAX	   65536 /* workers on one node */
#define RDZV_EXPECT_MAX	   (2 * RDZV_NODES_MAX)
#define RDZV_STATE_MAX	   1024 /* encoded state, message included */
#define RDZV_SLOT_MAX	   512
#define RDZV_WORLD_ROW_MAX (RDZV_ID_MAX + RDZV_ADDR_MAX + 8)

enum rdzv_phase {
	RDZV_OPEN = 1, /* round ROUND accepts joins */
	RDZV_RUNNING,  /* round ROUND is formed and runs; joins go to ROUND + 1 */
	RDZV_FINISHED, /* every node of round ROUND finished: the job is over */
	RDZV_FAILED,   /* the job failed (MSG says why) */
};

/* Why round ROUND was opened. */
enum rdzv_reason {
	RDZV_WHY_START = 1, /* a new job (or a new generation of a reused run id) */
	RDZV_WHY_JOIN,	    /* nodes joined the running job */
	RDZV_WHY_DEAD,	    /* SUBJECT died (session ended or heartbeat stale) */
	RDZV_WHY_LEFT,	    /* SUBJECT left (stop requested) */
	RDZV_WHY_RESTART,   /* SUBJECT's workers failed: counts against the budget */
	RDZV_WHY_REFORM,    /* the closer found fewer than MIN live nodes */
	RDZV_WHY_REPLACE,   /* SUBJECT replaces a worker alone: the same nodes
			       re-form in place; not charged */
	RDZV_WHY_PERMANENT, /* FAILED only: SUBJECT left with a failure that
			       will repeat (its workers exited 78, a full
			       disk) and too few nodes were left to go on:
			       every node ends as permanent (exit 78) */
};

/* The job state of one run id. GEN counts jobs that used the run id (a new
 * job after FINISHED or FAILED takes GEN + 1 and starts at ROUND 1); ROUND
 * counts rounds within a generation. Invariants checked by the decoder:
 * gen >= 1, round >= 1, 1 <= min <= max <= RDZV_NODES_MAX, expect <=
 * RDZV_EXPECT_MAX, size <= max, restarts <= max_restarts; RUNNING (and
 * FINISHED) have size >= 1 and a coord; FAILED has a message, the others
 * none. */
struct rdzv_state {
	uint64_t gen;
	uint32_t round;
	enum rdzv_phase phase;
	uint32_t min_nodes, max_nodes;
	uint32_t expect;       /* OPEN: close as soon as this many tickets are out */
	uint32_t size;	       /* RUNNING: nodes in the round */
	uint32_t restarts;     /* restarts used by the job (its generation) */
	uint32_t max_restarts; /* the job's budget, fixed when the generation starts */
	enum rdzv_reason reason;
	char subject[RDZV_ID_MAX + 1]; /* the node REASON is about, or "" */
	char coord[RDZV_ID_MAX + 1];   /* RUNNING: group rank 0's id */
	/* The generation's job: the fingerprint its creator was started with
	 * (a token, or "" for none), the fingerprint of its creator's whole
	 * command line (a token, or ""), and its description in words
	 * (printable ASCII, or ""). Every node of one job has the same job
	 * fingerprint; their command lines may differ (rdzv_machine.h). */
	char job[RDZV_ID_MAX + 1];
	char cmd[RDZV_ID_MAX + 1];
	char job_text[RDZV_JOB_MAX + 1];
	char msg[RDZV_MSG_MAX + 1]; /* FAILED: why (printable ASCII) */
};

/* Who hosts a store for its own job (a static job's node 0): the run id,
 * the job's fingerprint and description, as in struct rdzv_state. */
struct rdzv_owner {
	char run_id[RDZV_RUN_ID_MAX + 1];
	char job[RDZV_ID_MAX + 1];
	char job_text[RDZV_JOB_MAX + 1];
};

/* What a node tells the closer when it takes a ticket in round (gen, round). */
struct rdzv_slot {
	uint64_t gen;
	uint32_t round;
	char id[RDZV_ID_MAX + 1];
	char addr[RDZV_ADDR_MAX + 1];
	uint16_t port;	     /* its store port for workers, used if it becomes rank 0 */
	uint32_t nproc;	     /* 1..RDZV_NPROC_MAX */
	int32_t node_rank;   /* asked for with --node_rank, or -1 */
	uint32_t prev_round; /* the last round it ran in (this generation), or 0 */
	uint32_t prev_rank;  /* its group rank there (0 when prev_round is 0) */
};

struct rdzv_member {
	const char *id;
	const char *addr;
	uint32_t nproc;
};

/* A decoded world. `members` (size entries, group-rank order) and their
 * strings point into `raw`, a private copy of the encoded bytes whose
 * field separators were replaced by NULs. */
struct rdzv_world_data {
	uint64_t gen;
	uint32_t round;
	uint32_t size;
	uint16_t master_port;
	struct rdzv_member *members;
	uint8_t *raw;
	size_t raw_len;
};

/* Encoders write into buf (cap bytes) and return the length, or -ENOSPC
 * when it does not fit, or -EINVAL when the input breaks the invariants the
 * decoder checks (so whatever is encoded decodes again). */
int rdzv_state_encode(const struct rdzv_state *st, char *buf, size_t cap);
int rdzv_slot_encode(const struct rdzv_slot *slot, char *buf, size_t cap);
int rdzv_owner_encode(const struct rdzv_owner *o, char *buf, size_t cap);

/* The version rdzv_state_encode writes ("rdzv3 ..."). */
#define RDZV_STATE_VERSION 3

/* A state value that another ddplaunch version wrote: "rdzvN " with N a
 * decimal other than RDZV_STATE_VERSION. Every older version (1, 2) began
 * "rdzvN GEN ROUND PHASE ", so for N < RDZV_STATE_VERSION *out gets gen,
 * round and phase (everything else zero) when those parse; for a newer N
 * nothing is known but N (*out zeroed). Returns N, or -EINVAL when data is
 * not such a value (then *out is zeroed). */
int rdzv_state_version_other(const uint8_t *data, size_t len, struct rdzv_state *out);

/* Return 0, or -EINVAL for anything malformed (then *out is zeroed). */
int rdzv_state_decode(const uint8_t *data, size_t len, struct rdzv_state *out);
int rdzv_slot_decode(const uint8_t *data, size_t len, struct rdzv_slot *out);
int rdzv_owner_decode(const uint8_t *data, size_t len, struct rdzv_owner *out);

/* Decodes a world of at most max_size members (max_size <= RDZV_NODES_MAX)
 * in one linear pass (every agent decodes it once per round). Ids are not
 * checked for being distinct: the closer writes distinct ones, and a reader
 * that finds its own id twice refuses the world. Returns 0, -EINVAL, or
 * -ENOMEM. Release with rdzv_world_data_release (also after a failure;
 * zeroed is released). */
int rdzv_world_decode(const uint8_t *data, size_t len, uint32_t max_size,
		      struct rdzv_world_data *out);
void rdzv_world_data_release(struct rdzv_world_data *w);

/* Encodes a world of n members (1..RDZV_NODES_MAX); *out is malloc'ed (the
 * caller frees), *out_len its length. Returns 0, -EINVAL (bad member) or
 * -ENOMEM. */
int rdzv_world_encode(uint64_t gen, uint32_t round, uint16_t master_port,
		      const struct rdzv_member *members, uint32_t n, char **out, size_t *out_len);

/* True for 1..max bytes of printable ASCII without space or '/', and not
 * "-" alone (the encoding's empty marker). */
bool rdzv_token_ok(const char *s, size_t max);

/* Parses a strict decimal (no sign, no leading zeros, no spaces) no larger
 * than max. Returns 0 or -EINVAL. */
int rdzv_parse_u64(const uint8_t *p, size_t len, uint64_t max, uint64_t *out);

/*
 * Rank assignment: given the live nodes that took tickets in a round (their
 * slots, in ticket order), chooses who is in (at most max_nodes) and gives
 * each a group rank, deterministically:
 *  1. nodes that asked for a node rank come first (by that rank), then nodes
 *     that ran in an earlier round (most recent round first, then by their
 *     old rank), then the others in ticket order; the first max_nodes are in;
 *  2. an asked-for rank is given when it is < the world's size; then each
 *     earlier member keeps its old rank when it is < size and still free;
 *     everyone else takes the lowest free ranks, in the order of step 1.
 * So a surviving node keeps its rank whenever the smaller world still has
 * it, and rank 0 stays rank 0 while it lives. Costs O(n log n).
 *
 * `order` (n entries) receives, for each group rank, the index into slots
 * of its node; *size the number of nodes in (<= max_nodes and <= n).
 * Returns 0; -EEXIST when two slots ask for the same node rank (*dup_a and
 * *dup_b are their indices), or -ENOMEM.
 */
int rdzv_assign_ranks(const struct rdzv_slot *slots, uint32_t n, uint32_t max_nodes,
		      uint32_t *order, uint32_t *size, uint32_t *dup_a, uint32_t *dup_b);

const char *rdzv_phase_name(enum rdzv_phase phase);
const char *rdzv_reason_name(enum rdzv_reason reason);

#endif
