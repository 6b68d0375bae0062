"""PyTorch gloo all-reduce bandwidth, the reference for allreduce_bench.c:
same sizes, same timing rule (warm-up, ~0.25 s of iterations, slowest
rank), float32 sum. Run under ddplaunch (env:// through its store) with
the benchmark's --python (torch 1.13 or 2.x). Rank 0 prints RESULT lines."""
import sys
import time

import torch
import torch.distributed as dist


def main():
    lo = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    hi = int(sys.argv[2]) if len(sys.argv) > 2 else 256 << 20
    dist.init_process_group("gloo")
    w = dist.get_world_size()
    buf = torch.zeros(hi // 4, dtype=torch.float32)
    size = lo
    while size <= hi:
        t = buf[: size // 4]
        for _ in range(2):
            dist.all_reduce(t)
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(t)
        plan = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.broadcast(plan, 0)
        iters = max(3, min(2000, int(0.25 / plan.item()) if plan.item() > 0 else 1000))
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        dt = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
        dist.all_reduce(dt, op=dist.ReduceOp.MAX)
        us = dt.item() * 1e6
        alg = size / (us * 1e-6) / 1e9
        if dist.get_rank() == 0:
            print("RESULT %d %.1f %.3f %.3f" % (size, us, alg, alg * 2 * (w - 1) / w),
                  flush=True)
        size *= 4
    dist.destroy_process_group()


main()
