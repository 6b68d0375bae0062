/*
 * metrics.c - progress lines, progress bar and the JSON-lines file.
 */
#include "metrics.h"

#include "timeutil.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

int metrics_open(struct metrics *m, FILE *out, const char *path, bool want_bar)
{
	memset(m, 0, sizeof(*m));
	m->out = out;
	m->bar = want_bar && isatty(fileno(out));
	if (path && path[0]) {
		m->jsonl = fopen(path, "a");
		if (!m->jsonl)
			return -errno;
	}
	return 0;
}

void metrics_close(struct metrics *m)
{
	if (m->bar_drawn)
		fputs("\n", m->out);
	if (m->jsonl)
		fclose(m->jsonl);
	m->jsonl = NULL;
	m->bar_drawn = false;
}

/* Clears the bar line before a regular line is printed. */
static void metrics_clear_bar(struct metrics *m)
{
	if (m->bar_drawn) {
		fputs("\r\033[K", m->out);
		m->bar_drawn = false;
	}
}

void metrics_log_train(struct metrics *m, const struct metrics_train *r)
{
	metrics_clear_bar(m);
	fprintf(m->out,
		"epoch %llu/%llu step %llu/%llu lr %.5f loss %.4f acc %.2f%% %.0f samples/s "
		"allreduce %.1f%%\n",
		(unsigned long long)r->epoch + 1, (unsigned long long)r->epochs,
		(unsigned long long)r->step, (unsigned long long)r->total_steps, r->lr, r->loss,
		100.0 * r->accuracy, r->samples_per_s, 100.0 * r->allreduce_share);
	fflush(m->out);
	if (!m->jsonl)
		return;
	fprintf(m->jsonl,
		"{\"kind\": \"train\", \"epoch\": %llu, \"step\": %llu, \"lr\": %.8g, "
		"\"loss\": %.8g, \"accuracy\": %.8g, \"samples_per_s\": %.6g, "
		"\"allreduce_share\": %.6g, \"grad_norm\": %.8g}\n",
		(unsigned long long)r->epoch + 1, (unsigned long long)r->step, r->lr, r->loss,
		r->accuracy, r->samples_per_s, r->allreduce_share, r->grad_norm);
	fflush(m->jsonl);
}

void metrics_log_eval(struct metrics *m, const struct metrics_eval *r)
{
	metrics_clear_bar(m);
	fprintf(m->out,
		"eval epoch %llu step %llu held-out loss %.4f accuracy %.2f%% (%llu samples)\n",
		(unsigned long long)r->epoch + 1, (unsigned long long)r->step, r->loss,
		100.0 * r->accuracy, (unsigned long long)r->samples);
	fflush(m->out);
	if (!m->jsonl)
		return;
	fprintf(m->jsonl,
		"{\"kind\": \"eval\", \"epoch\": %llu, \"step\": %llu, \"loss\": %.8g, "
		"\"accuracy\": %.8g, \"samples\": %llu}\n",
		(unsigned long long)r->epoch + 1, (unsigned long long)r->step, r->loss, r->accuracy,
		(unsigned long long)r->samples);
	fflush(m->jsonl);
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
