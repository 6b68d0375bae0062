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
from mnlib import Cluster, addr, descendants, fast_conf, free_port, wait_for  # noqa: E402

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


def port_open(host, port):
    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:
        return False


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
        self.port = free_port(addr(0)) if kind == "torchrun" else 0
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
        elif slot == 0:
            # Every torchrun agent on this machine takes itself for the
            # endpoint's host and the first to bind the port hosts the
            # store: node 0 must, or killing node 2 kills the store too
            wait_for(lambda: port_open(addr(0), self.port), 120, "torchrun's store")

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
        """Ends the agents and every process under them, by PID: torchrun's
        workers outlive a killed agent (ddplaunch's die with it)."""
        pids = [pid for p in self.cluster.procs if p.alive() for pid in descendants(p.pid)]
        self.cluster.close()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def sleep_until(t_unix):
    left = t_unix - time.time()
    if left > 0:
        time.sleep(left)  # the fault schedule itself, not a wait for an event


def kill_cost(recs, t_kill, world_before):
    """(seconds from the kill to the next step committed by the new world,
    steps committed before it that were done again), or None. In place, a
    rank 0 that failed a step the others committed takes it from them and
    never logs it: the next record skips a step, which is not work redone."""
    for i, r in enumerate(recs):
        if r["time"] > t_kill and r["world"] != world_before:
            last = max((x["step"] for x in recs[:i]), default=0)
            return r["time"] - t_kill, max(0, last - (r["step"] - 1))
    return None


def join_cost(recs, t_start):
    """(seconds from a node's start to the first step with it, the longest
    wait between two committed steps meanwhile), or None."""
    prev = None
    gap = 0.0
    for r in recs:
        if r["time"] <= t_start:
            prev = r
            continue
        if prev is not None:
            gap = max(gap, r["time"] - prev["time"])
        prev = r
        if r["world"] == NODES:
            return r["time"] - t_start, gap
    return None


def rates(recs, t0, t1):
    """{world: samples/s} from the steps that followed a step of that world
    within [t0, t1]."""
    acc = {}
    for a, b in zip(recs, recs[1:]):
        if t0 <= a["time"] and b["time"] <= t1 and a["world"] == b["world"]:
            steps, dt = acc.get(a["world"], (0, 0.0))
            acc[a["world"]] = (steps + 1, dt + b["time"] - a["time"])
    return {w: n * G / dt for w, (n, dt) in acc.items() if dt > 0}


def throughput_run(args, faults):
    """Samples/s over the window, the kills' costs, the joins' costs and the
    rates per world."""
    with tempfile.TemporaryDirectory(prefix="chaos_bench_") as tmp:
        job = Job(args, tmp, "inplace")
        try:
            t0 = job.start_all()
            kills, starts, t = [], [], t0 + args.period
            while faults and t + args.down <= t0 + args.seconds:
                sleep_until(t)
                kills.append(job.kill(2))
                sleep_until(t + args.down)
                starts.append(time.time())
                job.start(2)
                t += args.period
            sleep_until(t0 + args.seconds)
            recs = records(job.metrics)
        finally:
            job.close()
    t1 = t0 + args.seconds
    steps = sum(1 for r in recs if t0 < r["time"] <= t1)
    return {"rate": steps * G / args.seconds, "kills": [kill_cost(recs, t, NODES) for t in kills],
            "joins": [join_cost(recs, t) for t in starts], "by_world": rates(recs, t0, t1),
            "step": {w: step_time(recs, w) for w in (NODES - 1, NODES)}}


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
                for p in job.cluster.procs:
                    print("-- %s's last lines:\n%s" % (p.name, "\n".join(
                        p.text().splitlines()[-15:])), file=sys.stderr)
                return None, None
            recs = records(job.metrics)
            return kill_cost(recs, t_kill, NODES), step_time(recs, NODES)
        finally:
            job.close()


def fmt_rate(r):
    return "-" if r is None else "%.0f" % r


def step_time(recs, world):
    """The median time between two consecutive committed steps of a world."""
    gaps = [b["time"] - a["time"] for a, b in zip(recs, recs[1:])
            if a["world"] == b["world"] == world and b["step"] == a["step"] + 1]
    return statistics.median(gaps) if gaps else None


def lost_share(run, seconds):
    """The share of the window that the failures cost in place: each kill's
    wait for the next step and each join's longest wait between steps, less
    one step of the world then."""
    lost = 0.0
    for c in run["kills"]:
        lost += max(0.0, c[0] - (run["step"].get(NODES - 1) or 0.0)) if c else seconds
    for c in run["joins"]:
        lost += max(0.0, c[1] - (run["step"].get(NODES - 1) or 0.0)) if c else seconds
    return lost / seconds


def cost_row(name, c, step_s):
    if c is None:
        return "| %s | no step within 120 s | - | - |" % name
    return "| %s | %.3f s | %d | %s |" % (name, c[0], c[1], "-" if step_s is None else
                                          "%.3f s" % (c[1] * step_s + c[0]))


def throughput_lines(args, base, faulty):
    lines = ["3 simulated nodes x 1 rank, synthetic MLP 64-256-256-10, global batch %d; "
             "node 2 killed every %.0f s and started %.0f s later, over %.0f s" %
             (G, args.period, args.down, args.seconds), "",
             "| committed samples/s | over the run | 3 nodes | 2 nodes |",
             "|---|---:|---:|---:|"]
    for name, run in (("no faults", base), ("with faults (%d kills)" % len(faulty["kills"]),
                                            faulty)):
        w = run["by_world"]
        lines.append("| %s | %.0f | %s | %s |" % (name, run["rate"], fmt_rate(w.get(NODES)),
                                                  fmt_rate(w.get(NODES - 1))))
    lines += ["", "ratio of the runs: %.3f; time lost to the failures in place: %.2f%% of the "
              "run, so %.3f at equal speed per node count (target >= 0.95)" %
              (faulty["rate"] / base["rate"], 100 * faulty["lost"], 1 - faulty["lost"]), ""]
    for c in faulty["joins"]:
        lines.append("node 2 started: %s" % ("no step with it" if c is None else
                                             "its first step %.3f s later, the others' longest "
                                             "wait between steps meanwhile %.3f s" % c))
    return lines


def main():
    sys.stdout.reconfigure(line_buffering=True)
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddplaunch", required=True)
    ap.add_argument("--ddp-train", dest="ddp_train", required=True)
    ap.add_argument("--torch", default=os.path.expanduser(
        "~/.cache/ddplaunch/venv-torch2/bin/python"))
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--period", type=float, default=10.0)
    ap.add_argument("--down", type=float, default=5.0)
    ap.add_argument("--checkpoint_every", type=int, default=500)
    ap.add_argument("--only", choices=["throughput", "restart", "torchrun"])
    ap.add_argument("--out")
    args = ap.parse_args()
    lines, rows, ok = [], [], True
    if args.only in (None, "throughput"):
        base = throughput_run(args, False)
        faulty = throughput_run(args, True)
        faulty["lost"] = lost_share(faulty, args.seconds)
        lines += throughput_lines(args, base, faulty) + [""]
        step_s = faulty["step"].get(NODES)
        rows += [cost_row("in place (ddp-train --global_batch_size), kill %d" % (i + 1), c,
                          step_s) for i, c in enumerate(faulty["kills"])]
        ok = 1 - faulty["lost"] >= 0.95 and None not in faulty["kills"]
    if args.only in (None, "restart"):
        c, step_s = one_kill_run(args, "restart")
        rows.append(cost_row("ddplaunch restart path (ddp-train, checkpoint every %d steps)" %
                             args.checkpoint_every, c, step_s))
    if args.only in (None, "torchrun") and os.path.exists(args.torch):
        c, step_s = one_kill_run(args, "torchrun")
        rows.append(cost_row("torchrun 2.x, PyTorch DDP (checkpoint every %d steps)" %
                             args.checkpoint_every, c, step_s))
    lines += ["| a node killed | kill -> next committed step | steps done again | "
              "time lost (wait + steps redone) |", "|---|---:|---:|---:|"] + rows
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
