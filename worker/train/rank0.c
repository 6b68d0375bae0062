/*
 * rank0.c - rank 0's duties (trainer.h): its metrics file, the checked
 * checkpoint_dir, and taking them over in whichever process is rank 0
 * after a re-formation renumbered the ranks.
 */
#include "fileutil.h"
#include "log.h"
#include "trainer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A checkpoint write killed between its temporary file and the rename
 * leaves NAME.safetensors.tmp behind; rank 0 is the only writer of its
 * checkpoint_dir, so at start every such file is a dead run's and goes. */
static void trainer_remove_partials(const char *dir)
{
	static const char suffix[] = ".safetensors.tmp";
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name);

		if (n <= sizeof(suffix) - 1 || strcmp(e->d_name + n - (sizeof(suffix) - 1), suffix))
			continue;
		if (unlinkat(dirfd(d), e->d_name, 0) == 0)
			log_info("removed '%s/%s', a partial checkpoint an interrupted run left",
				 dir, e->d_name);
	}
	closedir(d);
}

/* checkpoint_dir (rank 0 creates it) must be a directory this process can
 * write in: tried now with a probe file, not at the first checkpoint,
 * which may be the last thing the run does. */
int trainer_check_ckpt_dir(const char *dir)
{
	char probe[CONFIG_STR_MAX + 64];
	struct stat sb;
	int fd;

	if (mkdir(dir, 0777) < 0 && errno != EEXIST) {
		log_error("cannot create checkpoint_dir '%s': %s", dir, strerror(errno));
		return -errno;
	}
	if (stat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
		log_error("checkpoint_dir '%s' is %s, not a directory: give a directory (it is "
			  "created if missing)",
			  dir, file_kind(sb.st_mode));
		return -ENOTDIR;
	}
	snprintf(probe, sizeof(probe), "%s/.ddp-train-probe.%ld", dir, (long)getpid());
	fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		int ret = -errno;

		log_error("cannot write in checkpoint_dir '%s': %s", dir, strerror(-ret));
		return ret;
	}
	close(fd);
	unlink(probe);
	trainer_remove_partials(dir);
	return 0;
}

int trainer_init_outputs(struct trainer *t)
{
	int ret;

	if (t->rank != 0)
		return 0;
	ret = metrics_open(&t->metrics, stdout, t->cfg.metrics, t->cfg.progress_bar);
	if (ret < 0)
		log_error("cannot open the metrics file '%s': %s (check the directory)",
			  t->cfg.metrics, strerror(-ret));
	t->rank0_duties = ret == 0;
	return ret;
}

int trainer_take_rank0(struct trainer *t)
{
	int ret;

	if (t->rank != 0 || t->rank0_duties)
		return 0;
	ret = trainer_init_outputs(t);
	/* The dead rank 0's checkpoint_dir may be on another machine's disk,
	 * and a write it did not finish left a partial file there. */
	if (ret == 0 && t->cfg.checkpoint_dir[0])
		ret = trainer_check_ckpt_dir(t->cfg.checkpoint_dir);
	if (ret == 0)
		log_info("step %llu: this process is rank 0 now: it writes the progress lines, the "
			 "metrics and the checkpoints",
			 (unsigned long long)t->step);
	return ret;
}
