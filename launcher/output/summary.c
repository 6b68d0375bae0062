#include "summary.h"
#include "signames.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <log.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void summary_init(struct summary *s)
{
	memset(s, 0, sizeof(*s));
}

void summary_release(struct summary *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free(s->recs[i].error_message);
		free(s->recs[i].stderr_tail);
	}
	free(s->recs);
	free(s->reforms);
	free(s->replicas);
	free(s->stragglers);
	for (size_t i = 0; i < s->nhangs; i++)
		free(s->hangs[i].waiters);
	free(s->hangs);
	free(s->interpreter);
	memset(s, 0, sizeof(*s));
}

/* The first executable `name` in the colon-separated `path`, malloc'ed, or
 * NULL. */
static char *path_lookup(const char *name, const char *path)
{
	while (path && *path) {
		const char *end = strchr(path, ':');
		size_t dlen = end ? (size_t)(end - path) : strlen(path);
		char *full = NULL;

		if (dlen && asprintf(&full, "%.*s/%s", (int)dlen, path, name) >= 0) {
			if (access(full, X_OK) == 0)
				return full;
			free(full);
		}
		path = end ? end + 1 : NULL;
	}
	return NULL;
}

int summary_set_interpreter(struct summary *s, const char *argv0, const char *path)
{
	const char *base = argv0 ? strrchr(argv0, '/') : NULL;
	char *found = NULL;

	base = base ? base + 1 : argv0;
	if (!base || strncmp(base, "python", 6) != 0)
		return 0;
	if (!strchr(argv0, '/'))
		found = path_lookup(argv0, path);
	free(s->interpreter);
	s->interpreter_from_path = !strchr(argv0, '/');
	s->interpreter = found ? found : strdup(argv0);
	return s->interpreter ? 0 : -ENOMEM;
}

bool summary_missing_module_hint(const struct summary *s, const struct summary_rec *r, char *buf,
				 size_t len)
{
	static const char mark[] = "ModuleNotFoundError: No module named '";
	const char *p = r->stderr_tail ? strstr(r->stderr_tail, mark) : NULL;
	const char *end;
	char ran[PATH_MAX + 64];

	if (!p)
		return false;
	p += sizeof(mark) - 1;
	end = strchr(p, '\'');
	if (!end || end == p)
		return false;
	if (!s->interpreter)
		snprintf(ran, sizeof(ran), "ran under a Python interpreter");
	else if (s->interpreter_from_path)
		snprintf(ran, sizeof(ran), "ran under %s (the first %s on PATH)", s->interpreter,
			 strrchr(s->interpreter, '/') ? strrchr(s->interpreter, '/') + 1
						      : s->interpreter);
	else
		snprintf(ran, sizeof(ran), "ran under %s", s->interpreter);
	snprintf(buf, len,
		 "rank %d %s, which cannot import '%.*s'; choose the interpreter with "
		 "PYTHON_EXEC=/path/to/python, or activate the virtual environment that has "
		 "'%.*s' so that its python comes first on PATH",
		 r->rank, ran, (int)(end - p), p, (int)(end - p), p);
	return true;
}

static int dup_or_null(const char *in, char **out)
{
	*out = NULL;
	if (!in)
		return 0;
	*out = strdup(in);
	return *out ? 0 : -ENOMEM;
}

int summary_add(struct summary *s, const struct summary_rec *rec)
{
	struct summary_rec *r;

	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 8;
		struct summary_rec *nr = realloc(s->recs, cap * sizeof(*nr));

		if (!nr)
			return -ENOMEM;
		s->recs = nr;
		s->cap = cap;
	}
	r = &s->recs[s->n];
	*r = *rec;
	if (dup_or_null(rec->error_message, &r->error_message) ||
	    dup_or_null(rec->stderr_tail, &r->stderr_tail)) {
		free(r->error_message);
		return -ENOMEM;
	}
	s->n++;
	return 0;
}

bool summary_rec_failed(const struct summary_rec *r)
{
	return r->term_signal > 0 || r->exit_code != 0;
}

const struct summary_rec *summary_first_failure(const struct summary *s, int attempt)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->recs[i].attempt == attempt && s->recs[i].first)
			return &s->recs[i];
	return NULL;
}

const char *summary_describe(const struct summary_rec *r, char *buf, size_t len)
{
	if (r->term_signal > 0)
		snprintf(buf, len, "was killed by %s", signame_name(r->term_signal));
	else if (r->pid <= 0)
		snprintf(buf, len, "could not be started (exit code %d)", r->exit_code);
	else
		snprintf(buf, len, "exited with code %d", r->exit_code);
	return buf;
}

static void format_time(int64_t ms, char *buf, size_t len)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;

	gmtime_r(&t, &tm);
	snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
		 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
}

/* "pid N", or "never started" for a worker that got no process. */
static const char *rec_pid(const struct summary_rec *r, char *buf, size_t len)
{
	if (r->pid <= 0)
		return "never started";
	snprintf(buf, len, "pid %d", r->pid);
	return buf;
}

static void print_first(const struct summary *s, const struct summary_rec *r, int max_restarts)
{
	char how[64], when[64], pid[32];
	const char *p, *nl;
	char hint[PATH_MAX + 512];

	format_time(r->time_ms, when, sizeof(when));
	log_error("first failure: rank %d (local rank %d, %s) %s at %s, attempt %d of %d", r->rank,
		  r->local_rank, rec_pid(r, pid, sizeof(pid)),
		  summary_describe(r, how, sizeof(how)), when, r->attempt + 1, max_restarts + 1);
	if (r->error_message)
		log_error("  error file of rank %d: %s", r->rank, r->error_message);
	if (!r->stderr_tail)
		return;
	log_error("  last lines of rank %d's stderr:", r->rank);
	for (p = r->stderr_tail; *p; p = nl ? nl + 1 : p + strlen(p)) {
		nl = strchr(p, '\n');
		log_error("    | %.*s", nl ? (int)(nl - p) : (int)strlen(p), p);
		if (!nl)
			break;
	}
	if (summary_missing_module_hint(s, r, hint, sizeof(hint)))
		log_error("  %s", hint);
}

void summary_print(const struct summary *s, int attempt, int max_restarts)
{
	const struct summary_rec *first = summary_first_failure(s, attempt);
	char how[64], pid[32];

	if (!first)
		return;
	print_first(s, first, max_restarts);
	for (size_t i = 0; i < s->n; i++) {
		const struct summary_rec *r = &s->recs[i];

		if (r->attempt != attempt || r == first)
			continue;
		log_error("  then rank %d (local rank %d, %s) %s%s", r->rank, r->local_rank,
			  rec_pid(r, pid, sizeof(pid)), summary_describe(r, how, sizeof(how)),
			  r->stopped ? " (stopped by ddplaunch)" : "");
	}
}

static json_t *rec_json(const struct summary_rec *r)
{
	char when[64];

	format_time(r->time_ms, when, sizeof(when));
	return json_pack(
	    "{s:i, s:i, s:i, s:i, s:o, s:o, s:b, s:b, s:s, s:o, s:o}", "attempt", r->attempt,
	    "rank", r->rank, "local_rank", r->local_rank, "pid", r->pid, "exit_code",
	    r->term_signal ? json_null() : json_integer(r->exit_code), "signal",
	    r->term_signal ? json_string(signame_name(r->term_signal)) : json_null(),
	    "first_failure", r->first, "stopped_by_launcher", r->stopped, "time", when,
	    "error_message", r->error_message ? json_string(r->error_message) : json_null(),
	    "stderr_tail", r->stderr_tail ? json_string(r->stderr_tail) : json_null());
}

int summary_add_reform(struct summary *s, const struct summary_reform *r)
{
	struct summary_reform *v = realloc(s->reforms, (s->nreforms + 1) * sizeof(*v));

	if (!v)
		return -ENOMEM;
	s->reforms = v;
	v[s->nreforms++] = *r;
	return 0;
}

void summary_print_reforms(const struct summary *s)
{
	if (s->nreforms)
		log_info("%zu re-formation(s) in place, no restart:", s->nreforms);
	for (size_t i = 0; i < s->nreforms; i++) {
		const struct summary_reform *r = &s->reforms[i];

		log_info("  round %d: %d -> %d workers on %d node(s), the survivors waited %.3f s "
			 "(%s)",
			 r->round, r->world_before, r->world_after, r->nodes_after, r->waited_s,
			 r->why);
	}
}

static json_t *reform_json(const struct summary_reform *r)
{
	return json_pack("{s:f, s:i, s:i, s:i, s:i, s:f, s:i, s:s}", "time", r->time_ms / 1000.0,
			 "round", r->round, "world_before", r->world_before, "world_after",
			 r->world_after, "nodes", r->nodes_after, "waited_s", r->waited_s,
			 "replaced", r->replaced, "why", r->why);
}

static int reforms_json(const struct summary *s, json_t *root)
{
	json_t *a = json_array();

	if (!a)
		return -ENOMEM;
	for (size_t i = 0; i < s->nreforms; i++)
		if (json_array_append_new(a, reform_json(&s->reforms[i]))) {
			json_decref(a);
			return -ENOMEM;
		}
	return json_object_set_new(root, "reformations", a) ? -ENOMEM : 0;
}

int summary_write_json(const struct summary *s, const char *path, int exit_code, int attempts,
		       int stop_signal)
{
	json_t *root = json_object(), *workers = json_array();
	char tmp[4096];
	int rc = -ENOMEM;

	if (!root || !workers)
		goto out;
	for (size_t i = 0; i < s->n; i++)
		if (json_array_append_new(workers, rec_json(&s->recs[i])))
			goto out;
	if (summary_numerics_json(s, root))
		goto out;
	if (json_object_set_new(root, "exit_code", json_integer(exit_code)) ||
	    json_object_set_new(root, "attempts", json_integer(attempts)) ||
	    json_object_set_new(root, "launcher_signal",
				stop_signal ? json_string(signame_name(stop_signal))
					    : json_null()) ||
	    json_object_set(root, "workers", workers) || reforms_json(s, root) ||
	    summary_replicas_json(s, root) || summary_hangs_json(s, root) ||
	    summary_stragglers_json(s, root))
		goto out;
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	rc = json_dump_file(root, tmp, JSON_INDENT(2)) ? -EIO : 0;
	if (!rc && rename(tmp, path))
		rc = -errno;
out:
	json_decref(workers);
	json_decref(root);
	return rc;
}

int summary_read_error_file(const char *path, char **msg)
{
	json_error_t jerr;
	json_t *root, *m;
	const char *text = NULL;
	int rc = -EINVAL;

	*msg = NULL;
	if (access(path, F_OK))
		return -ENOENT;
	root = json_load_file(path, 0, &jerr);
	if (!root)
		return -EINVAL;
	m = json_object_get(root, "message");
	if (json_is_string(m))
		text = json_string_value(m);
	else if (json_is_object(m) && json_is_string(json_object_get(m, "message")))
		text = json_string_value(json_object_get(m, "message"));
	if (text) {
		*msg = strdup(text);
		rc = *msg ? 0 : -ENOMEM;
	}
	json_decref(root);
	return rc;
}
