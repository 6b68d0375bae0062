"""What a hang costs (issue 24, section 5), on 3 simulated nodes x 2 ranks
(127.0.0.2-4, node 0 hosting the store), ddp-train in shard mode
(--global_batch_size 48 --virtual_shards 8), as tests/multinode/test_hangs.py
runs it:

  stop    one worker SIGSTOPped (mostly inside an all-reduce: 97% of a step)
  spin    one worker's main thread in a busy loop (tests/multinode/mn_spin.c,
          preloaded; SIGUSR2 sent to that thread)
  node    a whole node stopped, agent and workers (keep-alive window 10 s)

For each: the detection time (the fault to the hang line on the last node),
the deadline the agents had learned, and the first step committed without the
culprit (rank 0's --metrics record with --log_every 1). Then the false alarms:
--steps unperturbed steps beside two CPU hogs (the hang lines counted).

  hang_bench.py [--trials 3] [--steps 10000] [--out FILE]
  (DDPLAUNCH, DDP_TRAIN, MN_SPIN as for the multinode tests)

--side [--cap 120] runs instead, side by side in one run, one worker
SIGSTOPped (after step 100; a rank other than 0) under:

  torchrun 2.15 (TORCHRUN, default the torch2 venv's) with gloo, 3 nodes x 2
          ranks on 127.0.0.2-4 (c10d rendezvous), a plain DDP script
          (gloo_steps.py): once with torch's default timeout (30 min for
          gloo), once with init_process_group(timeout=60 s)
  ddplaunch with --hang_timeout off (PET_HANG_TIMEOUT=off: the behaviour
          before issue 24; DDP_TIMEOUT_MS is 300 s), ddp-train as above
  ddplaunch as it is (the learned deadline), the same job

For each: when, after the stop, the first line of any node's output names a
hang, a timeout or a failure (bounded by --cap: "> cap"), and that line.

--torch [--trials 3] runs instead ddplaunch.torch's Elastic (the
ElasticHangs job of tests/python/test_elastic_nodes.py: 3 nodes x 2 ranks of
torch with gloo, 10 ms of compute a step) under the interpreter that runs
this script (the torch2 venv's python for torch 2.15), one worker SIGSTOPped
inside an all-reduce (its progress page read as the agent reads it). Per
trial: the hang line on the last node, the first step committed without the
culprit (the first step of a round of 5 on every node; where no such round
comes, as before issue 24, the first step committed after the line), when
the replacement is back in (the first step of 6 after that), and the load
average then.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "multinode"))
import test_hangs  # noqa: E402
from mnlib import addr, descendants, fast_conf, free_port  # noqa: E402

TORCHRUN = os.environ.get("TORCHRUN", os.path.expanduser(
    "~/.cache/ddplaunch/venv-torch2/bin/torchrun"))
GLOO_STEPS = os.path.join(HERE, "gloo_steps.py")
# a word, not a path's part (the worktree may be named wt-hang2)
NAMED_RE = re.compile(r"(?i)\bhang\b|timed? ?out|timeout|error\b|fail|exception|did not report")


class Bench(test_hangs.HangCase):
    def runTest(self):
        pass


def first_commit_after(metrics, t_wall):
    with open(metrics) as f:
        for line in f:
            r = json.loads(line)
            if r.get("kind") == "train" and r.get("time", 0) > t_wall:
                return r["time"] - t_wall
    return None


def trial(kind):
    b = Bench()
    b.setUp()
    try:
        env = {"LD_PRELOAD": test_hangs.MN_SPIN} if kind == "spin" else None
        conf = fast_conf(keep_alive_interval=5, keep_alive_max_attempt=2)
        ref, run, nodes = b.start_train(20000, restarts=1, env=env, conf=conf, log_every=1)
        time.sleep(1.0)
        t0, w0 = time.monotonic(), time.time()
        if kind == "node":
            pids = [nodes[2].pid] + descendants(nodes[2].pid)
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            got = [p.wait_line(r"hang: node \d+ rank \d+ has not answered.*deadline of "
                               r"([\d.]+) s", 60, t0) for p in nodes[:2]]
            time.sleep(2.0)
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        else:
            victim = b.workers_of(nodes[1])[0]
            if kind == "stop":
                os.kill(victim, signal.SIGSTOP)
            else:
                test_hangs.tgkill(victim, victim, signal.SIGUSR2)
            got = [p.wait_line(r"hang: node \d+ rank \d+ pid %d .*deadline of ([\d.]+) s" %
                               victim, 60, t0) for p in nodes]
        detect = max(t for t, _ in got) - t0
        deadline = float(got[0][1].group(1))
        time.sleep(3.0)
        commit = first_commit_after(b.metrics, w0)
        for p in nodes:
            p.signal(signal.SIGTERM)
        return detect, deadline, commit
    finally:
        b.tearDown()


def false_alarms(steps):
    b = Bench()
    b.setUp()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        ref, run, nodes = b.start_train(steps)
        t0 = time.monotonic()
        b.assert_all_exit(nodes, timeout=3600)
        secs = time.monotonic() - t0
        lines = sum(len(b.hang_lines(p)) for p in nodes)
        same = test_hangs.train_it.sha256(os.path.join(run, "final.safetensors")) == \
            test_hangs.train_it.sha256(os.path.join(ref, "final.safetensors"))
        return lines, secs, same
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        b.tearDown()


def first_named(nodes, t0, cap):
    """(seconds after t0, line) of the first output line after t0 that names
    a hang, a timeout or a failure, waiting up to cap s; (None, None)."""
    end = t0 + cap
    while time.monotonic() < end:
        found = []
        for p in nodes:
            with p.cond:
                found += [(t, line) for t, line in p.lines if t >= t0 and NAMED_RE.search(line)]
        if found:
            t, line = min(found)
            return t - t0, line.strip()
        time.sleep(0.1)
    return None, None


def kill_tree(nodes):
    for p in nodes:
        for pid in descendants(p.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def side_torchrun(cap, timeout_s):
    b = Bench()
    b.setUp()
    nodes = []
    try:
        port = free_port(addr(0))
        env = {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
        if timeout_s:
            env["GLOO_BENCH_TIMEOUT_S"] = str(timeout_s)
        for i in range(3):
            nodes.append(b.cluster.start("torchrun%d" % i, [
                TORCHRUN, "--nnodes=3", "--nproc_per_node=2", "--rdzv_backend=c10d",
                "--rdzv_endpoint=%s:%d" % (addr(0), port), "--rdzv_id=bench",
                "--rdzv_conf=is_host=%d" % (i == 0), "--local-addr=" + addr(i),
                "--max_restarts=0", GLOO_STEPS], env))
        nodes[0].wait_line(r"BENCH step 100 ", 240)
        victim = None
        for p in nodes:
            with p.cond:
                for _, line in p.lines:
                    m = re.search(r"BENCH start rank=3 pid=(\d+)", line)
                    victim = int(m.group(1)) if m else victim
        t0 = time.monotonic()
        os.kill(victim, signal.SIGSTOP)
        got = first_named(nodes, t0, cap)
        if got[0] is not None:  # what follows: which rank each line blames
            time.sleep(15.0)
            for p in nodes:
                with p.cond:
                    for t, line in p.lines:
                        if t >= t0 and (NAMED_RE.search(line) or "rank" in line.lower()):
                            sys.stderr.write("%s +%.2f %s\n" % (p.name, t - t0, line[:400]))
        sys.stderr.write("stopped: rank 3, pid %d\n" % victim)
        return got
    finally:
        kill_tree(nodes)
        b.tearDown()


def side_ddplaunch(cap, off):
    b = Bench()
    b.setUp()
    try:
        env = {"PET_HANG_TIMEOUT": "off"} if off else None
        ref, run, nodes = b.start_train(20000, restarts=1, env=env, learned=not off)
        victim = b.workers_of(nodes[1])[0]
        t0 = time.monotonic()
        os.kill(victim, signal.SIGSTOP)
        return first_named(nodes, t0, cap)
    finally:
        b.tearDown()


def side(cap):
    rows = ["| one rank SIGSTOPped (3 nodes x 2 ranks, gloo or libddp's TCP/shm) | first line "
            "naming it, after the stop | the line |", "|---|---|---|"]
    runs = [("torchrun 2.15, gloo, torch's default timeout (1800 s)",
             lambda: side_torchrun(cap, 0)),
            ("torchrun 2.15, gloo, init_process_group(timeout=60 s)",
             lambda: side_torchrun(cap, 60)),
            ("ddplaunch, --hang_timeout off (before issue 24; DDP_TIMEOUT_MS 300 s)",
             lambda: side_ddplaunch(cap, True)),
            ("ddplaunch, the learned deadline", lambda: side_ddplaunch(cap, False))]
    for what, fn in runs:
        secs, line = fn()
        rows.append("| %s | %s | %s |" % (what, "%.2f s" % secs if secs is not None else
                                           "> %d s (nothing)" % cap,
                                           (line or "-")[:300].replace("|", "\\|")))
        print(rows[-1], flush=True)
    return "\n".join(rows) + "\n"


def torch_trial():
    """One SIGSTOP of an Elastic worker: (named, first step without it,
    back to 6 or None, world of that first step, load average)."""
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    import test_elastic_nodes as ten
    b = ten.ElasticHangs("test_worker_stopped_in_allreduce_named_cut_out_same_bits")
    b.setUp()
    try:
        nodes = b.start_job(3, 2, b.JOB + ["--pace_ms", "10", "--every", "1"], restarts=1)
        nodes[0].wait_line(r"ELASTIC step step=100 ", timeout=120)
        for p in nodes:
            p.wait_line(r"hang deadlines? (learned from the job|: )", timeout=60)
        before = {p.name: {d["pid"] for d in ten.elastic_lines(p, "start")} for p in nodes}
        victim = int(sorted(before[nodes[1].name])[0])
        t_mono, t_stop, _ = b.stop_inside_allreduce(victim)
        got = [p.wait_line(r"hang: node \d+ rank \d+ pid %d " % victim, 60, t_mono)
               for p in nodes]
        named = max(t for t, _ in got) - t_mono
        load = os.getloadavg()[0]
        b.assert_all_exit(nodes, timeout=300)
        firsts, backs, worlds = [], [], set()
        for p in nodes:
            steps = [(float(d["t"]), int(d["world"])) for d in ten.elastic_lines(p, "step")
                     if float(d["t"]) > t_stop]
            five = [i for i, (_, w) in enumerate(steps) if w == 5]
            if five:  # re-formed without it first (issue 24)
                i = five[0]
                back = [t for t, w in steps[i:] if w == 6]
                backs.append(back[0] - t_stop if back else None)
            else:  # before: the first step once it was cut out, with its replacement
                i = next(k for k, (t, _) in enumerate(steps) if t > t_stop + named)
            firsts.append(steps[i][0] - t_stop)
            worlds.add(steps[i][1])
        back = None if None in backs or not backs else max(backs)
        return named, max(firsts), back, sorted(worlds), load
    finally:
        b.tearDown()


def torch_rows(trials):
    import torch
    rows = ["torch %s, %d trial(s), one Elastic worker SIGSTOPped inside an all-reduce:" % (
        torch.__version__, trials), "",
        "| trial | named after | first step without it (its world) | replacement back in "
        "(world 6) | load average |", "|---|---|---|---|---|"]
    res = []
    for k in range(trials):
        named, first, back, worlds, load = torch_trial()
        res.append(first)
        rows.append("| %d | %.2f s | %.2f s (%s) | %s | %.1f |" % (
            k + 1, named, first, "/".join(map(str, worlds)),
            "%.2f s" % back if back is not None else "-", load))
        print(rows[-1], flush=True)
    rows.append("")
    rows.append("First step without the culprit: median %.2f s, max %.2f s after the stop." % (
        statistics.median(res), max(res)))
    return "\n".join(rows) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10000)
    ap.add_argument("--out")
    ap.add_argument("--side", action="store_true")
    ap.add_argument("--cap", type=float, default=120)
    ap.add_argument("--torch", action="store_true")
    a = ap.parse_args()
    if a.torch:
        text = torch_rows(a.trials)
        print(text)
        if a.out:
            with open(a.out, "w") as f:
                f.write(text)
        return
    if a.side:
        text = side(a.cap)
        print(text)
        if a.out:
            with open(a.out, "w") as f:
                f.write(text)
        return
    rows = ["| fault | trials | detected after (median, max) | learned deadline | first "
            "step committed without it (median) |", "|---|---|---|---|---|"]
    for kind in ("stop", "spin", "node"):
        res = [trial(kind) for _ in range(a.trials)]
        det = [r[0] for r in res]
        com = [r[2] for r in res if r[2] is not None]
        rows.append("| %s | %d | %.2f s, %.2f s | %.2f s | %s |" % (
            kind, len(res), statistics.median(det), max(det),
            statistics.median(r[1] for r in res),
            "%.2f s" % statistics.median(com) if com else "-"))
        print(rows[-1], flush=True)
    lines, secs, same = false_alarms(a.steps)
    rows.append("")
    rows.append("False alarms: %d hang line(s) in %d unperturbed steps (%.0f s) beside two CPU "
                "hogs; final weights %s the 1-rank run's." % (
                    lines, a.steps, secs, "equal to" if same else "DIFFERENT from"))
    text = "\n".join(rows) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
