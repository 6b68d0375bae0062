#!/usr/bin/python3
"""Training throughput benchmark: ddp-train (under ddplaunch) against PyTorch
DDP (gloo, under the torchrun of --python: Debian's torch 1.13 by default, or
a torch 2.x venv; -r 9:1 -t 9:1 work around 1.13's torchrun under Python
3.11) on the same model and data, in the same run, 1 and 2 ranks, one thread
per rank.

  1. digits: MLP 64-256-256-10 with BatchNorm, batch 32 per rank, SGD with
     momentum, 20 epochs of the training split (80% of 1,797 images).
  2. synthetic: a larger MLP where matrix products dominate
     (512-2048-2048-10, batch 128 per rank, 40 steps).

Each configuration runs --reps times, interleaved (ours, torch, ours, ...);
the best run of each side is reported (on a shared machine other load only
ever slows a run down), with every run's figure printed as it comes.
samples/s counts the training loop only (both sides exclude start-up and
the final evaluation). Prints a markdown table (also written to --out).

  train_bench.py --ddp-train PATH --ddplaunch PATH --source DIR [--reps 5]
                 [--python /usr/bin/python3] [--configs digits,synthetic]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

TIMEOUT = 600

CONFIGS = {
    "digits": {
        "ours": ["--eval_every_epoch", "false", "--threads", "1"],
        "torch": ["--data", "digits", "--epochs", "20", "--batch", "32",
                  "--hidden", "256,256"],
        "label": "digits MLP 64-256-256-10 + BN, batch 32/rank, 20 epochs",
    },
    "synthetic": {
        "ours": ["--data", "synthetic", "--synthetic_samples", "16384",
                 "--synthetic_features", "512", "--synthetic_classes", "10",
                 "--hidden", "2048,2048", "--batch_size", "128", "--max_steps", "40",
                 "--eval_every_epoch", "false", "--threads", "1", "--clip_norm", "0"],
        "torch": ["--data", "synthetic", "--samples", "16384", "--features", "512",
                  "--classes", "10", "--hidden", "2048,2048", "--batch", "128",
                  "--steps", "40"],
        "label": "synthetic MLP 512-2048-2048-10 + BN, batch 128/rank, 40 steps",
    },
}

DONE = re.compile(r"done: (\d+) steps in ([\d.]+) s \((\d+) samples/s, all-reduce wait ([\d.]+)%")
EVAL = re.compile(r"held-out loss [\d.]+ accuracy ([\d.]+)%")


def env1():
    return dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def run_ours(args, cfg, ranks):
    cmd = [args.ddplaunch, "--standalone", "--nproc_per_node=%d" % ranks, args.ddp_train,
           "--config", os.path.join(args.source, "configs", "digits.ini")] + cfg["ours"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env1())
    out = p.stdout + p.stderr
    m = DONE.search(out)
    if p.returncode != 0 or not m:
        sys.exit("ddp-train failed:\n" + out[-3000:])
    acc = EVAL.findall(out)
    return {"samples_per_s": float(m.group(3)), "allreduce": float(m.group(4)) / 100,
            "accuracy": float(acc[-1]) / 100 if acc else float("nan")}


def run_torch(args, cfg, ranks):
    script = os.path.join(args.source, "tests", "bench", "train_torch_ddp.py")
    cmd = [args.python, "-m", "torch.distributed.run", "-r", "9:1", "-t", "9:1",
           "--standalone", "--nproc_per_node", str(ranks), script,
           "--digits", os.path.join(args.source, "data", "digits.csv.gz")] + cfg["torch"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env1())
    line = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not line:
        sys.exit("torch DDP failed:\n" + (p.stdout + p.stderr)[-3000:])
    r = json.loads(line[-1])
    return {"samples_per_s": r["samples_per_s"], "allreduce": float("nan"),
            "accuracy": r["accuracy"]}


def best_of(runs):
    return max(runs, key=lambda r: r["samples_per_s"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddp-train", required=True)
    ap.add_argument("--ddplaunch", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--python", default="/usr/bin/python3",
                    help="the interpreter whose torch (and torchrun) is the reference")
    ap.add_argument("--configs", default="digits,synthetic")
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "train_bench.md"))
    args = ap.parse_args()
    version = subprocess.run([args.python, "-c", "import torch; print(torch.__version__)"],
                             capture_output=True, text=True).stdout.strip() or "?"
    print("reference: PyTorch %s DDP (gloo) under %s" % (version, args.python), flush=True)

    rows = []
    for name in args.configs.split(","):
        cfg = CONFIGS[name]
        for ranks in (1, 2):
            ours, torch = [], []
            for _ in range(args.reps):
                ours.append(run_ours(args, cfg, ranks))
                torch.append(run_torch(args, cfg, ranks))
            bo, bt = best_of(ours), best_of(torch)
            o, t = bo["samples_per_s"], bt["samples_per_s"]
            rows.append((cfg["label"], ranks, o, t, o / t, bo["allreduce"], bo["accuracy"],
                         bt["accuracy"]))
            print("%s, %d rank(s): ddp-train %s samples/s, torch DDP %s -> best x%.1f"
                  % (name, ranks, [round(r["samples_per_s"]) for r in ours],
                     [round(r["samples_per_s"]) for r in torch], o / t), flush=True)
    lines = ["| model | ranks | ddp-train samples/s | PyTorch %s DDP samples/s | ratio | "
             % version +
             "ddp-train all-reduce wait | held-out acc. ddp-train / PyTorch |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| %s | %d | %.0f | %.0f | %.1fx | %.1f%% | %.1f%% / %.1f%% |" % (
            r[0], r[1], r[2], r[3], r[4], 100 * r[5], 100 * r[6], 100 * r[7]))
    table = "\n".join(lines)
    print(table)
    with open(args.out, "w") as f:
        f.write(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
