"""Naming a persistently slow rank, the same way as ddp-train
(worker/train/straggler.h, loop_balance.c): each step every rank's
timings of its last completed step (compute seconds, shards, seconds in
collectives) and who it is (node, host) travel in the step's first
all-reduce, one row of ROW floats per rank written by that rank and 0
elsewhere (the sum is a copy), so every rank feeds the same samples to the
same Detector and names the same ranks at the same step.

Detector: per rank, medians over the last WINDOW samples of its seconds per
shard (compute) and of its time in collectives not spent waiting for a
slower rank's compute (link). A rank is named after `persist` consecutive
samples over `ratio` x the others' median lasting MIN_S together (the job's
step: the slowest rank's compute and wait; compute first; link also needs
LINK_MIN_S and LINK_SHARE of the median step more than the others), and
cleared after as long under 1 + (ratio - 1) / 2. Pure: no I/O, no clock.
"""
import math
import os
import socket

WINDOW = 5
LINK_MIN_S = 0.002
LINK_SHARE = 0.2
MIN_S = 0.5
ROW = 19  # floats per rank: compute, wait, shards, node, 15 x 3 host bytes
HOST_MAX = 45
NONE, COMPUTE, LINK = "none", "compute", "link"


def _median(xs):
    v = sorted(x for x in xs if x > 0.0 and math.isfinite(x))
    return v[(len(v) - 1) // 2] if v else 0.0


class _Rank:
    def __init__(self):
        self.shard_s = [0.0] * WINDOW
        self.link_s = [0.0] * WINDOW
        self.step_s = [0.0] * WINDOW
        self.cost = self.link = self.step = 0.0
        self.slower = 0.0
        self.cause = NONE
        self.named = NONE
        self.over = self.under = 0
        self.over_s = self.under_s = 0.0


class Detector:
    def __init__(self, world, ratio=1.5, persist=4):
        if world < 1 or not ratio > 1.0 or persist < 1:
            raise ValueError("world >= 1, ratio > 1, persist >= 1")
        self.world, self.ratio, self.persist = world, ratio, persist
        self.n = 0
        self.r = [_Rank() for _ in range(world)]

    def _push(self, samples):
        slot = self.n % WINDOW
        slowest = max(s[0] for s in samples)
        self.step_s = max(s[0] + s[1] for s in samples)
        for q, (compute, wait, shards) in zip(self.r, samples):
            skew = slowest - compute
            q.shard_s[slot] = compute / shards if shards > 0 else 0.0
            q.link_s[slot] = max(wait - skew, 1e-9) if wait > 0.0 else 0.0
            q.step_s[slot] = compute + wait
            q.cost, q.link, q.step = _median(q.shard_s), _median(q.link_s), _median(q.step_s)

    def _others(self, me, attr):
        return _median([getattr(q, attr) for i, q in enumerate(self.r) if i != me])

    def _judge(self, i, band):
        q = self.r[i]
        oc, ol, os_ = (self._others(i, a) for a in ("cost", "link", "step"))
        rc = q.cost / oc if oc > 0.0 and q.cost > 0.0 else 0.0
        rl = q.link / ol if ol > 0.0 and q.link > 0.0 else 0.0
        q.slower = rc
        if rc > band:
            return COMPUTE
        if rl > band and q.link - ol >= max(LINK_MIN_S, LINK_SHARE * os_):
            q.slower = rl
            return LINK
        return NONE

    def update(self, samples):
        """samples: (compute_s, wait_s, shards) per rank, in rank order.
        Returns the ranks named or cleared by this sample."""
        self._push(samples)
        self.n += 1
        if self.world < 2:
            return []
        clear = 1.0 + (self.ratio - 1.0) / 2.0
        changed = []
        for i, q in enumerate(self.r):
            over = self._judge(i, self.ratio)
            under = self._judge(i, clear) == NONE
            q.cause = over
            q.over = q.over + 1 if over != NONE else 0
            q.over_s = q.over_s + self.step_s if over != NONE else 0.0
            q.under = q.under + 1 if under else 0
            q.under_s = q.under_s + self.step_s if under else 0.0
            if q.named == NONE and q.over >= self.persist and q.over_s >= MIN_S:
                q.named = over
                changed.append(i)
            elif q.named != NONE and q.under >= self.persist and q.under_s >= MIN_S:
                q.named = NONE
                changed.append(i)
        return changed


def identity():
    """(node, host) of this process: GROUP_RANK (-1 unknown), DDP_LOCAL_ADDR
    or the host name, at most HOST_MAX bytes."""
    node = int(os.environ.get("GROUP_RANK", "-1") or -1)
    host = os.environ.get("DDP_LOCAL_ADDR") or socket.gethostname() or "?"
    return node, host.encode("ascii", "replace")[:HOST_MAX].decode("ascii")


def pack(row, last, node, host):
    """This rank's row (a sequence of ROW floats, zeroed): last = (compute,
    wait, shards) of its last completed step, or None."""
    if last is not None:
        row[0], row[1], row[2] = last
    row[3] = node
    data = host.encode("ascii")[:HOST_MAX]
    for i, b in enumerate(data):
        row[4 + i // 3] += float(b << (8 * (i % 3)))


def unpack(row):
    """((compute, wait, shards), node, host) from a rank's row."""
    host = bytearray()
    for i in range(HOST_MAX):
        host.append((int(row[4 + i // 3]) >> (8 * (i % 3))) & 0xFF)
    host = bytes(host).split(b"\0")[0].decode("ascii", "replace") or "?"
    return (float(row[0]), float(row[1]), int(row[2])), int(row[3]), host


def line(step, rank, node, host, q):
    """The one line that names or clears a rank (the C trainer's words)."""
    if q.named != NONE:
        return ("step %d: straggler: rank %d (node %d, host %s) is %.2fx slower than the "
                "others (%s)" % (step, rank, node, host, q.slower, q.named))
    return ("step %d: straggler: rank %d (node %d, host %s) is no longer slower (%.2fx)" %
            (step, rank, node, host, q.slower))
