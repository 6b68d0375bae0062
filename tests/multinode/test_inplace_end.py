"""The end of a job re-formed in place too (issue 23, "the last step and the
final save are not re-formed"): ddp-train with a fixed global batch on 3
simulated nodes x 2 ranks; a worker dies at the final save
(final.safetensors, a collective), or a whole node dies there, or a node
dies before the last step's exchange. The survivors re-form around it as at
any step: the job finishes in place (no restart charged, --max_restarts 0
where no worker is replaced; the survivors' worker processes are the same
from start to end, each says "re-formed in place" with its pid; no
checkpoint read) with the bits of an undisturbed 1-rank run.

The moment is hit deterministically with ddp-train's own test fault
(--fault_kill_step S --fault_rank R: the rank SIGKILLs itself once it has
made S steps, before step S+1 or, at S = the last step, before the final
save); for a whole node the test kills the rest of that node as soon as the
fault's line appears.
"""
import os
import re
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "worker", "train"))
import test_inplace as ti  # noqa: E402
import train_it  # noqa: E402
from mnlib import DDPLAUNCH, MultiNodeCase, descendants, wait_for  # noqa: E402

STEPS = 150
FAULT_RE = r"rank (\d+): fault_kill_step %d: killing myself"
REFORMED_RE = r"re-formed in place as rank \d+ of %s \(round \d+, pid (\d+)\)"


class InPlaceEnd(MultiNodeCase):
    start_job = ti.InPlace.start_job
    summary = ti.InPlace.summary
    kill_node = ti.InPlace.kill_node
    assert_same_bits = ti.InPlace.assert_same_bits

    def train_args(self, ckdir):
        return [a for a in train_it.synthetic_args(ckdir, 8, STEPS) if a != "--sync_bn"] + [
            "--held_out", "0.1", "--global_batch_size", "48", "--virtual_shards", "8",
            "--device", "cpu"]

    def start(self, fault_step, fault_rank, restarts=0):
        """The 1-rank reference, then the 6-rank job with the fault set:
        (reference dir, run dir, nodes, each node's processes at the start)."""
        ref, run = os.path.join(self.dir, "ref"), os.path.join(self.dir, "run")
        solo = self.cluster.start("solo", [DDPLAUNCH, "--standalone", "--nproc_per_node=1",
                                           ti.DDP_TRAIN] + self.train_args(ref), ti.TRAIN_ENV)
        self.assertEqual(solo.wait(300)[0], 0, solo.text())
        prog = [ti.DDP_TRAIN] + self.train_args(run) + [
            "--log_every", "10", "--fault_kill_step", str(fault_step),
            "--fault_rank", str(fault_rank)]
        nodes = self.start_job(prog, env=ti.TRAIN_ENV, restarts=restarts)
        # every node's two workers started (a ddp-exec and a ddp-train each)
        for p in nodes:
            wait_for(lambda: len(descendants(p.pid)) >= 4, 60, "%s's workers" % p.name)
        before = {p.name: set(descendants(p.pid)) for p in nodes}
        return ref, run, nodes, before

    def fault_node(self, nodes, step, timeout=120):
        """The node whose worker printed the fault line."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in nodes:
                if re.search(FAULT_RE % step, p.text()):
                    return p
            time.sleep(0.02)
        self.fail("no worker said 'fault_kill_step %d':\n%s"
                  % (step, "\n".join(p.text() for p in nodes)))

    def assert_in_place(self, survivors, before, world, nworkers):
        text = "\n".join(p.text() for p in survivors)
        self.assertNotIn("resumed from", text)
        self.assertNotIn("stopping this node's workers", text)
        pids = [int(m) for m in re.findall(REFORMED_RE % world, text)]
        self.assertEqual(len(set(pids)), nworkers, text)
        self.assertTrue(set(pids) <= set().union(*(before[p.name] for p in survivors)), text)

    def test_worker_killed_at_final_save(self):
        # a worker dies once the last step is done, before the final save's
        # collective: it alone is replaced; every other worker re-forms in
        # place without it at once (issue 24: its replacement starts outside
        # the rounds) and saves; the replacement, not needed once the job is
        # done, ends (or, ready in time, joins a last round and saves too)
        ref, run, nodes, before = self.start(STEPS, 3, restarts=1)
        victim = self.fault_node(nodes, STEPS)
        self.assert_all_exit(nodes, timeout=120)
        self.assertIn("replacing it alone", victim.text())
        self.assert_in_place(nodes, before, "[56]", 5)
        self.assert_same_bits(ref, run)

    def test_node_killed_at_final_save(self):
        # a whole node dies at the final save: the two others re-form as 4
        # ranks and save; no restart (--max_restarts 0 and exit 0)
        ref, run, nodes, before = self.start(STEPS, 3)
        victim = self.fault_node(nodes, STEPS)
        self.kill_node(victim, before[victim.name])
        survivors = [p for p in nodes if p is not victim]
        self.assert_all_exit(survivors, timeout=120)
        self.assert_in_place(survivors, before, 4, 4)
        self.assert_same_bits(ref, run)

    def test_node_killed_before_last_step(self):
        # a node dies before the last step: the last step's exchange fails
        # and is redone by 4 ranks, then the final save
        ref, run, nodes, before = self.start(STEPS - 1, 3)
        victim = self.fault_node(nodes, STEPS - 1)
        self.kill_node(victim, before[victim.name])
        survivors = [p for p in nodes if p is not victim]
        self.assert_all_exit(survivors, timeout=120)
        self.assert_in_place(survivors, before, 4, 4)
        self.assert_same_bits(ref, run)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
