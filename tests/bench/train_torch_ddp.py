#!/usr/bin/python3
"""PyTorch DDP reference for the training benchmark (run under torchrun with
torch 1.13 or 2.x, gloo): the same MLP as ddp-train (Linear,
BatchNorm1d, ReLU per hidden layer), SGD with momentum, cross-entropy,
DistributedSampler, batch per rank. Prints one JSON line on rank 0:
samples/s of the training loop, held-out accuracy, all-reduce wait share.

  torchrun -r 9:1 -t 9:1 --standalone --nproc_per_node N train_torch_ddp.py \
      --data digits --digits PATH --epochs 20 --batch 32 --hidden 256,256
  ... --data synthetic --samples S --features F --classes C --steps K
"""
import argparse
import gzip
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def load(args):
    if args.data == "digits":
        with gzip.open(args.digits, "rt") as f:
            a = np.loadtxt(f, delimiter=",", dtype=np.float32)
        x, y = a[:, :64] / 16.0, a[:, 64].astype(np.int64)
        classes = 10
    else:
        g = np.random.default_rng(1)
        x = g.standard_normal((args.samples, args.features), dtype=np.float32)
        w = g.standard_normal((args.features, args.classes), dtype=np.float32)
        y = (x @ w).argmax(1).astype(np.int64)
        classes = args.classes
    perm = np.random.default_rng(0).permutation(len(x))
    n_held = int(round(len(x) * 0.2))
    tr, ho = perm[:len(x) - n_held], perm[len(x) - n_held:]
    return (torch.from_numpy(x[tr]), torch.from_numpy(y[tr]), torch.from_numpy(x[ho]),
            torch.from_numpy(y[ho]), classes)


def model(features, hidden, classes):
    layers, d = [], features
    for h in hidden:
        layers += [nn.Linear(d, h), nn.BatchNorm1d(h), nn.ReLU()]
        d = h
    layers.append(nn.Linear(d, classes))
    return nn.Sequential(*layers)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="digits")
    ap.add_argument("--digits")
    ap.add_argument("--samples", type=int, default=16384)
    ap.add_argument("--features", type=int, default=512)
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--hidden", default="256,256")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    args = ap.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    xtr, ytr, xho, yho, classes = load(args)
    net = DDP(model(xtr.shape[1], [int(h) for h in args.hidden.split(",")], classes))
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    sampler = DistributedSampler(TensorDataset(xtr, ytr), num_replicas=world, rank=rank)
    loader = DataLoader(TensorDataset(xtr, ytr), batch_size=args.batch, sampler=sampler,
                        drop_last=True)
    loss_fn = nn.CrossEntropyLoss()
    epochs = args.epochs if not args.steps else 10 ** 9
    steps, t0 = 0, time.perf_counter()
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            opt.zero_grad()
            loss_fn(net(xb), yb).backward()
            opt.step()
            steps += 1
            if args.steps and steps >= args.steps:
                break
        if args.steps and steps >= args.steps:
            break
    dt = time.perf_counter() - t0
    net.eval()
    with torch.no_grad():
        acc = float((net.module(xho).argmax(1) == yho).float().mean())
    if rank == 0:
        print(json.dumps({"impl": "torch-ddp", "ranks": world, "steps": steps,
                          "samples_per_s": steps * args.batch * world / dt, "seconds": dt,
                          "accuracy": acc, "threads": torch.get_num_threads()}), flush=True)
    dist.barrier()
    del net  # holds the process group; see ddp_gloo.py's end
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
