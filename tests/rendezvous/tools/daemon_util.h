/*
 * daemon_util.h - test helpers: run the real ddp-rdzvd on port 0 and talk
 * to it over raw loopback sockets.
 */
#ifndef DDP_TESTS_STORE_DAEMON_UTIL_H
#define DDP_TESTS_STORE_DAEMON_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Under AddressSanitizer freed memory sits in quarantine, so the daemon's RSS
 * says nothing about its bounds (LeakSanitizer checks leaks at its exit). */
#if defined(__SANITIZE_ADDRESS__)
#define DAEMON_RSS_MEANINGFUL 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DAEMON_RSS_MEANINGFUL 0
#endif
#endif
#ifndef DAEMON_RSS_MEANINGFUL
#define DAEMON_RSS_MEANINGFUL 1
#endif

struct daemon {
	pid_t pid;
	int port;
	char dir[256]; /* temporary directory of this daemon */
	char port_file[320];
	char log_file[320]; /* the daemon's stderr */
};

/* Starts $DDP_RDZVD --port 0 --port-file ... [args] (NULL-terminated) with
 * stderr in log_file, and waits (up to 10 s) for the port it announces on
 * its standard output (a pipe). 0 or -1. */
int daemon_start(struct daemon *d, const char *const *args);

/* SIGTERM, then waits up to 10 s; returns the exit status (or -1 if it had
 * to be killed or did not exit normally). Removes the directory. */
int daemon_stop(struct daemon *d);

/* Waits up to timeout_ms for the daemon to exit by itself; returns its exit
 * status, or -1 (still running, or killed by a signal). */
int daemon_wait(struct daemon *d, int timeout_ms);

/* VmRSS of the daemon in KiB, or -1. */
long daemon_rss_kib(const struct daemon *d);

/* VmHWM (the peak VmRSS so far) of the daemon in KiB, or -1. */
long daemon_hwm_kib(const struct daemon *d);

/* True if `needle` appears in the daemon's log within timeout_ms. */
int daemon_log_contains(const struct daemon *d, const char *needle, int timeout_ms);

/* True if at least `count` lines of the daemon's log contain `needle`
 * within timeout_ms. */
int daemon_log_count(const struct daemon *d, const char *needle, int count, int timeout_ms);

/* Raw connection to 127.0.0.1:port (blocking, TCP_NODELAY). fd or -1. */
int raw_connect(int port);
int raw_send(int fd, const void *buf, size_t len);
/* Reads exactly len bytes within timeout_ms. 0, or -1 (timeout/closed). */
int raw_recv(int fd, void *buf, size_t len, int timeout_ms);
/* 1 if the peer closed the connection within timeout_ms, else 0. */
int raw_closed(int fd, int timeout_ms);
/* 1 if nothing arrives (and the peer does not close) within ms. */
int raw_silent(int fd, int ms);
/* Sends the 2.x validate + ping and checks the echo. 0 or -1. */
int raw_handshake_v2(int fd);

#endif
