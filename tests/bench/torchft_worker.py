"""The benchmark's model (elastic_worker.py) under torchft: one process per
replica group, torchft's Manager, DistributedDataParallel and Optimizer over
its ProcessGroupGloo, a lighthouse at TORCHFT_LIGHTHOUSE. Each step the
participating replicas split the global batch G; a step that fails on a
replica is not committed anywhere and is done again.

  torchft_worker.py --replica I --store_port P [--epochs E --g G --pace_ms MS]

Prints elastic_worker.py's "BENCH step" lines (world: the step's
participants).
"""
import argparse
import datetime
import os
import sys
import time

import torch
# torchft is not a requirement: the bench runs this file under --torchft's python
from torchft import (DistributedDataParallel, Manager, Optimizer,  # not in the venv: --torchft
                     ProcessGroupGloo)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from elastic_worker import model_and_data, pace, say  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--replica", type=int, required=True)
    p.add_argument("--store_port", type=int, required=True)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--g", type=int, default=96)
    p.add_argument("--pace_ms", type=float, default=0.0)
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(1)
    # the replica group's store (torchrun's agent would host it)
    store = torch.distributed.TCPStore("127.0.0.1", args.store_port, 1, True)
    model, x, y = model_and_data()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def load(sd):
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["optim"])

    manager = Manager(pg=ProcessGroupGloo(timeout=datetime.timedelta(seconds=10)),
                      min_replica_size=2, load_state_dict=load,
                      state_dict=lambda: {"model": model.state_dict(), "optim": opt.state_dict()},
                      replica_id="replica%d" % args.replica, rank=0, world_size=1,
                      store_addr="127.0.0.1", store_port=args.store_port,
                      timeout=datetime.timedelta(seconds=10))
    ddp = DistributedDataParallel(manager, model)
    optim = Optimizer(manager, opt)
    steps_per_epoch = len(x) // args.g
    last = [None, True]
    while manager.current_step() < args.epochs * steps_per_epoch:
        t0 = time.monotonic()
        step = manager.current_step()
        optim.zero_grad()  # starts the step's quorum
        n = max(1, manager.num_participants())
        r = manager.participating_rank() or 0
        epoch, pos = divmod(step, steps_per_epoch)
        g = torch.Generator()
        g.manual_seed(epoch)
        perm = torch.randperm(len(x), generator=g)
        per = args.g // n
        idx = perm[pos * args.g + r * per:pos * args.g + (r + 1) * per]
        torch.nn.functional.cross_entropy(ddp(x[idx]), y[idx]).backward()
        optim.step()  # steps only when every participant says it may commit
        if manager.current_step() > step:
            pace(args, t0)
            say(step, manager.num_participants(), args.quiet, last)
    print("BENCH done pid=%d" % os.getpid(), flush=True)
    del store


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
