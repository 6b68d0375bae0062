#!/usr/bin/python3
"""What the progress page costs per collective (issue 24 §1: no system call,
unmeasurable against a collective).

  progress_bench.py --bench PATH --ddplaunch PATH [--rounds K] [--out FILE]

1. libddp's writer alone (progress_bench writer): ns per collective of the
   enter/leave pair into a mapped page, and without a page.
2. The smallest collective there is, a 4-byte all-reduce between 2 ranks
   under ddplaunch (shared memory, then the TCP ring), with and without a
   page, K rounds of each interleaved (page, no page, page, ...) so that the
   machine's drift falls on both; the medians, the fastest runs, and their
   differences.
3. The Python writer (ddplaunch.torch's progress.Page): us per enter/leave.
A markdown table on stdout (and in --out).
"""
import argparse
import importlib.util
import mmap
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MIRROR = os.path.join(HERE, "..", "..", "python", "ddplaunch", "torch", "progress.py")


def run(cmd, env=None):
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if out.returncode != 0:
        sys.exit("%s failed:\n%s%s" % (cmd, out.stdout, out.stderr))
    return out.stdout


def coll(args, transport, page):
    env = dict(os.environ, DDP_CPU_TRANSPORT=transport, DDP_BACKEND="cpu")
    out = run([args.ddplaunch, "--standalone", "--nproc_per_node=2", args.bench, "coll",
               "page" if page else "nopage", str(args.iters)], env)
    for line in out.splitlines():
        if "COLL" in line:
            return float(line.split()[-1])
    sys.exit("no COLL line: " + out)


def python_writer(n=200000):
    spec = importlib.util.spec_from_file_location("ddp_progress_mirror", MIRROR)
    pr = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pr)
    with tempfile.TemporaryFile() as f:
        f.truncate(pr.SIZE)
        m = mmap.mmap(f.fileno(), pr.SIZE)
        page = pr.Page(m)
        page.round(1, 0, 2)
        t0 = time.perf_counter_ns()
        for _ in range(n):
            page.enter(pr.OP_ALLREDUCE, 4)
            page.leave()
        dt = (time.perf_counter_ns() - t0) / n
        m.close()
    return dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--ddplaunch", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--out")
    args = ap.parse_args()
    w = run([args.bench, "writer"]).split()
    lines = ["| what | with a page | without | difference |", "|---|---:|---:|---:|",
             "| libddp's writer, per collective (enter + leave) | %s ns | %s ns | %.1f ns |"
             % (w[1], w[2], float(w[1]) - float(w[2]))]
    for transport in ("shm", "ring"):
        runs = {True: [], False: []}
        for _ in range(args.rounds):
            for page in (True, False):
                runs[page].append(coll(args, transport, page))
        a, b = statistics.median(runs[True]), statistics.median(runs[False])
        lines.append("| 4-byte all-reduce, 2 ranks, %s: median of %d runs x %d | %.0f ns | "
                     "%.0f ns | %+.0f ns (%+.1f%%) |"
                     % (transport, args.rounds, args.iters, a, b, a - b, 100 * (a - b) / b))
        a, b = min(runs[True]), min(runs[False])
        lines.append("| the same, fastest run (runs: %s vs %s) | %.0f ns | %.0f ns | "
                     "%+.0f ns (%+.1f%%) |"
                     % (" ".join("%.0f" % x for x in runs[True]),
                        " ".join("%.0f" % x for x in runs[False]), a, b, a - b,
                        100 * (a - b) / b))
    py = min(python_writer() for _ in range(5)) / 1e3
    lines.append("| ddplaunch.torch's writer (Python), per collective (enter + leave), "
                 "fastest of 5 | %.2f us | 0 | %.2f us |" % (py, py))
    text = "\n".join(lines) + "\n\nload average during the run: %s\n" % \
        " ".join("%.2f" % x for x in os.getloadavg())
    sys.stdout.write(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
