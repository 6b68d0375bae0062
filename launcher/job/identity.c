/*
 * identity.c - a job's fingerprints and description (identity.h).
 */
#include "identity.h"

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME  0x100000001b3ull
#define CMD_SHOWN  120 /* characters of the command in the description */

/* FNV-1a over a field with its length first, so fields never run into
 * each other ("ab" "c" differs from "a" "bc"). */
static uint64_t mix(uint64_t h, const char *s)
{
	char len[24];
	size_t n = s ? strlen(s) : 0;

	snprintf(len, sizeof(len), "%zu:", n);
	for (const char *p = len; *p; p++)
		h = (h ^ (uint8_t)*p) * FNV_PRIME;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)s[i]) * FNV_PRIME;
	return h;
}

/* Appends s to buf (len so far in *n, cap bytes), as printable ASCII. */
static void append(char *buf, size_t cap, size_t *n, const char *s)
{
	for (; s && *s && *n + 1 < cap; s++) {
		uint8_t c = (uint8_t)*s;

		buf[(*n)++] = c < 0x20 || c > 0x7e || c == '\'' ? '?' : (char)c;
	}
	buf[*n] = '\0';
}

/* The command as one line, its last CMD_SHOWN characters when longer (the
 * end tells jobs apart). */
static void command_text(const struct launch_opts *o, char out[CMD_SHOWN + 1])
{
	char all[4096];
	size_t n = 0;

	append(all, sizeof(all), &n, o->module ? "-m " : "");
	append(all, sizeof(all), &n, o->program);
	for (size_t i = 0; i < o->args.n; i++) {
		append(all, sizeof(all), &n, " ");
		append(all, sizeof(all), &n, o->args.v[i]);
	}
	if (n > CMD_SHOWN) {
		memcpy(out, "...", 3);
		memmove(all, all + n - (CMD_SHOWN - 3), CMD_SHOWN - 3 + 1);
		n = CMD_SHOWN - 3;
		memcpy(out + 3, all, n + 1);
		return;
	}
	memcpy(out, all, n + 1);
}

/* What both fingerprints start with: the fields' version, the mode, the
 * nodes, how the program is run. */
static uint64_t mix_common(const struct launch_opts *o, const char *version, const char *mode,
			   const char *nodes)
{
	uint64_t h = mix(FNV_OFFSET, version);

	h = mix(h, mode);
	h = mix(h, nodes);
	h = mix(h, o->no_python ? "no_python" : "python");
	return mix(h, o->module ? "module" : "program");
}

/* The program's name: its path's last part (a module's name as given). */
static const char *program_name(const char *program)
{
	const char *slash = program ? strrchr(program, '/') : NULL;

	return slash ? slash + 1 : program;
}

void identity_make(const struct launch_opts *o, const char *mode, char job[IDENTITY_JOB_LEN + 1],
		   char cmd[IDENTITY_JOB_LEN + 1], char text[IDENTITY_TEXT_MAX + 1])
{
	char nodes[32], shown[CMD_SHOWN + 1];
	uint64_t h;

	if (o->nnodes_min == o->nnodes_max)
		snprintf(nodes, sizeof(nodes), "%d", o->nnodes_max);
	else
		snprintf(nodes, sizeof(nodes), "%d:%d", o->nnodes_min, o->nnodes_max);
	h = mix(mix_common(o, "ddpjob2", mode, nodes), program_name(o->program));
	snprintf(job, IDENTITY_JOB_LEN + 1, "%016" PRIx64, h);
	/* "ddpjob1": the fingerprint of the whole command line keeps its
	 * first form, so default run ids stay what they were. */
	h = mix(mix_common(o, "ddpjob1", mode, nodes), o->program);
	for (size_t i = 0; i < o->args.n; i++)
		h = mix(h, o->args.v[i]);
	snprintf(cmd, IDENTITY_JOB_LEN + 1, "%016" PRIx64, h);
	command_text(o, shown);
	snprintf(text, IDENTITY_TEXT_MAX + 1, "'%s' on --nnodes=%s --nproc_per_node=%s (%s)", shown,
		 nodes, o->nproc_spec ? o->nproc_spec : "1", mode);
}
