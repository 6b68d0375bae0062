"""The worker's progress page in Python: common/progress.h's layout, written
by ddplaunch.torch for the collectives it issues (Elastic's all-reduces and
broadcasts), its steps and its phases, and read the way the agent reads it.

The agent makes one page per worker (DDP_PROGRESS_SIZE zero bytes) and names
it in DDP_PROGRESS_FILE; shared() maps it once per process (None without
the variable, or when it cannot be mapped: progress is a report, never a
condition for training). Writes are plain stores into the mapping under the
page's sequence lock (gen odd while written) and time.monotonic_ns(),
CLOCK_MONOTONIC as the agent's: no system call per collective.

The layout is the C header's (LAYOUT below, checked against a program
compiled from common/progress.h by tests/python/test_progress.py); a change
there bumps VERSION here too. No torch in this module.
"""
import mmap
import os
import struct
import threading
import time

MAGIC = 0x50504444  # "DDPP", little-endian
VERSION = 1
SIZE = 4096
ENV = "DDP_PROGRESS_FILE"
BEAT_S = 0.1  # a collective that waits beats this often (libddp: PROGRESS_BEAT_MS)

(PHASE_NONE, PHASE_STARTUP, PHASE_REFORM, PHASE_HANDOVER, PHASE_COMPUTE, PHASE_COLLECTIVE,
 PHASE_CHECKPOINT, PHASE_EVAL, PHASE_FINAL, PHASE_SHUTDOWN, PHASE_COUNT) = range(11)
PHASES = ("none", "startup", "reform", "handover", "compute", "collective", "checkpoint",
          "eval", "final", "shutdown")
OP_NONE, OP_ALLREDUCE, OP_BROADCAST, OP_BARRIER, OP_ALLGATHER, OP_OTHER, OP_COUNT = range(7)
OPS = ("none", "allreduce", "broadcast", "barrier", "allgather", "other")

# struct ddp_progress, in order: (field, struct format). Little-endian, the
# natural alignment of each field (no padding: the C header lays them so).
LAYOUT = (
    ("magic", "I"), ("version", "I"), ("gen", "Q"),
    ("pid", "i"), ("round", "i"), ("rank", "i"), ("world", "i"),
    ("phase", "I"), ("op", "I"), ("seq", "Q"), ("bytes", "Q"),
    ("bucket", "i"), ("waiting_on", "i"),
    ("entered_ns", "Q"), ("left_ns", "Q"), ("phase_ns", "Q"),
    ("step", "Q"), ("step_ns", "Q"), ("compute_ns", "Q"), ("wait_ns", "Q"),
    ("written_ns", "Q"), ("shards", "I"), ("reserved0", "I"),
    ("steps_total", "Q"), ("step_ns_sum", "Q"),
)
FORMAT = "<" + "".join(f for _, f in LAYOUT)
STRUCT_SIZE = struct.calcsize(FORMAT)
OFFSETS = {}
_off = 0
for _name, _f in LAYOUT:
    OFFSETS[_name] = _off
    _off += struct.calcsize("<" + _f)
del _off, _name, _f
_GEN = struct.Struct("<Q")


def read(buf):
    """A consistent copy of the page in buf (an mmap or bytes-like of at
    least STRUCT_SIZE bytes) as a dict of LAYOUT's fields, or None while
    the worker has not written yet or kept writing (a few tries, as
    ddp_progress_read)."""
    for _ in range(8):
        g = _GEN.unpack_from(buf, OFFSETS["gen"])[0]
        if g & 1:
            continue
        raw = bytes(buf[:STRUCT_SIZE])
        if _GEN.unpack_from(buf, OFFSETS["gen"])[0] != g:
            continue
        page = dict(zip((n for n, _ in LAYOUT), struct.unpack(FORMAT, raw)))
        if page["magic"] != MAGIC or page["version"] != VERSION:
            return None
        return page
    return None


def read_file(path):
    """read() of the page file at path (None: not written yet, or absent)."""
    try:
        with open(path, "rb") as f:
            with mmap.mmap(f.fileno(), SIZE, prot=mmap.PROT_READ) as m:
                return read(m)
    except (OSError, ValueError):
        return None


class Page:
    """The writer of one mapped page. One writer per page: the methods take
    a lock, so the training thread and a helper thread may both report."""

    def __init__(self, m):
        self._m = m
        self._lock = threading.Lock()
        self._base = PHASE_NONE
        self._inside = False
        self._seq = 0
        self._fields = dict.fromkeys((n for n, _ in LAYOUT), 0)
        self._first_write()

    # -- the sequence lock -------------------------------------------------

    def _store(self, now, **kv):
        """gen odd, the changed fields, written_ns, gen even."""
        f = self._fields
        f["gen"] += 1
        _GEN.pack_into(self._m, OFFSETS["gen"], f["gen"])
        kv["written_ns"] = now
        m = self._m
        for name, value in kv.items():
            f[name] = value
            _PACK[name](m, OFFSETS[name], value)
        f["gen"] += 1
        _GEN.pack_into(self._m, OFFSETS["gen"], f["gen"])

    def _first_write(self):
        g = _GEN.unpack_from(self._m, OFFSETS["gen"])[0]
        self._fields["gen"] = g + (g & 1)  # an earlier writer that died mid-write
        now = time.monotonic_ns()
        self._store(now, pid=os.getpid(), round=-1, rank=-1, world=-1, phase=PHASE_NONE,
                    op=OP_NONE, seq=0, bytes=0, bucket=-1, waiting_on=-1, entered_ns=0,
                    left_ns=0, phase_ns=now, step=0, step_ns=0, compute_ns=0, wait_ns=0,
                    shards=0, steps_total=0, step_ns_sum=0, magic=MAGIC, version=VERSION)

    def _shown(self):
        if self._inside and self._base == PHASE_COMPUTE:
            return PHASE_COLLECTIVE
        return self._base

    def _phase_kv(self, now):
        shown = self._shown()
        if shown == self._fields["phase"]:
            return {}
        return {"phase": shown, "phase_ns": now}

    # -- what the package reports -----------------------------------------

    def round(self, round_, rank, world):
        """A new round's group: its identity; collectives count from 1 again;
        the phase becomes COMPUTE."""
        with self._lock:
            now = time.monotonic_ns()
            self._seq = 0
            self._inside = False
            self._base = PHASE_COMPUTE
            self._store(now, round=round_, rank=rank, world=world, op=OP_NONE, seq=0, bytes=0,
                        bucket=-1, waiting_on=-1, entered_ns=0, left_ns=0,
                        **self._phase_kv(now))

    def phase(self, phase):
        """The phase from now on (not COLLECTIVE: enter() shows it)."""
        if not PHASE_NONE < phase < PHASE_COUNT or phase == PHASE_COLLECTIVE:
            raise ValueError("progress phase %r: one of STARTUP, REFORM, HANDOVER, COMPUTE, "
                             "CHECKPOINT, EVAL, FINAL, SHUTDOWN" % (phase,))
        with self._lock:
            now = time.monotonic_ns()
            self._base = phase
            self._store(now, **self._phase_kv(now))

    def enter(self, op, nbytes, bucket=-1):
        """Entering the round's next collective; returns its number. (The
        two per collective, enter and leave, store their fields directly:
        they run around every collective.)"""
        with self._lock:
            now = time.monotonic_ns()
            self._seq += 1
            self._inside = True
            f, m = self._fields, self._m
            shown = self._shown()
            gen = f["gen"] + 1
            _GEN.pack_into(m, _OFF_GEN, gen)
            _ENTER.pack_into(m, _OFF_PHASE, shown, op, self._seq, nbytes, bucket, -1, now)
            if shown != f["phase"]:
                _GEN.pack_into(m, _OFF_PHASE_NS, now)
                f["phase"], f["phase_ns"] = shown, now
            _GEN.pack_into(m, _OFF_WRITTEN, now)
            f["gen"] = gen + 1
            _GEN.pack_into(m, _OFF_GEN, gen + 1)
            f.update(op=op, seq=self._seq, bytes=nbytes, bucket=bucket, waiting_on=-1,
                     entered_ns=now, written_ns=now)
            return self._seq

    def leave(self):
        """The collective entered last ended (well or not)."""
        with self._lock:
            now = time.monotonic_ns()
            self._inside = False
            f, m = self._fields, self._m
            shown = self._base
            gen = f["gen"] + 1
            _GEN.pack_into(m, _OFF_GEN, gen)
            _I32.pack_into(m, _OFF_WAITING, -1)
            _GEN.pack_into(m, _OFF_LEFT, now)
            if shown != f["phase"]:
                _U32.pack_into(m, _OFF_PHASE, shown)
                _GEN.pack_into(m, _OFF_PHASE_NS, now)
                f["phase"], f["phase_ns"] = shown, now
            _GEN.pack_into(m, _OFF_WRITTEN, now)
            f["gen"] = gen + 1
            _GEN.pack_into(m, _OFF_GEN, gen + 1)
            f.update(waiting_on=-1, left_ns=now, written_ns=now)
            return now

    def beat(self):
        """Inside a collective that waits: written_ns, the heartbeat, when
        the last write is a beat old (a waiting rank beats, a stopped one
        does not)."""
        with self._lock:
            now = time.monotonic_ns()
            if now - self._fields["written_ns"] >= BEAT_S * 1e9:
                self._store(now)

    def step(self, step, step_ns, compute_ns, wait_ns, shards):
        """A committed step: the steps so far, its duration, its time
        outside and inside collectives, the shards this rank computed."""
        with self._lock:
            f = self._fields
            self._store(time.monotonic_ns(), step=int(step), step_ns=int(step_ns),
                        compute_ns=int(compute_ns), wait_ns=int(wait_ns), shards=int(shards),
                        steps_total=(f["steps_total"] + 1) & _U64,
                        step_ns_sum=(f["step_ns_sum"] + int(step_ns)) & _U64)


_PACK = {n: struct.Struct("<" + f).pack_into for n, f in LAYOUT}
# enter() and leave(): phase, op, seq, bytes, bucket, waiting_on and
# entered_ns lie back to back, stored at once
_ENTER = struct.Struct("<IIQQiiQ")
assert OFFSETS["entered_ns"] + 8 - OFFSETS["phase"] == _ENTER.size
_U32, _I32 = struct.Struct("<I"), struct.Struct("<i")
_U64 = (1 << 64) - 1  # the C writer's counters wrap
_OFF_GEN, _OFF_PHASE, _OFF_PHASE_NS = OFFSETS["gen"], OFFSETS["phase"], OFFSETS["phase_ns"]
_OFF_WAITING, _OFF_LEFT, _OFF_WRITTEN = (OFFSETS["waiting_on"], OFFSETS["left_ns"],
                                         OFFSETS["written_ns"])
_shared = None
_shared_lock = threading.Lock()
_opened = False


def shared(env=None):
    """The process's page (mapped at the first call from DDP_PROGRESS_FILE,
    which is then removed from the environment, so the script's children
    never write it), or None without one."""
    global _shared, _opened
    with _shared_lock:
        if _opened:
            return _shared
        _opened = True
        env = os.environ if env is None else env
        path = env.pop(ENV, None)
        if not path:
            return None
        if path.count("/") == 1 and not os.path.exists(path):
            path = "/dev/shm" + path  # a POSIX shared-memory name, as libddp takes it
        try:
            with open(path, "r+b") as f:
                if os.fstat(f.fileno()).st_size < SIZE:
                    return None
                m = mmap.mmap(f.fileno(), SIZE, mmap.MAP_SHARED,
                              mmap.PROT_READ | mmap.PROT_WRITE)
        except (OSError, ValueError):
            return None
        _shared = Page(m)
        return _shared
