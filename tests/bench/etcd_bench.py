"""The etcd rendezvous backend beside the c10d one: ddplaunch agents on
simulated nodes (127.0.0.2, ... via --local_addr, one worker each), in the
same run:

  start   first agent started -> every worker running, for 2, 8, 16 agents
          (median of --repeat runs); c10d: node 0 hosts the store (the
          others start once it listens); etcd: all start at once on a
          running cluster of 1 member and of 3 members
  death   one of 8 nodes killed (agent and worker) -> the 7 survivors'
          workers running again (c10d: its connection closes; etcd: its
          lease expires, 3 s)
  leader  3 members, 8 nodes running: the etcd leader killed, then a node
          leaves (SIGTERM) -> the 7 survivors running (an election, then
          the re-formation)

  etcd_bench.py --ddplaunch PATH --worker PATH [--sizes 2,8,16] [--repeat 3]
                [--out FILE]

torchrun's etcd backends need the python-etcd package and etcd's v2 API;
this script does not run them. Exit 0, 1 when a run failed, 77 when etcd
cannot run here.
"""
import argparse
import os
import signal
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "multinode"))
sys.path.insert(0, os.path.join(HERE, "..", "rendezvous", "etcd"))
import etcd_cluster  # noqa: E402
import mnlib  # noqa: E402
from mnlib import Cluster, addr  # noqa: E402

CONF = "last_call_timeout=1"  # the first 2:8 round waits for it


class Job:
    """n agents of one backend: "c10d" or an etcd cluster's endpoints."""

    def __init__(self, cluster, args, backend, n, nnodes, conf=None):
        self.cluster, self.args, self.backend = cluster, args, backend
        self.n, self.nnodes, self.conf = n, nnodes, conf
        self.port = 0
        self.nodes = []

    def argv(self, i):
        a = [self.args.ddplaunch, "--local_addr=" + addr(i), "--nnodes=%s" % self.nnodes,
             "--nproc_per_node=1", "--rdzv_id=bench"]
        if self.backend == "c10d":
            a += ["--rdzv_backend=c10d", "--rdzv_endpoint=%s:%d" % (addr(0), self.port)]
        else:
            a += ["--rdzv_backend=etcd", "--rdzv_endpoint=" + self.backend]
        if self.conf:
            a.append("--rdzv_conf=" + self.conf)
        return a + [self.args.worker, "forever"]

    def start(self, i):
        p = self.cluster.start("node%d" % i, self.argv(i))
        self.nodes.append(p)
        if i == 0 and self.backend == "c10d":
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

    def kill_node(self, p):
        workers = p.workers()
        p.p.kill()
        for w in workers:
            try:
                os.kill(int(w["pid"]), signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop(self):
        for p in self.nodes:
            p.signal(signal.SIGTERM)
        for p in self.nodes:
            try:
                p.wait(60)
            except AssertionError:
                p.p.kill()


class Backend:
    """c10d, or a fresh etcd cluster of `members` for every job."""

    def __init__(self, members=0):
        self.members = members
        self.etcd = None

    def __enter__(self):
        if self.members:
            self.etcd = etcd_cluster.EtcdCluster(self.members)
            self.etcd.start()
        return self

    def __exit__(self, *exc):
        if self.etcd:
            self.etcd.stop()
        return False

    @property
    def name(self):
        return self.etcd.endpoints if self.etcd else "c10d"


def run_job(args, members, fn):
    with tempfile.TemporaryDirectory(prefix="etcd_bench_") as tmp, Backend(members) as b:
        cluster = Cluster(tmp)
        try:
            return fn(cluster, b)
        except AssertionError as e:
            print("run failed: %s" % str(e)[:2000], file=sys.stderr)
            return None
        finally:
            cluster.close()


def start_time(args, members, n):
    def fn(cluster, b):
        job = Job(cluster, args, b.name, n, str(n))
        t0 = job.start_all()
        took = job.all_running(n, t0) - t0
        job.stop()
        return took
    runs = [run_job(args, members, fn) for _ in range(args.repeat)]
    return None if None in runs else statistics.median(runs)


def death_time(args, members):
    def fn(cluster, b):
        job = Job(cluster, args, b.name, 8, "2:8", CONF)
        job.all_running(8, job.start_all())
        t_kill = time.monotonic()
        job.kill_node(job.nodes[-1])
        took = job.all_running(7, t_kill) - t_kill
        job.stop()
        return took
    return run_job(args, members, fn)


def leader_time(args):
    def fn(cluster, b):
        job = Job(cluster, args, b.name, 8, "2:8", CONF)
        job.all_running(8, job.start_all())
        leader = b.etcd.leader()
        t0 = time.monotonic()
        b.etcd.kill(leader)
        job.nodes[-1].signal(signal.SIGTERM)
        took = job.all_running(7, t0) - t0
        job.stop()
        return took
    return run_job(args, 3, fn)


def fmt(x):
    return "failed" if x is None else "%.3f" % x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddplaunch", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--sizes", default="2,8,16")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    why = etcd_cluster.etcd_unavailable()
    if why:
        print("SKIP: etcd cannot run here: " + why)
        return 77
    lines = ["ddplaunch agents on simulated nodes (1 worker each), c10d beside etcd "
             "(%s); seconds, median of %d for the start rows" %
             (os.path.basename(etcd_cluster.ETCD), args.repeat), "",
             "| | c10d | etcd, 1 member | etcd, 3 members |", "|---|---:|---:|---:|"]
    results = []
    for n in [int(x) for x in args.sizes.split(",")]:
        row = [start_time(args, m, n) for m in (0, 1, 3)]
        results += row
        lines.append("| %d agents: start -> all workers running | %s |" %
                     (n, " | ".join(fmt(x) for x in row)))
    row = [death_time(args, m) for m in (0, 1, 3)]
    results += row
    lines.append("| 1 of 8 killed -> 7 running | %s |" % " | ".join(fmt(x) for x in row))
    leader = leader_time(args)
    results.append(leader)
    lines.append("| etcd leader killed + 1 of 8 leaves -> 7 running | - | - | %s |" % fmt(leader))
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 1 if None in results else 0


if __name__ == "__main__":
    sys.exit(main())
