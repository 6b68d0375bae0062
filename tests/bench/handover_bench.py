#!/usr/bin/python3
"""Hand-over throughput: handover_bench (one ddp_broadcast of a 100 MB
state from rank 0 to rank 1, 5 repeats) under the real ddplaunch, between
two local ranks (shared memory) and between two simulated nodes on
127.0.0.2 and 127.0.0.3 (one launcher each, --local_addr, the TCP ring).
Prints each repeat, the median, and the target line (at least 1 GB/s:
100 MB in at most 0.1 s). Exit 1 when a run fails, not when the target is
missed (the figure says by how much).

  handover_bench.py --bench PATH --ddplaunch PATH [--mb 100] [--repeats 5]
"""
import argparse
import os
import re
import socket
import subprocess
import sys

TIMEOUT = 300
TARGET_GBPS = 1.0


def free_port(host):
    """A port free on host right now (bound to 0 and read back)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def run_shm(args, env):
    cmd = [args.ddplaunch, "--standalone", "--nproc_per_node=2", args.bench,
           str(args.mb), str(args.repeats)]
    p = subprocess.run(cmd, env=dict(env, DDP_CPU_TRANSPORT="shm"), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT)
    return p.returncode, p.stdout


def run_nodes(args, env):
    """Two launchers, one rank each, on 127.0.0.2 (hosting) and 127.0.0.3."""
    port = free_port("127.0.0.2")
    procs = []
    try:
        for addr in ("127.0.0.2", "127.0.0.3"):
            cmd = [args.ddplaunch, "--local_addr=" + addr, "--nnodes=2", "--nproc_per_node=1",
                   "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.2:%d" % port,
                   "--rdzv_id=handover%d" % os.getpid(), args.bench, str(args.mb),
                   str(args.repeats)]
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
        outs = [p.communicate(timeout=TIMEOUT)[0] for p in procs]
        rc = max(abs(p.returncode) for p in procs)
        return rc, "".join(outs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def report(name, rc, out):
    results = re.findall(r"RESULT (\S+) (\d+) ([0-9.]+) ([0-9.]+)", out)
    summary = re.search(r"SUMMARY (\S+) (\d+) ([0-9.]+) ([0-9.]+) ([0-9.]+)", out)
    if rc != 0 or not summary:
        print("%s: the run failed (exit %d):\n%s" % (name, rc, out[-3000:]))
        return False
    for i, (tr, nbytes, secs, gbps) in enumerate(results):
        print("%s: repeat %d: %s, %d bytes in %s s, %s GB/s" % (name, i, tr, int(nbytes), secs,
                                                                 gbps))
    tr, nbytes, best, med, gbps = summary.groups()
    ok = float(gbps) >= TARGET_GBPS
    print("%s (%s): %.0f MB, median %.4f s (best %.4f s), %.2f GB/s" % (
        name, tr, int(nbytes) / 1e6, float(med), float(best), float(gbps)))
    print("target: %s hand-over >= %.1f GB/s (100 MB in <= 0.1 s): %.2f GB/s, %s" % (
        name, TARGET_GBPS, float(gbps), "met" if ok else "MISSED by %.1fx" % (
            TARGET_GBPS / float(gbps))))
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--ddplaunch", required=True)
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    env = dict(os.environ, DDP_BACKEND="cpu", DDP_TIMEOUT_MS="60000", OMP_NUM_THREADS="1")
    ok = report("2 local ranks, shared memory", *run_shm(args, env))
    ok = report("2 simulated nodes, TCP ring", *run_nodes(args, env)) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
