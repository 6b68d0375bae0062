#!/usr/bin/python3
"""A slow rank costs its share (issue 26), measured: ddp-train in shard mode
on NODES simulated nodes x 1 rank (loopback, c10d; the job of
tests/multinode/test_straggler.py: 24 shards, steps of about 270 ms on 2
ranks), node 1's worker capped at 5 ms of CPU per 10 ms from outside mid-run
(tests/multinode/slowdown.py: a cgroup quota; the job's workers shielded
from the machine's other load by cpu.shares), three runs per repetition,
interleaved: no cap, the cap without rebalancing (--no-rebalance), the cap
with it. Step times from rank 0's --metrics records over the same steps.

  of the lost step time = (capped, no mitigation - capped, rebalanced)
                          / (capped, no mitigation - healthy)
  of the lost throughput = (1 / rebalanced - 1 / capped, no mitigation)
                          / (1 / healthy - 1 / capped, no mitigation)
  of the recoverable = (capped, no mitigation - capped, rebalanced)
                          / (capped, no mitigation - balanced optimum)
  balanced optimum = capped, no mitigation x predicted / was, from the
  first "plan" record: the plan's predicted compute over the even plan's,
  for the per-shard times the ranks had under the cap
On a clean machine the capped rank's lost capacity is gone for good: with
W = 2 and one rank at half speed the best plan (16 + 8 of 24 shards) takes
16 units against 12 healthy and 24 capped, i.e. 67% of the lost step time,
50% of the lost throughput; with W = 3, 75% and 60%. Here the ranks share 2
CPUs with other work, and a capped rank leaves CPU to the others, so the
healthy step is not the fast ranks' speed under the cap: the recoverable
share, from the speeds measured under the cap, is the figure to read.
Published figure for comparison: Greyhound/FALCON remove about 60% of the
slowdown.

Then the cost when nobody is slow: straggler_micro (--micro: the detector
and the plan's CPU per step, and the bytes the exchange adds), and the same
binary's step against a
baseline ddp-train (today's step, without the exchange), 2 ranks, the small
digits job where a step is shortest (so a fixed cost shows most), best of
--reps interleaved runs, from the `done:` line (rank 0's CPU ms/step and the
wall clock).

  straggler_bench.py --ddp-train PATH --ddplaunch PATH --source DIR
                     [--baseline PATH] [--micro PATH] [--reps 3] [--nodes 2]
                  [--overhead_only] [--out FILE]
--baseline: today's ddp-train built the same way (same build type, the same
libddp: LD_LIBRARY_PATH=BUILD/worker for a copy), or the comparison measures
the builds, not the change.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "multinode"))

STEPS, SLOW_AT = 44, 8
SETTLE = 14
PUBLISHED = 0.60
DONE = re.compile(r"done: (\d+) steps in ([\d.]+) s \((\d+) samples/s.*cpu ([\d.]+) ms/step")


class Case:
    """What slowdown.run_job needs of a MultiNodeCase, outside unittest."""

    def __init__(self, tmp):
        import mnlib
        self.dir = tmp
        self.cluster = mnlib.Cluster(tmp)
        self.cleanups = []
        self.host_port = lambda proc, timeout=20.0: mnlib.MultiNodeCase.host_port(
            self, proc, timeout)

    def assertEqual(self, a, b, msg=None):
        if a != b:
            sys.exit("straggler_bench: %s" % msg)

    def addCleanup(self, f):
        self.cleanups.append(f)

    def close(self):
        for f in reversed(self.cleanups):
            f()
        self.cluster.close()


def recovery(args, rep):
    import slowdown
    out = {}
    for mode in ("healthy", "off", "on"):
        with tempfile.TemporaryDirectory(prefix="straggler_bench_") as tmp:
            case = Case(tmp)
            try:
                r = slowdown.run_job(case, "%s%d" % (mode, rep), args.nodes, STEPS,
                                     None if mode == "healthy" else SLOW_AT, 1,
                                     rebalance=mode != "off")
            finally:
                case.close()
            out[mode] = r
    lo = max(out["off"]["slowed_at"], out["on"]["slowed_at"]) + SETTLE
    healthy = slowdown.step_time(out["healthy"]["times"], lo, STEPS)
    t_off = slowdown.step_time(out["off"]["times"], lo, STEPS)
    t_on = slowdown.step_time(out["on"]["times"], lo, STEPS)
    slower = [x["slower"] for x in out["off"]["stragglers"] if x["state"] == "named"]
    s = slower[0] if slower else t_off / healthy
    plan = out["on"]["plans"][0] if out["on"]["plans"] else None
    optimum = t_off * plan["predicted_s"] / plan["was_s"] if plan else float("nan")
    named = [x["step"] - out["on"]["slowed_at"] for x in out["on"]["stragglers"]
             if x["state"] == "named"]
    plans = [p["shards"] for p in out["on"]["plans"]]
    noise = len([x for x in out["healthy"]["stragglers"] if x["state"] == "named"])
    print("rep %d: healthy run: %d rank(s) named" % (rep, noise), flush=True)
    print("rep %d: steps %d-%d: healthy %.1f ms, capped %.1f ms (%.2fx), rebalanced %.1f ms "
          "(plans %s), optimum %.1f ms; named %s step(s) after the cap; %s" % (
              rep, lo, STEPS, healthy * 1e3, t_off * 1e3, s, t_on * 1e3, plans,
              optimum * 1e3, named, out["on"]["throttle"]), flush=True)
    return healthy, t_off, t_on, optimum, named[0] if named else None, s


STRAGGLER = re.compile(r"straggler: rank \d+ .* slower than the others")


def done(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1"))
    m = DONE.search(p.stdout + p.stderr)
    if p.returncode != 0 or not m:
        sys.exit("straggler_bench: %s failed:\n%s" % (cmd, (p.stdout + p.stderr)[-3000:]))
    # lines naming a rank (every rank prints one): noise named as a straggler
    named = len(STRAGGLER.findall(p.stdout + p.stderr))
    return 1000.0 * 64 / float(m.group(3)), float(m.group(4)), named


def overhead(args):
    job = ["--config", os.path.join(args.source, "configs", "digits.ini"), "--epochs", "20",
           "--eval_every_epoch", "false", "--threads", "1", "--global_batch_size", "64",
           "--virtual_shards", "8", "--progress_bar", "false"]
    # "detect": the exchange and the detector alone (--no-rebalance); "new":
    # as shipped, where noise that names a rank moves shards (and rank 0's
    # CPU per step with them)
    modes = (("baseline", args.baseline, []), ("detect", args.ddp_train, ["--no-rebalance"]),
             ("new", args.ddp_train, []))
    runs = {name: [] for name, _, _ in modes}
    for _ in range(3 * args.reps):  # short runs: more of them
        for name, exe, extra in modes:
            runs[name].append(done([args.ddplaunch, "--standalone", "--nproc_per_node=2", exe]
                                   + job + extra))
    out = {}
    for k, v in runs.items():
        wall, cpu = sorted(x[0] for x in v), sorted(x[1] for x in v)
        out[k] = (wall[0], cpu[0], wall[len(v) // 2], cpu[len(v) // 2], sum(x[2] for x in v))
        print("%s: wall ms/step %s, cpu %s, straggler lines %s" % (
            k, [round(x[0], 4) for x in v], [round(x[1], 4) for x in v], [x[2] for x in v]),
            flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddp-train", required=True)
    ap.add_argument("--ddplaunch", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--baseline", help="today's ddp-train, for the overhead (skipped without)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--micro", help="straggler_micro, for the CPU of the detector per step")
    ap.add_argument("--overhead_only", action="store_true", help="skip the capped runs")
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "straggler_bench.md"))
    args = ap.parse_args()
    os.environ["DDP_TRAIN"] = args.ddp_train
    os.environ["DDPLAUNCH"] = args.ddplaunch
    import mnlib
    mnlib.DDPLAUNCH = args.ddplaunch

    res = [] if args.overhead_only else [recovery(args, i) for i in range(args.reps)]
    lines = ["| run | healthy ms/step | capped, no mitigation | capped, rebalanced | "
             "capped rank per shard | balanced optimum | recovered: of the lost step time | "
             "of the lost throughput | of the recoverable | named after |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    cols = [[], [], []]
    for i, (h, off, on, opt, named, s) in enumerate(res):
        got = ((off - on) / (off - h), (1 / on - 1 / off) / (1 / h - 1 / off),
               (off - on) / (off - opt))
        for c, g in zip(cols, got):
            c.append(g)
        lines.append("| %d | %.1f | %.1f (%.2fx) | %.1f (%.2fx) | %.2fx | %.1f | %.0f%% | %.0f%% "
                     "| %.0f%% | %s steps |" % ((i + 1, h * 1e3, off * 1e3, off / h, on * 1e3,
                                                 on / h, s, opt * 1e3) +
                                                tuple(100 * g for g in got) + (named,)))
    med = [sorted(c)[len(c) // 2] if c else float("nan") for c in cols]
    lines.append("| median | | | | | | %.0f%% | %.0f%% | %.0f%% | |" % tuple(100 * m for m in med))
    lines.append("| published (Greyhound/FALCON) | | | | | | about %.0f%% of the slowdown | | | |"
                 % (100 * PUBLISHED))
    if args.micro:
        p = subprocess.run([args.micro], capture_output=True, text=True, timeout=600, check=True)
        lines += [""] + p.stdout.strip().splitlines()
    if args.baseline:
        o = overhead(args)
        b = o["baseline"]
        lines += ["", "| no straggler, digits G = 64 V = 8, 2 ranks, %d runs each | wall "
                  "ms/step best, median | rank 0's cpu ms/step best, median | straggler lines |"
                  % (3 * args.reps), "|---|---:|---:|---:|"]
        for k, label in (("baseline", "today (baseline)"),
                         ("detect", "the exchange and the detector (--no-rebalance)"),
                         ("new", "as shipped (rebalancing on)")):
            n = o[k]
            lines.append("| %s | %.4f, %.4f (%+.1f%%) | %.4f, %.4f (%+.1f%%) | %d |" % (
                label, n[0], n[2], 100 * (n[2] / b[2] - 1), n[1], n[3],
                100 * (n[3] / b[3] - 1), n[4]))
    table = "\n".join(lines)
    print(table)
    with open(args.out, "w") as f:
        f.write(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
