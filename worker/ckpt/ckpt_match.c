/*
 * ckpt_match.c - loads a checkpoint's tensors into the model's by name,
 * ignoring a "module." prefix on either side (the DistributedDataParallel
 * wrapper's prefix, the classic pitfall), strictly by default: missing,
 * unexpected or mismatched tensors are listed, never silently skipped.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

#define CK_PREFIX "module."

static const char *ck_strip(const char *name, int *stripped)
{
	if (strncmp(name, CK_PREFIX, strlen(CK_PREFIX)) == 0) {
		*stripped = 1;
		return name + strlen(CK_PREFIX);
	}
	return name;
}

/* Appends ", item" (or "item") to a malloc'ed list. */
static int ck_list_add(char **list, size_t *n, const char *item)
{
	size_t old = *list ? strlen(*list) : 0;
	char *nl = realloc(*list, old + strlen(item) + 3);

	if (!nl)
		return -ENOMEM;
	sprintf(nl + old, "%s%s", old ? ", " : "", item);
	*list = nl;
	(*n)++;
	return 0;
}

static void ck_shape_str(const int64_t *shape, int ndim, const char *dtype, char *out, size_t len)
{
	size_t off = (size_t)snprintf(out, len, "%s [", dtype);

	for (int d = 0; d < ndim && off < len; d++)
		off += (size_t)snprintf(out + off, len - off, "%s%lld", d ? ", " : "",
					(long long)shape[d]);
	if (off < len)
		snprintf(out + off, len - off, "]");
}

static int ck_same(const struct st_entry *e, const struct ddp_tensor *t)
{
	if (e->dtype != (int)t->dtype || e->ndim != t->ndim)
		return 0;
	for (int d = 0; d < t->ndim; d++)
		if (e->shape[d] != t->shape[d])
			return 0;
	return 1;
}

void ddp_load_report_release(struct ddp_load_report *rep)
{
	if (!rep)
		return;
	free(rep->missing);
	free(rep->unexpected);
	free(rep->mismatched);
	free(rep->report);
	free(rep->loaded);
	memset(rep, 0, sizeof(*rep));
}

/* Fills match[i] = file entry for tensors[i] or -1, and the lists. */
static int ck_match(const struct ddp_ckpt *ck, const struct ddp_tensor *t, size_t n, long *match,
		    struct ddp_load_report *rep)
{
	unsigned char *used = calloc(ck->ntensors + 1, 1);
	size_t nmatched = 0;
	int rc = 0;

	if (!used)
		return -ENOMEM;
	for (size_t i = 0; i < n && rc == 0; i++) {
		int s = 0;
		const char *want = ck_strip(t[i].name, &s);

		rep->prefix_stripped |= s;
		match[i] = -1;
		for (size_t j = 0; j < ck->ntensors; j++) {
			int fs = 0;

			if (!used[j] && strcmp(ck_strip(ck->t[j].name, &fs), want) == 0) {
				rep->prefix_stripped |= fs;
				match[i] = (long)j;
				used[j] = 1;
				break;
			}
		}
		if (match[i] < 0) {
			rc = ck_list_add(&rep->missing, &rep->nmissing, t[i].name);
		} else if (ck_same(&ck->t[match[i]], &t[i])) {
			rc = ck_list_add(&rep->loaded, &nmatched, t[i].name);
		} else {
			char a[160], b[160], item[400];
			const struct st_entry *e = &ck->t[match[i]];

			ck_shape_str(e->shape, e->ndim, e->dtype_str, a, sizeof(a));
			ck_shape_str(t[i].shape, t[i].ndim,
				     t[i].dtype == DDP_FLOAT64 ? "F64" : "F32", b, sizeof(b));
			snprintf(item, sizeof(item), "%s (checkpoint %s, model %s)", t[i].name, a,
				 b);
			rc = ck_list_add(&rep->mismatched, &rep->nmismatched, item);
			match[i] = -1;
		}
	}
	for (size_t j = 0; j < ck->ntensors && rc == 0; j++)
		if (!used[j])
			rc = ck_list_add(&rep->unexpected, &rep->nunexpected, ck->t[j].name);
	free(used);
	return rc;
}

static void ck_report(const struct ddp_ckpt *ck, enum ddp_load_flags flags,
		      struct ddp_load_report *rep)
{
	bool partial = rep->nmissing || rep->nunexpected || rep->nmismatched;
	bool kept = flags != DDP_LOAD_STRICT && (rep->nmissing || rep->nmismatched);
	size_t len = 640 + (rep->missing ? strlen(rep->missing) : 0) +
		     (rep->unexpected ? strlen(rep->unexpected) : 0) +
		     (rep->mismatched ? strlen(rep->mismatched) : 0) +
		     (rep->loaded ? strlen(rep->loaded) : 0);
	size_t off = 0;

	if (!rep->prefix_stripped && !partial)
		return;
	rep->report = malloc(len);
	if (!rep->report)
		return;
	rep->report[0] = '\0';
	if (rep->prefix_stripped)
		off += (size_t)snprintf(rep->report + off, len - off,
					"checkpoint '%s': names matched ignoring the 'module.' "
					"prefix\n",
					ck->path);
	if (partial && flags != DDP_LOAD_STRICT)
		off += (size_t)snprintf(rep->report + off, len - off, "loaded: %s\n",
					rep->loaded ? rep->loaded : "nothing");
	if (rep->nmissing)
		off += (size_t)snprintf(rep->report + off, len - off,
					"missing from the checkpoint: %s\n", rep->missing);
	if (rep->nunexpected)
		off += (size_t)snprintf(rep->report + off, len - off,
					"unexpected in the checkpoint: %s\n", rep->unexpected);
	if (rep->nmismatched)
		off += (size_t)snprintf(rep->report + off, len - off, "dtype/shape mismatch: %s\n",
					rep->mismatched);
	if (kept)
		snprintf(rep->report + off, len - off,
			 "not loaded (missing or mismatched): they keep their values from "
			 "before the load\n");
}

int ddp_ckpt_load(const struct ddp_ckpt *ck, const struct ddp_tensor *tensors, size_t ntensors,
		  enum ddp_load_flags flags, struct ddp_load_report *rep_out, char *errbuf,
		  size_t errbuf_len)
{
	struct ddp_load_report rep = {0};
	long *match = calloc(ntensors + 1, sizeof(*match));
	int rc = match ? ck_match(ck, tensors, ntensors, match, &rep) : -ENOMEM;

	if (rc < 0)
		goto out;
	ck_report(ck, flags, &rep);
	if (flags == DDP_LOAD_STRICT && (rep.nmissing || rep.nunexpected || rep.nmismatched)) {
		if (errbuf && errbuf_len)
			snprintf(errbuf, errbuf_len,
				 "checkpoint '%s' does not match the model (strict load):\n%s"
				 "fix the model or the checkpoint, or load with --no-strict",
				 ck->path, rep.report ? rep.report : "");
		rc = -EINVAL;
		goto out;
	}
	for (size_t i = 0; i < ntensors; i++) {
		const struct st_entry *e;

		if (match[i] < 0)
			continue;
		e = &ck->t[match[i]];
		memcpy(tensors[i].data, ck->data + e->begin, e->end - e->begin);
		rep.nloaded++;
	}
out:
	free(match);
	if (rc < 0 && rc != -EINVAL && errbuf && errbuf_len)
		snprintf(errbuf, errbuf_len, "checkpoint '%s': %s", ck->path, strerror(-rc));
	if (rep_out)
		*rep_out = rep;
	else
		ddp_load_report_release(&rep);
	return rc;
}
