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
        """The parameters' current gradients as one vector (zeros for a
        parameter without one), in their dtype when they share one (a float
        scaled by a power of two is exact in float64 later), else float64."""
        grads = [p.grad.detach().reshape(-1) if p.grad is not None else
                 torch.zeros(p.numel(), dtype=p.dtype, device=p.device) for p in self.params]
        if not grads:
            return torch.zeros(0, dtype=torch.float64)
        if len({g.dtype for g in grads}) > 1:
            grads = [g.to(torch.float64) for g in grads]
        return torch.cat(grads)

    def maxabs_rows(self, rows):
        """rows: k flattened gradients (k x total). Per row and tensor, the
        largest |x| (k x len(params) float32; NaN where one is NaN, since max
        keeps a NaN)."""
        k = rows.shape[0]
        if not self.total:
            return torch.zeros(k, len(self.params), dtype=torch.float32, device=rows.device)
        a = rows.abs()
        return torch.stack([seg.max(dim=1).values if seg.shape[1] else
                            torch.zeros(k, dtype=a.dtype, device=a.device)
                            for seg in a.split(self.numels, dim=1)], dim=1).to(torch.float32)

    def maxabs(self, flat):
        """maxabs_rows of one gradient."""
        return self.maxabs_rows(flat.unsqueeze(0))[0]

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

    def quantize_sum(self, rows, exps):
        """The sum over rows (k x total) of round(x * 2^s_t) as int64: a float
        times a power of two is exact in float64, then one rounding to an
        integer of at most 2^62 / V, and integer sums are exact."""
        scale = self._per_element([math.ldexp(1.0, s) for s in exps], rows.device)
        return torch.round(rows.to(torch.float64) * scale).to(torch.int64).sum(dim=0)

    def quantize(self, flat, exps):
        """quantize_sum of one gradient."""
        return self.quantize_sum(flat.unsqueeze(0), exps)

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
