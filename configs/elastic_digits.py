"""The digits classifier of configs/train.py, written with ddplaunch.torch's
Elastic: a node that dies (or joins) costs the survivors one step, not a
restart, and the final weights are those of an undisturbed 1-rank run.

    ddplaunch --nproc_per_node=2 configs/elastic_digits.py --epochs 5
    python3 configs/elastic_digits.py --epochs 5        (1 rank, same bits)

The global batch (--global_batch_size) is fixed whatever the number of
ranks, cut into --virtual_shards shards of equal size; each rank computes a
contiguous run of whole shards. With --checkpoint rank 0 saves
el.state_dict() (model, optimizer, ledger) after every epoch, and a job
started again resumes from it into the same bits. The learning rate
halves every --lr_step epochs (a StepLR that Elastic steps, hands over and
checkpoints with the model); the replicas are compared every
--check_every steps (0: never). Prints the final loss, the accuracy on
the whole set and the state's SHA-256, then the time per step and the
replica check's share of it.
"""
import argparse
import gzip
import os
import sys
import time

import torch

from ddplaunch.torch import Elastic, state_digest

HERE = os.path.dirname(os.path.abspath(__file__))


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
    p.add_argument("--global_batch_size", type=int, default=64)
    p.add_argument("--virtual_shards", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--lr_step", type=int, default=2, help="halve the LR every N epochs")
    p.add_argument("--check_every", type=int, default=1,
                   help="compare the replicas every N steps (0: never)")
    p.add_argument("--checkpoint", help="save here every epoch and resume from it")
    return p.parse_args()


def save(path, sd):
    tmp = path + ".tmp"
    torch.save(sd, tmp)
    os.replace(tmp, path)


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    x, y = load_digits(args.data)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    per_epoch = len(x) // args.global_batch_size
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=args.lr_step * per_epoch, gamma=0.5)
    # Elastic sets one CPU thread (threads=1): a shard's bits must not
    # depend on the thread count, and a 1-rank run by hand gives the same
    el = Elastic(model, opt, dataset_size=len(x), global_batch_size=args.global_batch_size,
                 virtual_shards=args.virtual_shards, seed=args.seed, scheduler=sched,
                 check_every=args.check_every)
    if args.checkpoint and os.path.exists(args.checkpoint):
        el.load_state_dict(torch.load(args.checkpoint))

    def closure(indices):
        loss = torch.nn.functional.cross_entropy(model(x[indices]), y[indices])
        loss.backward()
        return loss

    loss, t0, done = None, None, 0
    for step in el.steps(epochs=args.epochs):
        if t0 is None:
            t0 = time.perf_counter()
        loss = el.step(closure)
        done += 1
        if (step + 1) % per_epoch == 0 and args.checkpoint and el.rank == 0:
            save(args.checkpoint, el.state_dict())
    with torch.no_grad():
        acc = (model(x).argmax(dim=1) == y).float().mean().item()
    if el.rank == 0:
        print("elastic_digits: %d ranks at the end, loss %.4f, accuracy %.3f, sha256 %s" %
              (el.world_size, loss if loss is not None else float("nan"), acc,
               state_digest(el.state_dict())), flush=True)
        per_step = (time.perf_counter() - t0) / max(done, 1) if t0 is not None else 0.0
        check = el.check_seconds / max(done, 1)
        print("elastic_digits: %.3f ms a step, the replica check %.3f ms of it (%.1f%%)" %
              (per_step * 1e3, check * 1e3, 100.0 * check / per_step if per_step else 0.0),
              flush=True)


if __name__ == "__main__":
    main()
    # past torch 2.15's C++ teardown at exit (see configs/train.py)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
