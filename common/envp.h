/*
 * envp.h - reading a variable from an environment given as an array
 * (envp: "NAME=value" strings, NULL-terminated), as the pure parts of the
 * launcher do (Slurm's variables, PET_*, the environment the workers get)
 * instead of getenv(), so that they can be tested with any environment.
 */
#ifndef DDP_COMMON_ENVP_H
#define DDP_COMMON_ENVP_H

/* The value of `name` in envp (which may be NULL): the text after the '='
 * of the first entry "NAME=...", "" for "NAME=", NULL when no entry has
 * that name (an entry without '=' has none). Points into envp. */
const char *envp_get(char *const envp[], const char *name);

#endif
