#!/usr/bin/env python3
"""A PyTorch 2.x worker for ddplaunch: init_process_group("nccl") through the
launcher's store (TORCHELASTIC_USE_AGENT_STORE: the worker is a client of the
store ddplaunch hosts, with torch 2.x's wire protocol), an all-reduce on the
GPU, a barrier. Rank 0 prints one line with the result; exit 0 on success.
"""
import datetime
import os

import torch
import torch.distributed as dist


def main():
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.full((4099,), float(rank + 1), device="cuda")
    dist.all_reduce(t)
    want = world * (world + 1) / 2
    if not torch.equal(t, torch.full_like(t, want)):
        raise SystemExit("rank %d: all-reduce gave %s, want %s" % (rank, t[:4].tolist(), want))
    dist.barrier()
    store = dist.distributed_c10d._get_default_store()
    store.set("torch_nccl_job/rank%d" % rank, "ok")
    if rank == 0:
        print("torch %s, nccl %s: init_process_group('nccl') with %d rank(s) through the "
              "ddplaunch store (MASTER_PORT %s): all-reduce and barrier ok" % (
                  torch.__version__, ".".join(map(str, torch.cuda.nccl.version())), world,
                  os.environ.get("MASTER_PORT")), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
