#!/usr/bin/python3
"""The cost of ddp-train's replica check (issue 25 part 2: at most 1% of step
time on the synthetic benchmark) and the time to heal a corrupted replica,
under ddplaunch, --global_batch_size mode.

Jobs (shards_bench.py's):
  digits     configs/digits.ini (64-256-256-10 + BatchNorm), G = 64, V = 8
  synthetic  512-2048-2048-10 + BatchNorm, G = 256, V = 8 (5.3 M parameters:
             42 MB of parameters and momentum digested per check)

Cost: W ranks with --replica_check_every 1 against 0 (off), --reps runs
each, interleaved (on, off, on, off...) so that other load falls on both
alike; the best run of each is kept. Per check, from ddp-train's closing
line: the digest's CPU time on the helper thread, the time the step waited
for the helper, the comparison's time (the digests ride in the step's first
all-reduce: no collective of the check's own, only the last step's
all-gather). The A/B cost: wall ms/step on against off. ms/step from the
`done:` line: wall (samples/s) and rank 0's CPU.

Heal: 3 ranks, DDP_TEST_FLIP=1:5: the time from the broadcast's start to
every rank's agreeing digest again, and the hand-over's bytes.

  replica_bench.py --ddp-train PATH --ddplaunch PATH --source DIR [--reps 3]
                   [--ranks 2] [--configs digits,synthetic] [--out FILE]
"""
import argparse
import os
import re
import subprocess
import sys

TIMEOUT = 600
TARGET = 0.01

JOBS = {
    "digits": {
        "args": ["--epochs", "20", "--eval_every_epoch", "false", "--threads", "1",
                 "--global_batch_size", "64", "--virtual_shards", "8"],
        "label": "digits 64-256-256-10, G = 64",
    },
    "synthetic": {
        "args": ["--data", "synthetic", "--synthetic_samples", "8192",
                 "--synthetic_features", "512", "--synthetic_classes", "10",
                 "--hidden", "2048,2048", "--max_steps", "24", "--held_out", "0",
                 "--eval_every_epoch", "false", "--threads", "1", "--clip_norm", "0",
                 "--global_batch_size", "256", "--virtual_shards", "8"],
        "label": "synthetic 512-2048-2048-10, G = 256",
    },
}

DONE = re.compile(r"done: (\d+) steps in ([\d.]+) s \((\d+) samples/s.*cpu ([\d.]+) ms/step\)")
CHECK = re.compile(r"replica check: (\d+) check\(s\).*per check: digest ([\d.]+) ms of the helper "
                   r"thread's CPU .*the step waited ([\d.]+) ms for it and ([\d.]+) ms "
                   r"comparing")
HEALED = re.compile(r"healed 1 replica\(s\) from rank 0's memory in ([\d.]+) s")
TOOK = re.compile(r"took the training state from rank 0's memory: (\d+) bytes in ([\d.]+) s")


def run(args, job, ranks, every, flip=None):
    cmd = [args.ddplaunch, "--standalone", "--nproc_per_node=%d" % ranks, args.ddp_train,
           "--config", os.path.join(args.source, "configs", "digits.ini"), "--device", "cpu",
           "--replica_check_every", str(every)] + job["args"]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    env.pop("DDP_TEST_FLIP", None)
    if flip:
        env["DDP_TEST_FLIP"] = flip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    out = p.stdout + p.stderr
    m = DONE.search(out)
    if p.returncode != 0 or not m:
        sys.exit("replica_bench: ddp-train failed (%s):\n%s" % (" ".join(cmd), out[-3000:]))
    steps = int(m.group(1))
    res = {"wall": 1000.0 * float(m.group(2)) / steps, "cpu": float(m.group(4)), "out": out}
    c = CHECK.search(out)
    if c:
        res.update(digest=float(c.group(2)), join=float(c.group(3)), gather=float(c.group(4)))
    return res


def measure(args, name):
    job = JOBS[name]
    on, off = [], []
    for _ in range(args.reps):
        on.append(run(args, job, args.ranks, 1))
        off.append(run(args, job, args.ranks, 0))
    best_on = min(on, key=lambda r: r["wall"])
    best_off = min(off, key=lambda r: r["wall"])
    return {
        "wall_on": best_on["wall"], "wall_off": best_off["wall"],
        "cpu_on": min(r["cpu"] for r in on), "cpu_off": min(r["cpu"] for r in off),
        "digest": min(r["digest"] for r in on), "join": min(r["join"] for r in on),
        "gather": min(r["gather"] for r in on),
    }


def heal(args, name):
    r = run(args, JOBS[name], 3, 1, flip="1:5")
    h, t = HEALED.search(r["out"]), TOOK.search(r["out"])
    if not h or not t:
        sys.exit("replica_bench: the 3-rank run with a flip did not heal:\n" + r["out"][-3000:])
    return float(h.group(1)), int(t.group(1)), float(t.group(2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddp-train", required=True)
    ap.add_argument("--ddplaunch", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--configs", default="digits,synthetic")
    ap.add_argument("--out")
    args = ap.parse_args()
    lines = ["| job | ranks | ms/step off (wall / cpu) | ms/step on (wall / cpu) | digest cpu "
             "ms/check | share of step | A/B wall | step waited for it ms | compare ms | "
             "heal s (bytes) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name in args.configs.split(","):
        m = measure(args, name)
        hs, nbytes, _ = heal(args, name)
        share = m["digest"] / m["wall_off"]
        ab = (m["wall_on"] - m["wall_off"]) / m["wall_off"]
        lines.append("| %s | %d | %.2f / %.2f | %.2f / %.2f | %.3f | %.2f%% | %+.1f%% | %.3f | "
                     "%.3f | %.4f (%d) |" % (JOBS[name]["label"], args.ranks, m["wall_off"],
                                            m["cpu_off"], m["wall_on"], m["cpu_on"],
                                            m["digest"], 100 * share, 100 * ab, m["join"],
                                            m["gather"], hs, nbytes))
        print(lines[-1], flush=True)
    text = "\n".join(lines) + ("\n\n(target: digest <= %.0f%% of the step; share = digest CPU "
                               "time / wall ms/step with the check off; A/B wall = the best "
                               "run on against the best run off, which the shared machine's "
                               "noise also moves)\n" % (100 * TARGET))
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
