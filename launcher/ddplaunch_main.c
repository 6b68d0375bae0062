/* ddplaunch: parse the command line and the job file, then run the agent. */
#include "agent.h"
#include "args.h"
#include "dryrun.h"
#include "fileutil.h"
#include "jobfile.h"
#include "opts.h"
#include "opts_pet.h"
#include "opts_rdzv.h"
#include "opts_slurm.h"
#include "status.h"

#include <log.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

/* torchrun --standalone gives each run a fresh id (a random UUID). */
static void standalone_run_id(struct launch_opts *o)
{
	unsigned char b[16];
	char id[40], err[OPTS_ERR_LEN];
	FILE *f;

	if (!o->standalone || strcmp(o->rdzv_id, "none"))
		return;
	f = fopen("/dev/urandom", "rb");
	if (!f)
		return;
	if (fread(b, 1, sizeof(b), f) == sizeof(b)) {
		b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
		b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
		snprintf(id, sizeof(id),
			 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
			 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
			 b[12], b[13], b[14], b[15]);
		opts_set(o, "rdzv_id", id, OPTS_SRC_DEFAULT, err, sizeof(err));
	}
	fclose(f);
}

int main(int argc, char **argv)
{
	struct launch_opts o;
	char err[4 * OPTS_ERR_LEN] = ""; /* room for slurm's explanations */
	int rc;

	log_init("ddplaunch", LOG_INFO);
	if (argc >= 2 && !strcmp(argv[1], "status"))
		return status_main(argc - 1, argv + 1, environ);
	if (opts_init(&o)) {
		log_error("out of memory");
		return 1;
	}
	rc = args_parse(&o, argc, argv, err, sizeof(err));
	if (rc == ARGS_HELP || rc == ARGS_VERSION) {
		fputs(rc == ARGS_HELP ? args_help_text() : "ddplaunch " DDP_VERSION "\n", stdout);
		opts_release(&o);
		return 0;
	}
	if (rc == 0 && o.config)
		rc = jobfile_load(&o, o.config, err, sizeof(err));
	/* torchrun's PET_* variables (Kubeflow), below the flags and the job
	 * file, above Slurm's. */
	if (rc == 0)
		rc = opts_pet_apply(&o, environ, err, sizeof(err));
	/* Under a Slurm step, what the flags and the job file left out. */
	if (rc == 0)
		rc = opts_slurm_apply(&o, environ, err, sizeof(err));
	/* Across nodes, a run id that two different jobs never share. */
	if (rc == 0 && (rc = opts_rdzv_default_run_id(&o)) < 0)
		snprintf(err, sizeof(err), "out of memory");
	/* A dry run may check a job file that leaves the program to the
	 * command line. */
	if (rc == 0 && !(o.dry_run && !o.program))
		rc = opts_check(&o, err, sizeof(err));
	/* A dry run refuses what the real run would refuse; so does a run
	 * with PET_* values, here, where the refusal can name them. */
	if (rc == 0 && (o.dry_run || o.set_by[OPTS_SRC_PET]))
		rc = agent_check(&o, environ, err, sizeof(err));
	if (rc == 0 && o.dry_run) {
		rc = dryrun_print(&o, getenv("PYTHON_EXEC"), stdout) ? 1 : 0;
		opts_release(&o);
		return rc;
	}
	if (rc < 0) {
		opts_pet_explain(&o, environ, err, sizeof(err));
		log_error("%s", err);
		opts_release(&o);
		return 2;
	}
	if (o.pet_used[0])
		log_info("%s", o.pet_used);
	if (o.slurm_used[0])
		log_info("%s", o.slurm_used);
	standalone_run_id(&o);
	/* A closed console must not kill the launcher in the middle of a job. */
	signal(SIGPIPE, SIG_IGN);
	/* Workers, the stores this agent hosts and their clients share it. */
	file_raise_nofile();
	rc = agent_run(&o, environ);
	opts_release(&o);
	return rc;
}
