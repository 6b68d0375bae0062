"""ddp-train end to end under AddressSanitizer and UBSan (suite asan: the
build-asan build of scripts/test.sh registers it; issue 28): checkpoints
every step, a resume after a worker's death, and an in-place re-formation
on 3 simulated nodes whose rank-0 node is killed (the store on a
standalone ddp-rdzvd). Each case runs the sanitized binaries; a sanitizer
report in any process's output, or any process that does not end as the
case expects, fails it.

Usage: sanitize_it.py CLASS (Checkpoints, Resume, InPlace), with
$DDPLAUNCH, $DDP_TRAIN, $DDP_RDZVD and $DDP_SOURCE set (meson does).
"""
import json
import os
import re
import signal
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "multinode"))
sys.path.insert(0, HERE)
import train_it  # noqa: E402
from mnlib import (DDP_RDZVD, DDPLAUNCH, MultiNodeCase, descendants, fast_conf,  # noqa: E402
                   wait_for)

DDP_TRAIN = os.environ.get("DDP_TRAIN", "ddp-train")
SOURCE = os.environ.get("DDP_SOURCE", os.path.join(HERE, "..", "..", ".."))
# What the sanitizers print; halt_on_error makes UBSan's findings fatal too.
REPORT_RE = re.compile(r"ERROR: (Address|Leak)Sanitizer|runtime error:|SUMMARY: \w+Sanitizer")
SAN_ENV = {"ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "detect_leaks=1"),
           "UBSAN_OPTIONS": os.environ.get("UBSAN_OPTIONS",
                                           "halt_on_error=1:print_stacktrace=1"),
           "OPENBLAS_NUM_THREADS": "1", "DDP_BACKEND": "cpu", "DDP_TIMEOUT_MS": "60000"}


def synthetic(ckdir, steps, extra=()):
    return [a for a in train_it.synthetic_args(ckdir, 8, steps) if a != "--sync_bn"] + [
        "--device", "cpu"] + list(extra)


class SanitizedCase(MultiNodeCase):
    def assert_clean(self, procs):
        for p in procs:
            m = REPORT_RE.search(p.text())
            self.assertIsNone(m, "%s: a sanitizer report:\n%s" % (p.name, p.text()))

    def run_proc(self, name, argv, code=0, timeout=120, env=None):
        p = self.cluster.start(name, argv, dict(SAN_ENV, **(env or {})))
        rc, _ = p.wait(timeout)
        self.assert_clean([p])
        self.assertEqual(rc, code, "%s exited %s:\n%s" % (name, rc, p.text()))
        return p


class Checkpoints(SanitizedCase):
    def test_digits_checkpoint_every_step(self):
        # issue 28's command: a checkpoint at every step, then the final one
        ck = os.path.join(self.dir, "ck")
        self.run_proc("digits", [DDP_TRAIN, "--config",
                                 os.path.join(SOURCE, "configs", "digits.ini"), "--epochs",
                                 "1", "--checkpoint_dir", ck, "--checkpoint_every", "1"])
        self.assertEqual(sorted(os.listdir(ck)),
                         ["final.safetensors", "latest.safetensors", "previous.safetensors"])


class Resume(SanitizedCase):
    def test_worker_killed_group_resumes_same_bits(self):
        # 2 ranks under ddplaunch, rank 1 killed before step 25: the group
        # restarts, resumes from step 20's checkpoint and ends with the bits
        # of the undisturbed run
        base, faulty = os.path.join(self.dir, "base"), os.path.join(self.dir, "faulty")
        launch = [DDPLAUNCH, "--standalone", "--nproc_per_node=2", "--max_restarts=1",
                  DDP_TRAIN]
        extra = ["--checkpoint_every", "10"]
        self.run_proc("base", launch + synthetic(base, 40, extra))
        p = self.run_proc("faulty", launch + synthetic(faulty, 40, extra + [
            "--fault_kill_step", "25", "--fault_rank", "1"]))
        self.assertIn("fault_kill_step", p.text())
        self.assertRegex(p.text(), r"resumed from '.*latest\.safetensors' at step 20")
        self.assertEqual(train_it.sha256(os.path.join(faulty, "final.safetensors")),
                         train_it.sha256(os.path.join(base, "final.safetensors")))


class InPlace(SanitizedCase):
    STEPS = 300

    def test_rank0_node_killed_reforms_in_place(self):
        # 3 nodes x 1 rank, --global_batch_size, checkpoints and metrics;
        # the node of rank 0 killed mid-run: the survivors re-form in
        # place, the new rank 0 writes on, and the final checkpoint holds
        # the 1-rank run's bits
        ref, run = os.path.join(self.dir, "ref"), os.path.join(self.dir, "run")
        metrics = os.path.join(self.dir, "metrics.jsonl")
        shards = ["--held_out", "0.1", "--global_batch_size", "48", "--virtual_shards", "6",
                  "--checkpoint_every", "50"]
        self.run_proc("solo", [DDPLAUNCH, "--standalone", "--nproc_per_node=1", DDP_TRAIN] +
                      synthetic(ref, self.STEPS, shards), timeout=180)
        d = self.cluster.start("rdzvd", [DDP_RDZVD, "--host", "127.0.0.1", "--port", "0"],
                               SAN_ENV)
        _, m = d.wait_line(r"listening on \S+:(\d+)")
        args = ["--nproc_per_node=1", "--nnodes=2:3", "--rdzv_backend=c10d", "--rdzv_id=job",
                "--rdzv_endpoint=127.0.0.1:" + m.group(1), fast_conf(), "--max_restarts=0",
                DDP_TRAIN] + synthetic(run, self.STEPS, shards + [
                    "--metrics", metrics, "--log_every", "10", "--step_sleep_ms", "10"])
        nodes = [self.cluster.agent(i, args, worker=None, env=SAN_ENV) for i in range(3)]

        def step_reached():
            try:
                with open(metrics) as f:
                    return any(json.loads(line).get("step", 0) >= 60
                               for line in f if line.endswith("\n"))
            except FileNotFoundError:
                return False

        wait_for(step_reached, 120, "step 60 of the 3-node run")
        rank0 = [p for p in nodes if "[rank 0]:" in p.text()]
        self.assertEqual(len(rank0), 1, [p.text() for p in nodes])
        survivors = [p for p in nodes if p is not rank0[0]]
        pids = descendants(rank0[0].pid)
        rank0[0].p.kill()  # the whole node: the agent, then ddp-exec and its worker
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        t_kill = time.time()  # after: the old rank 0 writes nothing later
        self.assert_all_exit(survivors, timeout=180)
        self.assert_clean(survivors + [d])
        text = "\n".join(p.text() for p in survivors)
        self.assertIn("re-form in place", text)
        self.assertNotIn("resumed from", text)
        self.assertRegex(text, r"re-formed in place as rank 0 of 2")
        with open(metrics) as f:
            after = [r for r in map(json.loads, f) if r["kind"] == "train" and
                     r["time"] > t_kill]
        self.assertTrue(after and after[-1]["step"] == self.STEPS, after[-3:])
        self.assertEqual(train_it.sha256(os.path.join(run, "final.safetensors")),
                         train_it.sha256(os.path.join(ref, "final.safetensors")))
        d.signal(signal.SIGTERM)
        self.assertEqual(d.wait(10)[0], 0, d.text())
        self.assert_clean([d])


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
