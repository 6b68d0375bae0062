/* The hang watch's judge where no deadline is learned (see
 * agent_hang.h, hang_rare.h). */
#include "agent_hang.h"

#include "hang_rare.h"
#include "proc_state.h"
#include "worker_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* v->ps and v->wchan; *main the main thread's state letter ('?' unknown). */
static void read_ps(struct hang_view *v, char *main)
{
	struct proc_state ps;
	int rc = proc_state_read(v->pid, &ps);

	*main = rc ? '?' : ps.main_state;

	if (rc == -ENOENT) {
		v->ps = HANG_PS_GONE;
		return;
	}
	if (rc) {
		v->ps = HANG_PS_UNKNOWN;
		return;
	}
	snprintf(v->wchan, sizeof(v->wchan), "%s", ps.wchan);
	if (ps.stopped)
		v->ps = HANG_PS_STOPPED;
	else if (ps.main_state == 'R')
		v->ps = HANG_PS_RUNNING;
	else if (ps.zombie == ps.threads)
		v->ps = HANG_PS_GONE;
	else
		v->ps = HANG_PS_BLOCKED;
}

void agent_hang_read_proc(struct hang_view *v)
{
	char main;

	read_ps(v, &main);
}

/* The number after "key" in a /proc text of "key value" lines, or 0. */
static uint64_t field(const char *text, const char *key)
{
	const char *p = strstr(text, key);
	unsigned long long x = 0;

	if (p && sscanf(p + strlen(key), " %llu", &x) == 1)
		return x;
	return 0;
}

/* How much the process wrote and its main thread slept, so far: -errno
 * when /proc cannot say (then nothing is judged by it). */
static int motion(int pid, uint64_t *wrote, uint64_t *nvcsw)
{
	char path[64], text[1536];
	int rc;

	snprintf(path, sizeof(path), "/proc/%d/io", pid);
	rc = proc_read_small(path, text, sizeof(text));
	if (rc)
		return rc;
	*wrote = field(text, "wchar:") + field(text, "\nwrite_bytes:");
	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", pid, pid);
	rc = proc_read_small(path, text, sizeof(text));
	if (rc)
		return rc;
	if (!strstr(text, "\nvoluntary_ctxt_switches:"))
		return -EIO;
	*nvcsw = field(text, "\nvoluntary_ctxt_switches:");
	return 0;
}

/* For how long the worker neither wrote nor slept: sampled every tick from
 * its phase's start; 0 while it moves, or when /proc cannot say. */
static uint64_t still_for(struct hang_rare_track *r, const struct hang_view *v, uint64_t now)
{
	uint64_t wrote, nvcsw;

	if (motion(v->pid, &wrote, &nvcsw) < 0) {
		r->pid = 0;
		return 0;
	}
	if (r->pid != v->pid || r->phase != v->page.phase || r->wrote != wrote ||
	    r->nvcsw != nvcsw) {
		r->pid = v->pid;
		r->phase = v->page.phase;
		r->wrote = wrote;
		r->nvcsw = nvcsw;
		r->moved_ns = now;
	}
	return now - r->moved_ns;
}

static int64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* What the other workers of the node did: one that exited 0 from shutdown
 * in v's round (the earliest), one past v's collective. */
static void peers(struct agent_hang *h, int i, const struct hang_view *v, struct hang_rare_facts *f)
{
	int64_t now_ms = wall_ms();

	for (int k = 0; k < h->host.nproc; k++) {
		struct agent_hang_worker w;
		struct ddp_progress p;

		if (k == i)
			continue;
		w = agent_hang_worker_of(h, k);
		if (!w.proc)
			continue;
		if (!w.proc->running) {
			if (w.proc->exit_code || w.proc->term_signal > 0 ||
			    w.proc->exit_time_ms <= 0 || worker_proc_progress(w.proc, &p) < 0 ||
			    p.phase != DDP_PHASE_SHUTDOWN || p.round != v->page.round)
				continue;
			if (now_ms - w.proc->exit_time_ms > 0 &&
			    (uint64_t)(now_ms - w.proc->exit_time_ms) * 1000000u >
				f->peer_done_ns) {
				f->peer_done_ns =
				    (uint64_t)(now_ms - w.proc->exit_time_ms) * 1000000u;
				f->peer_rank = w.rank;
			}
			f->peer_left = true;
			continue;
		}
		p = h->t[k].page;
		if (h->t[k].have && p.round == v->page.round &&
		    (p.seq > v->page.seq || p.phase == DDP_PHASE_SHUTDOWN))
			f->peer_left = true;
	}
}

bool agent_hang_rare_finished(struct agent_hang *h, int i, const struct hang_view *v)
{
	struct hang_rare_facts f = {.peer_rank = -1};

	if (v->page.phase != DDP_PHASE_SHUTDOWN)
		return false;
	peers(h, i, v, &f);
	return f.peer_rank >= 0;
}

bool agent_hang_rare(struct agent_hang *h, int i, struct hang_view *v, uint64_t now)
{
	struct hang_rare_track *r = &h->t[i].rare;
	uint64_t floor_ns = h->dl.cfg.long_floor_ns;
	struct hang_rare_facts f = {
	    .phase = v->page.phase,
	    .inside = v->page.seq && v->page.left_ns < v->page.entered_ns,
	    .age_ns = v->age_ns,
	    .peer_rank = -1,
	};
	enum hang_rare_why why;
	char main;
	bool rare = f.phase == DDP_PHASE_FINAL || f.phase == DDP_PHASE_SHUTDOWN;

	if (v->deadline_ns || v->page.magic != DDP_PROGRESS_MAGIC || f.phase == DDP_PHASE_COMPUTE ||
	    f.phase == DDP_PHASE_COLLECTIVE)
		return false;
	/* The final save's and shutdown's motion is sampled from their start:
	 * judged after the floor, it must cover the whole floor. */
	if (rare)
		f.still_ns = still_for(r, v, now);
	if (f.age_ns <= floor_ns)
		return false;
	read_ps(v, &main);
	f.ps = v->ps;
	f.disk_wait = main == 'D';
	if (rare)
		peers(h, i, v, &f);
	why = hang_rare_judge(&f, floor_ns);
	if (why == HANG_RARE_NONE)
		return false;
	v->deadline_ns = floor_ns;
	hang_rare_words(why, &f, v->why, sizeof(v->why));
	return true;
}
