"""A worker slowed from outside (stdlib only), and the shard-mode job that
the straggler test and bench run (test_straggler.py, tests/bench/
straggler_bench.py).

Throttle(pid) caps a running process at 5 ms of CPU per 10 ms, the way a
throttling GPU or a noisy neighbour halves a rank, with the first that
works here:
  - cgroup v2 with the cpu controller: a new cgroup beside the job's
    (<cgroup2 mount>/ddp-straggler-PID, cpu.max "5000 10000"); not inside
    the job's own cgroup (launcher/node/footprint.h), whose processes
    forbid controllers in its children (cgroup v2's no-internal-process
    rule);
  - cgroup v1's cpu controller (cpu.cfs_period_us 10000, cpu.cfs_quota_us
    5000), a hierarchy of its own that leaves the job's v2 cgroup alone;
  - else SIGSTOP / SIGCONT, 5 ms each, from a thread of the test.
`how` says which. release() lifts it and removes the cgroup.

run_job() runs ddp-train on NODES simulated nodes x 1 rank (c10d, node 0
hosting) with --global_batch_size G --virtual_shards 24, throttles node
SLOW's worker once rank 0's metrics show step `slow_at`, and returns what
the test and the bench read: every step's time (rank 0's metrics records),
the straggler and plan records, each node's output, the final checkpoint.
"""
import json
import os
import re
import signal
import threading
import time

from mnlib import descendants, fast_conf, wait_for

DDP_TRAIN = os.environ.get("DDP_TRAIN", "ddp-train")
TRAIN_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "DDP_TIMEOUT_MS": "60000"}
SHARDS = 24
# Steps of about 270 ms on 2 ranks here (540 ms on one), 24 shards.
JOB = ["--data", "synthetic", "--synthetic_samples", "16384", "--synthetic_features", "256",
       "--synthetic_classes", "10", "--hidden", "1024,1024", "--held_out", "0",
       "--eval_every_epoch", "false", "--lr", "0.02", "--seed", "3", "--threads", "1",
       "--global_batch_size", "6144", "--virtual_shards", str(SHARDS), "--device", "cpu",
       "--log_every", "1"]
NAMED_RE = re.compile(r"step (\d+): straggler: rank (\d+) \(node (-?\d+), host (\S+)\) is "
                      r"([\d.]+)x slower than the others \((\w+)\)")


def _cgroup2_root():
    with open("/proc/self/mounts") as f:
        for line in f:
            dev, mnt, fstype = line.split()[:3]
            if fstype == "cgroup2":
                return mnt
    return None


class Shield:
    """The job's workers in a cgroup v1 cpu group of their own with a large
    cpu.shares, so that on a shared machine (other tests, builds) the
    workers get their CPU first and the cap is the one slowdown that a rank
    sees (a CPU quota binds only when the process would run longer without
    it). Nothing where cgroup v1's cpu controller cannot be used: `dir`
    None."""
    SHARES = 65536

    def __init__(self, pids):
        self.dir = None
        root = "/sys/fs/cgroup/cpu"
        if not os.path.exists(os.path.join(root, "cpu.shares")):
            return
        path = os.path.join(root, "ddp-straggler-job-%d" % os.getpid())
        try:
            os.mkdir(path)
            self.dir = path
            with open(os.path.join(path, "cpu.shares"), "w") as f:
                f.write(str(self.SHARES))
            for pid in pids:
                with open(os.path.join(path, "cgroup.procs"), "w") as f:
                    f.write(str(pid))
        except OSError:
            self.release()

    def release(self):
        if not self.dir:
            return
        try:
            with open(os.path.join(self.dir, "cgroup.procs")) as f:
                pids = f.read().split()
            for pid in pids:
                with open(os.path.join(os.path.dirname(self.dir), "cgroup.procs"), "w") as f:
                    f.write(pid)
        except OSError:
            pass
        try:
            os.rmdir(self.dir)
        except OSError:
            pass
        self.dir = None


class Throttle:
    QUOTA_US, PERIOD_US = 5000, 10000

    def __init__(self, pid, parent=None):
        """parent: a cgroup v1 cpu directory to make the cgroup in (a
        Shield's), else the hierarchy's root."""
        self.pid = pid
        self.parent = parent
        self.dir = None
        self.thread = None
        self.stop = threading.Event()
        for how in (self._v2, self._v1):
            try:
                if how():
                    return
            except OSError:
                self._rmdir()
        self.how = "SIGSTOP/SIGCONT 5 ms / 5 ms"
        self.thread = threading.Thread(target=self._duty, daemon=True)
        self.thread.start()

    def _write(self, name, value):
        with open(os.path.join(self.dir, name), "w") as f:
            f.write(value)

    def _v2(self):
        root = _cgroup2_root()
        if not root or not os.path.exists(os.path.join(root, "cgroup.controllers")):
            return False
        with open(os.path.join(root, "cgroup.controllers")) as f:
            if "cpu" not in f.read().split():
                return False
        with open(os.path.join(root, "cgroup.subtree_control"), "w") as f:
            f.write("+cpu")
        self.dir = os.path.join(root, "ddp-straggler-%d" % self.pid)
        os.mkdir(self.dir)
        self._write("cpu.max", "%d %d" % (self.QUOTA_US, self.PERIOD_US))
        self._write("cgroup.procs", str(self.pid))
        self.how = "cgroup v2 cpu.max \"%d %d\"" % (self.QUOTA_US, self.PERIOD_US)
        return True

    def _v1(self):
        root = "/sys/fs/cgroup/cpu"
        if not os.path.exists(os.path.join(root, "cpu.cfs_quota_us")):
            return False
        self.dir = os.path.join(self.parent or root, "ddp-straggler-%d" % self.pid)
        os.mkdir(self.dir)
        self._write("cpu.cfs_period_us", str(self.PERIOD_US))
        self._write("cpu.cfs_quota_us", str(self.QUOTA_US))
        self._write("cgroup.procs", str(self.pid))
        self.how = "cgroup v1 cpu.cfs_quota_us %d per %d" % (self.QUOTA_US, self.PERIOD_US)
        return True

    def _duty(self):
        while not self.stop.is_set():
            try:
                os.kill(self.pid, signal.SIGSTOP)
                time.sleep(self.QUOTA_US / 1e6)
                os.kill(self.pid, signal.SIGCONT)
            except ProcessLookupError:
                return
            time.sleep((self.PERIOD_US - self.QUOTA_US) / 1e6)

    def _rmdir(self):
        if self.dir and os.path.isdir(self.dir):
            try:
                os.rmdir(self.dir)
            except OSError:
                pass

    def release(self):
        """Lifts the cap (the process, when alive, goes back to the root
        of the hierarchy) and removes the cgroup."""
        if self.thread:
            self.stop.set()
            self.thread.join()
            try:
                os.kill(self.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            return
        if self.dir:
            try:
                with open(os.path.join(os.path.dirname(self.dir), "cgroup.procs"), "w") as f:
                    f.write(str(self.pid))
            except OSError:
                pass  # gone already
            self._rmdir()


def train_pid(agent):
    """The ddp-train process under an agent."""
    for pid in descendants(agent.pid):
        try:
            with open("/proc/%d/comm" % pid) as f:
                if f.read().strip() == "ddp-train":
                    return pid
        except OSError:
            pass
    return None


def records(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.endswith("\n")]
    except OSError:
        return []


def last_step(path):
    steps = [r["step"] for r in records(path) if r["kind"] == "train"]
    return steps[-1] if steps else 0


def run_job(case, tag, nodes, steps, slow_at, slow_node, release_at=None, rebalance=True,
            extra=(), launcher=lambda i: [], during=None):
    """Runs the job under `case` (a MultiNodeCase); slow_at None: nobody
    is slowed; release_at: the cap is lifted once rank 0 has finished that
    step. Returns a dict: throttle (how), slowed_at, released_at (the step
    rank 0 had finished when the cap came, went), times {step: unix time}, stragglers,
    plans (records), outputs (each node's text), final (the checkpoint's
    path). launcher(i): more ddplaunch options for node i; during(procs):
    called once the cap is on (before it is lifted)."""
    ck = os.path.join(case.dir, tag)
    metrics = os.path.join(case.dir, tag + ".jsonl")
    prog = [DDP_TRAIN] + JOB + ["--max_steps", str(steps), "--checkpoint_dir", ck,
                                "--metrics", metrics] + list(extra)
    if not rebalance:
        prog.append("--no-rebalance")
    base = ["--nproc_per_node=1", "--nnodes=%d" % nodes, "--rdzv_backend=c10d",
            "--rdzv_id=" + tag, fast_conf(), "--max_restarts=0"]
    first = case.cluster.agent(0, base + launcher(0) + ["--rdzv_endpoint=127.0.0.2:0"] + prog,
                               None,
                               TRAIN_ENV, name=tag + "0")
    port = case.host_port(first)
    procs = [first] + [case.cluster.agent(
        i, base + launcher(i) + ["--rdzv_endpoint=127.0.0.2:%d" % port] + prog, None, TRAIN_ENV,
        name="%s%d" % (tag, i)) for i in range(1, nodes)]
    out = {"throttle": None, "slowed_at": None, "released_at": None}
    throttle = None
    pids = [wait_for(lambda p=p: train_pid(p), 60, "%s's ddp-train" % p.name) for p in procs]
    shield = Shield(pids)
    case.addCleanup(shield.release)
    out["shield"] = shield.dir is not None
    if slow_at is not None:
        wait_for(lambda: last_step(metrics) >= slow_at, 120, "step %d of %s" % (slow_at, tag))
        throttle = Throttle(pids[slow_node], shield.dir)
        out["slowed_at"] = last_step(metrics)
        out["throttle"] = throttle.how
    try:
        if throttle and during:
            during(procs)
        if throttle and release_at is not None:
            wait_for(lambda: last_step(metrics) >= release_at, 300, "step %d" % release_at)
            throttle.release()
            out["released_at"] = last_step(metrics)
        for p in procs:
            rc, _ = p.wait(600)
            case.assertEqual(rc, 0, "%s exited %s:\n%s" % (p.name, rc, p.text()[-4000:]))
    finally:
        if throttle:
            throttle.release()
        shield.release()
    recs = records(metrics)
    out["times"] = {r["step"]: r["time"] for r in recs if r["kind"] == "train"}
    out["stragglers"] = [r for r in recs if r["kind"] == "straggler"]
    out["plans"] = [r for r in recs if r["kind"] == "plan"]
    out["outputs"] = [p.text() for p in procs]
    out["final"] = os.path.join(ck, "final.safetensors")
    return out


def step_time(times, lo, hi):
    """Mean seconds per step over steps (lo, hi] of rank 0's records."""
    return (times[hi] - times[lo]) / (hi - lo)


def reference(case, steps):
    """The same job in one process, no launcher: the final checkpoint."""
    ck = os.path.join(case.dir, "one")
    p = case.cluster.start("one", [DDP_TRAIN] + JOB + ["--max_steps", str(steps),
                                                       "--checkpoint_dir", ck], TRAIN_ENV)
    rc, _ = p.wait(600)
    case.assertEqual(rc, 0, p.text())
    return os.path.join(ck, "final.safetensors")
