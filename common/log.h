/*
 * log.h - the project's one logging module.
 *
 * Programs call log_init() once with their name; library code logs at
 * LOG_DEBUG only (the program that called it reports errors once, to the
 * user). Messages go to stderr as "NAME: message\n", one write(2) per line
 * so lines from several processes sharing a stderr never interleave.
 */
#ifndef DDP_COMMON_LOG_H
#define DDP_COMMON_LOG_H

#include <stdarg.h>

enum log_level {
	LOG_ERROR = 0,
	LOG_WARN = 1,
	LOG_INFO = 2,
	LOG_DEBUG = 3,
};

/* Sets the program name printed before every line (not copied: pass a string
 * that lives as long as the program) and the most verbose level printed.
 * Before log_init() the name is "ddplaunch" and the level LOG_INFO. The
 * environment variable DDP_LOG_LEVEL (error, warn, info, debug) overrides the
 * level, so a library's debug lines can be seen without changing the program. */
void log_init(const char *program, enum log_level level);

/* Raises or lowers the level after log_init() (e.g. for each -v). */
void log_set_level(enum log_level level);
enum log_level log_get_level(void);

/* printf-style; a trailing newline is added. */
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void log_vmsg(enum log_level level, const char *fmt, va_list ap);

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...)                                                                             \
	do {                                                                                       \
		if (log_get_level() >= LOG_DEBUG)                                                  \
			log_msg(LOG_DEBUG, __VA_ARGS__);                                           \
	} while (0)

#endif
