/*
 * envp.c - a variable of an environment array (envp.h).
 */
#include "envp.h"

#include <string.h>

const char *envp_get(char *const envp[], const char *name)
{
	size_t n = strlen(name);

	for (; envp && *envp; envp++)
		if (!strncmp(*envp, name, n) && (*envp)[n] == '=')
			return *envp + n + 1;
	return NULL;
}
