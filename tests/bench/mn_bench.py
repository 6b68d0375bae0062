"""ddplaunch agents on simulated nodes (127.0.0.2, ... via --local_addr,
c10d, one worker each) beside torchrun 2.x in the same run:

  start      first agent started -> every worker running, for 2, 8, 16 agents
             (target under 1 s for 16)
  death      one of 8 nodes killed (agent and worker) -> the 7 survivors'
             workers running again
  join       a node joins a running 8:9 job -> 9 workers running
  footprint  each ddplaunch agent's CPU (user + system) and peak RSS
             (VmHWM) once its workers run (target <= 50 ms, <= 20 MB)

  mn_bench.py --ddplaunch PATH --worker PATH [--torch PYTHON] [--out FILE]
              [--sizes 2,8,16]

torchrun is given the same job (--no_python, the same worker, a port
chosen free just before). The death/join jobs of both have a 1 s last call
(the 30 s default would only delay their first round). Exit 0, or 1 when a run
failed.
"""
import argparse
import os
import signal
import socket
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "multinode"))
import mnlib  # noqa: E402
from mnlib import Cluster, addr  # noqa: E402


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def footprint(pid):
    """CPU seconds (the scheduler's, in ns) and VmHWM (MiB) of a running
    process."""
    with open("/proc/%d/schedstat" % pid) as f:
        cpu = int(f.read().split()[0]) / 1e9
    with open("/proc/%d/status" % pid) as f:
        hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
    return cpu, hwm / 1024.0


class Job:
    """N agents of one launcher: ours (torch None) or torchrun."""

    def __init__(self, cluster, args, torch, n, nnodes, conf=None):
        self.cluster, self.args, self.torch = cluster, args, torch
        self.n, self.nnodes, self.conf = n, nnodes, conf
        self.port = 0 if torch is None else free_port()
        self.nodes = []

    def argv(self, i):
        if self.torch is None:
            a = [self.args.ddplaunch, "--local_addr=" + addr(i)]
        else:
            a = [self.torch, "-m", "torch.distributed.run", "--no_python",
                 "--local_addr=" + addr(i), "--monitor_interval=0.1"]
        a += ["--nnodes=%s" % self.nnodes, "--nproc_per_node=1", "--rdzv_backend=c10d",
              "--rdzv_endpoint=%s:%d" % (addr(0), self.port), "--rdzv_id=bench"]
        if self.conf:
            a.append("--rdzv_conf=" + self.conf)
        return a + [self.args.worker, "forever"]

    def start(self, i):
        p = self.cluster.start("%s%d" % ("torch" if self.torch else "ours", i), self.argv(i))
        self.nodes.append(p)
        if i == 0 and self.torch is None:
            _, m = p.wait_line(mnlib.HOST_RE.pattern)
            self.port = int(m.group(2))
        return p

    def start_all(self):
        t0 = time.monotonic()
        for i in range(self.n):
            self.start(i)
        return t0

    def all_running(self, world, after, timeout=120):
        return max(p.wait_line(r"MNW .*world=%d\b" % world, timeout, after)[0]
                   for p in self.nodes if p.alive())

    def stop(self):
        for p in self.nodes:
            p.signal(signal.SIGTERM)
        for p in self.nodes:
            try:
                p.wait(60)
            except AssertionError:
                p.p.kill()


def start_row(args, torch, n):
    with tempfile.TemporaryDirectory(prefix="mn_bench_") as tmp:
        cluster = Cluster(tmp)
        try:
            job = Job(cluster, args, torch, n, str(n))
            t0 = job.start_all()
            took = job.all_running(n, t0) - t0
            fp = [footprint(p.pid) for p in job.nodes] if torch is None else []
            job.stop()
            return took, fp
        finally:
            cluster.close()


def death_join_rows(args, torch):
    """(death -> survivors running, join -> larger world running), s."""
    conf = "last_call_timeout=1"  # the first 8:9 round waits for it
    out = []
    with tempfile.TemporaryDirectory(prefix="mn_bench_") as tmp:
        cluster = Cluster(tmp)
        try:
            job = Job(cluster, args, torch, 8, "2:8", conf)
            t0 = job.start_all()
            job.all_running(8, t0)
            victim = job.nodes[-1]
            workers = victim.workers()
            t_kill = time.monotonic()
            victim.p.kill()
            for w in workers:
                try:
                    os.kill(int(w["pid"]), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                out.append(job.all_running(7, t_kill, timeout=120) - t_kill)
            except AssertionError:
                out.append(None)
            job.stop()
        finally:
            cluster.close()
    with tempfile.TemporaryDirectory(prefix="mn_bench_") as tmp:
        cluster = Cluster(tmp)
        try:
            job = Job(cluster, args, torch, 8, "8:9", conf)
            t0 = job.start_all()
            job.all_running(8, t0)
            t_join = time.monotonic()
            job.start(8)
            try:
                out.append(job.all_running(9, t_join, timeout=150) - t_join)
            except AssertionError:
                out.append(None)
            job.stop()
        finally:
            cluster.close()
    return out


def fmt(x):
    return "failed" if x is None else "%.3f" % x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddplaunch", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--torch", default=os.path.expanduser(
        "~/.cache/ddplaunch/venv-torch2/bin/python"))
    ap.add_argument("--sizes", default="2,8,16")
    ap.add_argument("--out")
    args = ap.parse_args()
    torch = args.torch if os.path.exists(args.torch) else None
    lines = ["ddplaunch agents on simulated nodes (c10d, 1 worker each) vs torchrun "
             "(%s); seconds" % (torch or "not found: ddplaunch alone"), "",
             "| | ddplaunch | torchrun |", "|---|---:|---:|"]
    fps, ok = [], True
    for n in [int(x) for x in args.sizes.split(",")]:
        ours, fp = start_row(args, None, n)
        fps += fp
        theirs = start_row(args, torch, n)[0] if torch else None
        lines.append("| %d agents: start -> all workers running | %s | %s |" %
                     (n, fmt(ours), fmt(theirs) if torch else "-"))
        if n == 16 and ours >= 1.0:
            ok = False
    ours = death_join_rows(args, None)
    theirs = death_join_rows(args, torch) if torch else [None, None]
    lines.append("| 1 of 8 killed -> 7 running | %s | %s |" % (fmt(ours[0]), fmt(theirs[0])))
    lines.append("| a 9th joins 8:9 -> 9 running | %s | %s |" % (fmt(ours[1]), fmt(theirs[1])))
    cpu = [c for c, _ in fps]
    rss = [r for _, r in fps]
    lines += ["", "ddplaunch agent footprint once its workers run (%d agents): CPU median %.0f ms"
              " (max %.0f), peak RSS median %.1f MiB (max %.1f); targets <= 50 ms, <= 20 MB" %
              (len(fps), 1000 * statistics.median(cpu), 1000 * max(cpu),
               statistics.median(rss), max(rss))]
    ok = ok and None not in ours and max(cpu) <= 0.05 and max(rss) <= 20
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
