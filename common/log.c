#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static const char *log_program = "ddplaunch";
static enum log_level log_level = LOG_INFO;

static int level_from_env(enum log_level fallback)
{
	const char *s = getenv("DDP_LOG_LEVEL");
	static const char *const names[] = {"error", "warn", "info", "debug"};

	if (!s)
		return fallback;
	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcasecmp(s, names[i]) == 0)
			return (int)i;
	return fallback;
}

void log_init(const char *program, enum log_level level)
{
	log_program = program;
	log_level = level_from_env(level);
}

void log_set_level(enum log_level level)
{
	log_level = level;
}

enum log_level log_get_level(void)
{
	return log_level;
}

void log_vmsg(enum log_level level, const char *fmt, va_list ap)
{
	char line[2048];
	int n, m;

	if (level > log_level)
		return;
	n = snprintf(line, sizeof(line), "%s: ", log_program);
	if (n < 0 || (size_t)n >= sizeof(line))
		n = 0;
	m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	if (m < 0)
		m = 0;
	n += m;
	if ((size_t)n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	/* One write per line: concurrent writers to the same pipe never split it. */
	(void)!write(STDERR_FILENO, line, (size_t)n);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vmsg(level, fmt, ap);
	va_end(ap);
}
