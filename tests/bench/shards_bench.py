#!/usr/bin/python3
"""The cost of ddp-train's fixed global batch (--global_batch_size G
--virtual_shards V: whole shards per rank, the exact fixed-point sum) against
today's step at the same global batch (--batch_size G/W per rank, one
backward, the reducer's float all-reduce), under ddplaunch, in the same run.

Jobs (issue 16 section 3: within 1.2x on the digits and synthetic benchmarks):
  digits     configs/digits.ini (64-256-256-10 + BatchNorm), G = 64
  synthetic  512-2048-2048-10 + BatchNorm on synthetic data, G = 256

For W = 1 and 2 ranks: today's step, then V = W, 2W and 8. Each cell runs
--reps times, interleaved (today, V = W, ..., today, ...) so that the load of
a shared machine falls on every mode alike; the best run is kept (other load
only ever slows a run down). ms/step counts the training loop only, from the
`done:` line: the wall clock (from its samples/s) and rank 0's CPU time,
which other load on the machine stretches less. Prints a markdown table
with the ratios.

  shards_bench.py --ddp-train PATH --ddplaunch PATH --source DIR [--reps 3]
                  [--configs digits,synthetic] [--ranks 1,2] [--out FILE]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

TIMEOUT = 600
TARGET = 1.2

JOBS = {
    "digits": {
        "args": ["--epochs", "40", "--eval_every_epoch", "false", "--threads", "1"],
        "global": 64,
        "label": "digits 64-256-256-10, G = 64",
    },
    "synthetic": {
        "args": ["--data", "synthetic", "--synthetic_samples", "8192",
                 "--synthetic_features", "512", "--synthetic_classes", "10",
                 "--hidden", "2048,2048", "--max_steps", "24", "--held_out", "0",
                 "--eval_every_epoch", "false", "--threads", "1", "--clip_norm", "0"],
        "global": 256,
        "label": "synthetic 512-2048-2048-10, G = 256",
    },
}

# The CPU figure is optional, so that a ddp-train from before it was added
# can be measured too (its CPU cells are then nan).
DONE = re.compile(r"done: (\d+) steps in ([\d.]+) s \((\d+) samples/s"
                  r"(?:, .*cpu ([\d.]+) ms/step)?")


def env1():
    return dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def run(args, job, ranks, shards):
    """(wall, cpu) ms per step of one run; shards 0 is today's step."""
    g = job["global"]
    mode = (["--batch_size", str(g // ranks)] if shards == 0 else
            ["--global_batch_size", str(g), "--virtual_shards", str(shards)])
    cmd = [args.ddplaunch, "--standalone", "--nproc_per_node=%d" % ranks, args.ddp_train,
           "--config", os.path.join(args.source, "configs", "digits.ini")] + job["args"] + mode
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env1())
    out = p.stdout + p.stderr
    m = DONE.search(out)
    if p.returncode != 0 or not m:
        sys.exit("shards_bench: ddp-train failed (%s):\n%s" % (" ".join(cmd), out[-3000:]))
    return 1000.0 * g / float(m.group(3)), float(m.group(4) or "nan")


def measure(args, name, ranks):
    """The best wall and CPU ms/step of each mode: {mode: (wall, cpu)}."""
    job = JOBS[name]
    modes = [0] + sorted({ranks, 2 * ranks, 8})
    runs = {v: [] for v in modes}
    for _ in range(args.reps):
        for v in modes:
            runs[v].append(run(args, job, ranks, v))
    best = {v: (min(r[0] for r in runs[v]), min(r[1] for r in runs[v])) for v in modes}
    for v in modes:
        ratio = "" if v == 0 else " (%.2fx / %.2fx)" % (best[v][0] / best[0][0],
                                                       best[v][1] / best[0][1])
        print("%s, W=%d, %s: wall ms/step %s, cpu %s -> best %.3f / %.3f%s" % (
            name, ranks, "today" if v == 0 else "V=%d" % v,
            [round(x[0], 3) for x in runs[v]], [round(x[1], 3) for x in runs[v]],
            best[v][0], best[v][1], ratio), flush=True)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddp-train", required=True)
    ap.add_argument("--ddplaunch", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--configs", default="digits,synthetic")
    ap.add_argument("--ranks", default="1,2")
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "shards_bench.md"))
    args = ap.parse_args()

    lines = ["| job | W | today ms/step | V = W | V = 2W | V = 8 |",
             "|---|---:|---:|---:|---:|---:|"]
    misses = 0
    for name in args.configs.split(","):
        for ranks in (int(r) for r in args.ranks.split(",")):
            best = measure(args, name, ranks)
            cells = []
            for v in (ranks, 2 * ranks, 8):
                wall, cpu = best[v][0] / best[0][0], best[v][1] / best[0][1]
                misses += wall > TARGET
                cells.append("%.3f (%.2f×) / %.3f (%.2f×)" % (best[v][0], wall, best[v][1],
                                                            cpu))
            lines.append("| %s | %d | %.3f / %.3f | %s |" % (
                JOBS[name]["label"], ranks, best[0][0], best[0][1], " | ".join(cells)))
    table = "\n".join(lines)
    print("cells: wall ms/step (ratio) / rank 0's CPU ms/step (ratio), best of %d" % args.reps)
    print(table)
    print("target: shards within %.1fx of today's step (wall); %d cell(s) above it"
          % (TARGET, misses))
    with open(args.out, "w") as f:
        f.write(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
