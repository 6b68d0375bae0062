"""ddplaunch.torch's Elastic beside the restart paths (issue 17): the same
model, data, global batch and failure.

  cost      steps per second of Elastic and of a plain DDP loop, 2 ranks
            under ddplaunch on one node, the same global batch
  failure   3 simulated nodes x 1 rank, the third killed with kill -9 (agent
            and worker) 50 steps after a checkpoint: the time from the kill
            to the first step committed by the 2 survivors, and the steps
            (x G samples) they do again, for
              Elastic under ddplaunch           (in place)
              the DDP script under ddplaunch    (restart + checkpoint)
              the DDP script under torchrun     (restart of every worker)
              torchft (--torchft PYTHON: an interpreter with torchft; one
              replica group per node, a lighthouse on 127.0.0.1)

  elastic_bench.py --python TORCH_PYTHON --ddplaunch PATH --source ROOT
                   [--torchft PYTHON] [--quick] [--out FILE]

Exit 0, or 1 when a run failed.
"""
import argparse
import os
import re
import signal
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "multinode"))
from mnlib import Cluster, addr, fast_conf, free_port  # noqa: E402

WORKER = os.path.join(HERE, "elastic_worker.py")
STEP_RE = re.compile(r"BENCH step step=(\d+) world=(\d+) pid=(\d+) t=(\S+)")
G = 96


def steps(proc):
    with proc.cond:
        return [(int(m.group(1)), int(m.group(2)), int(m.group(3)), float(m.group(4)))
                for _, line in proc.lines for m in [STEP_RE.search(line)] if m]


def env(args):
    old = os.environ.get("PYTHONPATH")
    path = os.path.join(args.source, "python") + (os.pathsep + old if old else "")
    return {"PYTHON_EXEC": args.python, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1",
            "PYTHONPATH": path}


def cost(args, mode, v=12):
    """Steps per second of 2 ranks, after 50 steps of warm-up: the best of
    3 runs (the machine is shared)."""
    return max(cost_once(args, mode, v) for _ in range(1 if args.quick else 3))


def cost_once(args, mode, v):
    with tempfile.TemporaryDirectory(prefix="elastic_bench_") as tmp:
        cluster = Cluster(tmp)
        try:
            p = cluster.start(mode, [args.ddplaunch, "--standalone", "--nproc_per_node=2",
                                     WORKER, "--mode", mode, "--epochs",
                                     "1" if args.quick else "3", "--g", str(G), "--v", str(v)],
                          env(args))
            rc, _ = p.wait(600)
            if rc != 0:
                raise RuntimeError(p.text())
            st = [s for s in steps(p) if s[0] >= 50]
            return (st[-1][0] - st[0][0]) / (st[-1][3] - st[0][3])
        finally:
            cluster.close()


def failure(args, launcher, mode):
    """(seconds from the kill to the survivors' first 2-rank step, steps
    done again); None for a run that did not recover in 120 s."""
    with tempfile.TemporaryDirectory(prefix="elastic_bench_") as tmp:
        cluster = Cluster(tmp)
        try:
            return failure_in(args, cluster, tmp, launcher, mode)
        finally:
            cluster.close()


def node_argv(args, launcher, i, port, prog):
    common = ["--nnodes=2:3", "--nproc_per_node=1", "--rdzv_backend=c10d", "--rdzv_id=bench",
              "--max_restarts=1", "--local_addr=" + addr(i)]
    if launcher == "torchrun":
        return ([args.python, "-m", "torch.distributed.run", "--monitor_interval=0.1",
                 "--rdzv_endpoint=%s:%d" % (addr(0), port),
                 "--rdzv_conf=last_call_timeout=1"] + common + prog)
    return [args.ddplaunch, "--rdzv_endpoint=%s:%d" % (addr(0), port), fast_conf()] + common \
        + prog


def torchft_nodes(args, cluster, prog_args):
    """A lighthouse and 3 replica groups of one process each."""
    bindir = os.path.dirname(args.torchft)
    lh_port = free_port()
    cluster.start("lighthouse", [os.path.join(bindir, "torchft_lighthouse"), "--min_replicas",
                                 "2", "--join_timeout_ms", "1000", "--heartbeat_timeout_ms",
                                 "1000", "--bind", "127.0.0.1:%d" % lh_port], {})
    e = dict(env(args), TORCHFT_LIGHTHOUSE="http://127.0.0.1:%d" % lh_port)
    return [cluster.start("node%d" % i, [args.torchft, os.path.join(HERE, "torchft_worker.py"),
                                         "--replica", str(i), "--store_port",
                                         str(free_port())] + prog_args, e)
            for i in range(3)]


def failure_in(args, cluster, tmp, launcher, mode):
    prog = [WORKER, "--mode", mode, "--epochs", "3", "--g", str(G), "--pace_ms", "20",
            "--every", "100", "--checkpoint", os.path.join(tmp, "ck.pt")]
    if launcher == "torchft":
        nodes = torchft_nodes(args, cluster, prog[3:7] + ["--pace_ms", "20"])
    else:
        nodes = start_nodes(args, cluster, launcher, prog)
    nodes[0].wait_line(r"BENCH step step=150 world=3", 300)
    victim = nodes[2]
    pids = {s[2] for s in steps(victim)}
    t_kill = time.time()
    victim.p.kill()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    before = max(s[0] for s in steps(nodes[0]) if s[3] < t_kill)
    after = []
    deadline = time.monotonic() + 120
    while not after:  # torchft may have run steps with 2 replicas before the kill
        if time.monotonic() > deadline:
            return None
        try:
            nodes[0].wait_line(r"BENCH step step=\d+ world=2", 1.0, after=time.monotonic() - 1)
        except AssertionError:
            pass
        after = [s for s in steps(nodes[0]) if s[1] == 2 and s[3] > t_kill]
    for p in nodes[:2]:
        p.signal(signal.SIGTERM)
    return after[0][3] - t_kill, before + 1 - after[0][0]


def start_nodes(args, cluster, launcher, prog):
    port = free_port() if launcher == "torchrun" else 0
    nodes = [cluster.start("node0", node_argv(args, launcher, 0, port, prog), env(args))]
    if launcher == "ddplaunch":
        _, m = nodes[0].wait_line(r"hosting the rendezvous store at (\S+):(\d+)", 30)
        port = int(m.group(2))
    return nodes + [cluster.start("node%d" % i, node_argv(args, launcher, i, port, prog),
                                  env(args)) for i in (1, 2)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--python", required=True)
    p.add_argument("--ddplaunch", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--torchft", help="a python with torchft (and the same torch)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out")
    args = p.parse_args()
    lines = ["ddplaunch.torch's Elastic (in place) vs the restart paths; global batch %d, "
             "%s" % (G, args.python), ""]
    el, el2, ddp = cost(args, "elastic"), cost(args, "elastic", 2), cost(args, "ddp")
    lines += ["| 2 ranks, one node | steps/s | step ms |", "|---|---:|---:|",
              "| plain DDP loop (48 samples a rank) | %.0f | %.2f |" % (ddp, 1000 / ddp),
              "| Elastic, 2 virtual shards (one a rank) | %.0f | %.2f |" % (el2, 1000 / el2),
              "| Elastic, 12 virtual shards (6 backward passes a rank) | %.0f | %.2f |" %
              (el, 1000 / el), "",
              "Elastic's step: %.2fx the DDP loop's with 2 shards, %.2fx with 12" %
              (ddp / el2, ddp / el), ""]
    lines += ["| 3 nodes x 1 rank, node 3 killed 50 steps after a checkpoint | kill -> first "
              "2-rank step | steps done again | samples lost |", "|---|---:|---:|---:|"]
    status = 0
    rows = [("Elastic under ddplaunch (in place)", "ddplaunch", "elastic"),
            ("DDP under ddplaunch (restart + checkpoint)", "ddplaunch", "ddp"),
            ("DDP under torchrun (restart of every worker)", "torchrun", "ddp")]
    if args.torchft:
        rows.append(("torchft (replica groups, lighthouse)", "torchft", "ddp"))
    for name, launcher, mode in rows:
        try:
            r = failure(args, launcher, mode)
        except AssertionError as e:  # a job that never reached its step 150
            lines.append("| %s | did not run: %s | | |" % (name, str(e).splitlines()[0]))
            status = 1 if launcher == "ddplaunch" else status
            continue
        if r is None:
            lines.append("| %s | no recovery in 120 s | | |" % name)
            status = 1 if launcher == "ddplaunch" else status
        else:
            lines.append("| %s | %.2f s | %d | %d |" % (name, r[0], r[1], r[1] * G))
    print("\n".join(lines))
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
