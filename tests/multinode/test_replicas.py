"""Replicas checked every step across simulated nodes (issue 25 part 2):
ddp-train with a fixed global batch on 3 nodes x 1 rank (ddplaunch agents on
127.0.0.2-4, c10d, node 0 hosting), rank 1's parameters corrupted by
DDP_TEST_FLIP=1:STEP (one bit flipped right after that step's update):

  Replicas.test_flip_named_on_every_node_and_healed
      every node's ddplaunch names the replica (rank 1, step STEP, the
      tensor) and lists it in its summary.json ("replicas", healed); every
      node exits 0; final.safetensors has the bits of an undisturbed
      1-rank run

  test_replicas.py Replicas
"""
import hashlib
import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from mnlib import MultiNodeCase  # noqa: E402

DDP_TRAIN = os.environ.get("DDP_TRAIN", "ddp-train")
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))
STEPS, FLIP, FLIPPED = 30, 7, "6.bias"
ENV = {"OPENBLAS_NUM_THREADS": "1", "DDP_TIMEOUT_MS": "60000"}


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class Replicas(MultiNodeCase):
    def job(self, ckdir):
        return ["--config", os.path.join(SOURCE, "configs", "digits.ini"), "--max_steps",
                str(STEPS), "--global_batch_size", "64", "--virtual_shards", "8",
                "--checkpoint_dir", ckdir, "--device", "cpu", "--threads", "1"]

    def test_flip_named_on_every_node_and_healed(self):
        one = os.path.join(self.dir, "one")
        ref = subprocess.run([DDP_TRAIN] + self.job(one), env=dict(os.environ, **ENV),
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(ref.returncode, 0, ref.stderr[-2000:])
        ck = os.path.join(self.dir, "ck")
        logs = [os.path.join(self.dir, "logs%d" % i) for i in range(3)]
        env = dict(ENV, DDP_TEST_FLIP="1:%d" % FLIP)
        base = ["--nproc_per_node=1", "--grace_period=5"]
        def node(i, port):
            argv = base + ["--log_dir", logs[i]] + self.c10d(3, port) + [DDP_TRAIN] + \
                self.job(ck)
            return self.cluster.agent(i, argv, None, env)

        nodes = [node(0, 0)]
        port = self.host_port(nodes[0])
        nodes += [node(i, port) for i in (1, 2)]
        self.assert_all_exit(nodes, timeout=240)
        said = ("rank 1's replica differed from the majority's after step %d (first in '%s'): "
                "healed in place" % (FLIP, FLIPPED))
        for i, p in enumerate(nodes):
            self.assertIn(said, p.text(), "node %d did not name it:\n%s" % (i, p.text()[-3000:]))
            with open(os.path.join(logs[i], "latest", "summary.json")) as f:
                self.assertEqual(json.load(f)["replicas"], [
                    {"step": FLIP, "rank": 1, "tensor": FLIPPED, "action": "healed"}])
        got = sha256(os.path.join(ck, "final.safetensors"))
        want = sha256(os.path.join(one, "final.safetensors"))
        print("3 nodes, rank 1 flipped after step %d: named and listed by every node, healed; "
              "final %s, 1 rank %s" % (FLIP, got[:12], want[:12]))
        self.assertEqual(got, want)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
