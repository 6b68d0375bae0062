"""One rank of test_torch_pg.py: init_process_group("gloo") through the agent
store at MASTER_ADDR:MASTER_PORT, then all_reduce and barrier."""
import datetime
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1), 10.0 * (rank + 1)])
dist.all_reduce(t)
want = world * (world + 1) / 2
assert t.tolist() == [want, 10 * want], t
dist.barrier()
print(f"rank {rank} sum {t[0].item():g}", flush=True)
dist.destroy_process_group()
# Past torch 2.15's C++ teardown at exit, which now and then aborts after
# the work is done (see tests/launcher/ddp_gloo.py's end).
sys.stderr.flush()
os._exit(0)
