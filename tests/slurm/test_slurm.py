"""Slurm tests (suite multinode): a real two-node Slurm cluster on this host
(slurm_cluster.py), the environment its steps give, and launcher/slurm's
reader (tests/launcher/slurm/slurm_probe) run under srun on both nodes.

Exits 77 (skipped) only where the daemons cannot run at all: not root, the
packages missing, or no PID, mount, UTS and network namespaces.

    SLURM_PROBE=build/tests/launcher/slurm/slurm_probe python3 test_slurm.py
"""
import os
import re
import signal
import subprocess
import sys
import time
import unittest
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from slurm_cluster import SlurmCluster  # noqa: E402

PROBE = os.environ.get("SLURM_PROBE", "slurm_probe")
ENOTSUP = 95
CLUSTER = None


def setUpModule():
    global CLUSTER
    CLUSTER = SlurmCluster(nodes=2).start()
    t = CLUSTER.times
    print("slurm cluster: namespaces made in %.3f s, munged ready in %.3f s, slurmctld "
          "listening at %.3f s, answering sinfo at %.3f s, both nodes idle at %.3f s"
          % (t["namespaces_s"], t["munged_s"], t["ctld_listens_s"], t["ctld_answers_s"],
             t["nodes_idle_s"]), file=sys.stderr)


def tearDownModule():
    if CLUSTER:
        CLUSTER.stop()


def by_task(out):
    """srun -l output as {task: {name: value}} (for name=value lines)."""
    tasks = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\d+): ([A-Za-z_][A-Za-z0-9_]*)=(.*)$", line)
        if m:
            tasks.setdefault(int(m.group(1)), {})[m.group(2)] = m.group(3)
    return tasks


def expected_port(job, step=0, lo=29500, hi=29999):
    return lo + (4 * job + step) % (hi - lo + 1)


class Cluster(unittest.TestCase):
    def test_step_environment(self):
        """srun -N2 --ntasks-per-node=1: one task per node, node ids 0 and 1,
        the compressed step node list."""
        t = time.monotonic()
        out = CLUSTER.srun(["-N2", "--ntasks-per-node=1", "-l", "env"]).stdout
        elapsed = time.monotonic() - t
        tasks = by_task(out)
        self.assertEqual(sorted(tasks), [0, 1])
        self.assertEqual([tasks[i]["SLURM_NODEID"] for i in (0, 1)], ["0", "1"])
        self.assertEqual([tasks[i]["SLURMD_NODENAME"] for i in (0, 1)], ["n1", "n2"])
        for i in (0, 1):
            self.assertEqual(tasks[i]["SLURM_STEP_NODELIST"], "n[1-2]")
            self.assertEqual(tasks[i]["SLURM_NNODES"], "2")
            self.assertEqual(tasks[i]["SLURM_STEP_TASKS_PER_NODE"], "1(x2)")
            self.assertEqual(tasks[i]["SLURM_PROCID"], str(i))
        print("srun -N2 env: %.3f s" % elapsed, file=sys.stderr)

    def test_nodes_resolve_in_their_namespace(self):
        """The nodes' tasks resolve n1 and n2 to the nodes' addresses."""
        out = CLUSTER.srun(["-N1", "getent", "hosts", "n1", "n2"]).stdout.split()
        self.assertEqual(out, [CLUSTER.addrs[0], "n1", CLUSTER.addrs[1], "n2"])

    def test_nodes_are_hosts(self):
        """Each node's tasks run on a host of their own: the node's name as
        hostname, the node's address and no other on an interface, and a
        network namespace (so a loopback) that is neither the other node's
        nor this test's."""
        out = CLUSTER.srun(["-N2", "--ntasks-per-node=1", "-l", "sh", "-c",
                            'echo "host=$(hostname)"; echo "net=$(readlink /proc/self/ns/net)"; '
                            'echo "addrs=$(ip -o -4 addr show scope global | '
                            'cut -d" " -f7 | tr "\\n" " ")"']).stdout
        tasks = by_task(out)
        for i in (0, 1):
            self.assertEqual(tasks[i]["host"], "n%d" % (i + 1), out)
            self.assertEqual(tasks[i]["addrs"].split(), ["%s/24" % CLUSTER.addrs[i]], out)
        nets = {tasks[0]["net"], tasks[1]["net"], os.readlink("/proc/self/ns/net")}
        self.assertEqual(len(nets), 3, out)

    def test_stop_ends_running_steps(self):
        """A step still running when the cluster stops ends with it: nothing
        outlives the cluster's namespace."""
        c = SlurmCluster(nodes=2).start()
        marker = "ddp-slurm-test-%s" % uuid.uuid4().hex
        # The task execs a sleep whose argv names the marker; bash's exec -a
        # sets argv[0], so the process can be found from outside.
        srun = subprocess.Popen(
            c.cmd("srun") + ["-N2", "--ntasks-per-node=1", "bash", "-c",
                             "echo started; exec -a %s sleep 300" % marker],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=c.env(),
            start_new_session=True)
        try:
            self.assertEqual(srun.stdout.readline().strip(), "started")
            self.assertEqual(srun.stdout.readline().strip(), "started")
            self.assertTrue(self._processes_named(marker))
        finally:
            c.stop()
            gone = self._processes_named(marker)
            # srun would wait minutes for the nodes it lost: it is ours, end
            # it with the shepherd it forks (its process group)
            os.killpg(srun.pid, signal.SIGKILL)
            srun.wait()
            srun.stdout.close()
        self.assertEqual(gone, [])
        self.assertIsNone(c.dir)

    @staticmethod
    def _processes_named(argv0):
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    if f.read().split(b"\0")[0].decode(errors="replace") == argv0:
                        found.append(int(pid))
            except OSError:
                pass
        return found


class Probe(unittest.TestCase):
    """launcher/slurm's reader under real steps."""

    def probe(self, srun_args, probe_args=()):
        r = CLUSTER.srun(list(srun_args) + ["-l", PROBE] + list(probe_args), check=False)
        return by_task(r.stdout), r

    def test_two_nodes(self):
        tasks, r = self.probe(["-N2", "--ntasks-per-node=1"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(sorted(tasks), [0, 1])
        job = int(re.match(r"slurm-(\d+)\.0$", tasks[0]["run_id"]).group(1))
        port = expected_port(job)
        for i, name in enumerate(["n1", "n2"]):
            t = tasks[i]
            self.assertEqual(t["rc"], "0")
            self.assertEqual(t["nnodes"], "2")
            self.assertEqual(t["node_rank"], str(i))
            self.assertEqual(t["node_name"], name)
            self.assertEqual(t["master"], "n1")
            self.assertEqual(t["master_addr"], CLUSTER.addrs[0])
            self.assertEqual(t["run_id"], "slurm-%d.0" % job)
            self.assertEqual(t["port"], str(port))
            self.assertEqual(t["list_var"], "SLURM_STEP_NODELIST")
            self.assertEqual(t["procid"], str(i))
            self.assertEqual(t["localid"], "0")
            self.assertEqual(t["resolve_note"], "")  # n1's own address, no loopback
            self.assertEqual(t["describe"],
                             "from slurm: job %d step 0, 2 nodes (n[1-2]), this is node %d "
                             "(%s), master n1 (%s), port %d" % (job, i, name, CLUSTER.addrs[0],
                                                                port))

    def test_one_node(self):
        tasks, r = self.probe(["-N1", "-w", "n2"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        t = tasks[0]
        self.assertEqual((t["nnodes"], t["node_rank"], t["master"], t["master_addr"]),
                         ("1", "0", "n2", CLUSTER.addrs[1]))

    def test_port_range(self):
        tasks, r = self.probe(["-N2", "--ntasks-per-node=1"], ["--port-range=40000-40009"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        job = int(tasks[0]["run_id"].split("-")[1].split(".")[0])
        self.assertEqual({tasks[i]["port"] for i in (0, 1)},
                         {str(expected_port(job, 0, 40000, 40009))})

    def test_two_tasks_per_node_refused(self):
        """srun --ntasks-per-node=2: every task refuses, naming the fix."""
        tasks, r = self.probe(["-N2", "--ntasks-per-node=2"])
        self.assertEqual(sorted(tasks), [0, 1, 2, 3])
        for t in tasks.values():
            self.assertEqual(t["rc"], str(-ENOTSUP))
            self.assertEqual(t["error"],
                             "slurm started 2 tasks on a node (SLURM_STEP_TASKS_PER_NODE="
                             "2(x2)): each would run its own ddplaunch with its own workers; "
                             "start one per node: srun --nodes=2 --ntasks=2 "
                             "--ntasks-per-node=1 ddplaunch ... (inside sbatch, srun takes "
                             "--ntasks from the job unless it is given)")

    def sbatch(self, lines, *args):
        status, out = CLUSTER.sbatch(lines, args)
        self.assertEqual(status, 0, out)
        return out

    def test_batch_script(self):
        """In the batch script of a 2-node job with 2 tasks per node: the
        script itself is refused; the srun line the message gives runs one
        task per node (srun --ntasks-per-node=1 alone would not: it takes
        --ntasks=4 from the job)."""
        out = self.sbatch(["%s | sed 's/^/B: /'" % PROBE,
                           "srun --ntasks-per-node=1 -l %s" % PROBE,
                           "echo ----",
                           "srun --nodes=2 --ntasks=2 --ntasks-per-node=1 -l %s" % PROBE],
                          "-N2", "--ntasks-per-node=2")
        batch = {m.group(1): m.group(2) for m in re.finditer(r"^B: (\w+)=(.*)$", out, re.M)}
        self.assertEqual(batch["rc"], str(-ENOTSUP))
        self.assertIn("this is the batch script or salloc shell of slurm job", batch["error"])
        self.assertIn("srun --nodes=2 --ntasks=2 --ntasks-per-node=1 ddplaunch",
                      batch["error"])
        trap, fixed = out.split("----\n")
        trap_tasks = by_task(trap)
        self.assertEqual(sorted(trap_tasks), [0, 1, 2, 3])
        self.assertEqual({t["rc"] for t in trap_tasks.values()}, {str(-ENOTSUP)})
        fixed_tasks = by_task(fixed)
        self.assertEqual(sorted(fixed_tasks), [0, 1])
        self.assertEqual([fixed_tasks[i]["node_rank"] for i in (0, 1)], ["0", "1"])
        self.assertEqual({fixed_tasks[i]["master_addr"] for i in (0, 1)}, {CLUSTER.addrs[0]})

    def test_one_node_batch_script(self):
        out = self.sbatch(["%s" % PROBE], "-N1", "-w", "n2")
        t = dict(re.findall(r"^(\w+)=(.*)$", out, re.M))
        self.assertEqual(t["rc"], "0", out)
        self.assertRegex(t["run_id"], r"^slurm-\d+\.batch$")
        self.assertEqual((t["nnodes"], t["node_rank"], t["master"]), ("1", "0", "n2"))
        self.assertIn("batch script, 1 node (n2), this is node 0 (n2)", t["describe"])

    def test_step_on_part_of_the_job(self):
        """A one-node step of a two-node job: the step's shape counts."""
        out = self.sbatch(["srun -N1 -n1 -w n2 -l %s" % PROBE], "-N2")
        t = by_task(out)[0]
        self.assertEqual(t["rc"], "0", out)
        self.assertEqual((t["nnodes"], t["node_rank"], t["master"]), ("1", "0", "n2"))
        self.assertEqual(t["list_var"], "SLURM_STEP_NODELIST")

    def test_salloc_shell(self):
        """The salloc shell runs on the submit host: refused."""
        r = subprocess.run(CLUSTER.cmd("salloc") + ["-N1", PROBE], capture_output=True,
                           text=True, timeout=60, env=CLUSTER.env())
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("error=this is the salloc shell of slurm job", r.stdout)
        self.assertIn("srun --ntasks=1 ddplaunch", r.stdout)


class HostList(unittest.TestCase):
    """launcher/slurm's expansion against Slurm's own (scontrol show
    hostnames), on lists both accept, and the lists where they differ on
    purpose (see hostlist.h)."""

    SAME = ["n[1-2,5]", "gpu[001-016]", "n1,gpu[01-02],x[3]", "r[1-2]n[1-2]", "n[08-11]",
            "n[9-10]", "n[9-011]", "n[01-2]", "n[1-003]", "n[0001-3]", "n[2,1]",
            "n[1-2],n[1-2]", "[1-2]", "a-b[1-2]", "127.0.0.[11-12]", "n[1-2][3-4]",
            "n[1-2]x[1-2],y", "n[1-2]ab[3]", "n[01,1]", "n01", "n[12345678901]",
            "n[1-2,3-4]", "x[3]", "n[98-101]", "node[0001-1024]"]
    BOTH_REFUSE = ["n[1-3-5]", "n[3-1]", "n[]", "n[a-b]", "n[1,,2]", "n[-1]", "n[1x3]",
                   "n[0-4294967296]", "n[1-2]]", "n[[1]]"]
    ONLY_SLURM_ACCEPTS = ["n1]", "n[1-]", ",n1", "n1,,n2", "n[1-2],", "n1 n2", "n[1"]
    ONLY_WE_ACCEPT = ["a[1-3]b", "n[1-2]-ib"]

    def ours(self, expr):
        r = subprocess.run([PROBE, "--expand", expr], capture_output=True, text=True)
        return r.stdout.split() if r.returncode == 0 else None

    def slurms(self, expr):
        r = subprocess.run(CLUSTER.cmd("scontrol") + ["show", "hostnames", expr],
                           capture_output=True, text=True, env=CLUSTER.env())
        # scontrol says "Invalid hostlist" on stdout or stderr, not always
        # with a failing exit code
        if r.returncode != 0 or not r.stdout.strip() or "Invalid hostlist" in r.stdout:
            return None
        return r.stdout.split()

    def test_same_names_as_slurm(self):
        for expr in self.SAME:
            self.assertIsNotNone(self.slurms(expr), expr)
            self.assertEqual(self.ours(expr), self.slurms(expr), expr)

    def test_differences(self):
        for expr in self.BOTH_REFUSE:
            self.assertEqual((self.ours(expr), self.slurms(expr)), (None, None), expr)
        for expr in self.ONLY_SLURM_ACCEPTS:
            self.assertIsNone(self.ours(expr), expr)
            self.assertIsNotNone(self.slurms(expr), expr)
        for expr in self.ONLY_WE_ACCEPT:
            self.assertIsNotNone(self.ours(expr), expr)
            self.assertIsNone(self.slurms(expr), expr)

    def test_first_name_of_three_groups(self):
        """Slurm orders the names of three groups its own way; the first
        name, the master, is the same."""
        expr = "a[1-2]b[1-2]c[1-2]"
        self.assertEqual(sorted(self.ours(expr)), sorted(self.slurms(expr)))
        self.assertEqual(self.ours(expr)[0], self.slurms(expr)[0])


def main():
    why = SlurmCluster.unavailable()
    if why:
        print("skipped: " + why)
        return 77
    if not os.access(PROBE, os.X_OK):
        print("SLURM_PROBE=%s is not a program (build tests/launcher/slurm first)" % PROBE)
        return 1
    # meson ends a test that runs too long with SIGTERM: stop the cluster
    # on the way out (tearDownModule and atexit).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    prog = unittest.main(exit=False, argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
    return 0 if prog.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
