"""The replica check: after a committed step every rank holds bitwise the
same parameters and optimizer state (the exact sum gives every rank the
same gradient, and a step is deterministic), so a replica that differs went
wrong (a flipped bit in memory, a bad core: silent data corruption).

Every rank digests its parameters and optimizer state, 8 bytes a tensor,
zero-copy over a CPU tensor's memory: XXH3-64 from libxxhash.so.0 (the
library ddplaunch's C side builds with; called through ctypes, no Python
package) where the process can load it, else BLAKE2b from hashlib (about
8 times slower). The algorithm is part of the numeric identity
(numerics.py), so two ranks never compare digests of different kinds.

The comparison rides on the next step's first all-reduce (a SUM, of the
shards' losses and maxima): each rank adds block(h), the 16-bit pieces x of
its digest and their squares, and per piece W * sum(x^2) == sum(x)^2 holds
exactly when every rank's x is the same (Cauchy-Schwarz; the sums are
integers below 2^53, exact in float64, for W below 2^21). Forward and
backward change neither the parameters nor the optimizer's state, so the
state compared is still the committed one, and the check costs no
collective of its own (the last step's check, with no next step, one
all-reduce of 8 numbers). Only when they do not agree: every rank's digest is gathered (one
all-reduce of a world-sized vector), the ranks that hold the most common
digest form the majority when they are more than half, the lowest of them
(or rank 0 when there is no majority) sends its per-tensor digests, and
each rank's first differing tensor is gathered, so that every rank names
every bad rank and the tensor. Elastic heals the minority from a majority
rank's memory (the hand-over) or, with no strict majority (2 replicas, a
tie), stops on every rank (ReplicaMismatch).

DDP_TEST_FLIP=RANK:STEP (tests only): rank RANK flips one bit of its first
parameter right after step STEP's update (parse_flip, flip).
"""
import concurrent.futures
import ctypes
import hashlib
import re
import struct
import threading

import torch

from .. import agent_wire

DIGEST_BYTES = 8


def _xxh3():
    """libxxhash's XXH3_64bits_withSeed, or None where it cannot be loaded."""
    try:
        fn = ctypes.CDLL("libxxhash.so.0").XXH3_64bits_withSeed
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_uint64
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64]
    return fn


_XXH3 = _xxh3()
ALGORITHM = "xxh3" if _XXH3 is not None else "blake2b"


def summary_name(name):
    """named_tensors()'s name as ddp-train names the same tensor in the
    launcher's summary ("0.weight", "optimizer.0.weight.momentum_buffer"),
    one word (agent_wire's name field)."""
    m = re.match(r"optimizer state\[(.*)\]\.(\w+)$", name)
    if m:
        name = "optimizer.%s.%s" % m.groups()
    elif name.startswith("param "):
        name = name[len("param "):]
    return agent_wire.fit_name(name)


def named_tensors(model, optimizer):
    """[(name, tensor)]: the model's parameters, then the optimizer's
    per-parameter state tensors (in the optimizer's parameter order, keys
    sorted); every rank lists them in the same order."""
    names = {id(p): n for n, p in model.named_parameters()}
    out = [("param " + n, p) for n, p in model.named_parameters()]
    i = 0
    for g in optimizer.param_groups:
        for p in g["params"]:
            st = optimizer.state.get(p, {})
            for k in sorted(st):
                if torch.is_tensor(st[k]):
                    out.append(("optimizer state[%s].%s" % (names.get(id(p), i), k), st[k]))
            i += 1
    return out


def _host(t):
    """t itself when it is a contiguous CPU tensor (its memory is read in
    place), else a contiguous CPU copy."""
    t = t.detach()
    if t.device.type != "cpu" or not t.is_contiguous():
        t = t.cpu().contiguous()
    return t


def _digest(t, head):
    n = t.numel() * t.element_size()
    if _XXH3 is not None:
        seed = _XXH3(head, len(head), 0)
        return struct.pack("<Q", _XXH3(t.data_ptr() if n else None, n, seed))
    h = hashlib.blake2b(head, digest_size=DIGEST_BYTES)
    if n:
        h.update((ctypes.c_char * n).from_address(t.data_ptr()))
    return h.digest()


def tensor_digests(pairs):
    """One 8-byte digest (ALGORITHM) per tensor, its dtype and shape
    included."""
    return [_digest(_host(t), ("%s%s" % (t.dtype, tuple(t.shape))).encode())
            for _, t in pairs]


def whole(digests):
    """The state's digest, a 62-bit integer, from the tensors' digests."""
    h = hashlib.blake2b(b"".join(digests), digest_size=8).digest()
    return int.from_bytes(h, "little") >> 2


def majority(values):
    """(value, ranks) of the most common value when more than half of the
    ranks hold it, else None. values: one per rank."""
    counts = {}
    for r, v in enumerate(values):
        counts.setdefault(v, []).append(r)
    best = max(counts.values(), key=lambda rs: (len(rs), -rs[0]))
    if 2 * len(best) <= len(values):
        return None
    return values[best[0]], best


def first_difference(mine, ref):
    """The index of the first tensor digest that differs, len(ref) when
    this rank has more tensors, or -1 when none differs."""
    for i, (a, b) in enumerate(zip(mine, ref)):
        if a != b:
            return i
    return -1 if len(mine) == len(ref) else min(len(mine), len(ref))


class Verdict:
    """What a mismatch found, the same on every rank: step, digests (one per
    rank), majority (its ranks, or None), source (the rank to heal from,
    or None), bad: [(rank, tensor name)] of the ranks outside the majority
    (outside rank 0's digest when there is none)."""

    def __init__(self, step, digests, majority_ranks, bad):
        self.step, self.digests, self.majority, self.bad = step, digests, majority_ranks, bad
        self.source = majority_ranks[0] if majority_ranks else None

    def line(self):
        who = "; ".join("rank %d first in %s" % rb for rb in self.bad)
        if self.majority:
            return ("replica check at step %d: %s differ%s from the majority (ranks %s)"
                    % (self.step, who, "s" if len(self.bad) == 1 else "",
                       ", ".join(map(str, self.majority))))
        return ("replica check at step %d: %s differ%s from rank 0, and no strict majority "
                "of the %d replicas agrees" % (self.step, who, "s" if len(self.bad) == 1
                                               else "", len(self.digests)))


PIECE_BITS, PIECES = 16, 4  # the 62-bit digest in 16-bit pieces
BLOCK = 2 * PIECES


def block(h, device):
    """float64 [BLOCK]: the pieces x of h, then their squares; summed over
    the ranks, agree() tells whether every rank had the same h."""
    xs = [(h >> (PIECE_BITS * i)) & ((1 << PIECE_BITS) - 1) for i in range(PIECES)]
    return torch.tensor(xs + [x * x for x in xs], dtype=torch.float64, device=device)


def agree(summed, world):
    """True when the sum over `world` ranks of their blocks came from one
    digest: W * sum(x^2) == sum(x)^2 for every piece (integer arithmetic)."""
    v = [int(x) for x in summed.tolist()]
    return all(world * v[PIECES + i] == v[i] * v[i] for i in range(PIECES))


BACKGROUND_BYTES = 1 << 20  # a state this large is digested beside the next compute
_pool = None
_pool_lock = threading.Lock()


def _background():
    """The process's one digest thread (made on first use)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(1, "ddplaunch-digest")
        return _pool


class Pending:
    """A check whose digests are taken (after step `step`) and whose
    comparison is still to come: block() rides on the next step's first
    all-reduce and settle() reads the sum, or finish() compares alone.

    A CPU state of BACKGROUND_BYTES or more with XXH3 is digested in the
    process's digest thread while the next step's forward and backward run
    (they only read the parameters and the optimizer's state, and XXH3 runs
    in C without the GIL); block() waits for it."""

    def __init__(self, group, step, pairs):
        self.group, self.step, self.pairs = group, step, pairs
        self._future, self.digests, self.h = None, None, None
        big = sum(t.numel() * t.element_size() for _, t in pairs) >= BACKGROUND_BYTES
        if big and _XXH3 is not None and all(t.device.type == "cpu" for _, t in pairs):
            self._future = _background().submit(tensor_digests, pairs)
        else:
            self._take(tensor_digests(pairs))

    def _take(self, digests):
        self.digests, self.h = digests, whole(digests)

    def block(self):
        if self._future is not None:
            self._take(self._future.result())
            self._future = None
        return block(self.h, self.group.device)

    def settle(self, summed, exchange):
        """None when the summed blocks agree, else the Verdict (examine, a
        collective, which every rank then enters alike)."""
        if self._future is not None:
            self.block()
        if agree(summed, self.group.world):
            return None
        return examine(self.group, self.step, self.pairs, self.digests, self.h, exchange)

    def finish(self, exchange):
        """The comparison in an all-reduce of its own. A collective."""
        t = self.group.allreduce(self.block())
        return self.settle(t, exchange)


def check(group, step, pairs, exchange):
    """None when every rank of the group holds the same digest of pairs
    (named_tensors), else a Verdict (the same on every rank). exchange:
    (group, source, state) -> the source's state on every rank (the
    hand-over's transport). A collective: every rank calls it."""
    return Pending(group, step, pairs).finish(exchange)


def examine(group, step, pairs, digs, h, exchange):
    """The slow half, once the digests differ: every rank's digest, the
    majority, each bad rank's first differing tensor (a Verdict, the same on
    every rank). A collective."""
    every = torch.zeros(group.world, dtype=torch.int64, device=group.device)
    every[group.rank] = h
    group.allreduce(every)
    values = [int(v) for v in every.cpu()]
    maj = majority(values)
    ref = maj[1][0] if maj else 0
    names = [n for n, _ in pairs]
    blob = exchange(group, ref, {"names": names, "digests": [d.hex() for d in digs]})
    ref_names, ref_digs = blob["names"], [bytes.fromhex(d) for d in blob["digests"]]
    firsts = torch.zeros(group.world, dtype=torch.int64, device=group.device)
    firsts[group.rank] = first_difference(digs, ref_digs) + 1
    group.allreduce(firsts)
    good = set(maj[1]) if maj else {r for r, v in enumerate(values) if v == values[0]}
    bad = []
    for r, f in enumerate(int(x) for x in firsts.cpu()):
        if r in good:
            continue
        i = f - 1
        bad.append((r, ref_names[i] if 0 <= i < len(ref_names) else "the list of tensors"))
    return Verdict(step, values, maj[1] if maj else None, bad)


def parse_flip(text):
    """(rank, step) from DDP_TEST_FLIP's "RANK:STEP", or None when unset.
    Raises ValueError naming the variable for anything else."""
    if not text:
        return None
    try:
        rank, step = (int(x) for x in text.split(":"))
        if rank < 0 or step < 0:
            raise ValueError
    except ValueError:
        raise ValueError("DDP_TEST_FLIP=%r: write RANK:STEP (two integers >= 0), or unset it"
                         % text) from None
    return rank, step


def flip(pairs):
    """Flips the lowest bit of the first byte of the first tensor (a
    parameter): a change of one ulp, the smallest corruption there is."""
    for _, t in pairs:
        if t.numel():
            with torch.no_grad():
                b = t.detach().view(-1).view(torch.uint8)
                b[0] ^= 1
            return
