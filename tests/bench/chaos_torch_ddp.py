#!/usr/bin/python3
"""PyTorch DDP job for the failure benchmark (chaos_bench.py), run under
torchrun 2.x with gloo: ddp-train's synthetic MLP (Linear, BatchNorm1d,
ReLU per hidden layer), SGD with momentum, a global batch G cut over the
ranks. Rank 0 saves a checkpoint every --checkpoint_every steps (temporary
file, renamed) and every rank resumes from it when it starts, as a job that
torchrun restarts must; rank 0 appends one JSON line per committed step to
--metrics: {"step", "time" (Unix seconds), "world"}, as ddp-train does.

  torchrun ... chaos_torch_ddp.py --metrics FILE --checkpoint DIR
      [--steps K] [--features F] [--hidden H,H] [--classes C] [--global_batch G]
"""
import argparse
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def model(features, hidden, classes):
    layers, width = [], features
    for h in hidden:
        layers += [nn.Linear(width, h), nn.BatchNorm1d(h), nn.ReLU()]
        width = h
    return nn.Sequential(*layers, nn.Linear(width, classes))


def data(args):
    g = np.random.default_rng(1)
    x = g.standard_normal((args.samples, args.features), dtype=np.float32)
    w = g.standard_normal((args.features, args.classes), dtype=np.float32)
    y = (x @ w).argmax(1).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def resume(path, net, opt):
    try:
        state = torch.load(path)
    except FileNotFoundError:
        return 0
    net.module.load_state_dict(state["model"])
    opt.load_state_dict(state["optim"])
    return state["step"]


def save(path, net, opt, step):
    tmp = path + ".tmp"
    torch.save({"model": net.module.state_dict(), "optim": opt.state_dict(), "step": step}, tmp)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--checkpoint_every", type=int, default=100)
    ap.add_argument("--steps", type=int, default=10 ** 9)
    ap.add_argument("--samples", type=int, default=4096)
    ap.add_argument("--features", type=int, default=64)
    ap.add_argument("--hidden", default="256,256")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--global_batch", type=int, default=48)
    ap.add_argument("--lr", type=float, default=0.02)
    args = ap.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    x, y = data(args)
    net = DDP(model(args.features, [int(h) for h in args.hidden.split(",")], args.classes))
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
    ckpt = os.path.join(args.checkpoint, "latest.pt")
    step = resume(ckpt, net, opt)
    loss_fn = nn.CrossEntropyLoss()
    per_rank = args.global_batch // world
    out = open(args.metrics, "a") if rank == 0 else None
    while step < args.steps:
        g = torch.Generator().manual_seed(step)
        idx = torch.randperm(len(x), generator=g)[:args.global_batch]
        mine = idx[rank * per_rank:(rank + 1) * per_rank]
        opt.zero_grad()
        loss_fn(net(x[mine]), y[mine]).backward()
        opt.step()
        step += 1
        if rank == 0:
            out.write(json.dumps({"kind": "train", "step": step, "time": time.time(),
                                  "world": world}) + "\n")
            out.flush()
            if step % args.checkpoint_every == 0:
                save(ckpt, net, opt, step)
    dist.barrier()
    # torch 2.x aborts now and then in its C++ teardown at exit (see
    # tests/launcher/ddp_gloo.py): leave once the work is flushed
    os._exit(0)


if __name__ == "__main__":
    main()
