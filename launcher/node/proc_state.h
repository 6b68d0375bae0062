/*
 * proc_state.h - what a process does now, from /proc: each thread's state
 * letter, the CPU time of all of them, and the main thread's wait channel.
 * For naming a hung worker (stopped, spinning, blocked in the kernel).
 */
#ifndef DDP_LAUNCHER_PROC_STATE_H
#define DDP_LAUNCHER_PROC_STATE_H

#include <stddef.h>
#include <stdint.h>

struct proc_state {
	int threads;	    /* threads read */
	int stopped;	    /* in state T or t */
	int running;	    /* in state R */
	int blocked;	    /* in state S or D */
	int zombie;	    /* in state Z or X */
	uint64_t cpu_ticks; /* utime + stime of every thread, clock ticks */
	char main_state;    /* the main thread's letter */
	char wchan[32];	    /* the main thread's wait channel, or "" */
};

/* Reads /proc/PID/task/\*\/stat and /proc/PID/wchan. Returns 0, or -ENOENT
 * (no such process), -EACCES, -EIO (a file it could not parse). */
int proc_state_read(int pid, struct proc_state *out);

/* Parses one stat line ("PID (COMM) S ... utime stime ..."): its state
 * letter and utime + stime. Returns 0 or -EIO. Pure. */
int proc_state_parse_stat(const char *line, char *state, uint64_t *ticks);

/* Reads the small file at path (a /proc text) into buf, NUL-terminated,
 * at most len - 1 bytes. Returns 0, -errno of open, or -EIO. */
int proc_read_small(const char *path, char *buf, size_t len);
#endif
