"""The job as a test watches it from outside (test_never_silent.py): every
process under its agents (each simulated node's ddplaunch), and each
ddp-train's progress page (python/ddplaunch/torch/progress.py's reader, on a
mapping made once per page) and job tag (DDP_JOB_TAG: its /dev/shm names).
"""
import importlib.util
import mmap
import os
import threading
import time

from mnlib import descendants

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "ddp_progress", os.path.join(HERE, "..", "..", "python", "ddplaunch", "torch",
                                 "progress.py"))
progress = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(progress)


def comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return ""


def environ(pid):
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    return dict(kv.split("=", 1) for kv in raw.decode(errors="replace").split("\0") if "=" in kv)


def gone(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(") ", 1)[1][0] == "Z"
    except OSError:
        return True


class Missed(Exception):
    """The phase passed, between two reads of the pages, with the target
    gone with it (a worker that had exited): the trial did not run."""


class Pages(threading.Thread):
    """Watches the job: every process under the agents (kept, to check
    they are gone at the end), each ddp-train's progress page and job tag,
    and the last page read of each."""

    def __init__(self, agents, steps):
        super().__init__(daemon=True)
        self.steps = steps  # the job's last step: every turn reads from the one before
        self.agents = agents  # node index -> Proc
        self.lock = threading.Lock()
        self.seen = set()
        self.tags = set()
        self.files = {}  # worker pid -> (node, page file)
        self.pages = {}  # worker pid -> last page
        self.stop = False

    def scan(self):
        for node, p in list(self.agents.items()):
            for pid in descendants(p.pid):
                if pid in self.seen:
                    continue
                if comm(pid) != "ddp-train":
                    with self.lock:
                        self.seen.add(pid)
                    continue
                env = environ(pid)
                if not env:
                    continue
                with self.lock:
                    self.seen.add(pid)
                    if env.get("DDP_JOB_TAG"):
                        self.tags.add(env["DDP_JOB_TAG"])
                    if env.get(progress.ENV):
                        self.files[pid] = (node, env[progress.ENV])

    def mapped(self, pid, path):
        """The page of pid mapped once (progress.read on it costs no
        system call), or None while it cannot be."""
        m = self.maps.get(pid)
        if m is None:
            try:
                with open(path, "rb") as f:
                    m = self.maps[pid] = mmap.mmap(f.fileno(), progress.SIZE,
                                                   prot=mmap.PROT_READ)
            except (OSError, ValueError):
                return None
        return m

    def run(self):
        self.maps = {}
        n = 0
        while not self.stop:
            if n % 20 == 0:
                self.scan()
            n += 1
            for pid, (_, path) in list(self.files.items()):
                m = self.mapped(pid, path) if pid not in self.pages or not gone(pid) else None
                page = progress.read(m) if m is not None else None
                with self.lock:
                    if page and page["pid"] == pid:
                        self.pages[pid] = page  # a gone worker's last page stays
            # near the end, every read: a shutdown lasts a few milliseconds
            if self.last_step < self.steps - 1:
                time.sleep(0.001)
        for m in self.maps.values():
            m.close()

    @property
    def last_step(self):
        with self.lock:
            return max((p["step"] for p in self.pages.values()), default=0)

    def find(self, pred, nodes, live=True):
        """A worker of one of nodes (a live one with live) whose last page
        satisfies pred: (pid, page) or None."""
        with self.lock:
            for pid, page in self.pages.items():
                if self.files[pid][0] in nodes and pred(page) and not (live and gone(pid)):
                    return pid, page
        return None
