"""A torchrun-style training script, the program of configs/launch-basic.ini
and configs/launch-restarts.ini:

    ddplaunch --config configs/launch-basic.ini        (from the source root)
    ddplaunch --nproc_per_node=2 configs/train.py --epochs 5

It reads only what every worker of torchrun (or ddplaunch) gets: RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT (init_process_group's env://), and
trains a small classifier of the digits data (data/digits.csv.gz) with
DistributedDataParallel over gloo, on the CPU. Each rank takes every
WORLD_SIZE-th sample. With --checkpoint_dir rank 0 saves the model and the
optimizer after every epoch (to a temporary file, then renamed), and on
SIGUSR1 at the end of the current step (Slurm's --signal=USR1@T "checkpoint
now"; ddplaunch passes USR1 on and the job goes on); a restarted group
(TORCHELASTIC_RESTART_COUNT > 0, or a new run) resumes from there.
"""
import argparse
import gzip
import os
import signal
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

HERE = os.path.dirname(os.path.abspath(__file__))
checkpoint_now = False


def on_usr1(signum, frame):
    global checkpoint_now
    checkpoint_now = True


def load_digits(path):
    """64 pixels (0..16) and a label per line."""
    with gzip.open(path, "rt") as f:
        rows = [[int(v) for v in line.split(",")] for line in f if line.strip()]
    t = torch.tensor(rows, dtype=torch.float32)
    return t[:, :64] / 16.0, t[:, 64].long()


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=os.path.join(HERE, "..", "data", "digits.csv.gz"))
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight_decay", type=float, default=0.0)
    p.add_argument("--checkpoint_dir", help="save every epoch here and resume from it")
    return p.parse_args()


def save(path, model, opt, epoch):
    """`epoch`: the epochs done; a resumed run starts with the next one."""
    tmp = path + ".tmp"
    torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(),
                "epoch": epoch}, tmp)
    os.replace(tmp, path)


def main():
    global checkpoint_now
    args = parse_args()
    signal.signal(signal.SIGUSR1, on_usr1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial weights on every rank
    x, y = load_digits(args.data)
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                          weight_decay=args.weight_decay)
    ckpt, start = None, 0
    if args.checkpoint_dir:
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        ckpt = os.path.join(args.checkpoint_dir, "checkpoint.pt")
        if os.path.exists(ckpt):
            state = torch.load(ckpt)
            model.module.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            start = state["epoch"]
            if rank == 0:
                print("resuming after epoch %d (restart %s)"
                      % (start, os.environ.get("TORCHELASTIC_RESTART_COUNT", "?")), flush=True)
    mine = torch.arange(rank, len(x), world)
    # Every rank takes the same number of steps (DDP all-reduces each one).
    steps = (len(x) // world) // args.batch_size
    for epoch in range(start, args.epochs):
        order = mine[torch.randperm(len(mine), generator=torch.Generator().manual_seed(epoch))]
        total = torch.zeros(1)
        for s in range(steps):
            idx = order[s * args.batch_size:(s + 1) * args.batch_size]
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.detach()
            if checkpoint_now:
                checkpoint_now = False
                if rank == 0 and ckpt:
                    save(ckpt, model, opt, epoch)  # this epoch is done again
                    print("checkpoint on SIGUSR1 in epoch %d" % (epoch + 1), flush=True)
        dist.all_reduce(total)
        if rank == 0:
            print("epoch %d/%d loss %.4f" % (epoch + 1, args.epochs, total.item() / steps / world),
                  flush=True)
            if ckpt:
                save(ckpt, model, opt, epoch + 1)
        dist.barrier()  # a restart resumes from an epoch every rank finished
    with torch.no_grad():
        accuracy = (model(x).argmax(1) == y).float().mean().item()
    if rank == 0:
        print("done: accuracy %.2f%% on all %d samples" % (100 * accuracy, len(x)), flush=True)
    # The DDP model holds the process group: drop it first, once no rank is in
    # a collective, so torch 2.x's gloo is not torn down with the interpreter
    # (it aborts there now and then, under torchrun as well).
    dist.barrier()
    del model
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # torch 2.15 now and then aborts in its C++ teardown at interpreter exit
    # ("terminate called without an active exception"), after the work is
    # done, under torchrun as under ddplaunch; leaving with os._exit skips it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
