/* The job's cgroup and its /dev/shm names (see footprint.h). */
#include "footprint.h"
#include "leftovers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <log.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <timeutil.h>
#include <unistd.h>

#define CG_PREFIX   "ddplaunch-"
#define CG_EMPTY_MS 1000
/* The lock a launcher holds for its cgroup's life: /dev/shm is shared by
 * launchers in other PID namespaces (a pid there means nothing here). */
#define CG_LOCK_FMT "/dev/shm/ddplaunch-cgroup-%s.lock"

/* The process's start time (clock ticks after boot, field 22 of
 * /proc/PID/stat), or 0 when there is no such process. */
static unsigned long long proc_start_time(long pid)
{
	char path[64], buf[1024];
	unsigned long long start = 0;
	ssize_t n;
	char *p, *save = NULL;
	int fd, field = 3;

	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	p = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
	if (!p)
		return 0;
	for (p = strtok_r(p + 1, " ", &save); p; p = strtok_r(NULL, " ", &save), field++)
		if (field == 22) {
			start = strtoull(p, NULL, 10);
			break;
		}
	return start;
}

/* Takes the lock of the cgroup named CG_PREFIX `id` when nobody holds it
 * (its launcher died): returns the open lock file, held, or -1 (no lock
 * file, or held). A cgroup without a lock file here is left alone: its
 * launcher may run in another PID or mount namespace, where our view of its
 * pid proves nothing. The caller removes the cgroup, then the lock file
 * (cg_lock_drop): never the lock without the cgroup. */
static int cg_lock_grab(const char *id)
{
	char path[PATH_MAX];
	int fd;

	snprintf(path, sizeof(path), CG_LOCK_FMT, id);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (flock(fd, LOCK_EX | LOCK_NB) == 0)
		return fd;
	close(fd);
	return -1;
}

/* Releases a grabbed lock, removing its file when `unlink_it`. */
static void cg_lock_drop(const char *id, int fd, bool unlink_it)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), CG_LOCK_FMT, id);
	if (unlink_it)
		unlink(path);
	close(fd);
}

/* What a lock file says (written by cg_lock_take): the cgroup directory
 * (first line) and the job's tag (second line, hex digits; "" when absent,
 * an older ddplaunch's). Returns -ENOENT when it names no directory. */
static int cg_lock_read(int fd, char *dir, size_t len, char tag[FOOTPRINT_TAG_LEN])
{
	char buf[PATH_MAX + FOOTPRINT_TAG_LEN + 2];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	size_t d, t;

	tag[0] = '\0';
	if (n <= 0)
		return -ENOENT;
	buf[n] = '\0';
	d = strcspn(buf, "\n");
	if (buf[0] != '/' || d >= len)
		return -ENOENT;
	memcpy(dir, buf, d);
	dir[d] = '\0';
	if (buf[d] == '\n') {
		t = strspn(buf + d + 1, "0123456789abcdef");
		if (t < FOOTPRINT_TAG_LEN && (buf[d + 1 + t] == '\n' || buf[d + 1 + t] == '\0')) {
			memcpy(tag, buf + d + 1, t);
			tag[t] = '\0';
		}
	}
	return 0;
}

/* A dead launcher's cgroup is gone: its job's /dev/shm names go with its
 * lock. Its guards remove them when they outlive it, but a launcher that
 * removed the cgroup first (it started while they were still at work) has
 * killed them. */
static void cg_remove_names(const char *tag)
{
	int n = job_shm_remove(tag);

	if (n > 0)
		log_debug("removed %d shared-memory name(s) /dev/shm/ddp-%s-* of a job whose "
			  "launcher is gone",
			  n, tag);
}

/* Kills what is left in an abandoned cgroup and removes it: 0, or -errno
 * of rmdir (-ENOENT when it is gone already). */
static int cg_remove(const char *path)
{
	int rc = cgroup_remove(path, CG_EMPTY_MS);

	if (rc == 0)
		log_debug("removed '%s' and what was left in it (its launcher is gone)", path);
	return rc;
}

/* Removes the cgroups CG_PREFIX PID-START under `parent` whose launcher is
 * gone, killing what is still in them first (a job whose launcher and
 * guards were all killed at once). */
static void cg_remove_stale(const char *parent)
{
	DIR *d = opendir(parent);
	struct dirent *e;
	char path[PATH_MAX + 256], dir[PATH_MAX], tag[FOOTPRINT_TAG_LEN];

	if (!d)
		return;
	while ((e = readdir(d))) {
		long pid;
		unsigned long long start;
		int lock;
		bool gone;

		if (strncmp(e->d_name, CG_PREFIX, strlen(CG_PREFIX)) ||
		    sscanf(e->d_name + strlen(CG_PREFIX), "%ld-%llu", &pid, &start) != 2)
			continue;
		if (proc_start_time(pid) == start)
			continue; /* its launcher runs */
		lock = cg_lock_grab(e->d_name + strlen(CG_PREFIX));
		if (lock < 0)
			continue; /* held, or unknown: maybe a launcher in another PID namespace */
		snprintf(path, sizeof(path), "%s/%s", parent, e->d_name);
		gone = cg_remove(path) == 0;
		if (gone && cg_lock_read(lock, dir, sizeof(dir), tag) == 0)
			cg_remove_names(tag);
		cg_lock_drop(e->d_name + strlen(CG_PREFIX), lock, gone);
	}
	closedir(d);
}

/* The cgroup v2 mount point (from /proc/self/mountinfo) into `mnt` and its
 * root (as the mount shows it) into `root`. */
static int cg_mount(char *mnt, size_t mntlen, char *root, size_t rootlen)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096];
	int rc = -ENOENT;

	if (!f)
		return -errno;
	while (rc && fgets(line, sizeof(line), f)) {
		char r[PATH_MAX], m[PATH_MAX];
		const char *sep = strstr(line, " - ");

		if (!sep || strncmp(sep + 3, "cgroup2 ", 8))
			continue;
		if (sscanf(line, "%*s %*s %*s %4095s %4095s", r, m) != 2)
			continue;
		snprintf(mnt, mntlen, "%s", m);
		snprintf(root, rootlen, "%s", r);
		rc = 0;
	}
	fclose(f);
	return rc;
}

/* This process's cgroup v2 directory ("0::PATH" in /proc/self/cgroup). */
static int cg_own_dir(char *dir, size_t len)
{
	char mnt[PATH_MAX], root[PATH_MAX], line[PATH_MAX + 8], *path = NULL;
	FILE *f;
	size_t rl;
	int rc = cg_mount(mnt, sizeof(mnt), root, sizeof(root));

	if (rc)
		return rc;
	f = fopen("/proc/self/cgroup", "re");
	if (!f)
		return -errno;
	while (!path && fgets(line, sizeof(line), f))
		if (!strncmp(line, "0::", 3))
			path = line + 3;
	fclose(f);
	if (!path)
		return -ENOENT;
	path[strcspn(path, "\n")] = '\0';
	/* A mount of a subtree shows paths below its root. */
	rl = strcmp(root, "/") ? strlen(root) : 0;
	if (rl && strncmp(path, root, rl))
		return -ENOENT;
	rc = snprintf(dir, len, "%s%s", mnt, path + rl);
	if (rc < 0 || (size_t)rc >= len)
		return -ENAMETOOLONG;
	if (rc > 1 && dir[rc - 1] == '/')
		dir[rc - 1] = '\0'; /* the root cgroup */
	/* Moving a process in needs write access where it comes from. */
	rc = snprintf(line, sizeof(line), "%s/cgroup.procs", dir);
	if (rc < 0 || (size_t)rc >= sizeof(line))
		return -ENAMETOOLONG;
	return access(line, W_OK) ? -errno : 0;
}

/* An abandoned lock (its launcher died, its guards too perhaps): its cgroup
 * goes first, wherever it is (a launcher started from another cgroup, under
 * Slurm say, made it where we cannot see it by listing our own); the lock
 * goes only when its cgroup is gone, so the next ddplaunch finds both or
 * neither. A lock naming no cgroup is left as it is. */
static void cg_remove_abandoned(const char *id, int fd, const char *own)
{
	char dir[PATH_MAX], mine[PATH_MAX], tag[FOOTPRINT_TAG_LEN];
	const char *base;
	int rc = cg_lock_read(fd, dir, sizeof(dir), tag);

	base = rc ? NULL : strrchr(dir, '/');
	snprintf(mine, sizeof(mine), CG_PREFIX "%s", id);
	/* Only the cgroup the lock is for, under the same cgroup2 mount. */
	if (!base || strcmp(base + 1, mine) || strncmp(dir, own, strlen(own))) {
		cg_lock_drop(id, fd, false);
		return;
	}
	rc = cg_remove(dir);
	if (rc == 0 || rc == -ENOENT)
		cg_remove_names(tag);
	cg_lock_drop(id, fd, rc == 0 || rc == -ENOENT);
}

/* Removes the abandoned lock files with their cgroups (the guards of a
 * killed launcher remove its cgroup, not its lock file; a launcher and its
 * guards killed at once leave both). `mnt`: our cgroup2 mount point. */
static void cg_remove_stale_locks(const char *mnt)
{
	static const char prefix[] = "ddplaunch-cgroup-", suffix[] = ".lock";
	char id[NAME_MAX + 1];
	DIR *d = opendir("/dev/shm");
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name), p = sizeof(prefix) - 1, x = sizeof(suffix) - 1;
		int fd;

		if (n <= p + x || strncmp(e->d_name, prefix, p) ||
		    strcmp(e->d_name + n - x, suffix))
			continue;
		memcpy(id, e->d_name + p, n - p - x);
		id[n - p - x] = '\0';
		fd = cg_lock_grab(id);
		if (fd >= 0)
			cg_remove_abandoned(id, fd, mnt);
	}
	closedir(d);
}

/* Takes the lock that says this job's cgroup is in use (cg_lock_free),
 * held until footprint_close or this process's death. */
static int cg_lock_take(struct footprint *f)
{
	char path[PATH_MAX], text[PATH_MAX + FOOTPRINT_TAG_LEN + 2];
	int n;

	snprintf(path, sizeof(path), CG_LOCK_FMT, strrchr(f->cgroup, '/') + 1 + strlen(CG_PREFIX));
	f->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (f->lock_fd < 0)
		return -errno;
	if (flock(f->lock_fd, LOCK_EX | LOCK_NB)) {
		int rc = -errno;

		close(f->lock_fd);
		f->lock_fd = -1;
		return rc;
	}
	/* The cgroup it is for and the job's tag, so that whoever finds the
	 * lock abandoned can remove that cgroup and the job's /dev/shm names
	 * with it (cg_remove_stale, cg_remove_abandoned). */
	n = snprintf(text, sizeof(text), "%s\n%s\n", f->cgroup, f->tag);
	if (ftruncate(f->lock_fd, 0) || pwrite(f->lock_fd, text, (size_t)n, 0) < 0)
		log_debug("cannot record '%s' in its lock file: %s", f->cgroup, strerror(errno));
	return 0;
}

static void footprint_make_cgroup(struct footprint *f)
{
	char own[PATH_MAX], kill_file[PATH_MAX + 16], mnt[PATH_MAX], root[PATH_MAX];
	int rc = cg_own_dir(own, sizeof(own));

	if (rc == 0)
		rc = cg_mount(mnt, sizeof(mnt), root, sizeof(root));
	if (rc == 0) {
		cg_remove_stale(own);
		cg_remove_stale_locks(mnt);
		rc = snprintf(f->cgroup, sizeof(f->cgroup), "%s/" CG_PREFIX "%ld-%llu", own,
			      (long)getpid(), proc_start_time((long)getpid()));
		if (rc < 0 || (size_t)rc >= sizeof(f->cgroup))
			rc = -ENAMETOOLONG;
		else
			rc = mkdir(f->cgroup, 0755) ? -errno : 0;
	}
	if (rc == 0 && (rc = cg_lock_take(f)))
		rmdir(f->cgroup);
	if (rc == 0) {
		snprintf(kill_file, sizeof(kill_file), "%s/cgroup.kill", f->cgroup);
		if (access(kill_file, W_OK)) {
			rc = -ENOTSUP; /* a kernel before 5.14 */
			rmdir(f->cgroup);
		}
	}
	if (rc) {
		log_debug("no cgroup for the job (%s); the guards hold the workers' trees",
			  strerror(-rc));
		f->cgroup[0] = '\0';
		return;
	}
	log_debug("the workers run in cgroup '%s'", f->cgroup);
}

void footprint_open(struct footprint *f, bool use_cgroup)
{
	unsigned char b[8] = {0};
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	uint64_t mix = time_now_ns() ^ ((uint64_t)getpid() << 32);

	if (fd < 0 || read(fd, b, sizeof(b)) != (ssize_t)sizeof(b))
		memcpy(b, &mix, sizeof(b));
	if (fd >= 0)
		close(fd);
	for (int i = 0; i < 8; i++)
		snprintf(f->tag + 2 * i, 3, "%02x", b[i]);
	f->cgroup[0] = '\0';
	f->lock_fd = -1;
	if (use_cgroup)
		footprint_make_cgroup(f);
	else
		log_debug("no cgroup for the job (DDPLAUNCH_CGROUP=off); the guards hold the "
			  "workers' trees");
}

void footprint_sweep(const struct footprint *f)
{
	int n;

	if (f->cgroup[0] && cgroup_populated(f->cgroup)) {
		log_debug("killing what the workers left in '%s'", f->cgroup);
		cgroup_write(f->cgroup, "cgroup.kill", "1");
	}
	n = job_shm_remove(f->tag);
	if (n > 0)
		log_debug("removed %d shared-memory name(s) /dev/shm/ddp-%s-*, left by a rank that "
			  "died",
			  n, f->tag);
}

void footprint_close(struct footprint *f)
{
	footprint_sweep(f);
	if (!f->cgroup[0])
		return;
	cgroup_wait_empty(f->cgroup, CG_EMPTY_MS);
	if (rmdir(f->cgroup))
		log_debug("cannot remove '%s': %s (the next ddplaunch removes it)", f->cgroup,
			  strerror(errno));
	else if (f->lock_fd >= 0) {
		char path[PATH_MAX];

		snprintf(path, sizeof(path), CG_LOCK_FMT,
			 strrchr(f->cgroup, '/') + 1 + strlen(CG_PREFIX));
		unlink(path);
	}
	if (f->lock_fd >= 0)
		close(f->lock_fd);
	f->lock_fd = -1;
	f->cgroup[0] = '\0';
}
