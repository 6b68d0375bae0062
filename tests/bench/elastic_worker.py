"""The benchmark's training script, in two forms on the same model, data
and global batch:

  --mode elastic   ddplaunch.torch's Elastic (re-forms in place)
  --mode ddp       a plain DistributedDataParallel loop: each rank takes
                   G/WORLD_SIZE samples of the step's global batch; rank 0
                   checkpoints every --every steps; a restarted group
                   resumes from the checkpoint (ddplaunch's restart path,
                   and torchrun's)

Prints "BENCH step step=S world=W pid=P t=UNIX" for every committed step
(--quiet: only at the start, after a change of world, every 50 steps and
at the end). --pace_ms spreads each step over that long (a bigger model's
compute, without the CPU).
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist


def model_and_data():
    torch.manual_seed(0)
    g = torch.Generator()
    g.manual_seed(1234)
    x = torch.randn(9600, 32, generator=g)
    y = (x @ torch.randn(32, 10, generator=g)).argmax(dim=1)
    model = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.Tanh(),
                                torch.nn.Linear(256, 10))
    return model, x, y


def say(step, world, quiet, last):
    if quiet and world == last[0] and step % 50 and not last[1]:
        return
    last[0], last[1] = world, False
    print("BENCH step step=%d world=%d pid=%d t=%.6f" % (step, world, os.getpid(), time.time()),
          flush=True)


def run_elastic(args):
    from ddplaunch.torch import Elastic
    model, x, y = model_and_data()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    el = Elastic(model, opt, dataset_size=len(x), global_batch_size=args.g,
                 virtual_shards=args.v, seed=1)

    def closure(idx):
        loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        return loss

    last = [None, True]
    for step in el.steps(epochs=args.epochs):
        t0 = time.monotonic()
        el.step(closure)
        pace(args, t0)
        say(step, el.world_size, args.quiet, last)


def pace(args, t0):
    left = args.pace_ms / 1000.0 - (time.monotonic() - t0)
    if left > 0:
        time.sleep(left)


def run_ddp(args):
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model, x, y = model_and_data()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    steps_per_epoch = len(x) // args.g
    step = 0
    if args.checkpoint and os.path.exists(args.checkpoint):
        sd = torch.load(args.checkpoint)
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["optimizer"])
        step = sd["step"]
    per = args.g // world
    last = [None, True]
    while step < args.epochs * steps_per_epoch:
        t0 = time.monotonic()
        epoch, pos = divmod(step, steps_per_epoch)
        g = torch.Generator()
        g.manual_seed(epoch)
        perm = torch.randperm(len(x), generator=g)
        idx = perm[pos * args.g + rank * per:pos * args.g + (rank + 1) * per]
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x[idx]), y[idx]).backward()
        opt.step()
        step += 1
        if args.checkpoint and rank == 0 and step % args.every == 0:
            tmp = args.checkpoint + ".tmp"
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                        "step": step}, tmp)
            os.replace(tmp, args.checkpoint)
        pace(args, t0)
        say(step - 1, world, args.quiet, last)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["elastic", "ddp"], required=True)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--g", type=int, default=96)
    p.add_argument("--v", type=int, default=12)
    p.add_argument("--pace_ms", type=float, default=0.0)
    p.add_argument("--every", type=int, default=100)
    p.add_argument("--checkpoint")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(1)
    (run_elastic if args.mode == "elastic" else run_ddp)(args)
    print("BENCH done pid=%d" % os.getpid(), flush=True)


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
