/*
 * agent_wire.h - the one grammar of the agent channel: the lines between
 * ddplaunch's agent and each of its workers (a socket on the worker's fd
 * DDP_AGENT_FD). Pure module: format and parse, no I/O. The Python package
 * mirrors it (python/ddplaunch/agent_wire.py), and both read the same
 * vectors (tests/common/agent_wire_vectors.txt). docs/protocol.md, "The
 * agent channel", gives the grammar byte by byte.
 *
 * A line is ASCII, ends with '\n' and is at most AGENT_WIRE_MAX_LINE bytes
 * with it; its first word is its kind, its fields follow, each after one
 * space. Worker to agent: "hello V DECL" (the first line: the version the
 * worker speaks and "resizable" or "fixed"), then "resizable", "fixed",
 * "took R", "numerics PROMISE TEXT", "replica STEP RANK ACTION TENSOR" (a
 * replica whose state differed from the others' after step STEP: rank
 * RANK, ACTION "healed" or "stopped", TENSOR the first tensor that
 * differed; ddp-train's replica check), "straggler STEP RANK NODE CAUSE
 * SLOWER" (at step STEP rank RANK of node NODE was named slow, CAUSE
 * "compute" or "link", or cleared, CAUSE "none"; SLOWER how much slower
 * than the others it was, a ratio with two decimals; ddp-train's straggler
 * detector). Agent to worker: "round R RANK
 * WORLD LOCAL_RANK LOCAL_WORLD ADDR PORT GROUP_RANK GROUP_WORLD".
 *
 * New kinds of lines will come (progress, hang notices, shard plans): a
 * reader skips a kind it does not know (AGENT_WIRE_UNKNOWN, not an error),
 * so they need no new version; a change to a known kind's fields does, and
 * then AGENT_WIRE_VERSION is bumped (don't forget: the vectors and the
 * Python mirror follow).
 */
#ifndef DDP_COMMON_AGENT_WIRE_H
#define DDP_COMMON_AGENT_WIRE_H

#include <stdbool.h>
#include <stddef.h>

#define AGENT_WIRE_VERSION  1
#define AGENT_WIRE_MAX_LINE 1024 /* bytes of one line, its '\n' included */
#define AGENT_WIRE_ADDR_MAX 255	 /* bytes of an address, as the rendezvous allows */
#define AGENT_WIRE_KIND_MAX 32	 /* bytes of a kind word */
#define AGENT_WIRE_TEXT_MAX 900	 /* bytes of a line's closing text (NUMERICS) */
#define AGENT_WIRE_NAME_MAX 255	 /* bytes of a tensor's name */
/* A local rank's bound: the rendezvous' workers on one node (RDZV_NPROC_MAX) */
#define AGENT_WIRE_LOCAL_RANK_MAX 65536

enum agent_wire_kind {
	AGENT_WIRE_UNKNOWN = 0, /* a well-formed kind this side does not know: skip it */
	AGENT_WIRE_HELLO,	/* "hello V DECL": version, resizable */
	AGENT_WIRE_RESIZABLE,	/* "resizable" */
	AGENT_WIRE_FIXED,	/* "fixed" */
	AGENT_WIRE_TOOK,	/* "took R": round */
	AGENT_WIRE_ROUND,	/* "round ...": r */
	AGENT_WIRE_NUMERICS,	/* "numerics PROMISE TEXT": numerics, text */
	AGENT_WIRE_REPLICA,	/* "replica STEP RANK ACTION TENSOR": replica */
	AGENT_WIRE_STRAGGLER,	/* "straggler STEP RANK NODE CAUSE SLOWER": straggler */
};

/* Why a rank was named slow; NONE: it was cleared. */
enum agent_wire_cause {
	AGENT_WIRE_CAUSE_NONE = 0, /* "none" */
	AGENT_WIRE_CAUSE_COMPUTE,  /* "compute" */
	AGENT_WIRE_CAUSE_LINK,	   /* "link" */
};

/* A rank named slow or cleared (worker to agent). SLOWER on the wire is
 * DIGITS "." two digits, DIGITS canonical ("0" or no leading zero). */
struct agent_wire_straggler {
	int step, rank, node; /* >= 0 */
	enum agent_wire_cause cause;
	int slower_x100; /* the ratio in hundredths, >= 0 */
};

/* A replica whose state differed from the others' (worker to agent). */
struct agent_wire_replica {
	int step, rank;			      /* >= 0 */
	bool healed;			      /* ACTION "healed"; false: "stopped" */
	char tensor[AGENT_WIRE_NAME_MAX + 1]; /* 1-255 bytes 0x21-0x7e, NUL-terminated */
};

/* What became of a job's promise of a 1-rank run's bits, as a worker says
 * it (ddp-train's numeric identity: worker/train/numerics.h). */
enum agent_wire_numerics {
	AGENT_WIRE_NUMERICS_KEPT,    /* "kept": every rank alike; TEXT: the identity */
	AGENT_WIRE_NUMERICS_DROPPED, /* "dropped": a difference accepted; TEXT: which */
	AGENT_WIRE_NUMERICS_REFUSED, /* "refused": this rank refused; TEXT: why */
};

/* One round as the agent hands it to one worker. */
struct agent_wire_round {
	int round;	      /* >= 0 */
	int rank, world_size; /* 0 <= rank < world_size */
	/* 1 <= local_world_size <= world_size: the node's workers in the round;
	 * 0 <= local_rank < AGENT_WIRE_LOCAL_RANK_MAX, the worker's own (its
	 * device), which passes local_world_size while a sibling is being
	 * replaced outside the round */
	int local_rank, local_world_size;
	char master_addr[AGENT_WIRE_ADDR_MAX + 1]; /* 1-255 bytes 0x21-0x7e, NUL-terminated */
	int master_port;			   /* 1-65535 */
	int group_rank, group_world_size;	   /* 0 <= group_rank < group_world_size */
};

struct agent_wire_msg {
	enum agent_wire_kind kind;
	/* HELLO: the version the writer speaks (>= 1). For a version other
	 * than AGENT_WIRE_VERSION the rest of the line is not parsed (its
	 * fields are that version's): resizable is false. */
	int version;
	bool resizable;		   /* HELLO of this version */
	int round;		   /* TOOK: >= 0 */
	struct agent_wire_round r; /* ROUND */
	/* NUMERICS: the promise, and the rest of the line: 1 to
	 * AGENT_WIRE_TEXT_MAX bytes of 0x20-0x7e, neither first nor last a
	 * space, NUL-terminated. */
	enum agent_wire_numerics numerics;
	char text[AGENT_WIRE_TEXT_MAX + 1];
	struct agent_wire_replica replica;     /* REPLICA */
	struct agent_wire_straggler straggler; /* STRAGGLER */
};

/* "none", "compute", "link" (NULL for another value). */
const char *agent_wire_cause_name(enum agent_wire_cause c);

/* Copies text into m->text for a NUMERICS line: cut to AGENT_WIRE_TEXT_MAX
 * bytes, bytes outside 0x20-0x7e written as '?', spaces at both ends
 * dropped, "-" when nothing is left. */
void agent_wire_set_text(struct agent_wire_msg *m, const char *text);

/* Copies addr (NUL-terminated) into r->master_addr. Returns 0, or -ERANGE
 * when it is empty or longer than AGENT_WIRE_ADDR_MAX (nothing is cut). */
int agent_wire_round_set_addr(struct agent_wire_round *r, const char *addr);

/* Parses one line of len bytes, without its '\n'. Returns 0 with *m (kind
 * AGENT_WIRE_UNKNOWN for a kind this side does not know, whose fields are
 * not looked at), or:
 *   -EINVAL    not a line of the grammar (a bad kind word, a known kind
 *              with missing, extra or malformed fields, a byte outside
 *              0x20-0x7e in a known kind, two spaces)
 *   -ERANGE    a field out of its range (a number past 2^31-1, a rank not
 *              below its world, port 0, an address longer than 255 bytes)
 *   -EMSGSIZE  the line is longer than AGENT_WIRE_MAX_LINE - 1 bytes
 * Nothing is truncated and no field moves into the next: a line is taken
 * whole or refused. */
int agent_wire_parse(const char *line, size_t len, struct agent_wire_msg *m);

/* Writes m as one line with its '\n' into buf (NUL-terminated). Returns
 * its length without the NUL, -EINVAL for a kind that cannot be written
 * (AGENT_WIRE_UNKNOWN, a HELLO of another version), -ERANGE for a field
 * the parser would refuse, or -ENOSPC when buf is too small
 * (AGENT_WIRE_MAX_LINE always suffices). */
int agent_wire_format(const struct agent_wire_msg *m, char *buf, size_t len);

/* The incremental reader of a byte stream of lines: keeps a partial line
 * between calls (as the store's codec does), so that any split of the
 * stream gives the same messages. */
struct agent_wire_reader {
	char line[AGENT_WIRE_MAX_LINE];
	size_t len;
	bool overlong; /* the line being read passed the limit: dropped to its '\n' */
};

void agent_wire_reader_init(struct agent_wire_reader *rd);

/* Takes bytes from data[0..n) up to and including the first '\n' (all of
 * them when none comes); *used says how many. Returns 1 with *m when that
 * ended a line of the grammar, 0 when more bytes are needed (then *used is
 * n), or agent_wire_parse's negative errno for a line refused (consumed
 * whole: the next call goes on with the next line; an overlong line is
 * reported once, at its '\n'). */
int agent_wire_read(struct agent_wire_reader *rd, const char *data, size_t n, size_t *used,
		    struct agent_wire_msg *m);

/* Whether a partial line waits in rd. */
bool agent_wire_reader_idle(const struct agent_wire_reader *rd);

#endif
