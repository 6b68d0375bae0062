"""ddplaunch under a real Slurm (suite multinode): `srun ddplaunch
--nproc_per_node=2 PROGRAM` with nothing else, on the two-node cluster of
slurm_cluster.py (n1, n2). One meson test per group:

  Launch  shell workers: one node (srun and a batch script), two nodes, the
          one line, --dry_run, flags over Slurm's values, --no_slurm and
          DDPLAUNCH_SLURM=0, more than one task per node (refused, exit 2), a
          batch script of two nodes (refused; the srun line it names runs), a
          worker failing and an agent killed on one node (the step ends at
          once), a failing worker with --max_restarts (restarts, succeeds)
  Torch   PyTorch gloo jobs across the two nodes, and a restart, with the
          torch of this interpreter (with_torch.sh runs it with 1.13 or 2.x)
  Train   ddp-train on 2 nodes x 2 ranks equals 1 node x 4 ranks; scancel of
          a running job ends everything and leaves nothing in /dev/shm

Every srun is bounded in time; the cluster and everything it ran end with the
test. Each node is a network namespace of its own (its own address and
loopback), so a worker of n2 given any MASTER_ADDR but n1's address fails.
/dev/shm is the host's (the nodes share it): what libddp leaves there is
named ddp-TAG-*, TAG the DDP_JOB_TAG of the agent, which the workers print.

    DDPLAUNCH=build/launcher/ddplaunch python3 test_slurm_launch.py Launch

Exits 77 (skipped) only where the daemons cannot run at all.
"""
import glob
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "common"))
from slurm_cluster import SlurmCluster  # noqa: E402
from waiting import wait_for  # noqa: E402

DDPLAUNCH = os.environ.get("DDPLAUNCH", "ddplaunch")
DDP_TRAIN = os.environ.get("DDP_TRAIN", "ddp-train")
GLOO = os.environ.get("DDP_GLOO", os.path.join(HERE, "..", "launcher", "ddp_gloo.py"))
TRAIN_IT = os.environ.get("TRAIN_IT", os.path.join(HERE, "..", "worker", "train", "train_it.py"))
CLUSTER = None
RUN_TIMEOUT = 120

# A shell worker that prints what it was given.
SHOW_ENV = ("echo env RANK=$RANK WORLD_SIZE=$WORLD_SIZE GROUP_RANK=$GROUP_RANK "
            "LOCAL_RANK=$LOCAL_RANK MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT "
            "RUN_ID=$TORCHELASTIC_RUN_ID RESTART=$TORCHELASTIC_RESTART_COUNT "
            "TAG=$DDP_JOB_TAG")


def setUpModule():
    global CLUSTER
    CLUSTER = SlurmCluster(nodes=2).start()


def tearDownModule():
    if CLUSTER:
        CLUSTER.stop()


def expected_port(job, step=0, lo=29500, hi=29999):
    return lo + (4 * job + step) % (hi - lo + 1)


def worker_envs(out):
    """The SHOW_ENV lines of srun -l output as {rank: {name: value}}."""
    ranks = {}
    for m in re.finditer(r"^\s*\d+: \[rank (\d+)\]: env (.*)$", out, re.M):
        ranks[int(m.group(1))] = dict(kv.split("=", 1) for kv in m.group(2).split())
    return ranks


def task_lines(out, task):
    """Lines of srun -l output from task `task`, label stripped."""
    return [m.group(1) for m in re.finditer(r"^\s*%d: (.*)$" % task, out, re.M)]


def job_of(out):
    m = re.search(r"from slurm job (\d+)\b", out)
    assert m, "no 'from slurm' line in:\n" + out
    return int(m.group(1))


def used_line(job, rank):
    """The line a node of a two-node step of `job` prints."""
    return ("ddplaunch: from slurm job %d step 0 (2 nodes: n[1-2]): --nnodes=2 --node_rank=%d "
            "(n%d) --master_addr=%s (n1) --master_port=%d --rdzv_id=slurm-%d.0"
            % (job, rank, rank + 1, CLUSTER.addrs[0], expected_port(job), job))


def processes_with(marker):
    """PIDs of processes whose command line contains marker."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def environ_of(pid):
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            return dict(kv.split("=", 1) for kv in f.read().decode(errors="replace").split("\0")
                        if "=" in kv)
    except OSError:
        return {}


class SlurmTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ddp-slurm-launch-")
        self.addCleanup(subprocess.run, ["rm", "-rf", self.tmp])

    def srun(self, nodes, ddplaunch_args, tpn=1, srun_args=(), env=None, timeout=RUN_TIMEOUT):
        """srun -N NODES --ntasks-per-node=TPN -l [SRUN_ARGS] ddplaunch ARGS."""
        args = ["-N%d" % nodes, "--ntasks-per-node=%d" % tpn, "-l"] + list(srun_args)
        return CLUSTER.srun(args + [DDPLAUNCH] + list(ddplaunch_args), timeout=timeout,
                            env=env, check=False)

    def assertLeftNothing(self, tags):
        """No /dev/shm names of these agents' tags."""
        self.assertTrue(tags)
        for tag in tags:
            self.assertEqual(glob.glob("/dev/shm/ddp-%s-*" % tag), [], tag)


class Launch(SlurmTest):
    def test_one_node(self):
        """srun -N1: every value from Slurm but the address; the store stays
        on loopback, at the job's port unless another process holds it."""
        r = self.srun(1, ["--nproc_per_node=2", "sh", "-c", SHOW_ENV], srun_args=["-w", "n2"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        job = job_of(r.stderr)
        port = expected_port(job)
        self.assertIn("0: ddplaunch: from slurm job %d step 0 (1 node: n2): --nnodes=1 "
                      "--master_port=%d --rdzv_id=slurm-%d.0\n" % (job, port, job), r.stderr)
        ranks = worker_envs(r.stdout)
        self.assertEqual(sorted(ranks), [0, 1])
        for rank, e in ranks.items():
            self.assertEqual((e["WORLD_SIZE"], e["GROUP_RANK"], e["RUN_ID"], e["MASTER_ADDR"]),
                             ("2", "0", "slurm-%d.0" % job, "127.0.0.1"))
            if e["MASTER_PORT"] != str(port):  # taken: ddplaunch moved, saying so
                self.assertIn("port %d is in use" % port, r.stderr)

    def test_one_node_batch_script(self):
        status, out = CLUSTER.sbatch(["%s --nproc_per_node=2 sh -c '%s' 2>&1" % (DDPLAUNCH,
                                                                                 SHOW_ENV)],
                                     ["-N1", "-w", "n1"], timeout=RUN_TIMEOUT)
        self.assertEqual(status, 0, out)
        job = job_of(out)
        self.assertIn("ddplaunch: from slurm job %d's batch script (1 node: n1): --nnodes=1 "
                      "--master_port=%d --rdzv_id=slurm-%d.batch\n"
                      % (job, expected_port(job), job), out)
        self.assertEqual(len(re.findall(r"^\[rank \d\]: env .*RUN_ID=slurm-%d.batch" % job, out,
                                        re.M)), 2, out)

    def test_two_nodes(self):
        """srun -N2: 4 ranks, node n1 is group rank 0 and hosts the store at
        its address and the job's port; one line per node says so. Every
        worker, n2's too, gets n1's own address as MASTER_ADDR (127.0.0.1
        would be n2's loopback)."""
        t = time.monotonic()
        r = self.srun(2, ["--nproc_per_node=2", "sh", "-c", SHOW_ENV])
        elapsed = time.monotonic() - t
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        job = job_of(r.stderr)
        for task in (0, 1):
            lines = task_lines(r.stderr, task)
            self.assertEqual([line for line in lines if "from slurm" in line],
                             [used_line(job, task)])
        self.assertIn("0: ddplaunch: hosting the rendezvous store at %s:%d for run id "
                      "'slurm-%d.0'" % (CLUSTER.addrs[0], expected_port(job), job), r.stderr)
        ranks = worker_envs(r.stdout)
        self.assertEqual(sorted(ranks), [0, 1, 2, 3])
        for rank, e in ranks.items():
            self.assertEqual((e["WORLD_SIZE"], e["GROUP_RANK"], e["LOCAL_RANK"], e["RUN_ID"]),
                             ("4", str(rank // 2), str(rank % 2), "slurm-%d.0" % job))
        # both agents name the workers' store: n1's address, one port
        masters = re.findall(r"^\d: ddplaunch: round 1 of run id 'slurm-%d\.0': node \d of 2 "
                             r"\(ranks \d to \d of 4\), master (\S+)$" % job, r.stderr, re.M)
        self.assertEqual(len(masters), 2, r.stderr)
        self.assertEqual({m.rsplit(":", 1)[0] for m in masters}, {CLUSTER.addrs[0]}, r.stderr)
        self.assertEqual({"%s:%s" % (e["MASTER_ADDR"], e["MASTER_PORT"]) for e in ranks.values()},
                         set(masters))
        # the workers of node 1 ran on n2 (their output came from task 1)
        self.assertEqual(len(re.findall(r"^1: \[rank [23]\]: env ", r.stdout, re.M)), 2)
        print("srun -N2 ddplaunch --nproc_per_node=2: %.2f s" % elapsed, file=sys.stderr)

    def test_dry_run(self):
        r = self.srun(2, ["--dry_run", "--nproc_per_node=2", "--slurm_port_range=40000-40009",
                          "prog"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        job = job_of(r.stdout)
        port = expected_port(job, 0, 40000, 40009)
        for task in (0, 1):
            got = dict(line.split(" = ", 1) for line in task_lines(r.stdout, task)
                       if " = " in line)
            self.assertEqual(got["nnodes"], "2:2")
            self.assertEqual(got["node_rank"], str(task))
            self.assertEqual(got["master_addr"], CLUSTER.addrs[0])
            self.assertEqual(got["master_port"], str(port))
            self.assertEqual(got["rdzv_id"], "slurm-%d.0" % job)
            self.assertEqual(got["slurm_port_range"], "40000-40009")
            self.assertTrue(got["slurm"].startswith(
                "from slurm job %d step 0 (2 nodes: n[1-2]): --nnodes=2 --node_rank=%d (n%d) "
                "--master_addr=%s (n1) --master_port=%d " % (job, task, task + 1,
                                                            CLUSTER.addrs[0], port)))
            self.assertEqual(got["rdzv_store"], "%s:%d (hosted by node 0)"
                             % (CLUSTER.addrs[0], port))
            self.assertEqual(got["rdzv_lost_node"], "ends the job when fewer than 2 nodes are "
                                                    "left (a slurm step does not restart it)")
        self.assertNotIn("ddplaunch: from slurm", r.stderr)  # the dry run says it once

    def test_flags_win(self):
        """A flag replaces its own value only: --rdzv_id given, the rest from
        Slurm; then --master_port too (a dry run: shown, not bound)."""
        r = self.srun(2, ["--nproc_per_node=1", "--rdzv_id=mine", "sh", "-c", SHOW_ENV])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(" --master_port=%d; kept as given: --rdzv_id\n"
                      % expected_port(job_of(r.stderr)), r.stderr)
        ranks = worker_envs(r.stdout)
        self.assertEqual(sorted(ranks), [0, 1])
        self.assertEqual({e["RUN_ID"] for e in ranks.values()}, {"mine"})
        r = self.srun(2, ["--dry_run", "--rdzv_id=mine", "--master_port=31234", "prog"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for task in (0, 1):
            got = dict(line.split(" = ", 1) for line in task_lines(r.stdout, task)
                       if " = " in line)
            self.assertEqual((got["rdzv_id"], got["master_port"], got["node_rank"]),
                             ("mine", "31234", str(task)))
            self.assertTrue(got["slurm"].endswith("; kept as given: --master_port, --rdzv_id"),
                            got["slurm"])

    def test_c10d_endpoint(self):
        """--rdzv_backend=c10d without an endpoint: the master's address and
        the job's port. n1's agent, whose interface has that address, hosts
        the store; every worker gets n1's address as MASTER_ADDR."""
        r = self.srun(2, ["--rdzv_backend=c10d", "--nproc_per_node=2", "sh", "-c", SHOW_ENV])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        job = job_of(r.stderr)
        endpoint = "%s:%d" % (CLUSTER.addrs[0], expected_port(job))
        self.assertIn("0: ddplaunch: from slurm job %d step 0 (2 nodes: n[1-2]): --nnodes=2 "
                      "--node_rank=0 (n1) --rdzv_endpoint=%s (n1) --rdzv_id=slurm-%d.0\n"
                      % (job, endpoint, job), r.stderr)
        self.assertRegex(r.stderr, r"0: ddplaunch: hosting the rendezvous store at %s "
                         % re.escape(endpoint))
        ranks = worker_envs(r.stdout)
        self.assertEqual(sorted(ranks), [0, 1, 2, 3])
        self.assertEqual({e["GROUP_RANK"] for r, e in ranks.items() if r >= 2}, {"1"})
        self.assertEqual({e["MASTER_ADDR"] for e in ranks.values()}, {CLUSTER.addrs[0]})

    def test_slurm_off(self):
        """--no_slurm and DDPLAUNCH_SLURM=0: each node runs a job of its own."""
        for flags, env in (["--no_slurm"], None), ([], {"DDPLAUNCH_SLURM": "0"}):
            with self.subTest(flags=flags, env=env):
                r = self.srun(2, flags + ["--master_port=0", "--nproc_per_node=1", "sh", "-c",
                                          SHOW_ENV], env=env)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                self.assertNotIn("from slurm", r.stderr)
                envs = re.findall(r"^\d+: \[rank 0\]: env RANK=0 WORLD_SIZE=1 .*RUN_ID=none ",
                                  r.stdout, re.M)
                self.assertEqual(len(envs), 2, r.stdout)

    def test_two_tasks_per_node_refused(self):
        """srun --ntasks-per-node=2: no worker starts; every task explains
        and exits 2."""
        r = self.srun(2, ["--nproc_per_node=2", "sh", "-c", SHOW_ENV], tpn=2)
        self.assertEqual(worker_envs(r.stdout), {})
        why = ("ddplaunch: slurm started 2 tasks on a node (SLURM_STEP_TASKS_PER_NODE=2(x2)): "
               "each would run its own ddplaunch with its own workers; start one per node: "
               "srun --nodes=2 --ntasks=2 --ntasks-per-node=1 ddplaunch ... (inside sbatch, "
               "srun takes --ntasks from the job unless it is given) (--no_slurm or "
               "DDPLAUNCH_SLURM=0 leaves slurm out)")
        for task in range(4):
            self.assertEqual(task_lines(r.stderr, task), [why])
        self.assertIn("Exited with exit code 2", r.stderr)

    def test_batch_script(self):
        """The README's batch script: sbatch --nodes=2 --ntasks-per-node=1,
        then srun ddplaunch. ddplaunch run in the script itself is refused
        (it would be one node)."""
        status, out = CLUSTER.sbatch(
            ["%s --nproc_per_node=2 sh -c 'echo never' 2>&1; echo direct=$?" % DDPLAUNCH,
             "srun %s --nproc_per_node=2 sh -c '%s'" % (DDPLAUNCH, SHOW_ENV)],
            ["--nodes=2", "--ntasks-per-node=1"], timeout=RUN_TIMEOUT)
        self.assertEqual(status, 0, out)
        self.assertIn("direct=2\n", out)
        self.assertIn("this is the batch script or salloc shell of slurm job", out)
        self.assertNotIn("never", out)
        self.assertEqual(len(re.findall(r"^\[rank \d\]: env RANK=\d WORLD_SIZE=4 ", out, re.M)),
                         4, out)

    def fail_when_all_run(self, failing, others):
        """A worker script: the rank for which `failing` holds exits 3 once
        the 3 others have started and run `others`. They say so through a
        FIFO that the failing rank holds open for writing too (so that it
        never reads an end of file). A stop signal that reaches a worker
        group before all its workers exist is not the case under test."""
        fifo = os.path.join(self.tmp, "up")
        if not os.path.exists(fifo):
            os.mkfifo(fifo)
        return ('if %s; then exec 3<>%s; head -n 3 <&3 >/dev/null; exit 3; fi; '
                'echo up > %s; %s' % (failing, fifo, fifo, others))

    def test_failed_worker_ends_the_step(self):
        """Rank 3 (on n2) fails, no restarts left: n1's agent stops its
        workers, which would sleep for minutes, and the step ends at once."""
        marker = "ddp-slurm-sleeper-%s" % uuid.uuid4().hex
        t = time.monotonic()
        r = self.srun(2, ["--nproc_per_node=2", "bash", "-c", self.fail_when_all_run(
            "[ $RANK = 3 ]", "exec -a %s sleep 300" % marker)], timeout=60)
        elapsed = time.monotonic() - t
        self.assertLess(elapsed, 20, r.stdout + r.stderr)
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertIn("1: ddplaunch: rank 3 (local rank 1) exited with code 3", r.stderr)
        self.assertRegex(r.stderr, r"0: ddplaunch: workers on node '[^']+' failed and the job "
                                   r"of run id 'slurm-\d+\.0' has no restarts left")
        self.assertEqual(processes_with(marker), [])

    def test_killed_agent_ends_the_step(self):
        """kill -9 of n2's ddplaunch (a node lost), restarts left: n1's agent
        ends the job at once (a Slurm task never comes back) instead of
        waiting for it until the join deadline (600 s). The tasks' stderr
        goes to files (srun --error): srun stops reading the tasks' output
        once a task was killed by a signal, and n1's last line may come
        after that."""
        marker = "ddp-slurm-lost-%s" % uuid.uuid4().hex
        errs = os.path.join(self.tmp, "err-%t")
        p = subprocess.Popen(
            CLUSTER.cmd("srun") + ["-N2", "--ntasks-per-node=1", "-l", "--error=" + errs,
                                   DDPLAUNCH, "--nproc_per_node=1", "--max_restarts=2", "bash",
                                   "-c", "echo started; exec -a %s sleep 300" % marker],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=CLUSTER.env(),
            start_new_session=True)
        try:
            self.assertIn("started", p.stdout.readline())
            self.assertIn("started", p.stdout.readline())
            agents = [pid for pid in processes_with(marker)
                      if os.path.basename(os.readlink("/proc/%d/exe" % pid)) == "ddplaunch"]
            node1 = [pid for pid in agents if environ_of(pid).get("SLURM_NODEID") == "1"]
            self.assertEqual(len(node1), 1, agents)
            t = time.monotonic()
            os.kill(node1[0], signal.SIGKILL)
            out, err = p.communicate(timeout=30)
            elapsed = time.monotonic() - t
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
        # n1's ddplaunch exited by itself (1), it was not killed by srun
        self.assertIn("srun: error: n1: task 0: Exited with exit code 1", err)
        with open(errs.replace("%t", "0")) as f:
            self.assertRegex(f.read(), r"\n0: ddplaunch: node '[^']+' is gone and the 1 node "
                                       r"left is fewer than --nnodes' 2; under slurm a lost node "
                                       r"does not come back, so the job of run id 'slurm-\d+\.0' "
                                       r"ends")
        self.assertLess(elapsed, 10, err)
        wait_for(lambda: not processes_with(marker), 10, "the sleepers to end")
        print("node lost -> step over: %.2f s" % elapsed, file=sys.stderr)

    def test_kill_on_bad_exit(self):
        """srun --kill-on-bad-exit=1 (the README's line): n2's ddplaunch
        refuses to start (exit 2); n1's, which would wait for it until the
        join deadline, is ended by srun at once."""
        marker = "ddp-slurm-alone-%s" % uuid.uuid4().hex
        t = time.monotonic()
        r = CLUSTER.srun(["-N2", "--ntasks-per-node=1", "-l", "--kill-on-bad-exit=1", "bash",
                          "-c", '[ "$SLURM_NODEID" = 1 ] && exec "$0" --bogus; exec "$0" '
                          '--nproc_per_node=1 bash -c "exec -a %s sleep 300"' % marker,
                          DDPLAUNCH], timeout=60, check=False)
        elapsed = time.monotonic() - t
        # srun relays n2's line "ddplaunch: unknown option '--bogus'" most of
        # the time, but with --kill-on-bad-exit it may end the step before the
        # line is forwarded (seen 1 run in 6); its own line about n2 stays.
        self.assertIn("n2: task 1: Exited with exit code 2", r.stderr)
        self.assertNotEqual(r.returncode, 0)
        self.assertLess(elapsed, 20, r.stderr)
        wait_for(lambda: not processes_with(marker), 10, "n1's sleeper to end")

    def test_restart_after_a_failure(self):
        """--max_restarts=1: rank 3 fails in attempt 0, the whole job
        restarts once and succeeds."""
        # In attempt 0 the others are still running when rank 3 fails (as
        # ranks waiting in a collective would be): a node whose workers had
        # all finished could not be restarted.
        r = self.srun(2, ["--nproc_per_node=2", "--max_restarts=1", "bash", "-c",
                          SHOW_ENV + "; [ $TORCHELASTIC_RESTART_COUNT = 0 ] || exit 0; "
                          + self.fail_when_all_run("[ $RANK = 3 ]", "exec sleep 300")])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("(restart 1 of 1)", r.stderr)
        restarted = re.findall(r"^\d: \[rank (\d)\]: env RANK=\1 WORLD_SIZE=4 .* RESTART=1 ",
                               r.stdout, re.M)
        self.assertEqual(sorted(restarted), ["0", "1", "2", "3"], r.stdout)


class Torch(SlurmTest):
    """PyTorch gloo across the two nodes, with this interpreter's torch."""

    ENV = {"PYTHON_EXEC": sys.executable, "OMP_NUM_THREADS": "1"}

    def test_gloo_two_nodes(self):
        r = self.srun(2, ["--nproc_per_node=2", GLOO], env=self.ENV)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        ok = re.findall(r"^\d: \[rank (\d)\]: rank \1 ok world=4 steps=\d+ attempt=0 ", r.stdout,
                        re.M)
        self.assertEqual(sorted(ok), ["0", "1", "2", "3"], r.stdout + r.stderr)

    def test_gloo_restart(self):
        """Rank 3 (on n2) exits after the first all-reduce in attempt 0; the
        job restarts once and every rank succeeds."""
        r = self.srun(2, ["--nproc_per_node=2", "--max_restarts=1", GLOO, "--allreduce_only",
                          "--fail_once_rank=3"], env=self.ENV)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        ok = re.findall(r"^\d: \[rank (\d)\]: rank \1 ok world=4 steps=2 attempt=1 ", r.stdout,
                        re.M)
        self.assertEqual(sorted(ok), ["0", "1", "2", "3"], r.stdout + r.stderr)


class Train(SlurmTest):
    """ddp-train across the two nodes."""

    ENV = {"OPENBLAS_NUM_THREADS": "1", "DDP_TIMEOUT_MS": "60000"}

    @classmethod
    def setUpClass(cls):
        sys.path.insert(0, os.path.dirname(os.path.abspath(TRAIN_IT)))
        import train_it  # numpy, and the equivalence check's helpers
        cls.train_it = train_it

    def train(self, nodes, nproc, ckdir, extra=(), **kw):
        """srun ddplaunch ddp-train on the synthetic set (train_it's
        arguments), through a shell that prints the agent's DDP_JOB_TAG."""
        args = self.train_it.synthetic_args(ckdir, 8) + ["--device", "cpu"] + list(extra)
        return self.srun(nodes, ["--nproc_per_node=%d" % nproc, "--grace_period=5", "sh", "-c",
                                 'echo "job_tag=$DDP_JOB_TAG"; exec "$0" "$@"', DDP_TRAIN]
                         + args, env=self.ENV, **kw)

    def test_two_nodes_equal_one(self):
        """2 nodes x 2 ranks == 1 node x 4 ranks (same world size, same
        batch per rank) after 100 steps, as train_it's equivalence check
        measures it."""
        tio = self.train_it
        one, two = os.path.join(self.tmp, "one"), os.path.join(self.tmp, "two")
        r1 = self.train(1, 4, one)
        self.assertEqual(r1.returncode, 0, r1.stdout[-3000:] + r1.stderr[-3000:])
        r2 = self.train(2, 2, two)
        self.assertEqual(r2.returncode, 0, r2.stdout[-3000:] + r2.stderr[-3000:])
        self.assertIn("--nnodes=2 --node_rank=1 (n2)", r2.stderr)
        ta, ma = tio.read_st(os.path.join(two, "final.safetensors"))
        tb, mb = tio.read_st(os.path.join(one, "final.safetensors"))
        self.assertEqual(set(ta), set(tb))
        self.assertEqual((ma["step"], mb["step"]), ("100", "100"))
        name, rel = tio.max_rel_diff(ta, tb, "optimizer.")
        keys = sorted(k for k in tb if k.startswith("optimizer."))
        flat = [tio.np.concatenate([t[k].ravel().astype(tio.np.float64) for k in keys])
                for t in (ta, tb)]
        mom_rel = float(tio.np.linalg.norm(flat[0] - flat[1]) / tio.np.linalg.norm(flat[1]))
        print("2 nodes x 2 ranks vs 1 node x 4 ranks after 100 steps: max relative difference "
              "%.3g (%s), momentum state %.3g" % (rel, name, mom_rel), file=sys.stderr)
        self.assertLessEqual(rel, 1e-5, name)
        self.assertLessEqual(mom_rel, 1e-5)
        tags = set(re.findall(r"\]: job_tag=(\w+)$", r1.stdout + r2.stdout, re.M))
        self.assertEqual(len(tags), 3, r2.stdout[-2000:])  # one agent, then two
        self.assertLeftNothing(tags)

    @staticmethod
    def job_state(job):
        return subprocess.run(CLUSTER.cmd("scontrol") + ["-o", "show", "job", job],
                              capture_output=True, text=True, env=CLUSTER.env()).stdout

    def test_scancel(self):
        """scancel of a running two-node job: the agents, guards and
        workers all end, the job is CANCELLED, nothing is left in /dev/shm."""
        ckdir = os.path.join(self.tmp, "cancel-%s" % uuid.uuid4().hex)
        metrics = os.path.join(self.tmp, "metrics.jsonl")
        args = (self.train_it.synthetic_args(ckdir, 8, steps=10 ** 7)
                + ["--device", "cpu", "--log_every", "1", "--metrics", metrics])
        p = subprocess.Popen(
            CLUSTER.cmd("srun") + ["-N2", "--ntasks-per-node=1", "-l", DDPLAUNCH,
                                   "--nproc_per_node=2", DDP_TRAIN] + args,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=CLUSTER.env(self.ENV),
            start_new_session=True)
        try:
            wait_for(lambda: os.path.exists(metrics) and os.path.getsize(metrics) > 0, 60,
                     "the first step's metrics")
            procs = processes_with(ckdir)
            workers = [pid for pid in procs if os.path.basename(
                os.readlink("/proc/%d/exe" % pid)) == "ddp-train"]
            self.assertEqual(len(workers), 4, procs)
            envs = [environ_of(pid) for pid in workers]
            job = envs[0]["SLURM_JOB_ID"]
            tags = {e["DDP_JOB_TAG"] for e in envs}
            self.assertEqual(len(tags), 2)
            t = time.monotonic()
            subprocess.run(CLUSTER.cmd("scancel") + [job], check=True, env=CLUSTER.env(),
                           timeout=30)
            out, err = p.communicate(timeout=60)
            wait_for(lambda: not processes_with(ckdir), 30, "every process of the job to end")
            elapsed = time.monotonic() - t
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
        self.assertLeftNothing(tags)
        if CLUSTER.cgroup:  # the agents ended on SIGTERM: their cgroups are gone
            self.assertEqual(glob.glob(os.path.join(CLUSTER.cgroup, "ddplaunch-*")), [])
        # Slurm itself is done with the job once its nodes have reported
        # back (COMPLETING until then).
        wait_for(lambda: "JobState=CANCELLED " in self.job_state(job), 30,
                 "job %s to be CANCELLED (it is %s)" % (job, self.job_state(job)))
        print("scancel -> every process gone: %.2f s" % elapsed, file=sys.stderr)


def main():
    why = SlurmCluster.unavailable()
    if why:
        print("skipped: " + why)
        return 77
    if not os.access(DDPLAUNCH, os.X_OK):
        print("DDPLAUNCH=%s is not a program (build ddplaunch first)" % DDPLAUNCH)
        return 1
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    prog = unittest.main(exit=False, argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
    return 0 if prog.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
