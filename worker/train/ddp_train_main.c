/*
 * ddp_train_main.c - ddp-train: parse the settings, run the training job.
 *
 *   ddplaunch --nproc_per_node=2 ddp-train --config configs/digits.ini
 *
 * Run without a launcher (no RANK / WORLD_SIZE in the environment), it trains
 * as a single process.
 */
#include "config.h"
#include "exit_status.h"
#include "log.h"
#include "trainer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

static char main_log_name[64];

int main(int argc, char **argv)
{
	struct train_config cfg;
	struct trainer t;
	char err[1024] = "";
	const char *rank = getenv("RANK");
	bool help, permanent;
	int ret;

	if (rank && atoi(rank) != 0)
		snprintf(main_log_name, sizeof(main_log_name), "ddp-train[rank %d]", atoi(rank));
	else
		snprintf(main_log_name, sizeof(main_log_name), "ddp-train");
	log_init(main_log_name, LOG_INFO);
	config_defaults(&cfg);
	if (config_parse_args(&cfg, argc - 1, argv + 1, &help, err, sizeof(err)) < 0 ||
	    (!help && config_validate(&cfg, err, sizeof(err)) < 0)) {
		log_error("%s", err);
		return 2;
	}
	if (help) {
		config_usage("ddp-train", stdout);
		return 0;
	}
	ret = trainer_init(&t, &cfg);
	/* Checkpoints it may not replace, or a failure every restart would
	 * meet again: the launcher is told not to restart. */
	permanent = ret == -EEXIST || ret == NUMERICS_REFUSED;
	if (ret == 0)
		ret = trainer_run(&t);
	trainer_release(&t);
	if (ret < 0 && (permanent || exit_status_permanent_errno(ret)))
		return DDP_EXIT_PERMANENT;
	return ret < 0 ? 1 : 0;
}
