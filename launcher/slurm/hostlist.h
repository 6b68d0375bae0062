/*
 * hostlist.h - expands a compressed Slurm host list ("n[1-2,5]",
 * "gpu[001-016]", "n1,gpu[01-02],x[3]") into host names. Pure module.
 *
 * Grammar: a list is entries separated by ','; an entry is text and
 * bracket groups in any order; a group is '[' ranges ']' where the ranges,
 * separated by ',', are "N" or "LO-HI" (LO <= HI, decimal, at most 18
 * digits). Each value is printed with at least as many digits as LO was
 * written with, so zero padding is kept: "n[08-10]" is n08 n09 n10,
 * "n[9-010]" is n9 n10 (Slurm's rule). Text is printable ASCII other than
 * space, ',', '[' and ']'.
 *
 * Several groups in one entry expand to every combination, the last group
 * varying fastest ("r[1-2]n[1-2]" is r1n1 r1n2 r2n1 r2n2, as Slurm
 * 22.05's scontrol prints it; for three or more groups scontrol orders the
 * names differently, but the first name is the same). Text after the last
 * group ("a[1-3]b" is a1b a2b a3b) is accepted although Slurm 22.05 refuses
 * it; Slurm never writes such a list itself.
 *
 * Stricter than Slurm, which lets these through: empty entries ("n1,,n2",
 * a trailing ','), whitespace, an unclosed '[' and an open range ("n[1-]").
 */
#ifndef DDP_LAUNCHER_HOSTLIST_H
#define DDP_LAUNCHER_HOSTLIST_H

#include <stddef.h>

/* A bound for callers that have no better one (Slurm's own node count is
 * far below it on any real machine). */
#define HOSTLIST_MAX_HOSTS 65536
/* The longest host name produced (a DNS name is at most 253 characters). */
#define HOSTLIST_NAME_MAX 255

struct hostlist {
	char **hosts; /* hosts[0 .. count-1], each NUL-terminated */
	size_t count;
};

/* Expands expr (NUL-terminated) into out, which the caller releases with
 * hostlist_release() after success. Names keep the list's order; duplicates
 * are kept. Returns 0, or on failure (out left empty, err filled with a
 * lowercase message that names the fault and its 1-based character
 * position):
 *   -EINVAL  expr is not a host list, or makes a name longer than
 *            HOSTLIST_NAME_MAX;
 *   -E2BIG   it names more than max_hosts hosts;
 *   -ENOMEM  out of memory.
 * err may be NULL (errlen 0). */
int hostlist_expand(const char *expr, size_t max_hosts, struct hostlist *out, char *err,
		    size_t errlen);

/* Frees the names; hl is left empty. Accepts an empty or released list. */
void hostlist_release(struct hostlist *hl);

#endif
