#!/usr/bin/env python3
"""Runs N ranks of nccl_worker (a file:// store, no launcher needed) and
checks their outcome. Standard library only, so any python3 can run it.

  nccl_test.py WORKER MODE NPROC [TIMEOUT_MS]

MODE collectives: every rank exits 0.
MODE stall / die: the last rank stops calling collectives (stall) or exits
(die); every other rank must exit 3 (its all-reduce failed with the
watchdog's message, then a later call was refused) within TIMEOUT_MS + 20 s.

Several ranks on one GPU: NCCL before 2.30 refuses two ranks on one device
unless they look like different hosts, so each rank gets its own
NCCL_HOSTID (NCCL then connects them through sockets on lo); NCCL >= 2.30
would also accept NCCL_MULTI_RANK_GPU_ENABLE=1, which this test does not use
so that it runs the same way on every NCCL version.
Exit 0 pass, 1 fail, 77 skipped (no GPU: the worker said so).
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time


def main():
    worker, mode, nproc = sys.argv[1], sys.argv[2], int(sys.argv[3])
    timeout_ms = int(sys.argv[4]) if len(sys.argv) > 4 else 8000
    tmp = tempfile.mkdtemp(prefix="ddp-nccl-")
    init = "file://" + os.path.join(tmp, "store")
    procs = []
    print(f"{mode}: {nproc} ranks, one NCCL_HOSTID per rank, NCCL_SOCKET_IFNAME=lo, "
          f"DDP_TIMEOUT_MS={timeout_ms}")
    try:
        for r in range(nproc):
            env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(nproc),
                       LOCAL_WORLD_SIZE=str(nproc), TORCHELASTIC_RUN_ID="nccltest",
                       DDP_TIMEOUT_MS=str(timeout_ms), NCCL_SOCKET_IFNAME="lo",
                       NCCL_HOSTID=f"ddp-test-host-{r}", NCCL_IB_DISABLE="1")
            procs.append(subprocess.Popen([worker, mode, init], env=env, stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True))
        waiters = procs if mode == "collectives" else procs[:-1]
        deadline = time.monotonic() + timeout_ms / 1000 + 60
        outs, codes = {}, {}
        for i, p in enumerate(waiters):
            try:
                outs[i], _ = p.communicate(timeout=max(1, deadline - time.monotonic()))
                codes[i] = p.returncode
            except subprocess.TimeoutExpired:
                codes[i] = None
                outs[i] = "(still running at the deadline: it hung)"
        for i in sorted(outs):
            print(f"--- rank {i} exit {codes[i]}\n{outs[i]}")
        if any(c == 77 for c in codes.values()):
            return 77
        want = 0 if mode == "collectives" else 3
        ok = all(c == want for c in codes.values())
        if ok and mode != "collectives":
            ok = all("all-reduce" in outs[i] and "rank" in outs[i] for i in outs)
        print("PASS" if ok else f"FAIL: wanted every waited rank to exit {want}")
        return 0 if ok else 1
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
