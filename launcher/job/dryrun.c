#include "dryrun.h"
#include "command.h"
#include "opts_pet.h"
#include "opts_rdzv.h"
#include "opts_slurm.h"
#include "signames.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

static void print_streams(FILE *out, const char *name, const struct opts_streams *s)
{
	fprintf(out, "%s = ", name);
	if (s->all >= 0)
		fprintf(out, "%d", s->all);
	for (int i = 0; i < s->n; i++)
		fprintf(out, "%s%d:%d", (i || s->all >= 0) ? "," : "", s->rank[i], s->mask[i]);
	if (s->all < 0 && s->n == 0)
		fprintf(out, "0");
	fputc('\n', out);
}

static void print_launch(const struct launch_opts *o, FILE *out)
{
	fprintf(out, "nproc_per_node = %s\n", o->nproc_spec);
	fprintf(out, "nnodes = %d:%d\n", o->nnodes_min, o->nnodes_max);
	if (o->node_rank >= 0)
		fprintf(out, "node_rank = %d\n", o->node_rank);
	else
		fprintf(out, "node_rank = not given\n");
	fprintf(out, "master_addr = %s\n", o->master_addr);
	if (o->master_port >= 0)
		fprintf(out, "master_port = %d\n", o->master_port);
	else
		fprintf(out, "master_port = %s\n", o->standalone ? "any free" : "29500 if free");
	fprintf(out, "standalone = %s\n", o->standalone ? "true" : "false");
	fprintf(out, "rdzv_backend = %s\n", o->rdzv_backend);
	fprintf(out, "rdzv_id = %s\n", o->rdzv_id);
	fprintf(out, "max_restarts = %d\n", o->max_restarts);
	fprintf(out, "log_dir = %s\n", o->log_dir ? o->log_dir : "");
	print_streams(out, "redirects", &o->redirects);
	print_streams(out, "tee", &o->tee);
	fprintf(out, "local_ranks_filter = %s\n",
		o->local_ranks_filter ? o->local_ranks_filter : "");
	fprintf(out, "role = %s\n", o->role);
	fprintf(out, "strict_port = %s\n", o->strict_port ? "true" : "false");
	if (o->metrics.port < 0)
		fprintf(out, "metrics_port = none\n");
	else
		fprintf(out, "metrics_port = %s%s%s%s%d\n", strchr(o->metrics.addr, ':') ? "[" : "",
			o->metrics.addr, strchr(o->metrics.addr, ':') ? "]" : "",
			o->metrics.addr[0] ? ":" : "", o->metrics.port);
	fprintf(out, "grace_period = %g\n", o->grace_period);
	fprintf(out, "signals = ");
	for (int i = 0; i < o->nsignals; i++)
		fprintf(out, "%s%s", i ? "," : "", signame_name(o->signals[i]) + 3);
	fprintf(out, "\nforward_signals = ");
	for (int i = 0; i < o->nforward; i++)
		fprintf(out, "%s%s", i ? "," : "", signame_name(o->forward_signals[i]) + 3);
	fprintf(out, "%s\nbackoff = %g:%g\n", o->nforward ? "" : "none", o->backoff_initial,
		o->backoff_max);
	if (o->hang_timeout == OPTS_HANG_AUTO)
		fprintf(out, "hang_timeout = auto\n");
	else if (o->hang_timeout == OPTS_HANG_OFF)
		fprintf(out, "hang_timeout = off\n");
	else
		fprintf(out, "hang_timeout = %g\n", o->hang_timeout);
	fprintf(out, "pass_local_rank = %s\n",
		opts_local_rank_arg(o) ? opts_local_rank_arg(o) : "false");
	fprintf(out, "prefix = %s\n", o->no_prefix ? "" : o->prefix);
}

/* "from = nnodes: PET_NNODES, node_rank: flag, ...; the rest: defaults". */
static void print_sources(const struct launch_opts *o, FILE *out)
{
	static const char *const words[] = {"default", "slurm", "", "job file", "flag"};
	char var[SETTINGS_NAME_MAX + 8];
	int n = 0;

	fprintf(out, "from = ");
	for (size_t i = 0; i < opts_settings.n; i++) {
		enum opts_source s = opts_source_of(o, i);

		if (s == OPTS_SRC_DEFAULT)
			continue;
		opts_pet_name(o, i, var, sizeof(var));
		fprintf(out, "%s%s: %s", n++ ? ", " : "", opts_settings.defs[i].name,
			s == OPTS_SRC_PET ? var : words[s]);
	}
	fprintf(out, "%s\n", n ? "; the rest: defaults" : "defaults only");
	fprintf(out, "pet = %s\n", o->pet_used[0] ? o->pet_used : "no PET_* variable set");
}

int dryrun_print(const struct launch_opts *o, const char *python, FILE *out)
{
	char **argv, err[OPTS_ERR_LEN];
	struct opts_rdzv r;
	size_t argc;

	print_launch(o, out);
	print_sources(o, out);
	opts_slurm_print(o, environ, out);
	/* agent_check resolved it already: a dry run refuses what a run does. */
	if (opts_rdzv_resolve(o, getenv(OPTS_RDZV_TOKEN_ENV), &r, err, sizeof(err)) == 0)
		opts_rdzv_print(&r, out);
	if (o->program) {
		if (command_build(o, python, &argv, &argc))
			return -ENOMEM;
		fprintf(out, "command =");
		for (size_t i = 0; i < argc; i++)
			fprintf(out, " %s", argv[i]);
		fputc('\n', out);
		free(argv);
	}
	for (size_t i = 0; i < o->env.n; i++)
		fprintf(out, "env = %s\n", o->env.v[i]);
	return 0;
}
