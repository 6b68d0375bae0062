"""The data ledger and the shard plan of the fixed global batch.

The global batch of step s is positions [p*G, (p+1)*G) of its epoch's
permutation (p = s mod steps_per_epoch), cut into V virtual shards of G/V
samples; rank r of W computes a contiguous run of whole shards
(shards_range, the split of worker/train/shards.c). The permutation
depends only on the seed and the epoch, so which rank computes a shard, and
how often the membership changed, never changes which samples a step uses.
Pure: no process group, no I/O.
"""
import torch


def shards_range(v, w, r):
    """(first, count): the shards rank r of w computes out of v; the first
    v % w ranks take one more. count is 0 for r >= v when v < w."""
    base, extra = divmod(v, w)
    count = base + (1 if r < extra else 0)
    first = r * base + (r if r < extra else extra)
    return first, count


class Ledger:
    """Which samples each step uses: dataset_size N, global_batch_size G,
    virtual_shards V, seed; the global step is the only moving part (its
    epoch is step // steps_per_epoch; the last N mod G samples of each
    epoch's permutation are left out, as with drop_last)."""

    def __init__(self, dataset_size, global_batch_size, virtual_shards, seed=0):
        n, g, v = int(dataset_size), int(global_batch_size), int(virtual_shards)
        if v < 1 or g < 1 or g % v:
            raise ValueError("global_batch_size %d is not a multiple of virtual_shards %d: "
                             "pick virtual_shards that divides it" % (g, v))
        if n < g:
            raise ValueError("dataset_size %d is smaller than global_batch_size %d: lower "
                             "global_batch_size" % (n, g))
        self.dataset_size, self.global_batch_size, self.virtual_shards = n, g, v
        self.seed = int(seed)
        self.step = 0
        self._perm = (None, None)

    @property
    def steps_per_epoch(self):
        return self.dataset_size // self.global_batch_size

    @property
    def epoch(self):
        return self.step // self.steps_per_epoch

    @property
    def shard_size(self):
        return self.global_batch_size // self.virtual_shards

    def permutation(self, epoch):
        """The epoch's order of the N indices: torch.randperm seeded by the
        seed and the epoch (torch.Generator, the same on every torch)."""
        if self._perm[0] != epoch:
            g = torch.Generator()
            g.manual_seed((self.seed * 1000003 + epoch) % (1 << 63))
            self._perm = (epoch, torch.randperm(self.dataset_size, generator=g))
        return self._perm[1]

    def shard_indices(self, step, shard):
        """The sample indices of virtual shard `shard` of global step `step`."""
        epoch, pos = divmod(step, self.steps_per_epoch)
        start = pos * self.global_batch_size + shard * self.shard_size
        return self.permutation(epoch)[start:start + self.shard_size]

    def plan(self, rank, world):
        """This rank's shards: range(first, first + count)."""
        first, count = shards_range(self.virtual_shards, world, rank)
        return range(first, first + count)

    def state_dict(self):
        return {"epoch": self.epoch, "step": self.step, "seed": self.seed,
                "dataset_size": self.dataset_size,
                "global_batch_size": self.global_batch_size,
                "virtual_shards": self.virtual_shards}

    def load_state_dict(self, sd):
        for k in ("seed", "dataset_size", "global_batch_size", "virtual_shards"):
            if k in sd and int(sd[k]) != getattr(self, k):
                raise ValueError("the checkpoint's ledger has %s %s, this run %s: run with "
                                 "the checkpoint's value" % (k, sd[k], getattr(self, k)))
        self.step = int(sd["step"])
