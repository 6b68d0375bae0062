/*
 * store_bench.h - the store load generator's parts (tests/bench/store_bench*).
 *
 * The generator measures two servers in the same run: ddp-rdzvd and the
 * TCPStore server of the torch that --python has (1.13's, or 2.x's libuv
 * server). Clients talk in one of four ways:
 *   SB_WIRE_API   our blocking C client (store_client.h, torch 2.x framing);
 *                 ddp-rdzvd and torch 2.x's server, not torch 1.13's;
 *   SB_WIRE_V2    torch 2.x frames from the store's codec over a plain
 *                 socket (validate and ping first, then one send() per
 *                 query, as torch 2.x's client sends them); ddp-rdzvd and
 *                 torch 2.x's server;
 *   SB_WIRE_V113  torch 1.13 frames from the store's codec (proto.h) over a
 *                 plain socket; both servers speak it, so the same bytes
 *                 measure both; each query leaves in one send();
 *   SB_WIRE_V113_SPLIT  the same frames sent as torch 1.13's client sends
 *                 them: the type byte alone, then the rest (two segments
 *                 on the wire, as captured with strace). The 1.13 ways
 *                 reach ddp-rdzvd and torch 1.13's server.
 * Every function is bounded in time and frees what it opened. Fallible
 * functions return >= 0 or a negative errno.
 */
#ifndef DDP_TESTS_BENCH_STORE_BENCH_H
#define DDP_TESTS_BENCH_STORE_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto.h"

enum sb_wire {
	SB_WIRE_API,
	SB_WIRE_V113,
	SB_WIRE_V113_SPLIT,
	SB_WIRE_V2,
};

/* A running server: where it listens and its pid (for /proc). */
struct sb_server {
	const char *name; /* "ddp-rdzvd", or "torch-VERSION" (in label) */
	char label[32];
	enum proto_gen gen; /* the framing it speaks; UNKNOWN: both (ddp-rdzvd) */
	pid_t pid;
	int port;
	int stdin_fd; /* write end of the child's stdin, or -1 */
};

/* --- store_bench_proc.c: servers and /proc --- */

/* Starts `rdzvd` on 127.0.0.1 port 0 (extra_args: NULL-terminated, may be
 * NULL) and reads the bound port from its --port-file within 10 s. */
int sb_server_start_rdzvd(const char *rdzvd, const char *const *extra_args, struct sb_server *out);

/* Starts torch's TCPStore(is_master=True) under `python` on 127.0.0.1 port 0
 * (torch 2.x: its default libuv server); the server lives until its stdin
 * closes. Waits up to 60 s for the port; names the server by its torch
 * version and sets its generation. */
int sb_server_start_torch(const char *python, struct sb_server *out);

/* Ends the server (closes stdin, SIGTERM, 5 s, SIGKILL) and reaps it.
 * Safe on a server that never started (pid <= 0). */
void sb_server_stop(struct sb_server *server);

/* utime + stime of the whole process (all threads), in nanoseconds. */
int64_t sb_proc_cpu_ns(pid_t pid);

/* A "Vm...:" line of /proc/PID/status in KiB ("VmRSS", "VmHWM"), or -errno. */
int64_t sb_proc_status_kib(pid_t pid, const char *field);

/* Raises RLIMIT_NOFILE's soft limit to the hard limit; returns the new soft
 * limit. Children started afterwards inherit it. */
long sb_raise_nofile(void);

/* --- store_bench_wire.c: one blocking connection, any of the four ways --- */

struct sb_conn;

/* Connects to 127.0.0.1:port within timeout_ms. */
int sb_conn_open(enum sb_wire wire, int port, uint64_t timeout_ms, struct sb_conn **out);
void sb_conn_free(struct sb_conn *conn);
int sb_conn_set(struct sb_conn *conn, const char *key, const void *value, size_t len);
/* Gets an existing key; the value is checked to be `expect_len` bytes long. */
int sb_conn_get(struct sb_conn *conn, const char *key, size_t expect_len);
int sb_conn_add(struct sb_conn *conn, const char *key, int64_t delta, int64_t *result);
int sb_conn_wait(struct sb_conn *conn, const char *key, uint64_t timeout_ms);
/* One round trip (API: ping; frames: number of keys), so the server surely
 * has accepted the connection. */
int sb_conn_ping(struct sb_conn *conn);

/* Frame encoders built on the store's codec (rendezvous/proto/proto.h), in either
 * generation (PROTO_GEN_V1: torch 1.13 numbering; PROTO_GEN_V2: 2.x). Each
 * appends one request to buf and returns 0 or -ENOMEM / -EINVAL. */
int sb_frame_set(struct bytebuf *buf, enum proto_gen gen, const char *key, const void *value,
		 size_t len);
int sb_frame_get(struct bytebuf *buf, enum proto_gen gen, const char *key);
int sb_frame_add(struct bytebuf *buf, enum proto_gen gen, const char *key, int64_t delta);
int sb_frame_wait(struct bytebuf *buf, enum proto_gen gen, const char *key);
int sb_frame_num_keys(struct bytebuf *buf, enum proto_gen gen);
/* V2 only: the validate magic, then a ping with `nonce` (reply: 4 bytes). */
int sb_frame_hello(struct bytebuf *buf, uint32_t nonce);

/* --- store_bench_hist.c: latency histogram (log-linear, buckets <= ~3 % wide) --- */

#define SB_HIST_SUB	64
#define SB_HIST_BUCKETS (SB_HIST_SUB * 40)

struct sb_hist {
	uint64_t count[SB_HIST_BUCKETS];
	uint64_t total;
};

void sb_hist_add(struct sb_hist *hist, uint64_t ns);
void sb_hist_merge(struct sb_hist *into, const struct sb_hist *from);
/* The value (ns, bucket midpoint) under which fraction q of samples lie. */
uint64_t sb_hist_quantile(const struct sb_hist *hist, double q);

/* --- store_bench_pairs.c: K connections doing set+get pairs --- */

struct sb_pairs_result {
	uint64_t ops;	/* sets + gets completed */
	double seconds; /* measured interval */
	double ops_per_s;
	double p50_us, p99_us; /* latency of one set+get pair */
	double cpu_ns_per_op;  /* server CPU (utime+stime) / ops */
};

int sb_pairs_run(const struct sb_server *server, enum sb_wire wire, int conns, double seconds,
		 size_t value_len, struct sb_pairs_result *out);

/* --- store_bench_storm.c, store_bench_storm_api.c, store_bench_idle.c --- */

struct sb_storm_result {
	int clients;
	int released;	      /* clients whose wait returned */
	double seconds;	      /* start of the first connect to the last release */
	double connect_s;     /* start to the last connection established */
	double cpu_ns_per_op; /* server CPU / (2 * clients) (add + wait) */
};

/* N clients connect at once (non-blocking, one thread, frames from the
 * codec in generation `gen`; V2 opens with validate + ping), each adds 1 to
 * a counter key; the one that reaches N sets the release key; all wait for
 * it. Gives up after timeout_ms (then released < clients). */
int sb_storm_raw(const struct sb_server *server, enum proto_gen gen, int clients,
		 uint64_t timeout_ms, struct sb_storm_result *out);

/* The same barrier with our C client (store_client.h), one thread per
 * client (64 KiB stacks). */
int sb_storm_api(const struct sb_server *server, int clients, uint64_t timeout_ms,
		 struct sb_storm_result *out);

/* Waits (up to timeout_ms) until the server's CPU time stops growing, so
 * the next measurement does not pay for the last one's cleanup. */
void sb_server_quiesce(const struct sb_server *server, uint64_t timeout_ms);

struct sb_idle_result {
	int connections;
	int64_t rss_before_kib, rss_with_kib;
	double bytes_per_conn;
};

/* Opens `conns` idle connections (one by one), reads the server's VmRSS
 * before and with them, closes them. */
int sb_idle_run(const struct sb_server *server, enum sb_wire wire, int conns,
		struct sb_idle_result *out);

#endif
