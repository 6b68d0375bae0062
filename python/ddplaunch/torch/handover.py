"""The state a joining process takes from a peer's memory, at the start and
after every re-formation.

One all-reduce (MAX of the step held, -1 for a process with no state, and
of the lowest and highest step held by a rank that trained in a group)
tells which steps the ranks hold. When they differ, or nobody has state
yet, the lowest rank at the highest step broadcasts the model, the
optimizer state and the ledger (state_codec.py: data, no code; the bits
travel as they are), and every rank not at that step takes them. A step
committed on some ranks only (the last all-reduce failed on the others) is
thereby rolled forward: a step is deterministic, so those ranks' state is
the one the others would have computed.

Ranks that trained in a group are at most one step apart: a gap of more is
refused on every rank (HandoverRefused, naming both steps), and a receiver
refuses bytes whose step is more than one from its own. A process whose
state came from a disk checkpoint (load_state_dict before it took part in a
group) is a newcomer: it takes the group's state whatever its step.
"""
import hashlib
import os

import torch
import torch.distributed as dist

from . import state_codec
from .errors import HandoverRefused

_NONE = -(1 << 62)


def _gap(a, b):
    return HandoverRefused(
        "hand-over refused: ranks hold steps %d and %d, more than one step apart; a peer's "
        "in-place state is at most one step ahead, so one of them is not this job's: restart "
        "the job from its checkpoint" % (a, b))


def agree(group, step, trained=True):
    """(lowest, highest, source): the steps held over the group (-1 for no
    state) and the rank that hands its state over, or None when every rank
    holds the same step already. trained: whether this rank's state comes
    from training in a group (False: from a disk checkpoint only). Raises
    HandoverRefused when the highest step is more than one past the lowest
    step of a rank that trained."""
    t_step = step if trained and step >= 0 else None
    t = torch.tensor([step, -step, _NONE if t_step is None else -t_step], dtype=torch.int64,
                     device=group.device)
    group.allreduce(t, dist.ReduceOp.MAX)
    hi, lo, t_lo = int(t[0]), -int(t[1]), (None if int(t[2]) == _NONE else -int(t[2]))
    if t_lo is not None and hi - t_lo > 1:
        raise _gap(t_lo, hi)
    if hi == lo and hi >= 0:
        return lo, hi, None
    mine = group.rank if step == hi else group.world
    r = torch.tensor([mine], dtype=torch.int64, device=group.device)
    group.allreduce(r, dist.ReduceOp.MIN)
    return lo, hi, int(r[0])


def hand_over(group, source, pack, step=-1, trained=True):
    """The source's state (pack() there, at `step`) on every rank of the
    group, or None on the source itself. A receiver at `step` (trained:
    from training in a group) refuses a state more than one step from its
    own. Raises HandoverRefused for bytes that are not a hand-over."""
    wire = state_codec.encode(pack(), step) if group.rank == source else None
    n = torch.tensor([wire.numel() if wire is not None else 0], dtype=torch.int64,
                     device=group.device)
    group.broadcast(n, source)
    if wire is None:
        size = int(n[0])
        if size < state_codec.PREFIX.size or size > _memory_bytes():
            # refused before anything is allocated, on the peer's word
            raise HandoverRefused("a hand-over of %d bytes announced (this machine has %d)"
                                  % (size, _memory_bytes()))
        wire = torch.empty(size, dtype=torch.uint8)
    wire = group.broadcast(wire.to(group.device), source)
    if group.rank == source:
        return None
    got, state = state_codec.decode(wire.cpu())
    if trained and step >= 0 and abs(got - step) > 1:
        raise _gap(min(got, step), max(got, step))
    return state


def share(group, source, state):
    """The source's state (a small tree: state_codec's data) on every rank,
    itself on the source; no step check. A collective."""
    got = hand_over(group, source, lambda: state)
    return state if got is None else got


def _memory_bytes():
    """This machine's physical memory: no state a peer hands over is larger."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def state_digest(sd):
    """SHA-256 (hex) of an Elastic.state_dict()'s bits: the model's tensors
    and the optimizer's per-parameter tensors in key order, and the ledger.
    Two runs that end with the same digest hold byte-identical states."""
    h = hashlib.sha256()

    def feed(name, t):
        t = t.detach().cpu().contiguous().reshape(-1)
        h.update(name.encode())
        h.update(state_codec.tensor_bytes(t.view(torch.uint8)))

    for k, t in sd["model"].items():
        feed("model." + k, t)
    for pid, st in sorted(sd["optimizer"]["state"].items()):
        for k, t in sorted(st.items()):
            if torch.is_tensor(t):
                feed("optim.%s.%s" % (pid, k), t)
    h.update(repr(sorted(sd["ledger"].items())).encode())
    return h.hexdigest()
