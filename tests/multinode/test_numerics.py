"""The numeric identity at a join (issue 25, part 1): ddp-train with a fixed
global batch runs in place on two simulated nodes whose OpenBLAS uses one
kernel; a third node whose OpenBLAS uses another joins. Its worker is
refused with the line that names both sides and what to set (exit 78: its
node leaves the job), the running ranks say they refused it, re-form
without it and end with the bits of an undisturbed 1-rank run; the
refused node's summary.json says "numerics": refused (and why), the
others' kept (and the identity).

Simulated nodes on 127.0.0.2-4 (mnlib.py). Skips (77) when this CPU cannot
run both kernels.
"""
import json
import os
import re
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "worker", "train"))
import train_it  # noqa: E402
from mnlib import DDPLAUNCH, MultiNodeCase, fast_conf, wait_for  # noqa: E402

DDP_TRAIN = os.environ.get("DDP_TRAIN", "ddp-train")
TRAIN_ENV = {"OPENBLAS_NUM_THREADS": "1", "DDP_TIMEOUT_MS": "60000", "DDP_BACKEND": "cpu"}
JOB_CORE, OTHER_CORE = "Haswell", "Sandybridge"


def openblas_core(asked):
    env = dict(os.environ, OPENBLAS_VERBOSE="2", OPENBLAS_CORETYPE=asked)
    p = subprocess.run([DDP_TRAIN, "--help"], capture_output=True, text=True, env=env,
                       timeout=30)
    m = re.search(r"^Core: (\S+)", p.stdout + p.stderr, re.M)
    return m.group(1) if m else None


class Numerics(MultiNodeCase):
    def setUp(self):
        for core in (JOB_CORE, OTHER_CORE):
            got = openblas_core(core)
            if got != core:
                raise unittest.SkipTest("OpenBLAS runs %s when asked for %s" % (got, core))
        super().setUp()

    def args(self, ckdir, steps):
        return [a for a in train_it.synthetic_args(ckdir, 8, steps) if a != "--sync_bn"] + [
            "--held_out", "0.1", "--global_batch_size", "48", "--virtual_shards", "8",
            "--device", "cpu"]

    def node(self, i, prog, env, port, name=None):
        base = ["--nproc_per_node=1", "--nnodes=2:3", "--rdzv_backend=c10d", "--rdzv_id=job",
                fast_conf(), "--max_restarts=0",
                "--log_dir=" + os.path.join(self.dir, "logs-" + (name or str(i))),
                "--rdzv_endpoint=127.0.0.2:%d" % port]
        return self.cluster.agent(i, base + prog, worker=None, env=env, name=name)

    def numerics(self, name):
        found = [os.path.join(d, "summary.json")
                 for d, _, files in os.walk(os.path.join(self.dir, "logs-" + name))
                 if "summary.json" in files]
        self.assertEqual(len(found), 1, found)
        with open(found[0]) as f:
            return json.load(f)["numerics"]

    def test_join_with_another_kernel_refused(self):
        steps = 400
        job_env = dict(TRAIN_ENV, OPENBLAS_CORETYPE=JOB_CORE)
        ref, run = os.path.join(self.dir, "ref"), os.path.join(self.dir, "run")
        solo = self.cluster.start("solo", [DDPLAUNCH, "--standalone", "--nproc_per_node=1",
                                           DDP_TRAIN] + self.args(ref, steps), job_env)
        self.assertEqual(solo.wait(300)[0], 0, solo.text())
        # Paced so that the join lands mid-run.
        prog = [DDP_TRAIN] + self.args(run, steps) + ["--step_sleep_ms", "20", "--log_every",
                                                      "25"]
        first = self.node(0, prog, job_env, 0)
        port = self.host_port(first)
        nodes = [first, self.node(1, prog, job_env, port)]
        nodes[0].wait_line(r"step 50/%d" % steps, timeout=60)
        other = self.node(2, prog, dict(TRAIN_ENV, OPENBLAS_CORETYPE=OTHER_CORE), port,
                          name="other")
        rc, _ = other.wait(120)
        self.assertEqual(rc, 78, other.text())
        want = re.compile(r"rank \d \(host [^,]+, node 2\) uses OpenBLAS kernel %s, rank \d "
                          r"\(host [^,]+, node [01]\) %s: set OPENBLAS_CORETYPE=%s on every "
                          r"node, or --allow_numeric_mismatch to drop the bit-identity "
                          r"promise" % (OTHER_CORE, JOB_CORE, JOB_CORE))
        self.assertRegex(other.text(), want)
        self.assert_all_exit(nodes, timeout=300)
        text = "\n".join(p.text() for p in nodes)
        self.assertIn("refusing 1 rank(s) that joined", text)
        self.assertRegex(text, want)
        self.assertNotIn("resumed from", text)
        self.assertIn("numerics: the bits of a 1-rank run, promised", text)
        wait_for(lambda: os.path.exists(os.path.join(run, "final.safetensors")), 5, "the end")
        self.assertEqual(train_it.sha256(os.path.join(run, "final.safetensors")),
                         train_it.sha256(os.path.join(ref, "final.safetensors")),
                         "final checkpoints differ")
        n = self.numerics("other")
        self.assertEqual(n["promise"], "refused", n)
        self.assertIn("uses OpenBLAS kernel %s" % OTHER_CORE, n["why"])
        for name in ("0", "1"):
            n = self.numerics(name)
            self.assertEqual(n["promise"], "kept", n)
            self.assertIn("OpenBLAS kernel %s" % JOB_CORE, n["identity"])


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
