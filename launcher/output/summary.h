/*
 * summary.h - how every worker ended, across attempts: the text summary
 * printed at the end (first failure first), the JSON written to --log_dir,
 * and the reading of PyTorch's JSON error files (TORCHELASTIC_ERROR_FILE).
 */
#ifndef DDP_LAUNCHER_SUMMARY_H
#define DDP_LAUNCHER_SUMMARY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct summary_rec {
	int attempt;
	int rank, local_rank;
	int pid;
	int exit_code;	     /* when term_signal == 0 */
	int term_signal;     /* > 0: killed by this signal */
	bool first;	     /* the first failure of its attempt */
	bool stopped;	     /* ended after ddplaunch asked the group to stop */
	int64_t time_ms;     /* wall clock, ms since the epoch */
	char *error_message; /* from the worker's error file, or NULL */
	char *stderr_tail;   /* last stderr lines joined by '\n', or NULL */
};

/* A re-formation in place: the workers of this node stayed and were handed
 * the next round (agent.c). */
struct summary_reform {
	int64_t time_ms;	       /* wall clock when the round was heard over */
	int round;		       /* the new round */
	int world_before, world_after; /* workers in the job */
	int nodes_after;	       /* nodes in the new round */
	int replaced;		       /* local workers replaced alone in it */
	double waited_s;	       /* from the old round's end to the new round */
	char why[200];		       /* who left or came, as the rendezvous said */
};

/* What became of the job's promise of a 1-rank run's bits, as this node's
 * workers said it (the agent channel's "numerics" line), worst first. */
enum summary_promise {
	SUMMARY_PROMISE_NONE, /* no worker said (not ddp-train, or no fixed global batch) */
	SUMMARY_PROMISE_KEPT,
	SUMMARY_PROMISE_DROPPED,
	SUMMARY_PROMISE_REFUSED,
};

struct summary_numerics {
	enum summary_promise promise;
	int rank;	/* the worker that said it */
	char text[904]; /* kept: the identity; else why */
};

/* A replica whose state differed from the others' (a worker's "replica"
 * line on its agent channel: ddp-train's replica check). */
struct summary_replica {
	int step, rank;
	bool healed;	  /* false: the run stopped (no majority) */
	char tensor[256]; /* the first tensor that differed */
};

/* A rank named slow (a worker's "straggler" line on its agent channel:
 * ddp-train's straggler detector), and when it was cleared. */
struct summary_straggler {
	int step, rank, node;
	int cause;	  /* enum agent_wire_cause: 1 compute, 2 link (0: a clearing) */
	double slower;	  /* how much slower than the others when named */
	int cleared_step; /* -1: still named */
};

/* What one worker did when a hang was named (who waits on whom): said by
 * its node's agent, this one's or another's (summary_add_waiters). */
struct summary_waiter {
	int node, rank;
	int waits_on;	/* the rank it waits on, -1 unknown or none */
	char state[12]; /* "waits", "waited", "behind", "computing", "done", "past", ... */
	char op[16];	/* the collective it is (was) in or last left */
	char phase[16]; /* its phase */
	uint64_t seq;	/* that collective's number */
	double for_s;	/* how long it has been (was) in that state */
};

/* A hang named (by this node, or by another and heard through the
 * rendezvous): summary_hangs.c. */
struct summary_hang {
	int64_t time_ms; /* wall clock when this node printed it */
	int round, node, rank, pid;
	uint64_t seq;	   /* the collective it had not entered or left */
	double late_s;	   /* past its deadline by this much */
	double deadline_s; /* that deadline */
	bool named_here;   /* this node's agent named it (its worker, or one
			      its workers wait on whose node was silent) */
	bool cut;	   /* this node's agent ended the worker */
	char phase[16];	   /* the culprit's phase (agent_phase_word) */
	char op[16];	   /* the collective not entered or left (hang_op_name) */
	char state[64];	   /* what its process did (hang_pstate_words) */
	char line[512];	   /* the line every node printed */
	/* The waiters every node said (summary_add_waiters; owned by the
	 * summary: NULL and 0 when given to summary_add_hang). */
	struct summary_waiter *waiters;
	size_t nwaiters;
};

/* jansson's object, for the *_json functions (the file that calls them
 * includes jansson.h). */
struct json_t;

/* The replicas kept in the summary: the first SUMMARY_REPLICAS_MAX, then
 * a count (a flaky core healed at every step must not grow the agent's
 * memory or its log without bound). */
#define SUMMARY_REPLICAS_MAX 100
/* The last reports remembered to drop repeats: every worker tells each
 * one, in step order, so repeats come close together. */
#define SUMMARY_REPLICAS_RECENT 64

struct summary_replica_key {
	int step, rank;
	bool healed;
};

/* The stragglers kept: the first SUMMARY_STRAGGLERS_MAX namings, then a
 * count; the last SUMMARY_STRAGGLERS_RECENT lines remembered to drop the
 * repeats (every worker of every node says each one). */
#define SUMMARY_STRAGGLERS_MAX	  64
#define SUMMARY_STRAGGLERS_RECENT 64

struct summary_straggler_key {
	int step, rank, cause;
};

struct summary {
	struct summary_rec *recs;
	size_t n, cap;
	struct summary_reform *reforms;
	size_t nreforms;
	struct summary_replica *replicas; /* summary_replicas.c: the first kept */
	size_t nreplicas;
	uint64_t replicas_more; /* differed past the first SUMMARY_REPLICAS_MAX */
	struct summary_replica_key replicas_recent[SUMMARY_REPLICAS_RECENT]; /* a ring */
	size_t nrecent;							     /* written */
	struct summary_hang *hangs;
	size_t nhangs;
	struct summary_straggler *stragglers; /* summary_stragglers.c: the first kept */
	size_t nstragglers;
	uint64_t stragglers_more;     /* namings past the first SUMMARY_STRAGGLERS_MAX */
	uint64_t stragglers_named[3]; /* namings by cause (enum agent_wire_cause) */
	struct summary_straggler_key stragglers_recent[SUMMARY_STRAGGLERS_RECENT]; /* a ring */
	size_t nstragglers_recent;						   /* written */
	char *interpreter;	    /* the Python the workers ran under, or NULL */
	bool interpreter_from_path; /* found on PATH (not given as a path) */
	struct summary_numerics numerics;
};

void summary_init(struct summary *s);
void summary_release(struct summary *s);

/* Notes the program the workers run as argv[0] (`argv0`), when it is a
 * Python interpreter (its name starts with "python"): a bare name is looked
 * up in `path` (the workers' PATH; NULL: not looked up). The failure summary
 * then names it when a worker died of a missing module. Returns 0 or
 * -ENOMEM (then nothing is noted). */
int summary_set_interpreter(struct summary *s, const char *argv0, const char *path);

/* When the record's stderr tail ends a Python traceback with
 * "ModuleNotFoundError: No module named 'M'", writes into buf a line saying
 * which interpreter ran the worker and how to choose another (PYTHON_EXEC, an
 * activated virtual environment) and returns true; else false. */
bool summary_missing_module_hint(const struct summary *s, const struct summary_rec *r, char *buf,
				 size_t len);

/* Copies *rec (and its strings). Returns 0 or -ENOMEM. */
int summary_add(struct summary *s, const struct summary_rec *rec);

/* The first failure of `attempt`, or NULL. */
const struct summary_rec *summary_first_failure(const struct summary *s, int attempt);

/* Whether the record is a failure (non-zero exit or a signal). */
bool summary_rec_failed(const struct summary_rec *r);

/* "exited with code 3" / "was killed by SIGKILL" into buf. */
const char *summary_describe(const struct summary_rec *r, char *buf, size_t len);

/* Records a re-formation in place. Returns 0 or -ENOMEM. */
int summary_add_reform(struct summary *s, const struct summary_reform *r);

/* Prints one log_info line per re-formation in place, if any. */
void summary_print_reforms(const struct summary *s);

/* Records a replica that differed, once per (step, rank, healed): every
 * worker of every node tells it (a repeat among the last
 * SUMMARY_REPLICAS_RECENT reports is dropped). The first
 * SUMMARY_REPLICAS_MAX are kept and each said in one line; later ones are
 * counted (said once). Returns 1 when new, 0 when a repeat, -ENOMEM. */
int summary_add_replica(struct summary *s, const struct summary_replica *r);

/* Sets root's "replicas": [{"step", "rank", "tensor", "action": "healed" |
 * "stopped"}...] (empty when none differed; the first
 * SUMMARY_REPLICAS_MAX) and "replicas_more": the count past them. Returns
 * 0 or -ENOMEM. */
int summary_replicas_json(const struct summary *s, struct json_t *root);

/* Records a "straggler" line, once per (step, rank, cause): a naming
 * (cause 1 or 2) closes the rank's open entry, if any, and opens one (the
 * first SUMMARY_STRAGGLERS_MAX are kept, later ones counted); a clearing
 * (cause 0) sets the open entry's cleared_step. Each new one is said in a
 * line. Returns 1 when new, 0 when a repeat, -EINVAL (a cause past 2),
 * -ENOMEM. */
int summary_add_straggler(struct summary *s, const struct summary_straggler *g);

/* Prints one log_info line listing the stragglers named, if any. */
void summary_print_stragglers(const struct summary *s);

/* Sets root's "stragglers": [{"step", "rank", "node", "cause": "compute" |
 * "link", "slower", "cleared_step": N | null}...] ([] when none was named)
 * and "stragglers_more": the count past them. Returns 0 or -ENOMEM. */
int summary_stragglers_json(const struct summary *s, struct json_t *root);

/* "compute", "link" or "none" for a summary_straggler's cause. */
const char *summary_cause_name(int cause);

/* Records a hang (its waiters are not taken: added by summary_add_waiters).
 * Returns 0 or -ENOMEM. */
int summary_add_hang(struct summary *s, const struct summary_hang *h);

/* Adds node's n waiters w (w[i].node) to the hang (round, rank, seq) last
 * recorded, in place of what that node said of it before. Returns 0,
 * -ENOENT (no such hang recorded) or -ENOMEM. */
int summary_add_waiters(struct summary *s, int round, int rank, uint64_t seq, int node,
			const struct summary_waiter *w, size_t n);

/* Who of h's waiters waits on whom (in its collective, the one before or
 * after it, or did): "R>Q ..." by rank, Q "?" where the transport does not
 * know; at most max of them, within len. "" for none. */
void summary_hang_waits(const struct summary_hang *h, size_t max, char *buf, size_t len);

/* Prints one log_info line per hang, if any, and under it who waits on
 * whom (summary_hang_waits). */
void summary_print_hangs(const struct summary *s);

/* Adds "hangs": [{"time", "round", "node", "rank", "pid", "phase", "op",
 * "seq", "late_s", "deadline_s", "state", "named_here", "cut", "line",
 * "waiters": [{"node", "rank", "state", "waits_on" (null: unknown or none),
 * "op", "seq", "for_s", "phase"}...]}...] to root (always, [] for none).
 * Returns 0 or -ENOMEM. */
int summary_hangs_json(const struct summary *s, struct json_t *root);

/* Prints the end-of-run summary for `attempt` through log_error/log_info. */
void summary_print(const struct summary *s, int attempt, int max_restarts);

/* Writes {"exit_code":..., "attempts":..., "workers":[...],
 * "reformations":[{"time", "round", "world_before", "world_after",
 * "nodes", "waited_s", "replaced", "why"}...], "numerics":
 * (summary_numerics_json), "replicas": [...], "hangs": [...],
 * "stragglers": [...]} to `path`
 * (written to path.tmp, then renamed). Returns 0 or -errno. */
int summary_write_json(const struct summary *s, const char *path, int exit_code, int attempts,
		       int stop_signal);

/* ---- summary_numerics.c ---- */

/* Notes what worker `rank` said of the promise; the summary keeps the
 * worst heard (refused, then dropped, then kept; the first of equals). */
void summary_note_numerics(struct summary *s, int rank, enum summary_promise promise,
			   const char *text);
/* Sets root's "numerics": {"promise": "kept", "rank", "identity"} or
 * {"promise": "dropped" | "refused", "rank", "why"}, or null when no
 * worker said. Returns 0 or -ENOMEM. (json_t: jansson's.) */
int summary_numerics_json(const struct summary *s, struct json_t *root);

/* Reads a PyTorch error file ({"message": {"message": "...", "extraInfo":
 * {...}}} or {"message": "..."}) and returns its message (malloc'ed) in *msg.
 * Returns 0, -ENOENT (no file), -EINVAL (not that format) or -ENOMEM. */
int summary_read_error_file(const char *path, char **msg);

#endif
