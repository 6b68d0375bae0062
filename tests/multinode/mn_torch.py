"""A PyTorch gloo worker for the multi-node tests: env:// process group,
an all-reduce checked against its sum, a few DistributedDataParallel steps
whose parameters must agree on every rank.

  mn_torch.py            then "TORCH ok rank=R world=W" and exit 0
  mn_torch.py --forever  then "TORCH ready world=W rank=R port=P pid=N", and
                         all-reduces until stopped (SIGTERM); a dead peer
                         fails it (gloo's error, exit 1)
"""
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def check_sum(rank, world):
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    assert t.item() == world * (world + 1) / 2, (t.item(), world)


def ddp_steps(rank, world):
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        torch.manual_seed(100 * step + rank)
        x = torch.randn(8, 4)
        opt.zero_grad()
        model(x).pow(2).sum().backward()
        opt.step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    every = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(every, flat)
    assert all(torch.equal(e, flat) for e in every), "parameters differ across ranks"


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == int(os.environ["WORLD_SIZE"])
    check_sum(rank, world)
    ddp_steps(rank, world)
    if "--forever" in sys.argv:
        print("TORCH ready world=%d rank=%d port=%s pid=%d" %
              (world, rank, os.environ["MASTER_PORT"], os.getpid()), flush=True)
        while True:
            try:
                check_sum(rank, world)
            except RuntimeError:
                # a dead peer: fail at once, as a script's uncaught error
                # would, without torch 2.15's teardown of a broken gloo
                # group at interpreter exit (seconds under load: a node's
                # lease ran out first, and the failure it tests never came)
                traceback.print_exc()
                sys.stderr.flush()
                os._exit(1)
            time.sleep(0.2)
    print("TORCH ok rank=%d world=%d" % (rank, world), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Past torch 2.15's C++ teardown at exit, which now and then aborts after
    # the work is done (see tests/launcher/ddp_gloo.py's end).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
