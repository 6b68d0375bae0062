"""A plain PyTorch DDP script with gloo for hang_bench.py --side: what
torchrun does when one rank is SIGSTOPped. Trains a small linear model
forever (the bench ends it), rank 0 printing "BENCH step S t=WALL" every 20
steps; every rank "BENCH start rank=R pid=P". GLOO_BENCH_TIMEOUT_S sets
init_process_group's timeout (unset: torch's default, 30 min for gloo)."""
import datetime
import os
import time

import torch
import torch.distributed as dist


def main():
    torch.set_num_threads(1)
    timeout = float(os.environ.get("GLOO_BENCH_TIMEOUT_S", "0"))
    kw = {"timeout": datetime.timedelta(seconds=timeout)} if timeout else {}
    dist.init_process_group("gloo", **kw)
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    print("BENCH start rank=%d pid=%d" % (rank, os.getpid()), flush=True)
    step = 0
    while True:
        loss = model(torch.randn(32, 64)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.005)
        if rank == 0 and step % 20 == 0:
            print("BENCH step %d t=%.3f" % (step, time.time()), flush=True)
        step += 1


if __name__ == "__main__":
    main()
