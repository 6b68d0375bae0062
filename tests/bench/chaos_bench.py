"""Failures on simulated nodes (issue 16, section 4): what a node's death
costs, on 3 nodes (127.0.0.2-4, one rank each, node 0 hosting the store)
and one model: ddp-train's synthetic MLP (64-256-256-10 with BatchNorm,
global batch 48), the same shape in PyTorch for torchrun.

  throughput  ddp-train --global_batch_size 48 --virtual_shards 8 (in
              place): committed samples per second over --seconds, without
              faults and with node 2 killed (kill -9, agent and workers)
              every --period s and started again --down s later (target:
              >= 95% of the run without faults)
  per kill    time from the kill to the survivors' next committed step, and
              the steps committed before the kill that were done again, for
              (a) in place (the kills of the throughput run), (b) ddplaunch's
              restart path (ddp-train without --global_batch_size: the
              workers restart and reload the checkpoint written every
              --checkpoint_every steps), (c) torchrun 2.x (PyTorch DDP,
              chaos_torch_ddp.py, the same checkpoint interval; its
              rendezvous tuned: last call 1 s, keep-alive 1 s x 3)

"Committed" is a --metrics record (rank 0 writes one per step with its
Unix time). Prints a markdown table (also written to --out).

  chaos_bench.py --ddplaunch PATH --ddp-train PATH [--torch PYTHON]
                 [--seconds 40] [--period 10] [--down 5]
                 [--checkpoint_every 500] [--out FILE]
"""
import argparse
import json
import os
import signal
import socket
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "multinode"))
from mnlib import Cluster, addr, fast_conf, wait_for  # noqa: E402

G = 48
MODEL = ["--data", "synthetic", "--synthetic_samples", "4096", "--synthetic_features", "64",
         "--synthetic_classes", "10", "--hidden", "256,256", "--held_out", "0",
         "--eval_every_epoch", "false", "--lr", "0.02", "--seed", "3", "--threads", "1",
         "--device", "cpu", "--log_every", "1", "--max_steps", "1000000"]
TORCH_MODEL = ["--samples", "4096", "--features", "64", "--hidden", "256,256",
               "--classes", "10", "--global_batch", str(G)]
ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "DDP_BACKEND": "cpu",
       "DDP_TIMEOUT_MS": "60000"}
NODES = 3


def free_port():
    s = socket.socket()
    s.bind((addr(0), 0))
    port = s.getsockname()[1]
    s.close()
    return port


def descendants(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            with open("/proc/%d/task/%d/children" % (p, p)) as f:
                found = [int(x) for x in f.read().split()]
        except OSError:
            found = []
        out += found
        todo += found
    return out


def records(path):
    try:
        with open(path) as f:
            return [r for r in (json.loads(line) for line in f if line.endswith("\n"))
                    if r.get("kind") == "train"]
    except FileNotFoundError:
        return []


class Job:
    """NODES agents of one kind ('inplace', 'restart' or 'torchrun')."""

    def __init__(self, args, tmp, kind):
        self.args, self.tmp, self.kind = args, tmp, kind
        self.cluster = Cluster(tmp)
        self.metrics = os.path.join(tmp, "metrics.jsonl")
        self.ckdir = os.path.join(tmp, "ck")
        os.makedirs(self.ckdir, exist_ok=True)
        self.port = free_port() if kind == "torchrun" else 0
        self.nodes = {}
        self.n = 0

    def argv(self, slot):
        common = ["--nnodes=2:%d" % NODES, "--nproc_per_node=1", "--rdzv_backend=c10d",
                  "--rdzv_endpoint=%s:%d" % (addr(0), self.port), "--rdzv_id=bench",
                  "--local_addr=" + addr(slot), "--max_restarts=100"]
        if self.kind == "torchrun":
            conf = "--rdzv_conf=last_call_timeout=1,keep_alive_interval=1," \
                   "keep_alive_max_attempt=3,join_timeout=120"
            return [self.args.torch, "-m", "torch.distributed.run", "--monitor_interval=0.1",
                    conf] + common + [os.path.join(HERE, "chaos_torch_ddp.py"), "--metrics",
                                      self.metrics, "--checkpoint", self.ckdir,
                                      "--checkpoint_every",
                                      str(self.args.checkpoint_every)] + TORCH_MODEL
        prog = [self.args.ddp_train] + MODEL + ["--metrics", self.metrics, "--checkpoint_dir",
                                                self.ckdir]
        if self.kind == "inplace":
            prog += ["--global_batch_size", str(G), "--virtual_shards", "8"]
        else:
            prog += ["--batch_size", str(G // NODES), "--checkpoint_every",
                     str(self.args.checkpoint_every)]
        return [self.args.ddplaunch, fast_conf()] + common + prog

    def start(self, slot):
        self.n += 1
        p = self.cluster.start("%s-node%d.%d" % (self.kind, slot, self.n), self.argv(slot), ENV)
        self.nodes[slot] = p
        if slot == 0 and self.kind != "torchrun":
            _, m = p.wait_line(r"hosting the rendezvous store at \S+:(\d+)", 60)
            self.port = int(m.group(1))

    def start_all(self):
        for slot in range(NODES):
            self.start(slot)
        # the first committed step starts the clock
        wait_for(lambda: records(self.metrics), 180, "the %s job's first step" % self.kind)
        return records(self.metrics)[0]["time"]

    def kill(self, slot):
        p = self.nodes.pop(slot)
        pids = descendants(p.pid)
        t = time.time()
        p.signal(signal.SIGKILL)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return t

    def close(self):
        self.cluster.close()


def sleep_until(t_unix):
    left = t_unix - time.time()
    if left > 0:
        time.sleep(left)  # the fault schedule itself, not a wait for an event


def kill_cost(recs, t_kill, world_before):
    """(seconds from the kill to the next step committed by the new world,
    steps committed before it that were done again), or None."""
    for i, r in enumerate(recs):
        if r["time"] > t_kill and r["world"] != world_before:
            last = max((x["step"] for x in recs[:i]), default=0)
            return r["time"] - t_kill, last - (r["step"] - 1)
    return None


def throughput_run(args, faults):
    """(samples/s over the window, [(kill cost) ...])"""
    with tempfile.TemporaryDirectory(prefix="chaos_bench_") as tmp:
        job = Job(args, tmp, "inplace")
        try:
            t0 = job.start_all()
            kills, t = [], t0 + args.period
            while faults and t + args.down <= t0 + args.seconds:
                sleep_until(t)
                kills.append(job.kill(2))
                sleep_until(t + args.down)
                job.start(2)
                t += args.period
            sleep_until(t0 + args.seconds)
            recs = records(job.metrics)
        finally:
            job.close()
    steps = sum(1 for r in recs if t0 < r["time"] <= t0 + args.seconds)
    return steps * G / args.seconds, [kill_cost(recs, t, NODES) for t in kills]


def one_kill_run(args, kind):
    """The cost of node 2's death --period s after the first step."""
    with tempfile.TemporaryDirectory(prefix="chaos_bench_") as tmp:
        job = Job(args, tmp, kind)
        try:
            t0 = job.start_all()
            sleep_until(t0 + args.period)
            t_kill = job.kill(2)
            try:
                wait_for(lambda: kill_cost(records(job.metrics), t_kill, NODES), 120,
                         "the %s job's first step after the kill" % kind)
            except AssertionError:
                return None
            return kill_cost(records(job.metrics), t_kill, NODES)
        finally:
            job.close()


def fmt_cost(c):
    if c is None:
        return "no step within 120 s", "-"
    return "%.3f s" % c[0], "%d" % c[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddplaunch", required=True)
    ap.add_argument("--ddp-train", dest="ddp_train", required=True)
    ap.add_argument("--torch", default=os.path.expanduser(
        "~/.cache/ddplaunch/venv-torch2/bin/python"))
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--period", type=float, default=10.0)
    ap.add_argument("--down", type=float, default=5.0)
    ap.add_argument("--checkpoint_every", type=int, default=500)
    ap.add_argument("--out")
    args = ap.parse_args()
    base, _ = throughput_run(args, False)
    faulty, costs = throughput_run(args, True)
    ratio = faulty / base
    lines = ["3 simulated nodes x 1 rank, synthetic MLP 64-256-256-10, global batch %d; "
             "node 2 killed every %.0f s and started %.0f s later, over %.0f s" %
             (G, args.period, args.down, args.seconds), "",
             "| committed samples/s | |", "|---|---:|",
             "| no faults | %.0f |" % base,
             "| with faults (%d kills) | %.0f |" % (len(costs), faulty),
             "| ratio (target >= 0.95) | %.3f |" % ratio, ""]
    restart = one_kill_run(args, "restart")
    torch = None
    if os.path.exists(args.torch):
        torch = one_kill_run(args, "torchrun")
    rows = [("in place (ddp-train --global_batch_size), per kill", c) for c in costs]
    rows.append(("ddplaunch restart path (checkpoint every %d steps)" % args.checkpoint_every,
                 restart))
    rows.append(("torchrun 2.x, PyTorch DDP (checkpoint every %d steps)" %
                 args.checkpoint_every, torch if os.path.exists(args.torch) else None))
    lines += ["| a node killed | kill -> next committed step | steps done again |",
              "|---|---:|---:|"]
    for name, c in rows:
        lines.append("| %s | %s | %s |" % ((name,) + fmt_cost(c)))
    ok = [c for c in costs if c]
    if ok:
        lines.append("")
        lines.append("in place: kill -> next committed step median %.3f s (max %.3f) over %d "
                     "kills" % (statistics.median(c[0] for c in ok), max(c[0] for c in ok),
                                len(ok)))
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0 if ratio >= 0.95 and len(ok) == len(costs) else 1


if __name__ == "__main__":
    sys.exit(main())
