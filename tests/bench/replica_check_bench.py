"""The cost of ddplaunch.torch's replica check (issue 25): the digest of the
parameters and optimizer state after every committed step, compared in the
next step's first all-reduce (8 more float64 numbers in it).

  step      configs/elastic_digits.py under ddplaunch, 2 ranks on one node,
            --check_every 1 and 0 run in turn (ROUNDS times each): the time
            per step (the best run of each), and the check's own time in the
            process (Elastic.check_seconds per step: listing the tensors,
            the digest, reading the comparison)
  digest    the digest alone (replicas.tensor_digests: XXH3, or BLAKE2b
            without libxxhash; the line says which) over the
            parameters and SGD momenta of MLPs of 10^4 to 10^7 parameters:
            ms per step and GB/s, to scale the figure to a model

  replica_check_bench.py --python TORCH_PYTHON --ddplaunch PATH --source ROOT
                         [--rounds N] [--epochs E] [--out FILE]

Exit 0, or 1 when a run failed.
"""
import argparse
import os
import re
import subprocess
import sys
import time

LINE = re.compile(r"elastic_digits: ([\d.]+) ms a step, the replica check ([\d.]+) ms")


def run_digits(args, every):
    env = dict(os.environ, PYTHON_EXEC=args.python, GLOO_SOCKET_IFNAME="lo",
               OMP_NUM_THREADS="1", PYTHONPATH=os.path.join(args.source, "python"))
    p = subprocess.run([args.ddplaunch, "--standalone", "--nproc_per_node=2",
                        os.path.join(args.source, "configs", "elastic_digits.py"), "--epochs",
                        str(args.epochs), "--check_every", str(every)], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    m = LINE.search(p.stdout)
    if p.returncode != 0 or not m:
        raise RuntimeError(p.stdout)
    return float(m.group(1)), float(m.group(2))


DIGEST_CODE = r"""
import sys, time, torch
sys.path.insert(0, sys.argv[1])
from ddplaunch.torch import replicas
torch.set_num_threads(1)
for width in (64, 512, 2048):
    m = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                            torch.nn.Linear(width, width))
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    m(torch.randn(2, width)).sum().backward()
    opt.step()
    pairs = replicas.named_tensors(m, opt)
    n = sum(p.numel() for p in m.parameters())
    nbytes = sum(t.numel() * t.element_size() for _, t in pairs)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        replicas.whole(replicas.tensor_digests(replicas.named_tensors(m, opt)))
        best = min(best, time.perf_counter() - t0)
    print("DIGEST %d %d %.6f %s" % (n, nbytes, best, replicas.ALGORITHM))
"""


def digest_rows(args):
    out = subprocess.run([args.python, "-c", DIGEST_CODE, os.path.join(args.source, "python")],
                         stdout=subprocess.PIPE, text=True, check=True, timeout=600).stdout
    return [tuple(float(x) for x in line.split()[1:4]) + (line.split()[4],)
            for line in out.splitlines() if line.startswith("DIGEST ")]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--python", required=True)
    p.add_argument("--ddplaunch", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--out")
    args = p.parse_args()
    on, off = [], []
    for _ in range(args.rounds):
        on.append(run_digits(args, 1))
        off.append(run_digits(args, 0))
    step_on, step_off = min(s for s, _ in on), min(s for s, _ in off)
    check = min(c for _, c in on)
    lines = ["ddplaunch.torch's replica check; %s, %s" % (args.python,
                                                         time.strftime("%Y-%m-%d")), "",
             "| configs/elastic_digits.py, 2 ranks, --epochs %d (best of %d) | step ms |" %
             (args.epochs, args.rounds), "|---|---:|",
             "| --check_every 0 (no check) | %.3f |" % step_off,
             "| --check_every 1 (every step) | %.3f |" % step_on,
             "| the check's own time in the process | %.3f (%.1f%% of the step) |" %
             (check, 100.0 * check / step_on), "",
             "| parameters | state bytes (params + momenta) | digest | ms | GB/s |",
             "|---:|---:|---|---:|---:|"]
    for n, nbytes, sec, algo in digest_rows(args):
        lines.append("| %d | %d | %s | %.3f | %.2f |" % (n, nbytes, algo, sec * 1e3,
                                                         nbytes / sec / 1e9))
    print("\n".join(lines))
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as e:
        print("replica_check_bench: a run failed:\n%s" % e, file=sys.stderr)
        sys.exit(1)
