"""Random events (issue 16, section 4): ddp-train with a fixed global batch
on 3-4 simulated nodes (127.0.0.2-5, mnlib.py) while at least 50 random
events land over 2,000 steps: kill -9 of a whole node (its agent and
workers), the start of a node (a new agent joins, --nnodes=2:4), kill -9 of
a single worker. Node 0 hosts the rendezvous store and is never killed
whole; at least 2 nodes live at all times. Each event waits for the last
one to land: node 0's agent re-forms in place for the expected world and
a step is committed after it.

The job must end 0 with the final.safetensors of an undisturbed 1-rank
run (SHA-256), read no checkpoint and restart nothing. For every node
killed, the survivors' next committed step (the --metrics "time", Unix
seconds) must come within one step time + 0.3 s of the kill, plus
KILL_SLACK_S for a loaded machine; the figures are printed.

CHAOS_SEED replays a run (the seed is printed); CHAOS_EVENTS sets how many
events (default 52).
"""
import json
import os
import random
import re
import signal
import statistics
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "worker", "train"))
import train_it  # noqa: E402
from mnlib import DDPLAUNCH, MultiNodeCase, addr, descendants, fast_conf  # noqa: E402

DDP_TRAIN = os.environ.get("DDP_TRAIN", "ddp-train")
TRAIN_ENV = {"OPENBLAS_NUM_THREADS": "1", "DDP_TIMEOUT_MS": "60000", "DDP_BACKEND": "cpu"}
STEP_RE = re.compile(r"step (\d+)/(\d+) ")
# The agent's line when its workers re-form in place (agent_inplace.c)
REFORM_RE = r"re-form in place as ranks \d+-\d+ of %d "
# The agent's lines when workers are stopped and started again (agent.c,
# agent_inplace.c)
RESTART_RE = r"stopping this node's workers|stopping the other workers|\(restart \d+ of \d+\)"
# Over the target (one step + 0.3 s) for a machine shared with other jobs
KILL_SLACK_S = 0.7
LAND_TIMEOUT_S = 60.0


class Watch:
    """Reads one node's output from where it last stopped, so that waiting
    for each of thousands of lines costs one look per line."""

    def __init__(self, proc):
        self.proc = proc
        self.pos = 0

    def wait(self, rx, timeout, after=0.0):
        """The first line at or after the read position that came at or
        after `after` and matches rx: (time, match); fails the test at the
        deadline or when the process ended."""
        deadline = time.monotonic() + timeout
        p = self.proc
        with p.cond:
            while True:
                while self.pos < len(p.lines):
                    t, line = p.lines[self.pos]
                    self.pos += 1
                    m = rx.search(line) if t >= after else None
                    if m:
                        return t, m
                left = deadline - time.monotonic()
                if left <= 0 or p.t_exit is not None:
                    raise AssertionError("%s: no line matching %r within %.0f s; last lines:\n%s"
                                         % (p.name, rx.pattern, timeout, tail(p)))
                p.cond.wait(left)


def tail(proc, n=60):
    with proc.cond:
        return "\n".join(line for _, line in proc.lines[-n:])


def ddp_train_pids(agent_pid):
    """The ddp-train processes under an agent (below its ddp-exec shims)."""
    pids = []
    for pid in descendants(agent_pid):
        try:
            with open("/proc/%d/comm" % pid) as f:
                if f.read().strip() == "ddp-train":
                    pids.append(pid)
        except OSError:
            pass
    return pids


def train_args(ckdir, steps):
    """test_inplace.py's synthetic job with a fixed global batch."""
    return [a for a in train_it.synthetic_args(ckdir, 8, steps) if a != "--sync_bn"] + [
        "--held_out", "0.1", "--global_batch_size", "48", "--virtual_shards", "8",
        "--device", "cpu"]


class Chaos(MultiNodeCase):
    STEPS = 2000
    NPROC = 2
    MAX_NODES = 4
    # A node's start takes ~0.5 s (agent, rendezvous last call, ddp-train's
    # start, the state handed over) while the others train on: at ~1 ms a
    # step that is 500 of the 2,000 steps. Paced steps keep each event
    # within a few dozen steps, at little CPU.
    STEP_SLEEP_MS = 20

    def setUp(self):
        super().setUp()
        self.seed = int(os.environ.get("CHAOS_SEED", random.SystemRandom().randrange(1 << 31)))
        self.nevents = int(os.environ.get("CHAOS_EVENTS", "52"))
        self.rng = random.Random(self.seed)
        self.ref = os.path.join(self.dir, "ref")
        self.run_dir = os.path.join(self.dir, "run")
        self.metrics = os.path.join(self.dir, "metrics.jsonl")
        self.nodes = {}  # slot -> the agent running there now
        self.all_nodes = []
        self.incarnation = 0

    def start_node(self, slot, port):
        self.incarnation += 1
        args = ["--nproc_per_node=%d" % self.NPROC, "--nnodes=2:%d" % self.MAX_NODES,
                "--rdzv_backend=c10d", "--rdzv_id=chaos", fast_conf(), "--max_restarts=1000",
                "--rdzv_endpoint=%s:%d" % (addr(0), port),
                "--log_dir=" + os.path.join(self.dir, "logs%d" % self.incarnation)]
        prog = [DDP_TRAIN] + train_args(self.run_dir, self.STEPS) + [
            "--metrics", self.metrics, "--log_every", "1", "--step_sleep_ms",
            str(self.STEP_SLEEP_MS)]
        p = self.cluster.agent(slot, args + prog, worker=None, env=TRAIN_ENV,
                               name="node%d.%d" % (slot, self.incarnation))
        self.nodes[slot] = p
        self.all_nodes.append(p)
        return p

    def world(self):
        return self.NPROC * len(self.nodes)

    def kill_node(self, slot):
        p = self.nodes.pop(slot)
        pids = ddp_train_pids(p.pid)
        p.signal(signal.SIGKILL)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def kill_worker(self, slot):
        """Kills one ddp-train process of the node; False when the node has
        not all its workers up (one is being replaced)."""
        pids = ddp_train_pids(self.nodes[slot].pid)
        if len(pids) != self.NPROC:
            return False
        os.kill(self.rng.choice(sorted(pids)), signal.SIGKILL)
        return True

    def pick(self):
        """The next event: (kind, slot)."""
        up = sorted(s for s in self.nodes if s != 0)
        down = [s for s in range(1, self.MAX_NODES) if s not in self.nodes]
        kinds = ["worker"]
        if len(self.nodes) > 2:
            kinds.append("kill")
        if down:
            kinds.append("start")
        kind = self.rng.choice(kinds)
        if kind == "kill":
            return kind, self.rng.choice(up)
        if kind == "start":
            return kind, self.rng.choice(down)
        return kind, self.rng.choice([0] + up)

    def tails(self, n=12):
        """Each node's last lines other than progress lines."""
        out = []
        for p in self.all_nodes:
            with p.cond:
                lines = [line for _, line in p.lines if not STEP_RE.search(line)]
            out.append("-- %s\n%s" % (p.name, "\n".join(lines[-n:])))
        return "\n".join(out)

    def land(self, watch, t_event):
        """Waits for node 0's agent to re-form in place for the world now
        expected, then for a step committed after it; returns that step."""
        rx = re.compile("(%s)|%s" % (REFORM_RE % self.world(), RESTART_RE))
        t_re, m = watch.wait(rx, LAND_TIMEOUT_S, after=t_event)
        self.assertTrue(m.group(1), "the event restarted workers instead of re-forming in "
                        "place: %r; the nodes' last lines:\n%s" % (m.group(0), self.tails()))
        _, m = watch.wait(STEP_RE, LAND_TIMEOUT_S, after=t_re)
        return int(m.group(1))

    def test_random_events_same_bits(self):
        print("chaos seed %d (CHAOS_SEED=%d replays it), %d events" %
              (self.seed, self.seed, self.nevents), flush=True)
        solo = self.cluster.start("solo", [DDPLAUNCH, "--standalone", "--nproc_per_node=1",
                                           DDP_TRAIN] + train_args(self.ref, self.STEPS),
                                  TRAIN_ENV)
        self.assertEqual(solo.wait(300)[0], 0, solo.text())
        first = self.start_node(0, 0)
        port = self.host_port(first)
        for slot in (1, 2):
            self.start_node(slot, port)
        watch = Watch(first)
        watch.wait(re.compile(REFORM_RE % 6 + "|" + r"6 rank\(s\), global batch"), 120)
        # the events at steps spread over the run, one in each of nevents
        # bins; the last 300 steps are left for the test to see the last
        # event's step (steps take milliseconds here)
        lo, hi = 40, self.STEPS - 300
        width = (hi - lo) / self.nevents
        targets = [int(lo + width * (i + self.rng.random())) for i in range(self.nevents)]
        kills, log = [], []
        step = 0
        t0 = time.monotonic()
        for target in targets:
            while step < target:
                step = int(watch.wait(STEP_RE, LAND_TIMEOUT_S)[1].group(1))
            kind, slot = self.pick()
            step_at = step
            t_event, t_unix = time.monotonic(), time.time()
            if kind == "kill":
                self.kill_node(slot)
            elif kind == "start":
                self.start_node(slot, port)
            elif not self.kill_worker(slot):
                continue
            step = self.land(watch, t_event)
            log.append((kind, slot, target, step, self.world(), time.monotonic() - t_event))
            print("event %2d: %-6s node %d at step %4d: world %d from step %4d, %.2f s" %
                  (len(log), kind, slot, step_at, self.world(), step, log[-1][-1]),
                  flush=True)
            if kind == "kill":
                kills.append((t_unix, self.world(), slot))
        t_events = time.monotonic() - t0
        counts = {k: sum(1 for e in log if e[0] == k) for k in ("kill", "start", "worker")}
        print("%d events in %.1f s: %s" % (len(log), t_events, counts), flush=True)
        self.assertGreaterEqual(len(log), 50, "too few events landed")
        self.assertTrue(all(counts.values()), counts)
        live = list(self.nodes.values())
        self.assert_all_exit(live, timeout=300)
        text = "\n".join(p.text() for p in self.all_nodes)
        self.assertNotIn("resumed from", text)
        self.assertNotIn("stopping this node's workers", text)
        self.assertNotIn("without the training state", text)
        self.assertEqual(train_it.sha256(os.path.join(self.run_dir, "final.safetensors")),
                         train_it.sha256(os.path.join(self.ref, "final.safetensors")),
                         "final checkpoints differ")
        self.check_kill_times(kills)

    def test_replacement_killed_at_once(self):
        # a sequence the random test draws now and then, made certain: a
        # worker that was handed a round killed, and its replacement killed
        # before the job saw any other event (no round was handed to it, so
        # it never said "took R"; the agent must not count the round handed
        # to the process it replaced): replaced alone again, no group
        # restarts, and the job ends with the 1-rank bits
        self.STEPS = 600
        solo = self.cluster.start("solo", [DDPLAUNCH, "--standalone", "--nproc_per_node=1",
                                           DDP_TRAIN] + train_args(self.ref, self.STEPS),
                                  TRAIN_ENV)
        self.assertEqual(solo.wait(300)[0], 0, solo.text())
        first = self.start_node(0, 0)
        self.start_node(1, self.host_port(first))
        watch = Watch(first)
        watch.wait(re.compile(r"4 rank\(s\), global batch"), 120)
        # node 0's worker first, so that node 1's workers are handed a
        # round; then one of node 1's, then its replacement
        before = set(ddp_train_pids(self.nodes[1].pid))
        victims = [min(ddp_train_pids(first.pid)), min(before), None]
        for victim in victims:
            watch.wait(STEP_RE, LAND_TIMEOUT_S)
            now = set(ddp_train_pids(self.nodes[1].pid))
            if victim is None:
                self.assertEqual(len(now - before), 1, (before, now))
                victim = (now - before).pop()
            before = now
            t_event = time.monotonic()
            os.kill(victim, signal.SIGKILL)
            self.land(watch, t_event)
        self.assert_all_exit(list(self.nodes.values()), timeout=120)
        text = "\n".join(p.text() for p in self.all_nodes)
        self.assertEqual(text.count("replacing it alone"), 3, text)
        self.assertNotIn("resumed from", text)
        self.assertEqual(train_it.sha256(os.path.join(self.run_dir, "final.safetensors")),
                         train_it.sha256(os.path.join(self.ref, "final.safetensors")),
                         "final checkpoints differ")

    def test_periodic_failures_cost(self):
        # issue 16 section 4's throughput target, shortened (the figure over
        # longer runs and beside a run without faults: tests/bench/
        # chaos_bench.py): 3 nodes x 1 rank, node 2 killed 10 s in and
        # started again 5 s later. The time the failures cost (the wait for
        # the first step after the kill, and the others' longest wait
        # between steps while the node joins, each less one step) is at
        # most 5% of the 20 s run, plus slack for a loaded machine: 95% of
        # the committed samples per second at equal speed per node count
        # (on 2 cores, 3 processes do not run at 3/2 the speed of 2)
        self.NPROC, self.MAX_NODES, self.STEPS, self.STEP_SLEEP_MS = 1, 3, 10 ** 6, 5
        period, down, seconds = 10.0, 5.0, 20.0
        first = self.start_node(0, 0)
        port = self.host_port(first)
        for slot in (1, 2):
            self.start_node(slot, port)
        Watch(first).wait(re.compile(r"3 rank\(s\), global batch"), 120)
        t0 = time.time()
        time.sleep(period)  # the fault schedule, not a wait for an event
        t_kill = time.time()
        self.kill_node(2)
        time.sleep(t0 + period + down - time.time())
        t_start = time.time()
        self.start_node(2, port)
        time.sleep(t0 + seconds - time.time())
        with open(self.metrics) as f:
            recs = [json.loads(line) for line in f if line.endswith("\n")]
        recs = [r for r in recs if r.get("kind") == "train" and r["time"] > t0]
        step2 = statistics.median(b["time"] - a["time"] for a, b in zip(recs, recs[1:])
                                  if a["world"] == b["world"] == 2)
        after_kill = next(r["time"] for r in recs if r["time"] > t_kill and r["world"] == 2)
        joined = next(i for i, r in enumerate(recs) if r["time"] > t_start and r["world"] == 3)
        during = [r for r in recs[:joined + 1] if r["time"] > t_start]
        prev = max((r for r in recs if r["time"] <= t_start), key=lambda r: r["time"])
        join_gap = max(b["time"] - a["time"] for a, b in zip([prev] + during, during))
        lost = max(0.0, after_kill - t_kill - step2) + max(0.0, join_gap - step2)
        share = lost / seconds
        print("periodic failures: the kill cost %.3f s, the join %.3f s (step %.1f ms at 2 "
              "nodes): %.2f%% of %.0f s lost, %.3f of the samples per second kept" %
              (after_kill - t_kill, join_gap, 1e3 * step2, 100 * share, seconds, 1 - share),
              flush=True)
        self.assertLess(share, 0.05 + 0.025, "the failures cost %.2f%% of the run" %
                        (100 * share))
        for p in self.nodes.values():
            self.assertTrue(p.alive(), p.text())
        text = "\n".join(p.text() for p in self.all_nodes)
        self.assertNotIn("resumed from", text)
        self.assertNotIn("stopping this node's workers", text)

    def check_kill_times(self, kills):
        with open(self.metrics) as f:
            recs = [json.loads(line) for line in f if line.endswith("\n")]
        recs = [r for r in recs if r.get("kind") == "train"]
        # one step's time at each world: the median gap between two
        # consecutive steps
        gaps = {}
        for a, b in zip(recs, recs[1:]):
            if b["step"] == a["step"] + 1 and a["world"] == b["world"]:
                gaps.setdefault(b["world"], []).append(b["time"] - a["time"])
        step_s = {w: statistics.median(g) for w, g in gaps.items()}
        print("step time by world: %s" %
              ", ".join("%d: %.1f ms" % (w, 1e3 * s) for w, s in sorted(step_s.items())))
        delays = []
        for t_kill, world, slot in kills:
            after = [r for r in recs if r["time"] > t_kill and r["world"] == world]
            self.assertTrue(after, "no step committed after the kill of node %d" % slot)
            delays.append((after[0]["time"] - t_kill, step_s.get(world, 0.0), slot))
        for d, s, slot in delays:
            print("node %d killed: next committed step %.3f s later (step %.1f ms; "
                  "target %.3f s)" % (slot, d, 1e3 * s, s + 0.3))
        if delays:
            print("kill -> next committed step: median %.3f s, max %.3f s over %d kills" %
                  (statistics.median(d for d, _, _ in delays), max(d for d, _, _ in delays),
                   len(delays)), flush=True)
        for d, s, slot in delays:
            self.assertLess(d, s + 0.3 + KILL_SLACK_S,
                            "node %d's kill: the next step came %.3f s later" % (slot, d))


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
