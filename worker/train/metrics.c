/*
 * metrics.c - progress lines, progress bar and the JSON-lines file.
 */
#include "metrics.h"

#include "timeutil.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int metrics_open(struct metrics *m, FILE *out, const char *path, bool want_bar)
{
	struct stat sb;

	memset(m, 0, sizeof(*m));
	m->out = out;
	m->jsonl = -1;
	m->bar = want_bar && isatty(fileno(out));
	if (path && path[0]) {
		m->jsonl = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
		if (m->jsonl < 0)
			return -errno;
		m->fsync = fstat(m->jsonl, &sb) == 0 && S_ISREG(sb.st_mode);
	}
	return 0;
}

static void metrics_lost(struct metrics *m, int err, uint64_t *counter)
{
	(*counter)++;
	if (!m->err)
		m->err = err;
}

int metrics_close(struct metrics *m)
{
	if (!m->out)
		return m->err; /* never opened, or closed already */
	if (m->bar_drawn)
		fputs("\n", m->out);
	if (fflush(m->out) == EOF)
		metrics_lost(m, -errno, &m->lost_lines);
	if (m->jsonl >= 0) {
		/* A delayed write error (a full disk) shows up here. */
		if (m->fsync && fsync(m->jsonl) < 0)
			metrics_lost(m, -errno, &m->lost_records);
		if (close(m->jsonl) < 0 && errno != EINTR)
			metrics_lost(m, -errno, &m->lost_records);
	}
	m->jsonl = -1;
	m->out = NULL;
	m->bar_drawn = false;
	return m->err;
}

/* Clears the bar line before a regular line is printed. */
static void metrics_clear_bar(struct metrics *m)
{
	if (m->bar_drawn) {
		fputs("\r\033[K", m->out);
		m->bar_drawn = false;
	}
}

/* Prints a progress line: 0 or -errno when stdout refused it. */
static int metrics_line(struct metrics *m, const char *line)
{
	metrics_clear_bar(m);
	if (fputs(line, m->out) == EOF || fflush(m->out) == EOF) {
		int err = errno ? -errno : -EIO;

		clearerr(m->out);
		metrics_lost(m, err, &m->lost_lines);
		return err;
	}
	return 0;
}

/* Appends one record with a single write(2) (O_APPEND): 0 or -errno when it
 * did not land whole. */
static int metrics_record(struct metrics *m, const char *rec)
{
	size_t len = strlen(rec);
	ssize_t n;

	if (m->jsonl < 0)
		return 0;
	m->records++;
	do
		n = write(m->jsonl, rec, len);
	while (n < 0 && errno == EINTR);
	if (n == (ssize_t)len)
		return 0;
	n = n < 0 ? -errno : -ENOSPC; /* a short write: the file system is full */
	metrics_lost(m, (int)n, &m->lost_records);
	return (int)n;
}

int metrics_log_train(struct metrics *m, const struct metrics_train *r)
{
	char line[512], rec[512];
	int a, b;

	snprintf(line, sizeof(line),
		 "epoch %llu/%llu step %llu/%llu lr %.5f loss %.4f acc %.2f%% %.0f samples/s "
		 "allreduce %.1f%%\n",
		 (unsigned long long)r->epoch + 1, (unsigned long long)r->epochs,
		 (unsigned long long)r->step, (unsigned long long)r->total_steps, r->lr, r->loss,
		 100.0 * r->accuracy, r->samples_per_s, 100.0 * r->allreduce_share);
	snprintf(rec, sizeof(rec),
		 "{\"kind\": \"train\", \"epoch\": %llu, \"step\": %llu, \"lr\": %.8g, "
		 "\"loss\": %.8g, \"accuracy\": %.8g, \"samples_per_s\": %.6g, "
		 "\"allreduce_share\": %.6g, \"grad_norm\": %.8g, \"time\": %.6f, "
		 "\"world\": %d}\n",
		 (unsigned long long)r->epoch + 1, (unsigned long long)r->step, r->lr, r->loss,
		 r->accuracy, r->samples_per_s, r->allreduce_share, r->grad_norm, r->time,
		 r->world);
	a = metrics_line(m, line);
	b = metrics_record(m, rec);
	return a ? a : b;
}

int metrics_log_eval(struct metrics *m, const struct metrics_eval *r)
{
	char line[512], rec[512];
	int a, b;

	snprintf(line, sizeof(line),
		 "eval epoch %llu step %llu held-out loss %.4f accuracy %.2f%% (%llu samples)\n",
		 (unsigned long long)r->epoch + 1, (unsigned long long)r->step, r->loss,
		 100.0 * r->accuracy, (unsigned long long)r->samples);
	snprintf(rec, sizeof(rec),
		 "{\"kind\": \"eval\", \"epoch\": %llu, \"step\": %llu, \"loss\": %.8g, "
		 "\"accuracy\": %.8g, \"samples\": %llu}\n",
		 (unsigned long long)r->epoch + 1, (unsigned long long)r->step, r->loss,
		 r->accuracy, (unsigned long long)r->samples);
	a = metrics_line(m, line);
	b = metrics_record(m, rec);
	return a ? a : b;
}

int metrics_log_replica(struct metrics *m, const struct metrics_replica *r)
{
	char rec[512];

	snprintf(rec, sizeof(rec),
		 "{\"kind\": \"replica\", \"step\": %llu, \"rank\": %d, \"tensor\": \"%s\", "
		 "\"world\": %d, \"majority\": %d, \"root\": %d, \"action\": \"%s\", "
		 "\"heal_s\": %.6f}\n",
		 (unsigned long long)r->step, r->rank, r->tensor, r->world, r->majority, r->root,
		 r->action, r->heal_s);
	return metrics_record(m, rec);
}

void metrics_bar(struct metrics *m, uint64_t done, uint64_t total, double loss)
{
	char bar[41];
	int fill;

	uint64_t now = time_now_ns();

	if (!m->bar || total == 0 || (done < total && now - m->bar_ns < 100000000ull))
		return;
	m->bar_ns = now;
	fill = (int)(40 * (done > total ? total : done) / total);
	memset(bar, '#', (size_t)fill);
	memset(bar + fill, '.', (size_t)(40 - fill));
	bar[40] = '\0';
	fprintf(m->out, "\r[%s] %3d%% step %llu/%llu loss %.4f", bar, (int)(100 * done / total),
		(unsigned long long)done, (unsigned long long)total, loss);
	fflush(m->out);
	m->bar_drawn = true;
}

int metrics_log_raw(struct metrics *m, const char *line, const char *rec)
{
	int a = line ? metrics_line(m, line) : 0, b = metrics_record(m, rec);

	return a ? a : b;
}
