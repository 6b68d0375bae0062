"""An older script written for python -m torch.distributed.launch, the
program of configs/launch-legacy.ini:

    ddplaunch --config configs/launch-legacy.ini       (from the source root)

Its argparse wants the local rank as an argument: --local_rank=N, as
torch.distributed.launch passed it before torch 2.0, or --local-rank=N, as
torch 2.x passes it (both spellings accepted, as PyTorch's documentation
advises). ddplaunch passes it with --use_env=false or --pass_local_rank
(=dash for the second spelling). The script then joins the group through
init_method env:// and checks, with one all-reduce, that every rank got its
own local rank.
"""
import argparse
import os

import torch
import torch.distributed as dist


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--local_rank", "--local-rank", type=int, required=True)
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args()
    if args.local_rank != int(os.environ["LOCAL_RANK"]):
        raise SystemExit("--local_rank=%d but LOCAL_RANK=%s"
                         % (args.local_rank, os.environ["LOCAL_RANK"]))
    dist.init_process_group("gloo", init_method="env://")
    world = dist.get_world_size()
    t = torch.tensor([float(args.local_rank)])
    dist.all_reduce(t)
    expected = world * (world - 1) / 2  # one node: local ranks 0..world-1
    if t.item() != expected:
        raise SystemExit("local ranks add up to %g, expected %g" % (t.item(), expected))
    print("local rank %d of %d, batch size %d: ok" % (args.local_rank, world, args.batch_size),
          flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
