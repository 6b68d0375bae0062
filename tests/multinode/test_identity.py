"""Job identity across nodes (issue 18, sections 4 and 6): two jobs on one
host never join each other, a spare respects its join timeout, and a node
that ran no worker never exits 0.

Run one class: test_identity.py CLASS.
  Identity      static: job B reuses job A's --master_port (B's node 0 is
                refused by the taken port, B's node 1 at once by A's store,
                naming both jobs); c10d: two jobs with one run id and
                different programs (B refused, A undisturbed), and with the
                default run id (two jobs, each on its own, the same program
                with other arguments too); one job under one --rdzv_id whose
                nodes give each its own --checkpoint_dir (c10d and static: it
                forms and finishes, one line says the arguments differ); the
                same command line twice (the same derived run id, reused); a
                spare's join timeout; a spare whose job finishes exits non-zero
  IdentityEtcd  the same refusal over etcd, and one job's own paths
"""
import os
import signal
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "rendezvous", "etcd"))
import etcd_cluster  # noqa: E402
from mnlib import DDP_RDZVD, DDPLAUNCH, WORKER, MultiNodeCase, addr, fast_conf  # noqa: E402

REFUSED_AT_ONCE_S = 5.0  # a refusal is one store round trip; slack for a loaded machine


def ranks(p):
    return sorted(int(w["rank"]) for w in p.workers())


def other_program(tmpdir):
    """mn_worker under another name: another program for the job identity,
    which compares the program's name (not its directory, nor its file)."""
    path = os.path.join(tmpdir, "other_worker")
    if not os.path.exists(path):
        os.symlink(os.path.abspath(WORKER) if os.sep in WORKER else WORKER, path)
    return path


class IdentityCase(MultiNodeCase):
    def assert_refused(self, p, mine, theirs, t0):
        rc, t_end = p.wait(REFUSED_AT_ONCE_S + 10)
        self.assertEqual(rc, 2, "%s exited %s; output:\n%s" % (p.name, rc, p.text()))
        self.assertLess(t_end - t0, REFUSED_AT_ONCE_S, p.text())
        text = p.text()
        self.assertIn(mine, text)
        self.assertIn(theirs, text)
        self.assertIn("refused", text)
        self.assertEqual(p.workers(), [], text)  # never ran as anyone's rank

    def assert_undisturbed(self, nodes, groups):
        """Every node still runs its one round's workers, nothing re-formed."""
        for p in nodes:
            self.assertTrue(p.alive(), p.text())
            self.assertEqual(len(p.workers()), 1, p.text())
            self.assertNotIn("is over", p.text())
            self.assertEqual(p.workers()[0]["groups"], str(groups))

    def assert_one_job_own_paths(self, nodes):
        """Both nodes ran in one round of one job and finished; one line, on
        one node, said that their arguments differ, naming both."""
        self.assert_all_exit(nodes)
        self.assertEqual(sorted(r for p in nodes for r in ranks(p)), [0, 1])
        for p in nodes:
            self.assertEqual({w["groups"] for w in p.workers()}, {"2"}, p.text())
        said = [ln for p in nodes for ln in p.text().splitlines()
                if "differ between this node" in ln]
        self.assertEqual(len(said), 1, "\n\n".join(p.text() for p in nodes))
        self.assertIn("ckpt-node0", said[0])
        self.assertIn("ckpt-node1", said[0])

    def stop(self, nodes):
        for p in nodes:
            p.signal(signal.SIGTERM)
        for p in nodes:
            p.wait(30)


class Identity(IdentityCase):
    def static_pair(self, worker, port=None, name="A", first=0):
        """A static job of 2 nodes (default run id) on addr(first), addr(first + 1)
        with the store at addr(0):port (0: node 0 picks it)."""
        common = ["--nnodes=2", "--master_addr=" + addr(0), fast_conf()]
        n0 = self.cluster.agent(first, common + ["--node_rank=0", "--master_port=%d" % (port or 0)],
                                worker, name=name + "-node0")
        if port is None:
            port = self.host_port(n0)
        n1 = self.cluster.agent(first + 1, common + ["--node_rank=1", "--master_port=%d" % port],
                                worker, name=name + "-node1")
        return [n0, n1], port

    def test_static_second_job_on_first_jobs_port(self):
        a, port = self.static_pair(("forever",))
        for p in a:
            p.wait_line(r"MNW ")
        t0 = time.monotonic()
        b, _ = self.static_pair(("run", "0.2"), port=port, name="B", first=2)
        # B's node 0: the taken port, as before (exit 2)
        rc, _ = b[0].wait(15)
        self.assertEqual(rc, 2, b[0].text())
        # B's node 1 reached A's store: refused at once, naming both jobs,
        # never a spare, never one of A's ranks
        self.assert_refused(b[1], "run 0.2", "forever", t0)
        # A runs on as it was: one round, its own two nodes
        self.assert_undisturbed(a, 2)
        self.assertEqual(sorted(r for p in a for r in ranks(p)), [0, 1])
        self.stop(a)

    def c10d_job(self, first, worker, run_id=None, port=0, n=2, nnodes=2, conf=None,
                 program=None):
        """n nodes from addr(first) on; `worker` is mn_worker's arguments, or
        a function of the node's index giving them; `program` replaces
        mn_worker."""
        args = ["--nnodes=%s" % nnodes, "--rdzv_backend=c10d",
                "--rdzv_endpoint=%s:%d" % (addr(0), port), conf or fast_conf()]
        args += ["--rdzv_id=" + run_id] if run_id else []
        nodes = []
        for i in range(first, first + n):
            w = worker(i) if callable(worker) else worker
            if program:
                nodes.append(self.cluster.agent(i, args + [program] + list(w), None,
                                                name="node%d" % i))
            else:
                nodes.append(self.cluster.agent(i, args, w, name="node%d" % i))
            if port == 0:
                port = self.host_port(nodes[0])
                args[2] = "--rdzv_endpoint=%s:%d" % (addr(0), port)
        return nodes, port

    def test_c10d_same_run_id_other_program_refused(self):
        a, port = self.c10d_job(0, ("forever",), run_id="shared")
        for p in a:
            p.wait_line(r"MNW .*groups=2")
        t0 = time.monotonic()
        b, _ = self.c10d_job(2, ("run", "0.2"), run_id="shared", port=port,
                             program=other_program(self.dir))
        for p in b:
            self.assert_refused(p, "other_worker run 0.2", "forever", t0)
            self.assertIn("belongs to another job", p.text())
        self.assert_undisturbed(a, 2)
        self.stop(a)

    def test_c10d_same_run_id_own_paths_one_job(self):
        # one job under one --rdzv_id whose nodes each give their own path
        # (a shared filesystem, $SLURM_NODEID in a file name): not "another
        # job"; it forms and finishes
        own = lambda i: ("run", "0.3", "--checkpoint_dir=%s/ckpt-node%d" % (self.dir, i))
        nodes, _ = self.c10d_job(0, own, run_id="shared")
        self.assert_one_job_own_paths(nodes)

    def test_static_same_run_id_own_paths_one_job(self):
        # the same with node 0 hosting the store for its own job (the owner
        # record names the job too)
        common = ["--nnodes=2", "--master_addr=" + addr(0), "--rdzv_id=shared", fast_conf()]
        own = lambda i: ("run", "0.3", "--checkpoint_dir=%s/ckpt-node%d" % (self.dir, i))
        n0 = self.cluster.agent(0, common + ["--node_rank=0", "--master_port=0"], own(0),
                                name="node0")
        port = self.host_port(n0)
        n1 = self.cluster.agent(1, common + ["--node_rank=1", "--master_port=%d" % port],
                                own(1), name="node1")
        self.assert_one_job_own_paths([n0, n1])

    def test_c10d_default_run_ids_two_jobs(self):
        # different programs, no --rdzv_id, one endpoint: two jobs, each
        # with its own derived run id, never mixed
        a, port = self.c10d_job(0, ("forever",))
        for p in a:
            p.wait_line(r"MNW .*groups=2")
        b, _ = self.c10d_job(2, ("run", "0.2"), port=port)
        self.assert_all_exit(b)
        self.assertEqual(sorted(r for p in b for r in ranks(p)), [0, 1])
        run_a = {w["run"] for p in a for w in p.workers()}
        run_b = {w["run"] for p in b for w in p.workers()}
        self.assertEqual(len(run_a), 1)
        self.assertEqual(len(run_b), 1)
        self.assertNotEqual(run_a, run_b)
        self.assertTrue(run_a.pop().startswith("job-"))
        self.assert_undisturbed(a, 2)
        self.stop(a)

    def test_same_command_line_twice(self):
        d = self.cluster.start("rdzvd", [DDP_RDZVD, "--host", addr(0), "--port", "0"])
        _, m = d.wait_line(r"listening on \S+:(\d+)")
        port = int(m.group(1))
        conf = fast_conf(is_host=0)
        dry = subprocess.run([DDPLAUNCH, "--dry_run", "--nnodes=2", "--rdzv_backend=c10d",
                              "--rdzv_endpoint=%s:%d" % (addr(0), port), conf, WORKER, "run",
                              "0.2"], capture_output=True, text=True, timeout=30)
        self.assertEqual(dry.returncode, 0, dry.stderr)
        derived = [ln.split()[2] for ln in dry.stdout.splitlines()
                   if ln.startswith("rdzv_run_id = ")]
        self.assertEqual(len(derived), 1, dry.stdout)
        self.assertIn("the default, from the command line's fingerprint", dry.stdout)
        for attempt in range(2):
            nodes, _ = self.c10d_job(2 * attempt, ("run", "0.2"), port=port, conf=conf)
            self.assert_all_exit(nodes)
            self.assertEqual(sorted(r for p in nodes for r in ranks(p)), [0, 1])
            self.assertEqual({w["run"] for p in nodes for w in p.workers()}, set(derived))

    def test_spare_respects_join_timeout(self):
        a, port = self.c10d_job(0, ("forever",), conf=fast_conf(join_timeout=3))
        for p in a:
            p.wait_line(r"MNW .*groups=2")
        t0 = time.monotonic()
        spare, _ = self.c10d_job(2, ("forever",), port=port, n=1,
                                 conf=fast_conf(join_timeout=3))
        rc, t_end = spare[0].wait(30)
        self.assertNotEqual(rc, 0, spare[0].text())
        self.assertLess(t_end - t0, 3 + REFUSED_AT_ONCE_S, spare[0].text())
        self.assertIn("never given a place", spare[0].text())
        self.assertEqual(spare[0].workers(), [])
        self.assert_undisturbed(a, 2)
        self.stop(a)

    def test_spare_of_finished_job_does_not_exit_0(self):
        a, port = self.c10d_job(0, ("run", "3"))
        for p in a:
            p.wait_line(r"MNW .*groups=2")
        spare, _ = self.c10d_job(2, ("run", "3"), port=port, n=1)
        self.assert_all_exit(a)
        rc, _ = spare[0].wait(30)
        self.assertNotEqual(rc, 0, spare[0].text())
        self.assertIn("never given a place", spare[0].text())
        self.assertEqual(spare[0].workers(), [])


class IdentityEtcd(IdentityCase):
    def setUp(self):
        super().setUp()
        self.etcd = etcd_cluster.EtcdCluster(1)
        self.etcd.start()
        self.addCleanup(self.etcd.stop)

    def job(self, first, worker, program=None):
        """Two nodes; `worker` as in Identity.c10d_job."""
        args = ["--nnodes=2", "--rdzv_backend=etcd", "--rdzv_endpoint=" + self.etcd.endpoints,
                "--rdzv_id=shared", fast_conf()]
        nodes = []
        for i in range(first, first + 2):
            w = worker(i) if callable(worker) else worker
            if program:
                nodes.append(self.cluster.agent(i, args + [program] + list(w), None,
                                                name="node%d" % i))
            else:
                nodes.append(self.cluster.agent(i, args, w, name="node%d" % i))
        return nodes

    def test_same_run_id_other_program_refused(self):
        a = self.job(0, ("forever",))
        for p in a:
            p.wait_line(r"MNW .*groups=2")
        t0 = time.monotonic()
        for p in self.job(2, ("run", "0.2"), program=other_program(self.dir)):
            self.assert_refused(p, "other_worker run 0.2", "forever", t0)
        self.assert_undisturbed(a, 2)
        self.stop(a)

    def test_same_run_id_own_paths_one_job(self):
        own = lambda i: ("run", "0.3", "--checkpoint_dir=%s/ckpt-node%d" % (self.dir, i))
        self.assert_one_job_own_paths(self.job(0, own))


if __name__ == "__main__":
    if "IdentityEtcd" in sys.argv[1:] and etcd_cluster.etcd_unavailable():
        print("SKIP: etcd cannot run here: " + etcd_cluster.etcd_unavailable())
        sys.exit(77)
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
