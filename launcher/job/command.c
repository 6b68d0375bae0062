#include "command.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && !strcmp(s + n - m, suffix);
}

int command_build(const struct launch_opts *o, const char *python, char ***argv, size_t *argc)
{
	bool use_python = o->module || (!o->no_python && ends_with(o->program, ".py"));
	char **v = calloc(o->args.n + 5, sizeof(*v));
	size_t n = 0;

	if (!v)
		return -ENOMEM;
	if (!python || !*python)
		python = "python3";
	if (use_python) {
		v[n++] = (char *)python;
		v[n++] = "-u";
		if (o->module)
			v[n++] = "-m";
	}
	v[n++] = o->program;
	for (size_t i = 0; i < o->args.n; i++)
		v[n++] = o->args.v[i];
	v[n] = NULL;
	*argv = v;
	*argc = n;
	return 0;
}
