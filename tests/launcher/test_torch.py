"""Torch tests: Debian's PyTorch 1.13 (gloo, CPU) under the real ddplaunch,
and the worker environment compared with torchrun's."""
import errno
import os
import re
import socket
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from launchtest import HELPER, HERE, PYTHON, LaunchCase, free_port, read_env, run  # noqa

SCRIPT = os.path.join(HERE, "ddp_gloo.py")
TORCH_ENV = {"PYTHON_EXEC": PYTHON, "PYTHONPATH": HERE, "OMP_NUM_THREADS": "1"}
OK = re.compile(r"^\[rank (\d)\]: rank \1 ok world=2 steps=(\d+) attempt=(\d+) port=(\d+)$",
                re.M)


class TorchJobs(LaunchCase):
    def check_trained(self, r, attempt="0"):
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        found = OK.findall(r.stdout)
        self.assertEqual(sorted(f[0] for f in found), ["0", "1"], r.stdout)
        self.assertTrue(all(f[2] == attempt for f in found), found)
        return found

    def test_gloo_ddp_on_a_taken_port(self):
        # The user's situation: 23455 is held by another process.
        holder = socket.socket()
        held = True
        try:
            holder.bind(("0.0.0.0", 23455))
            holder.listen(1)
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise
            held = False  # busy for another reason: still the case under test
        try:
            r = self.launch(["--nproc_per_node=2", "--master_port=23455", SCRIPT], timeout=240,
                    env=TORCH_ENV)
            found = self.check_trained(r)
            moved = re.search(r"port 23455 is in use by another process; using (\d+) instead",
                              r.stderr)
            if held:
                self.assertIsNotNone(moved, r.stderr)
            if moved:
                self.assertTrue(all(f[3] == moved.group(1) for f in found), found)
        finally:
            holder.close()

    def test_legacy_local_rank_as_module(self):
        r = self.launch(["--nproc_per_node=2", "--master_port=0", "--pass_local_rank", "-m",
                 "ddp_gloo", "--require_local_rank"], timeout=240, env=TORCH_ENV)
        self.check_trained(r)

    def test_fail_on_attempt0_then_restart_no_python(self):
        r = self.launch(["--nproc_per_node=2", "--master_port=0", "--max_restarts=1", "--no_python",
                 PYTHON, "-u", SCRIPT, "--fail_once_rank=1"], timeout=300, env=TORCH_ENV)
        self.check_trained(r, attempt="1")
        self.assertIn("first failure: rank 1 (local rank 1", r.stderr)
        self.assertIn("exited with code 13", r.stderr)
        self.assertIn("restarting the worker group: restart 1 of 1", r.stderr)

    def test_record_error_file_is_shown(self):
        script = self.path("rec.py")
        with open(script, "w") as f:
            f.write("import os\n"
                    "from torch.distributed.elastic.multiprocessing.errors import record\n"
                    "@record\n"
                    "def main():\n"
                    "    if os.environ['RANK'] == '1':\n"
                    "        raise ValueError('shapes do not match on rank 1')\n"
                    "main()\n")
        r = self.launch(["--nproc_per_node=2", "--master_port=0", script], timeout=240,
                        env=TORCH_ENV)
        self.assertEqual(r.returncode, 1, r.stderr[-3000:])
        self.assertIn("first failure: rank 1 (local rank 1", r.stderr)
        self.assertIn("error file of rank 1: ValueError: shapes do not match on rank 1",
                      r.stderr)


# Names whose values must differ between two runs, or that only one side sets
# for a reason, each with that reason.
ALLOWED = {
    "MASTER_PORT": "each launcher binds its own store port",
    "TORCHELASTIC_ERROR_FILE": "a per-run temporary directory (same attempt_N/RANK/error.json)",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "torch 2.x's name; torchrun 1.13 sets only the old one",
    "LC_CTYPE": "Python 3.11 coerces the C locale in torchrun's own process (PEP 538)",
}


class TorchrunEnv(LaunchCase):
    def dump(self, cmd, outdir, env=None):
        os.mkdir(outdir)
        full = dict(os.environ)
        full.update(env or {})
        r = subprocess.run(cmd + [HELPER, "env", outdir, "x", "--flag"], capture_output=True,
                           text=True, timeout=240, env=full)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        envs = [read_env(os.path.join(outdir, "env.%d.0" % rank)) for rank in (0, 1)]
        for e in envs:  # the dump directory is an argument: name it the same
            for k, v in e.items():
                if v == outdir:
                    e[k] = "<OUTDIR>"
        return envs

    def test_same_environment_as_torchrun(self):
        port = free_port()
        base = {"PYTHONDONTWRITEBYTECODE": "1"}
        theirs = self.dump([PYTHON, "-m", "torch.distributed.run", "-r", "9:1", "-t", "9:1",
                            "--nproc_per_node=2", "--master_port=%d" % port, "--no_python"],
                           self.path("torchrun"), base)
        ours = self.dump([os.environ["DDPLAUNCH"], "--nproc_per_node=2",
                          "--master_port=%d" % port, "--no_python"], self.path("ours"), base)
        for rank in (0, 1):
            t, o = theirs[rank], ours[rank]
            names = set(t) | set(o)
            diff = sorted(n for n in names if t.get(n) != o.get(n) and n not in ALLOWED)
            self.assertEqual(diff, [], "rank %d: %s" % (
                rank, {n: (t.get(n), o.get(n)) for n in diff}))
            for n in ("MASTER_PORT", "TORCHELASTIC_ERROR_FILE"):
                self.assertIn(n, o)
            self.assertTrue(o["TORCHELASTIC_ERROR_FILE"].endswith("/attempt_0/%d/error.json"
                                                                  % rank))
            self.assertTrue(t["TORCHELASTIC_ERROR_FILE"].endswith("/attempt_0/%d/error.json"
                                                                  % rank))
            self.assertEqual(o["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1")
            self.assertEqual(o["RANK"], str(rank))


if __name__ == "__main__":
    unittest.main()
