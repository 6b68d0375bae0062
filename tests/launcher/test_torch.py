"""Torch tests: PyTorch (gloo, CPU) under the real ddplaunch, and the worker
environment compared with torchrun's. They run under the interpreter that
runs this file (tests/rendezvous/with_torch.sh picks Debian's torch 1.13 or
the torch 2.x venv), which is also the workers' PYTHON_EXEC. PythonWorkers
needs no torch: a worker whose Python lacks it, and what the summary says."""
import errno
import importlib.metadata
import os
import re
import socket
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from launchtest import HELPER, HERE, LaunchCase, free_port, read_env, run  # noqa

PYTHON = sys.executable  # the interpreter with the torch under test
try:
    TORCH_MAJOR = int(importlib.metadata.version("torch").split(".")[0])
except importlib.metadata.PackageNotFoundError:  # PythonWorkers needs none
    TORCH_MAJOR = 0
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
    "NCCL_ASYNC_ERROR_HANDLING": "torch 1.13's name; torchrun 2.x sets only the new one "
                                 "(ddplaunch sets both, for either torch)",
    "LC_CTYPE": "Python 3.11 coerces the C locale in torchrun's own process (PEP 538)",
    "DDP_JOB_TAG": "ddplaunch's own: the tag in libddp's /dev/shm names, which it sweeps",
    "DDP_AGENT_FD": "ddplaunch's own: the agent channel on which a worker re-forms in place",
    "DDP_AGENT_PID": "ddplaunch's own: the agent channel's peer (ddplaunch's pid), which a "
                     "worker checks before it takes the fd",
    "DDP_PROGRESS_FILE": "ddplaunch's own: the worker's progress page (common/progress.h), "
                         "which the agent reads to name a hang",
    "TORCHELASTIC_SIGNALS_TO_HANDLE": "torchrun 2.x's setting for its own agent process "
                                      "(the signals it handles); workers inherit it but do "
                                      "not read it",
}


class TorchRestarts(LaunchCase):
    RUNS = 10

    def test_gloo_restart_after_first_allreduce(self):
        # Rank 1 exits right after the first all-reduce of attempt 0; the
        # restarted group must rendezvous afresh. torch 2.x workers key the
        # store without an attempt prefix, so a store that kept attempt 0's
        # keys fails here about half the time (stale gloo addresses).
        for run_no in range(self.RUNS):
            r = self.launch(["--nproc_per_node=2", "--master_port=0", "--max_restarts=1",
                             SCRIPT, "--allreduce_only", "--fail_once_rank=1"], timeout=120,
                            env=TORCH_ENV)
            self.assertEqual(r.returncode, 0, "run %d of %d failed:\n%s" % (
                run_no + 1, self.RUNS, r.stderr[-3000:]))
            found = OK.findall(r.stdout)
            self.assertEqual(sorted(f[0] for f in found), ["0", "1"], r.stdout)
            self.assertTrue(all(f[2] == "1" for f in found), found)
            self.assertIn("restarting the worker group: restart 1 of 1", r.stderr)


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
        # -r/-t 9:1 (a local rank that does not exist) work around 1.13's
        # torchrun crashing on its defaults under Python 3.11.
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
            if TORCH_MAJOR >= 2:  # what the ALLOWED entry is about
                self.assertEqual(t.get("TORCHELASTIC_SIGNALS_TO_HANDLE"),
                                 "SIGTERM,SIGINT,SIGHUP,SIGQUIT")
            self.assertEqual(o["RANK"], str(rank))


class PythonWorkers(LaunchCase):
    """A .py program runs under python3 from PATH, or PYTHON_EXEC; a worker
    that cannot import torch gets a summary naming that interpreter and how
    to choose another."""

    def fake_python(self):
        # A python3 that cannot import torch: the system Python without its
        # site directories (where Debian's python3-torch lives).
        d = self.path("bin")
        os.mkdir(d)
        py = os.path.join(d, "python3")
        with open(py, "w") as f:
            f.write("#!/bin/sh\nexec /usr/bin/python3 -S \"$@\"\n")
        os.chmod(py, 0o755)
        script = self.path("train.py")
        with open(script, "w") as f:
            f.write("import sys\nprint('python', sys.executable, flush=True)\nimport torch\n")
        return d, py, script

    def test_missing_torch_names_the_interpreter(self):
        d, py, script = self.fake_python()
        env = {"PATH": d + os.pathsep + os.environ.get("PATH", "")}
        r = self.launch(["--nproc_per_node=2", script], timeout=60, env=env)
        self.assertEqual(r.returncode, 1, r.stderr[-3000:])
        self.assertIn("ModuleNotFoundError: No module named 'torch'", r.stderr)
        self.assertRegex(r.stderr, r"rank \d ran under %s \(the first python3 on PATH\), "
                         r"which cannot import 'torch'; choose the interpreter with "
                         r"PYTHON_EXEC=/path/to/python, or activate the virtual environment "
                         r"that has 'torch'" % re.escape(py))

    def test_missing_torch_under_python_exec(self):
        d, py, script = self.fake_python()
        r = self.launch(["--nproc_per_node=1", script], timeout=60, env={"PYTHON_EXEC": py})
        self.assertEqual(r.returncode, 1, r.stderr[-3000:])
        self.assertIn("rank 0 ran under %s, which cannot import 'torch'" % py, r.stderr)

    def test_other_failures_get_no_hint(self):
        d, py, script = self.fake_python()
        with open(script, "w") as f:
            f.write("raise SystemExit('plain failure')\n")
        r = self.launch(["--nproc_per_node=1", script], timeout=60, env={"PYTHON_EXEC": py})
        self.assertEqual(r.returncode, 1, r.stderr[-3000:])
        self.assertIn("plain failure", r.stderr)
        self.assertNotIn("cannot import", r.stderr)


if __name__ == "__main__":
    unittest.main()
