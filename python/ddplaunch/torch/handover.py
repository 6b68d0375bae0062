"""The state a joining process takes from a peer's memory, at the start and
after every re-formation.

One all-reduce (MAX of [step, -step]; -1 for a process with no state)
tells the lowest and the highest step held. When they differ, or nobody
has state yet, the lowest rank at the highest step broadcasts the model,
the optimizer state and the ledger (torch.save'd into one byte tensor:
the bits travel as they are), and every rank not at that step takes them.
A step committed on some ranks only (the last all-reduce failed on the
others) is thereby rolled forward: a step is deterministic, so those
ranks' state is the one the others would have computed.
"""
import hashlib
import io

import torch
import torch.distributed as dist


def _dumps(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _loads(data):
    buf = io.BytesIO(data)
    try:
        return torch.load(buf, map_location="cpu", weights_only=False)
    except TypeError:  # torch before weights_only
        return torch.load(buf, map_location="cpu")


def agree(group, step):
    """(lowest, highest, source): the steps held over the group (-1 for no
    state) and the rank that hands its state over, or None when every rank
    holds the same step already."""
    t = torch.tensor([step, -step], dtype=torch.int64, device=group.device)
    group.allreduce(t, dist.ReduceOp.MAX)
    hi, lo = int(t[0]), -int(t[1])
    if hi == lo and hi >= 0:
        return lo, hi, None
    mine = group.rank if step == hi else group.world
    r = torch.tensor([mine], dtype=torch.int64, device=group.device)
    group.allreduce(r, dist.ReduceOp.MIN)
    return lo, hi, int(r[0])


def hand_over(group, source, pack):
    """The source's state (pack() there) on every rank of the group, or
    None on the source itself."""
    data = _dumps(pack()) if group.rank == source else b""
    n = torch.tensor([len(data)], dtype=torch.int64, device=group.device)
    group.broadcast(n, source)
    if group.rank == source:
        payload = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    else:
        payload = torch.empty(int(n[0]), dtype=torch.uint8)
    wire = payload.to(group.device)
    group.broadcast(wire, source)
    if group.rank == source:
        return None
    return _loads(_tobytes(wire.cpu()))


def _tobytes(t):
    """The bytes of a 1-D uint8 CPU tensor (no numpy needed)."""
    out = bytearray(t.numel())
    torch.frombuffer(out, dtype=torch.uint8).copy_(t)
    return bytes(out)


def state_digest(sd):
    """SHA-256 (hex) of an Elastic.state_dict()'s bits: the model's tensors
    and the optimizer's per-parameter tensors in key order, and the ledger.
    Two runs that end with the same digest hold byte-identical states."""
    h = hashlib.sha256()

    def feed(name, t):
        t = t.detach().cpu().contiguous().reshape(-1)
        h.update(name.encode())
        h.update(_tobytes(t.view(torch.uint8)) if t.numel() else b"")

    for k, t in sd["model"].items():
        feed("model." + k, t)
    for pid, st in sorted(sd["optimizer"]["state"].items()):
        for k, t in sorted(st.items()):
            if torch.is_tensor(t):
                feed("optim.%s.%s" % (pid, k), t)
    h.update(repr(sorted(sd["ledger"].items())).encode())
    return h.hexdigest()
