/*
 * cli_util.h - argument parsing helpers shared by ddp-rdzvd and ddp-store.
 */
#ifndef DDP_RENDEZVOUS_CLI_UTIL_H
#define DDP_RENDEZVOUS_CLI_UTIL_H

#include <stddef.h>

/* "123", "64K", "8M", "1G" (powers of 1024). Returns 0 or -EINVAL. */
int cli_parse_size(const char *text, size_t *out);

/* 0..65535. Returns 0 or -EINVAL. */
int cli_parse_port(const char *text, int *out);

/* "HOST:PORT" or "[V6]:PORT" into host (NUL-terminated) and port.
 * Returns 0 or -EINVAL. */
int cli_parse_addr(const char *text, char *host, size_t host_len, int *port);

/* Writes "PORT\n" to path through a temporary file in the same directory
 * and rename(2), so readers see the whole file or none. Returns 0 or -1 with
 * errno set. */
int cli_write_file_atomic(const char *path, int port);

#endif
