"""The exact sum of the virtual shards' gradients, as worker/train/shards.c
does it in C, with int64 in place of integer-valued doubles.

Each shard's gradient of parameter tensor t is scaled by 2^s_t and rounded
(half to even) to an int64; the integers of every shard are summed, on this
rank and then over the process group, and the sum is scaled back once and
divided by V. s_t is the same on every rank: it comes from the largest
|gradient| of tensor t over all V shards (every rank has every shard's
maximum after one all-reduce), chosen so that V integers of at most that
size sum to at most 2^62. Integer addition is associative, so any spread of
the shards over ranks and any all-reduce order gives the same bits. Error
against the exact mean: at most 2^-s_t / 2 per element, i.e. about
max|grad| x 2^ceil(log2 V) x 2^-62, far below float32's rounding of the
result. Pure tensor arithmetic: no process group.
"""
import math

import torch

HEADROOM_BITS = 62  # the sum of V integers stays within int64


class ExactSum:
    """The fixed point of a list of parameters (the order is the wire
    order: every rank must pass the same list)."""

    def __init__(self, params):
        self.params = list(params)
        self.numels = [p.numel() for p in self.params]
        self.total = sum(self.numels)
        self._counts = torch.tensor(self.numels, dtype=torch.int64)

    def flatten(self):
        """The parameters' current gradients as one float64 vector (zeros
        for a parameter without one)."""
        parts = [p.grad.detach().reshape(-1).to(torch.float64) if p.grad is not None else
                 torch.zeros(p.numel(), dtype=torch.float64, device=p.device)
                 for p in self.params]
        if not parts:
            return torch.zeros(0, dtype=torch.float64)
        return torch.cat(parts)

    def maxabs(self, flat):
        """Per tensor, the largest |x| of flat (NaN where one is NaN)."""
        out = torch.zeros(len(self.params), dtype=torch.float32, device=flat.device)
        off = 0
        for i, n in enumerate(self.numels):
            if n:
                part = flat[off:off + n]
                out[i] = part.abs().max().to(torch.float32)  # max keeps a NaN
            off += n
        return out

    def exponents(self, maxima, nshards):
        """s_t per tensor from the largest |grad| over all shards (a tensor of
        len(params) floats). Raises FloatingPointError naming the tensor
        when a maximum is not finite: every rank sees the same maxima, so
        every rank stops at the same step."""
        bits = max(0, (int(nshards) - 1).bit_length())
        out = []
        for i, m in enumerate(maxima.tolist()):
            if not math.isfinite(m):
                raise FloatingPointError(
                    "the gradient of parameter %d %s is not finite: lower the learning "
                    "rate (or clip the gradients)" % (i, tuple(self.params[i].shape)))
            if m == 0.0:
                out.append(0)
                continue
            _, e = math.frexp(m)  # m = f * 2^e, 0.5 <= f < 1
            out.append(min(HEADROOM_BITS - bits - e, 1000))
        return out

    def _per_element(self, values, device):
        v = torch.tensor(values, dtype=torch.float64)
        return torch.repeat_interleave(v, self._counts).to(device)

    def quantize(self, flat, exps):
        """round(flat * 2^s_t) as int64 (exact: a float times a power of
        two, then one rounding to an integer of at most 2^62)."""
        scale = self._per_element([math.ldexp(1.0, s) for s in exps], flat.device)
        return torch.round(flat * scale).to(torch.int64)

    def dequantize(self, q, exps, nshards):
        """The mean: q * 2^-s_t / nshards, per tensor, shaped and typed as
        the parameters."""
        inv = self._per_element([math.ldexp(1.0, -s) for s in exps], q.device)
        flat = q.to(torch.float64) * inv / float(nshards)
        out, off = [], 0
        for p, n in zip(self.params, self.numels):
            out.append(flat[off:off + n].view(p.shape).to(p.dtype))
            off += n
        return out
