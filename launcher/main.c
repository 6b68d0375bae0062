/* ddplaunch: parse the command line and the job file, then run the agent. */
#include "agent.h"
#include "args.h"
#include "dryrun.h"
#include "jobfile.h"
#include "opts.h"

#include <log.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

int main(int argc, char **argv)
{
	struct launch_opts o;
	char err[OPTS_ERR_LEN] = "";
	int rc;

	log_init("ddplaunch", LOG_INFO);
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
	/* A dry run may check a job file that leaves the program to the
	 * command line. */
	if (rc == 0 && !(o.dry_run && !o.program))
		rc = opts_check(&o, err, sizeof(err));
	if (rc == 0 && o.dry_run) {
		rc = dryrun_print(&o, getenv("PYTHON_EXEC"), stdout) ? 1 : 0;
		opts_release(&o);
		return rc;
	}
	if (rc < 0) {
		log_error("%s", err);
		opts_release(&o);
		return 2;
	}
	/* A closed console must not kill the launcher in the middle of a job. */
	signal(SIGPIPE, SIG_IGN);
	rc = agent_run(&o, environ);
	opts_release(&o);
	return rc;
}
