"""Simulated nodes for the multi-node tests (stdlib only).

A node is a ddplaunch agent with its own loopback address (127.0.0.2,
127.0.0.3, ...) given by --local_addr; its output is read by a thread that
timestamps every line (time.monotonic()) as it arrives, so a test waits for
a line (a condition variable, no polling) and measures from when it came.
Every process a test starts is killed by PID when the test ends, and so is
any process that a hosting agent said keeps its store ("stays up in
process N").
"""
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from waiting import wait_for  # noqa: E402,F401  (re-exported: the tests' one wait_for)

DDPLAUNCH = os.environ.get("DDPLAUNCH", "ddplaunch")
WORKER = os.environ.get("MN_WORKER", "mn_worker")
DDP_RDZVD = os.environ.get("DDP_RDZVD", "ddp-rdzvd")
DDP_HELPER = os.environ.get("LAUNCH_DDP_HELPER", "launch_ddp_helper")

KEPT_RE = re.compile(r"stays up in process (\d+)")
HOST_RE = re.compile(r"hosting the rendezvous store at (\S+):(\d+)")
ROUND_RE = re.compile(r"round (\d+) of run id '[^']*': node (\d+) of (\d+)")
MNW_RE = re.compile(r"MNW (.*)$")


def children(pid):
    """The processes whose parent is pid, from /proc ([] once it is gone)."""
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def descendants(pid):
    """Every process under pid (an agent's ddp-exec shims and their
    workers), from /proc."""
    out, todo = [], [pid]
    while todo:
        found = children(todo.pop())
        out += found
        todo += found
    return out


def free_port(host="127.0.0.1"):
    """A port free on host right now (bound to 0 and read back)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def addr(i):
    """The address of simulated node i (0, 1, ...)."""
    return "127.0.0.%d" % (i + 2)


def fast_conf(**kw):
    """--rdzv_conf with short windows, for tests that wait for them."""
    conf = {"last_call_timeout": 0.3, "close_timeout": 2, "keep_alive_interval": 0.5,
            "keep_alive_max_attempt": 3, "join_timeout": 20}
    conf.update(kw)
    return "--rdzv_conf=" + ",".join("%s=%s" % kv for kv in conf.items())


# The longest a worker failure waits under fast_conf() before it is charged:
# the keep-alive window (0.5 s x 3) + 2 s (the driver's fail_slack_ms, rendezvous/driver/driver.h);
# less once every other node has beaten since (rendezvous/rdzv/rdzv_grace.c)
FAIL_GRACE_S = 3.5


class Proc:
    """A process whose combined output is collected line by line."""

    def __init__(self, cluster, name, argv, env, preexec=None):
        self.cluster = cluster
        self.name = name
        self.argv = argv
        self.lines = []  # (monotonic time, text)
        self.cond = threading.Condition()
        self.t_start = time.monotonic()
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, env=env, text=True,
                                  errors="replace", preexec_fn=preexec)
        self.pid = self.p.pid
        self.t_exit = None
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.p.stdout:
            line = line.rstrip("\n")
            m = KEPT_RE.search(line)
            if m:
                self.cluster.extra_pids.append(int(m.group(1)))
            with self.cond:
                self.lines.append((time.monotonic(), line))
                self.cond.notify_all()
        self.p.wait()
        with self.cond:
            self.t_exit = time.monotonic()
            self.cond.notify_all()

    def wait_line(self, pattern, timeout=20.0, after=0.0):
        """The first line matching `pattern` (a regex) that came at or after
        `after`: (time, match). Fails the test at the deadline."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for t, line in self.lines:
                    if t >= after:
                        m = rx.search(line)
                        if m:
                            return t, m
                left = deadline - time.monotonic()
                if left <= 0 or (self.t_exit is not None and not self._pending()):
                    raise AssertionError("%s: no line matching %r within %.1f s; output:\n%s" %
                                         (self.name, pattern, timeout, self.text()))
                self.cond.wait(left)

    def _pending(self):
        return self.reader.is_alive() and self.t_exit is None

    def wait(self, timeout=30.0):
        """Waits for the process to end and its output to be read; returns
        (exit code, time of the end)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.t_exit is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("%s: still running after %.1f s; output:\n%s" %
                                         (self.name, timeout, self.text()))
                self.cond.wait(left)
        return self.p.returncode, self.t_exit

    def text(self):
        with self.cond:
            return "\n".join(line for _, line in self.lines)

    def workers(self):
        """The MNW lines so far, as dicts."""
        out = []
        with self.cond:
            for t, line in self.lines:
                m = MNW_RE.search(line)
                if m:
                    d = dict(kv.split("=", 1) for kv in m.group(1).split())
                    d["t"] = t
                    out.append(d)
        return out

    def signal(self, sig):
        if self.p.poll() is None:
            os.kill(self.pid, sig)

    def alive(self):
        return self.p.poll() is None


class Cluster:
    """The processes of one test: agents (Node), daemons; all killed at the end."""

    def __init__(self, tmpdir):
        self.tmpdir = tmpdir
        self.procs = []
        self.extra_pids = []

    def env(self, extra=None):
        env = dict(os.environ)
        env["TMPDIR"] = self.tmpdir
        env.pop("DDP_RDZV_TOKEN", None)
        env.update(extra or {})
        return env

    def agent(self, i, args, worker=("run", "0.3"), env=None, name=None, local=True):
        """Starts node i's agent: ddplaunch --local_addr=addr(i) ARGS mn_worker WORKER."""
        argv = [DDPLAUNCH] + (["--local_addr=" + addr(i)] if local else []) + list(args)
        argv += [WORKER] + list(worker) if worker is not None else []
        p = Proc(self, name or "node%d" % i, argv, self.env(env))
        self.procs.append(p)
        return p

    def start(self, name, argv, env=None, preexec=None):
        """Starts argv; preexec runs in the child before the exec (e.g. a
        resource.setrlimit)."""
        p = Proc(self, name, argv, self.env(env), preexec)
        self.procs.append(p)
        return p

    def close(self):
        for p in self.procs:
            if p.alive():
                p.p.kill()
        for p in self.procs:
            try:
                p.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            p.reader.join(timeout=5)
            if not p.reader.is_alive():
                p.p.stdout.close()
        for pid in self.extra_pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class MultiNodeCase(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="ddp_multinode_")
        self.dir = self._tmp.name
        self.cluster = Cluster(self.dir)

    def tearDown(self):
        self.cluster.close()
        self._tmp.cleanup()

    def host_port(self, proc, timeout=20.0):
        """The port a hosting agent reports for its rendezvous store."""
        _, m = proc.wait_line(HOST_RE.pattern, timeout)
        return int(m.group(2))

    def c10d(self, nnodes, port, run_id="job", extra=()):
        return ["--nnodes=%s" % nnodes, "--rdzv_backend=c10d",
                "--rdzv_endpoint=%s:%d" % (addr(0), port), "--rdzv_id=" + run_id] + list(extra)

    def start_c10d(self, n, nnodes=None, nproc=1, worker=("run", "0.3"), run_id="job",
                   extra=(), env=None):
        """Node 0 hosts (port 0, read back), then nodes 1..n-1 join."""
        nnodes = nnodes or n
        base = ["--nproc_per_node=%d" % nproc]
        first = self.cluster.agent(0, base + self.c10d(nnodes, 0, run_id, extra), worker, env)
        port = self.host_port(first)
        nodes = [first] + [self.cluster.agent(i, base + self.c10d(nnodes, port, run_id, extra),
                                              worker, env) for i in range(1, n)]
        return nodes, port

    def assert_all_exit(self, nodes, code=0, timeout=30.0):
        ends = []
        for p in nodes:
            rc, t = p.wait(timeout)
            self.assertEqual(rc, code, "%s exited %s; output:\n%s" % (p.name, rc, p.text()))
            ends.append(t)
        return ends
