#!/usr/bin/env python3
"""ddp-train's integration cases on the GPU: the same cases as
tests/worker/train/train_it.py (imported from there, so the GPU run is held to
exactly the CPU run's checks), with every rank on CUDA: --device cuda, the
NCCL backend, kernel_ops_cuda, and tests/gpu/rank_env.sh giving each rank its
own NCCL_HOSTID so that several ranks can share one GPU.

  gpu_train_it.py --probe GPU_PROBE --ddp-train PATH --ddplaunch PATH
                  --source DIR [--ranks N] CASE   (equivalence | resume | shards)
Exit 0 pass, 1 fail, 77 skipped (no GPU).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--probe", required=True)
    ap.add_argument("--ddp-train", required=True)
    ap.add_argument("--ddplaunch", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--build-dir", default=tempfile.gettempdir())
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--seed", type=int)
    ap.add_argument("case", choices=["equivalence", "resume", "shards"])
    args = ap.parse_args()
    probe = subprocess.run([args.probe], stdout=subprocess.PIPE, text=True)
    print(probe.stdout.strip())
    if probe.returncode != 0:
        return 77
    sys.path.insert(0, os.path.join(args.source, "tests", "worker", "train"))
    import train_it  # noqa: E402  (needs numpy, present wherever torch is)

    wrapper = os.path.join(args.source, "tests", "gpu", "rank_env.sh")

    class GpuEnv(train_it.Env):
        def launch(self, nproc, train_args, max_restarts=0, expect_ok=True):
            cmd = [self.launcher, "--standalone", "--nproc_per_node=%d" % nproc,
                   "--max_restarts=%d" % max_restarts, "--grace_period=5", wrapper,
                   self.trainer] + list(train_args) + ["--device", "cuda"]
            p = self._run(cmd, expect_ok)
            if expect_ok and "kernels cuda" not in p.stdout + p.stderr:
                raise train_it.Fail("ddp-train did not run its CUDA kernels:\n" +
                                    (p.stdout + p.stderr)[-2000:])
            return p

    # FP32 matrix products: the 1e-5 equivalence bound is the CPU test's.
    os.environ.pop("DDP_MATMUL_PRECISION", None)
    tmp = tempfile.mkdtemp(prefix="ddp-gpu-train-it-")
    print("ranks share the GPU with one NCCL_HOSTID each (tests/gpu/rank_env.sh)")
    try:
        train_it.CASES[args.case](GpuEnv(args, tmp), args)
    except train_it.Fail as e:
        print("FAIL: %s" % e)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
