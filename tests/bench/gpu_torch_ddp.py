#!/usr/bin/env python3
"""The PyTorch DDP reference of the GPU benchmark (gpu_bench.py starts it
under ddplaunch, one process per rank): the same MLP as ddp-train
(Linear + BatchNorm1d + ReLU per hidden layer, then Linear), the same
synthetic data shape, batch per rank, SGD with momentum and weight decay,
and the same matrix-product precision (fp32, tf32 or bf16 autocast).
Prints one JSON line from rank 0: samples/s over the timed steps.

  gpu_torch_ddp.py --features F --hidden 4096,4096,... --classes C
                   --batch B --steps N --warmup W --precision fp32|tf32|bf16
"""
import argparse
import datetime
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def build(features, hidden, classes):
    layers, width = [], features
    for h in hidden:
        layers += [nn.Linear(width, h), nn.BatchNorm1d(h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, classes))
    return nn.Sequential(*layers)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--features", type=int, default=4096)
    ap.add_argument("--hidden", default="4096,4096,4096,4096")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--samples", type=int, default=16384)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16"])
    a = ap.parse_args()

    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    tf32 = a.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32

    torch.manual_seed(1)
    hidden = [int(h) for h in a.hidden.split(",")]
    model = build(a.features, hidden, a.classes).cuda()
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[local])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()
    # Host data like ddp-train's: each batch is copied to the GPU per step.
    g = torch.Generator().manual_seed(2 + rank)
    x_all = torch.randn(a.samples, a.features, generator=g)
    y_all = torch.randint(0, a.classes, (a.samples,), generator=g)

    def step(i):
        lo = (i * a.batch) % (a.samples - a.batch + 1)
        x = x_all[lo:lo + a.batch].cuda()
        y = y_all[lo:lo + a.batch].cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = loss_fn(ddp(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    for i in range(a.warmup):
        step(i)
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for i in range(a.steps):
        loss = step(a.warmup + i)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    if rank == 0:
        print(json.dumps({"impl": "pytorch-ddp", "ranks": world, "precision": a.precision,
                          "samples_per_s": a.steps * a.batch * world / dt,
                          "loss": float(loss), "torch": torch.__version__,
                          "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                          "gpu": torch.cuda.get_device_name(local)}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
