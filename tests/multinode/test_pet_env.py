"""Kubeflow pods, simulated: `ddplaunch PROGRAM` with no flags, every value
from the PET_* variables a PyTorchJob operator sets (as torchrun reads them),
each pod on its own loopback address (PET_LOCAL_ADDR=127.0.0.2, ...).

Run: test_pet_env.py PetEnv. Static (PET_NNODES=2, PET_NODE_RANK,
PET_MASTER_ADDR/PORT, plus the operator's own MASTER_ADDR, MASTER_PORT,
WORLD_SIZE and RANK, which describe pods, not workers, and must not leak into
the workers) and elastic (PET_RDZV_BACKEND=c10d, PET_RDZV_ENDPOINT,
PET_NNODES=2:3); then, as dry runs, the precedence (flags > job file > PET_*
> Slurm > defaults) and a bad value.
"""
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mnlib import DDPLAUNCH, HOST_RE, MultiNodeCase, addr  # noqa: E402

PET_LINE = r"ddplaunch: took (.*) from PET_\* \(Kubeflow/torchrun environment\)"


def clean_env(extra):
    """This process's environment without PET_* and SLURM_*, plus extra."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PET_", "SLURM_")) and k != "DDP_RDZV_TOKEN"}
    env.update(extra)
    return env


def dry_run(args, extra):
    r = subprocess.run([DDPLAUNCH, "--dry_run"] + args + ["prog"], env=clean_env(extra),
                       capture_output=True, text=True, timeout=30)
    return r, dict(line.split(" = ", 1) for line in r.stdout.splitlines() if " = " in line)


class PetEnv(MultiNodeCase):
    def setUp(self):
        super().setUp()
        for k in [k for k in os.environ if k.startswith(("PET_", "SLURM_"))]:
            del os.environ[k]

    def check_workers(self, pods, nproc):
        """Every worker's RANK, WORLD_SIZE and MASTER_ADDR:PORT: the ranks
        0..N-1 once, ddplaunch's world (not the operator's WORLD_SIZE), and
        the store node 0's agent announced on node 0's address."""
        _, m = pods[0].wait_line(r"round \d+ of run id '[^']*': node 0 of %d .* master (\S+)$"
                                 % len(pods), 1)
        master = m.group(1)
        self.assertEqual(master.rsplit(":", 1)[0], addr(0))
        seen = {}
        for i, p in enumerate(pods):
            ws = p.workers()
            self.assertEqual(len(ws), nproc, p.text())
            for w in ws:
                self.assertEqual(w["world"], str(len(pods) * nproc), p.text())
                self.assertEqual(w["master"], master, p.text())
                self.assertEqual(w["local_addr"], addr(i), p.text())
                seen[int(w["rank"])] = w
        self.assertEqual(sorted(seen), list(range(len(pods) * nproc)))
        return seen

    def test_static_pods(self):
        def pod(i, port):
            env = {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": str(i),
                   "PET_MASTER_ADDR": addr(0), "PET_MASTER_PORT": str(port),
                   "PET_LOCAL_ADDR": addr(i),
                   # the operator's own, for the pods: WORLD_SIZE is its
                   # replica count, RANK the pod's index
                   "MASTER_ADDR": addr(0), "MASTER_PORT": str(port),
                   "WORLD_SIZE": "2", "RANK": str(i), "PYTHONUNBUFFERED": "1"}
            return self.cluster.agent(i, [], env=env, local=False)

        # pod 0 binds a port the kernel chooses (no fixed port in a test);
        # pod 1 gets the one it reports
        first = pod(0, 0)
        port = self.host_port(first)
        pods = [first, pod(1, port)]
        self.assert_all_exit(pods)
        seen = self.check_workers(pods, 2)
        for r, w in seen.items():
            self.assertEqual(int(w["group"]), r // 2)
            self.assertEqual(w["groups"], "2")
        for p in pods:
            _, m = p.wait_line(PET_LINE, 1)
            self.assertEqual(m.group(1), "nproc_per_node, nnodes, node_rank, master_addr, "
                                         "master_port, local_addr")

    def test_elastic_pods(self):
        def pod(i, port):
            env = {"PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": "%s:%d" % (addr(0), port),
                   "PET_RDZV_ID": "kfjob", "PET_NNODES": "2:3", "PET_NPROC_PER_NODE": "2",
                   "PET_MAX_RESTARTS": "3", "PET_LOCAL_ADDR": addr(i),
                   # at least 2 nodes (minReplicas:maxReplicas): both pods are in
                   # the first round whenever pod 1 comes; a third is waited 1 s for
                   "PET_RDZV_CONF": "last_call_timeout=1,join_timeout=20"}
            return self.cluster.agent(i, [], env=env, local=False)

        first = pod(0, 0)
        _, m = first.wait_line(HOST_RE.pattern, 20)
        self.assertEqual(m.group(1), addr(0))
        port = int(m.group(2))
        pods = [first, pod(1, port)]
        self.assert_all_exit(pods)
        seen = self.check_workers(pods, 2)
        self.assertEqual({w["run"] for w in seen.values()}, {"kfjob"})
        for p in pods:
            _, m = p.wait_line(PET_LINE, 1)
            self.assertEqual(m.group(1), "nproc_per_node, nnodes, rdzv_backend, rdzv_endpoint, "
                                         "rdzv_id, rdzv_conf, max_restarts, local_addr")

    def test_precedence_dry_run(self):
        """flags > job file > PET_* > Slurm > defaults, as --dry_run shows it."""
        with tempfile.NamedTemporaryFile("w", suffix=".ini", dir=self.dir,
                                         delete=False) as f:
            f.write("[launch]\nmax_restarts = 5\n")
        slurm = {"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0", "SLURM_NNODES": "2",
                 "SLURM_STEP_NUM_NODES": "2", "SLURM_NODEID": "1", "SLURM_PROCID": "1",
                 "SLURM_LOCALID": "0", "SLURM_STEP_NODELIST": "localhost,n2",
                 "SLURMD_NODENAME": "n2", "SLURM_STEP_TASKS_PER_NODE": "1(x2)"}
        pet = {"PET_NPROC_PER_NODE": "3", "PET_MASTER_PORT": "31000", "PET_RDZV_ID": "kf",
               "PET_MAX_RESTARTS": "2", "PET_ROLE": "trainer"}
        r, got = dry_run(["--config", f.name, "--role=mine"], dict(slurm, **pet))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual((got["nproc_per_node"], got["nnodes"], got["node_rank"],
                          got["master_addr"], got["master_port"], got["rdzv_id"],
                          got["max_restarts"], got["role"]),
                         ("3", "2:2", "1", "127.0.0.1", "31000", "kf", "5", "mine"))
        self.assertEqual(got["from"], "nproc_per_node: PET_NPROC_PER_NODE, nnodes: slurm, "
                                      "node_rank: slurm, master_addr: slurm, "
                                      "master_port: PET_MASTER_PORT, rdzv_id: PET_RDZV_ID, "
                                      "max_restarts: job file, role: flag, config: flag, "
                                      "dry_run: flag; the rest: defaults")
        self.assertEqual(got["pet"], "took nproc_per_node, master_port, rdzv_id from PET_* "
                                     "(Kubeflow/torchrun environment); flags and the job file "
                                     "override them; given as flags or in the job file, so "
                                     "not taken: PET_MAX_RESTARTS, PET_ROLE")
        self.assertIn("; kept as given: PET_MASTER_PORT, PET_RDZV_ID", got["slurm"])
        self.assertNotIn("PET_", r.stderr)  # a dry run says it once, in its output
        # no PET_* at all: every value a default or a flag
        r, got = dry_run(["--nnodes=1"], {})
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(got["from"], "nnodes: flag, dry_run: flag; the rest: defaults")
        self.assertEqual(got["pet"], "no PET_* variable set")

    def test_bad_values_name_the_variable(self):
        r, _ = dry_run([], {"PET_NNODES": "two"})
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr.strip(),
                         "ddplaunch: bad value 'two' in the environment variable PET_NNODES "
                         "(expected N or MIN:MAX); fix or unset PET_NNODES, or give --nnodes, "
                         "which wins over it")
        r, _ = dry_run([], {"PET_STANDALONE": "true!"})
        self.assertEqual(r.returncode, 2)
        self.assertIn("PET_STANDALONE", r.stderr)
        # a value that parses but that a later check refuses (the run, not
        # only the dry run): the message names the variables too
        r = subprocess.run([DDPLAUNCH, "true"], capture_output=True, text=True, timeout=30,
                           env=clean_env({"PET_NNODES": "2", "PET_NODE_RANK": "2"}))
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("--node_rank=2 is not below --nnodes=2; from the environment: "
                      "PET_NNODES=2 (--nnodes), PET_NODE_RANK=2 (--node_rank)", r.stderr)
        r = subprocess.run([DDPLAUNCH, "true"], capture_output=True, text=True, timeout=30,
                           env=clean_env({"PET_RDZV_BACKEND": "c10d", "PET_NNODES": "2",
                                          "PET_RDZV_CONF": "nonsense=1"}))
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("PET_RDZV_CONF=nonsense=1 (--rdzv_conf)", r.stderr)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
