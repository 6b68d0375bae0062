"""Shared helpers of the launcher's integration tests (stdlib only)."""
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from waiting import wait_for  # noqa: E402  (the tests' one wait_for)

DDPLAUNCH = os.environ.get("DDPLAUNCH", "ddplaunch")
HELPER = os.environ.get("LAUNCH_HELPER", "launch_helper")
PYTHON = "/usr/bin/python3"
HERE = os.path.dirname(os.path.abspath(__file__))


def with_port(args):
    """Tests never take a fixed port: without a port of their own, the store
    binds port 0 (the kernel's choice)."""
    if any(a.startswith(("--master_port", "--master-port", "--standalone", "--help"))
           for a in args):
        return list(args)
    return ["--master_port=0"] + list(args)


def run(args, timeout=60, env=None, **kw):
    """Runs ddplaunch ARGS to the end; returns the CompletedProcess."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([DDPLAUNCH] + with_port(args), capture_output=True, text=True,
                          timeout=timeout, env=full_env, **kw)


def start(args, env=None):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.Popen([DDPLAUNCH] + with_port(args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=full_env)


def pid_alive(pid):
    """True while `pid` exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def marker():
    """A sleep duration no other process on the machine uses: tests look
    for "sleep MARKER" processes in /proc to see what of a job survives."""
    return str(random.randrange(10**7, 10**8))


def marked_pids(*markers):
    """Pids of live processes whose argv is "sleep M" for one of the
    markers (a /proc scan)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if (len(argv) >= 2 and os.path.basename(argv[0]) == b"sleep"
                and argv[1].decode(errors="replace") in markers
                and pid_alive(int(entry))):
            found.append(int(entry))
    return found


def wait_none_left(markers, timeout=10.0):
    """Waits (bounded) until no "sleep MARKER" process is left."""
    try:
        wait_for(lambda: not marked_pids(*markers), timeout, "no process of the job to be left")
    except AssertionError:
        raise AssertionError("still running after %.0f s: %s" % (
            timeout, ", ".join("pid %d" % p for p in marked_pids(*markers))))


def read_env(path):
    env = {}
    with open(path) as f:
        for line in f:
            k, _, v = line.rstrip("\n").partition("=")
            env[k] = v
    return env


def free_port():
    """A port the kernel says is free now (used only where a test must
    name a port to torchrun, which cannot take 0)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class LaunchCase(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="ddplaunch_test_")
        self.dir = self._tmp.name
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        self._tmp.cleanup()

    def start(self, args, env=None):
        p = start(args, dict(self.env(), **(env or {})))
        self.procs.append(p)
        return p

    def env(self):
        # ddplaunch's per-run directory goes in the test's own directory, so
        # even a launcher killed with -9 leaves nothing in /tmp.
        return {"TMPDIR": self.dir}

    def launch(self, args, timeout=60, env=None, **kw):
        return run(args, timeout, dict(self.env(), **(env or {})), **kw)

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def wait_files(self, names, timeout=20.0):
        wait_for(lambda: all(os.path.exists(self.path(n)) for n in names), timeout,
                 "files %s" % names)
