#include "args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char args_help[] =
    "usage: ddplaunch [options] [--config JOB.ini] [--] PROGRAM [ARGS...]\n"
    "       ddplaunch status [--rdzv_backend=c10d|etcd] --rdzv_endpoint=ENDPOINT\n"
    "                        [--rdzv_id=ID] [--watch[=S]] [--json]   (status --help)\n"
    "\n"
    "Starts nproc_per_node copies of PROGRAM with torchrun's environment (RANK,\n"
    "LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...), hosts their store,\n"
    "supervises them and restarts the group on failure. PROGRAM ending in .py runs\n"
    "under $PYTHON_EXEC (else python3) -u; other programs run directly.\n"
    "Every flag is accepted as --flag_name or --flag-name, with '=VALUE' or ' VALUE'.\n"
    "Unset flags come from $PET_<FLAG> (torchrun): flag > job file > PET_* > Slurm\n"
    "\n"
    "torchrun options:\n"
    "  --nproc_per_node N|gpu|cpu|auto  workers on this node (default 1)\n"
    "  --nnodes N|MIN:MAX       number of nodes (default 1); MIN:MAX needs c10d\n"
    "  --node_rank R            rank of this node (static: required but for node 0;\n"
    "                           c10d: honoured when given)\n"
    "  --master_addr ADDR       address of the store host (default 127.0.0.1);\n"
    "                           static multi-node: node 0's address\n"
    "  --master_port PORT       store port (default 29500, or a free one if taken;\n"
    "                           multi-node: node 0 refuses a taken port)\n"
    "  --standalone             single node, port chosen freely\n"
    "  --rdzv_backend B         static (default: node 0 hosts the store), c10d or\n"
    "                           etcd (an etcd v3 cluster is the store)\n"
    "  --rdzv_endpoint H[:P]    c10d: the store at H:P (default port 29400), hosted\n"
    "                           by the first agent on H's machine, or a ddp-rdzvd;\n"
    "                           etcd: H[:P],H[:P],... (default port 2379)\n"
    "  --rdzv_id, --run_id ID   the job's name on the store (default 'none')\n"
    "  --rdzv_conf K=V,...      join_timeout (600), last_call_timeout (30),\n"
    "                           close_timeout (30), keep_alive_interval (5),\n"
    "                           keep_alive_max_attempt (3), is_host; seconds;\n"
    "                           etcd: read_timeout (5), protocol, cacert, cert,\n"
    "                           key, user (password: DDP_ETCD_PASSWORD)\n"
    "  --max_restarts N         restarts of the worker group, for the whole job\n"
    "                           across nodes (default 0); also the workers each\n"
    "                           node may replace alone (in place: man ddplaunch)\n"
    "  --monitor_interval S     accepted; supervision is event-driven\n"
    "  --log_dir DIR            logs per attempt/rank/stream and summary.json, in\n"
    "                           DIR/RUNID_XXXXXX, new per run; DIR/latest: the newest\n"
    "  -r, --redirects M        send streams to log files only: 0 none, 1 stdout,\n"
    "                           2 stderr, 3 both, or per local rank: 0:1,1:2\n"
    "  -t, --tee M              also copy streams to log files (same syntax)\n"
    "  --local_ranks_filter L   show only these local ranks on the console: 0,2\n"
    "  --role NAME              worker role (default 'default')\n"
    "  --no_python              run PROGRAM directly, even if it ends in .py\n"
    "  -m, --module             PROGRAM is a Python module (python -m)\n"
    "  --local_addr ADDR        this node's address for the other nodes (default:\n"
    "                           the interface that reaches the store)\n"
    "  --start_method M         accepted (spawn, fork, forkserver)\n"
    "\n"
    "torch.distributed.launch compatibility:\n"
    "  --pass_local_rank[=dash] pass --local_rank=N to each worker (legacy scripts),\n"
    "                           or --local-rank=N (torch 2.x's spelling) with =dash\n"
    "  --use_env[=false]        LOCAL_RANK only (the default); =false passes\n"
    "                           --local_rank=N too, as torch.distributed.launch did\n"
    "\n"
    "ddplaunch options:\n"
    "  --config JOB.ini         read options, program and env from an INI job file;\n"
    "                           flags on the command line override it\n"
    "  --strict_port            fail if --master_port is taken instead of moving\n"
    "  --rdzv_token T           multi-node: the job's secret; agents prove it to the\n"
    "                           store (never sent, never printed); better given as\n"
    "                           $DDP_RDZV_TOKEN or rdzv_token in the job file\n"
    "  --grace_period S         seconds from the stop signal to SIGKILL (default 30;\n"
    "                           torchrun's --shutdown_timeout)\n"
    "  --signals LIST           signals passed on to the workers, then the job stops\n"
    "                           (default TERM,INT,HUP,QUIT,USR1,USR2; torchrun's\n"
    "                           --signals_to_handle)\n"
    "  --forward_signals LIST   signals only passed on: the job goes on, its status\n"
    "                           is the workers' (default USR1,USR2; none: stop)\n"
    "  --backoff S[:MAX]        delay before a restart, doubling up to MAX (default 0)\n"
    "  --hang_timeout S|auto|off  how long a worker may make no progress (not entering\n"
    "                           or not leaving a collective) before every node names\n"
    "                           it and it is cut out in place; auto (default): learned\n"
    "                           from the job, max(0.5 s, 4 x p99, 2 x longest) of its\n"
    "                           recent waits after 20 of them; S >= 0.5 fixes it\n"
    "  --prefix FMT             output line prefix, %r rank, %l local rank\n"
    "                           (default '[rank %r]: ')\n"
    "  --no_prefix              print worker output unprefixed\n"
    "  --dry_run                print the resolved job and where each value came from\n"
    "                           (flag, job file, PET_*, slurm); start nothing\n"
    "  --slurm_port_range LO-HI where a Slurm job's port comes from (29500-29999)\n"
    "  --no_slurm               take nothing from Slurm (also DDPLAUNCH_SLURM=0)\n"
    "  --metrics_port [ADDR:]P  serve /metrics for Prometheus on port P (0: a free\n"
    "                           port, printed; ADDR: one literal address, as\n"
    "                           127.0.0.1 or [::1], else all); off by default\n"
    "  -h, --help               this text;  --version  the version\n"
    "\n"
    "Across nodes, one ddplaunch per node. Static (node 0 hosts the store):\n"
    "  ddplaunch --nnodes=2 --node_rank=0 --master_addr=10.0.0.1 --master_port=29500 "
    "train.py\n"
    "  ddplaunch --nnodes=2 --node_rank=1 --master_addr=10.0.0.1 --master_port=29500 "
    "train.py\n"
    "Dynamic (the same line everywhere; the agent on 10.0.0.1 hosts the store):\n"
    "  DDP_RDZV_TOKEN=SECRET ddplaunch --nnodes=2:4 --rdzv_backend=c10d \\\n"
    "      --rdzv_endpoint=10.0.0.1:29400 --rdzv_id=job42 train.py\n"
    "A dead or departed node's peers re-form at once without a restart; a joining\n"
    "node enters the next round; --max_restarts counts for the whole job.\n"
    "\n"
    "Under Slurm (srun with one task per node: srun --ntasks-per-node=1 ddplaunch\n"
    "...), what the flags and the job file leave out comes from the step: --nnodes,\n"
    "--node_rank, --master_addr (the first host, resolved), --master_port (from the\n"
    "job id, in --slurm_port_range) and --rdzv_id (slurm-JOB.STEP); one line says\n"
    "what was taken. More than one task per node is refused (exit 2), naming the\n"
    "srun line to use.\n"
    "\n"
    "Exit status: 0 when every worker succeeded, else the first failed worker's\n"
    "code (128+N for a signal); 128+N when ddplaunch itself got signal N.\n"
    "See ddplaunch(1).\n";

const char *args_help_text(void)
{
	return args_help;
}

/* Takes the rest of argv as the program and its arguments. */
static int args_program(struct launch_opts *o, int argc, char *const argv[], int i)
{
	opts_strv_clear(&o->args);
	free(o->program);
	o->program = strdup(argv[i]);
	if (!o->program)
		return -ENOMEM;
	o->program_from_cli = true;
	for (i++; i < argc; i++)
		if (opts_strv_push(&o->args, argv[i]))
			return -ENOMEM;
	return 0;
}

/* One option at argv[*i] (and its value, advancing *i past a separate one). */
static int args_option(struct launch_opts *o, int argc, char *const argv[], int *i, char *err,
		       size_t errlen)
{
	struct settings_flag f;

	if (settings_cli_take(&opts_settings, SETTINGS_CLI_SHORT, argc, argv, i, &f, err, errlen))
		return -EINVAL;
	return opts_set(o, opts_settings.defs[f.index].name, f.value, OPTS_SRC_CLI, err, errlen);
}

int args_parse(struct launch_opts *o, int argc, char *const argv[], char *err, size_t errlen)
{
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		int rc;

		if (!strcmp(arg, "--"))
			return i + 1 < argc ? args_program(o, argc, argv, i + 1) : 0;
		if (!strcmp(arg, "-h") || !strcmp(arg, "--help"))
			return ARGS_HELP;
		if (!strcmp(arg, "--version"))
			return ARGS_VERSION;
		if (arg[0] != '-' || arg[1] == '\0')
			return args_program(o, argc, argv, i);
		rc = args_option(o, argc, argv, &i, err, errlen);
		if (rc < 0)
			return rc;
	}
	return ARGS_OK;
}
