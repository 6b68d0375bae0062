/* The run's directory: a new one per run, the latest link, the lock of a
 * temporary one and the removal of those that dead runs left; in it, each
 * attempt's and rank's directory and the rank's log files. */
#include "rundir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <log.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define TMP_PREFIX "ddplaunch_"

static int mkdir_p(const char *path)
{
	char buf[PATH_MAX];
	size_t n = strlen(path);

	if (n == 0 || n >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, n + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, 0755) && errno != EEXIST)
		return -errno;
	return 0;
}

/* Calls fn(dir/name) for each entry of dir but "." and "..". */
static void each_entry(const char *dir, void (*fn)(const char *path))
{
	char path[PATH_MAX + 256];
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		fn(path);
	}
	closedir(d);
}

/* A rank's directory: the error file ddplaunch named, then the directory
 * (which stays if the worker put something else there). */
static void remove_rank_dir(const char *path)
{
	char file[PATH_MAX + 16];

	snprintf(file, sizeof(file), "%s/error.json", path);
	unlink(file);
	rmdir(path);
}

static void remove_attempt_dir(const char *path)
{
	const char *base = strrchr(path, '/');

	if (base && !strncmp(base + 1, "attempt_", 8)) {
		each_entry(path, remove_rank_dir);
		rmdir(path);
	}
}

/* What ddplaunch makes in a temporary run directory, the lock last. */
static void remove_tmp_dir(const char *path)
{
	char lock[PATH_MAX + 32];

	each_entry(path, remove_attempt_dir);
	snprintf(lock, sizeof(lock), "%s/" RUNDIR_LOCK, path);
	unlink(lock);
	rmdir(path);
}

/* One entry of the temporary directory: a run directory whose lock is
 * free belongs to a run that died. */
static void remove_if_dead(const char *path)
{
	const char *base = strrchr(path, '/') + 1;
	char lock[PATH_MAX + 32];
	int fd;

	if (strncmp(base, TMP_PREFIX, strlen(TMP_PREFIX)))
		return;
	snprintf(lock, sizeof(lock), "%s/" RUNDIR_LOCK, path);
	fd = open(lock, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return; /* no lock: kept logs, or not ours */
	if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
		log_debug("removing '%s', left by a ddplaunch that died", path);
		remove_tmp_dir(path);
	}
	close(fd);
}

/* The lock of a new temporary directory: made and locked under another
 * name, then renamed, so no other launcher ever sees it unlocked. */
static int take_lock(struct rundir *rd)
{
	char tmp[PATH_MAX + 32], lock[PATH_MAX + 32], pid[24];
	int fd, n;

	snprintf(tmp, sizeof(tmp), "%s/" RUNDIR_LOCK ".new", rd->path);
	snprintf(lock, sizeof(lock), "%s/" RUNDIR_LOCK, rd->path);
	fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	if (flock(fd, LOCK_EX) || write(fd, pid, (size_t)n) != n || rename(tmp, lock)) {
		int rc = -errno;

		close(fd);
		unlink(tmp);
		return rc;
	}
	rd->lock_fd = fd;
	return 0;
}

static int open_tmp(struct rundir *rd, const char *tmpdir, bool keep)
{
	int rc;

	snprintf(rd->path, sizeof(rd->path), "%s/" TMP_PREFIX "XXXXXX", tmpdir);
	if (!mkdtemp(rd->path)) {
		rc = -errno;
		log_error("cannot create a run directory in '%s': %s (set TMPDIR)", tmpdir,
			  strerror(errno));
		return rc;
	}
	if (keep) {
		log_info("worker logs go to '%s' (use --log_dir to choose)", rd->path);
		return 0;
	}
	rd->is_tmp = true;
	rc = take_lock(rd);
	if (rc)
		log_warn("cannot lock '%s': %s; a ddplaunch killed with -9 would leave it",
			 rd->path, strerror(-rc));
	return 0;
}

/* DIR/latest -> the new run's directory, replaced in one rename. */
static void point_latest(const char *log_dir, const char *name)
{
	char tmp[PATH_MAX + 64], latest[PATH_MAX + 16];
	struct stat st;

	snprintf(latest, sizeof(latest), "%s/latest", log_dir);
	if (lstat(latest, &st) == 0 && !S_ISLNK(st.st_mode)) {
		log_warn("'%s' is not a symbolic link; leaving it (the newest run is '%s')", latest,
			 name);
		return;
	}
	snprintf(tmp, sizeof(tmp), "%s/.latest.%d", log_dir, (int)getpid());
	unlink(tmp);
	if (symlink(name, tmp) || rename(tmp, latest)) {
		log_warn("cannot point '%s' at '%s': %s", latest, name, strerror(errno));
		unlink(tmp);
	}
}

static int open_in_log_dir(struct rundir *rd, const char *log_dir, const char *run_id)
{
	char id[64];
	size_t n = 0;
	int rc = mkdir_p(log_dir);

	if (rc) {
		log_error("cannot create --log_dir '%s': %s", log_dir, strerror(-rc));
		return rc;
	}
	/* The run id becomes part of a file name: nothing but [A-Za-z0-9._-]. */
	for (const char *p = run_id; *p && n < sizeof(id) - 1; p++)
		id[n++] = (strchr("._-", *p) || (*p >= '0' && *p <= '9') ||
			   ((*p | 0x20) >= 'a' && (*p | 0x20) <= 'z'))
			      ? *p
			      : '_';
	id[n] = '\0';
	rc = snprintf(rd->path, sizeof(rd->path), "%s/%s_XXXXXX", log_dir, n ? id : "run");
	if (rc < 0 || (size_t)rc >= sizeof(rd->path) - 64) {
		log_error("--log_dir '%s' is too long", log_dir);
		return -ENAMETOOLONG;
	}
	if (!mkdtemp(rd->path)) {
		rc = -errno;
		log_error("cannot create a run directory in --log_dir '%s': %s", log_dir,
			  strerror(errno));
		return rc;
	}
	point_latest(log_dir, strrchr(rd->path, '/') + 1);
	log_info("worker logs and summary.json go to '%s' (and '%s/latest')", rd->path, log_dir);
	return 0;
}

int rundir_open(struct rundir *rd, const char *log_dir, const char *run_id, const char *tmpdir,
		bool keep)
{
	rd->path[0] = '\0';
	rd->is_tmp = false;
	rd->lock_fd = -1;
	if (!tmpdir || !*tmpdir)
		tmpdir = "/tmp";
	each_entry(tmpdir, remove_if_dead);
	if (log_dir)
		return open_in_log_dir(rd, log_dir, run_id ? run_id : "run");
	return open_tmp(rd, tmpdir, keep);
}

int rundir_attempt(const struct rundir *rd, int attempt)
{
	char path[PATH_MAX];
	int rc = snprintf(path, sizeof(path), "%s/attempt_%d", rd->path, attempt);

	/* One mkdir for the attempt, then one per rank: this sits on the start
	 * and restart path. */
	if (rc < 0 || (size_t)rc >= sizeof(path))
		rc = -ENAMETOOLONG;
	else
		rc = mkdir(path, 0755) && errno != EEXIST ? -errno : 0;
	if (rc)
		log_error("cannot create '%s': %s", path, strerror(-rc));
	return rc;
}

int rundir_rank(const struct rundir *rd, int attempt, int rank, char dir[PATH_MAX],
		char error_file[PATH_MAX])
{
	int n = snprintf(dir, PATH_MAX, "%s/attempt_%d/%d", rd->path, attempt, rank);
	int m = snprintf(error_file, PATH_MAX, "%s/error.json", dir);
	int rc;

	if (n < 0 || n >= PATH_MAX || m < 0 || m >= PATH_MAX) {
		log_error("run directory path '%s' is too long (use a shorter --log_dir)",
			  rd->path);
		return -ENAMETOOLONG;
	}
	if (mkdir(dir, 0755) && errno != EEXIST) {
		rc = -errno;
		log_error("cannot create '%s': %s", dir, strerror(-rc));
		return rc;
	}
	return 0;
}

int rundir_open_logs(const char *dir, int fd[2], bool keep)
{
	static const char *const names[2] = {"stdout.log", "stderr.log"};
	char path[PATH_MAX + 16];
	int rc;

	fd[0] = fd[1] = -1;
	for (int s = 0; s < 2; s++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[s]);
		fd[s] = open(path, O_WRONLY | O_CREAT | (keep ? 0 : O_TRUNC) | O_APPEND | O_CLOEXEC,
			     0644);
		if (fd[s] < 0) {
			rc = -errno;
			log_error("cannot create log file '%s': %s (check --log_dir)", path,
				  strerror(-rc));
			return rc;
		}
	}
	return 0;
}

int rundir_close_logs(const char *dir, int rank, int fd[2])
{
	int rc = 0;

	for (int s = 0; s < 2; s++) {
		/* A full disk may only show at close (delayed allocation, NFS). */
		if (fd[s] >= 0 && close(fd[s]) && errno != EINTR) {
			rc = -errno;
			log_error("rank %d: closing its %s log in '%s' failed: %s; that log may be "
				  "incomplete",
				  rank, s ? "stderr" : "stdout", dir, strerror(-rc));
		}
		fd[s] = -1;
	}
	return rc;
}

void rundir_close(struct rundir *rd)
{
	if (rd->is_tmp && rd->path[0])
		remove_tmp_dir(rd->path);
	rd->is_tmp = false;
	if (rd->lock_fd >= 0)
		close(rd->lock_fd);
	rd->lock_fd = -1;
}
