"""Never silent (issue 24 section 4), a seeded campaign: faults {SIGSTOP,
SIGKILL, a busy loop, a network cut} x targets {a worker, an agent, the
store's host} x phases {start-up, rendezvous, a collective, a hand-over, a
checkpoint, the final save, shutdown}, each trial ddp-train with a fixed
global batch on 3 simulated nodes x 2 ranks (test_hangs.py's job).

A trial's seed decides everything: the (fault, target, phase) (seed modulo
the 84 combinations), the node, the worker, how long a paused agent stays
paused. CHAOS_SEED=S replays trial S alone; the seed and the combination
are printed first. The phase is reached by watching the workers' progress
pages (python/ddplaunch/torch/progress.py's reader, the agent's layout),
then the fault lands:

- stop: SIGSTOP; a worker stays stopped (its agent must cut it out), an
  agent or the store's host is continued after a pause drawn per trial;
- spin: a busy loop (mn_spin, preloaded): a worker's main thread spins for
  ever, an agent's for the pause drawn per trial;
- kill: SIGKILL;
- cut: the node's port taken off the switch for good (netns.py: each node
  in a network namespace of its own, made by the test; a worker or an agent
  as target cuts its node, which holds both). Skipped, with the reason,
  where namespaces cannot be made.

The invariant, every trial: every agent ends within END_S of the fault
(nothing waits silently), and either the job finished (every agent not
killed by the test exits 0) with the 1-rank run's final weights (SHA-256),
or a line names the culprit (its pid, node or address) within twice the
detection bound (the keep-alive window, the learned deadline or, before
one is learned, DDP_TIMEOUT_MS) plus slack; and nothing is left: every
process seen under an agent is gone, and every /dev/shm/ddp-TAG-* name of
the job's tags. A trial that breaks it is printed with its seed and the
nodes' last lines; the table of outcomes per (fault, target, phase) comes
at the end.

NEVER_SILENT_SET=ci (the multinode suite): a few trials that cover each
fault and each target; =all (the bench): every combination once;
NEVER_SILENT_TRIALS=N: N drawn at random; NEVER_SILENT_FAULTS=cut,kill: =all
for those faults only.
"""
import errno
import os
import random
import re
import signal
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "worker", "train"))
import netns  # noqa: E402
import test_inplace  # noqa: E402
import train_it  # noqa: E402
from mnlib import DDPLAUNCH, MultiNodeCase, addr, fast_conf  # noqa: E402
from job_watch import Missed, Pages, comm, gone, progress  # noqa: E402
from test_hangs import tgkill  # noqa: E402


MN_SPIN = os.environ.get("MN_SPIN", "")
FAULTS = ("stop", "spin", "kill", "cut")
TARGETS = ("worker", "agent", "host")
PHASES = ("startup", "rendezvous", "collective", "handover", "checkpoint", "final", "shutdown")
COMBOS = [(f, t, p) for f in FAULTS for t in TARGETS for p in PHASES]
# The multinode suite's set: each fault and each target at least once, over
# phases spread out (the index into COMBOS; the seed is index + 84 k)
CI_SET = [COMBOS.index(c) for c in (("stop", "worker", "collective"),
                                    ("spin", "agent", "checkpoint"),
                                    ("kill", "host", "collective"),
                                    ("cut", "agent", "collective"),
                                    ("kill", "worker", "handover"),
                                    ("stop", "host", "rendezvous"))]

# Trials that found a bug, replayed in the multinode suite as they were:
# 53253319: node 2's agent stopped 7.3 s at start-up while its workers
# finished the job; thawed, it found the store gone and failed (exit 1)
# though its workers were done. 58: the store's host killed inside a
# collective; every node ended naming the store but not the phase.
# 3370001: a worker stopped in its final save (after the job's last
# collective: no peer waits on it, and a once-a-run phase learns no
# deadline); its agent waited in silence. 52863159: a worker spinning in
# shutdown (its process runs, so 3370001's stop rule missed it): its agent
# waited in silence; now named 10 s after its node's other worker finished.
# 69358457, 69358542: the store's host cut off at start-up, in the
# rendezvous: the others named its address at 6 s but the phase only at the
# join timeout (26 s against a bound of 24 s); the 6 s line now says where
# the node was. 3371786: a worker spinning in the final save (where it
# lands: 2 of 4 replays here; else in the last collective before it, or
# missed): its agent waited in silence; now named 10 s after it stopped
# writing and sleeping.
REGRESSION_SEEDS = [53253319, 58, 3370001, 52863159, 69358457, 69358542, 3371786]

# paced steps: about 5 s of training, so that a node joins (rendezvous,
# hand-over trials) well before the end
STEPS = 500
CKPT_EVERY = 150
STEP_SLEEP_MS = 8
# a trial where node 2 joins late, or that waits for the learned deadlines:
# slower steps (pacing only: the same bits), so that this comes well
# before the end on a loaded machine
LATE_STEP_SLEEP_MS = 25
KEEPALIVE = (2, 3)  # interval (s), attempts: a 6 s window
WINDOW_S = KEEPALIVE[0] * KEEPALIVE[1]
DDP_TIMEOUT_S = 10.0  # the transport's timeout: the bound before a deadline is learned
JOIN_TIMEOUT_S = 20
END_S = 150.0  # every agent ends within this of the fault
SLACK_S = 4.0
TRAIN_ENV = dict(test_inplace.TRAIN_ENV, DDP_TIMEOUT_MS=str(int(DDP_TIMEOUT_S * 1000)))
# lines that name a failure (the culprit is then looked for in them)
FAIL_RE = re.compile(r"(?i)hang:|lost|died|exited|killed|signal|gone|not answer|unreachable|"
                     r"refused|timed out|no word|silent|re-forming without|failed|cannot reach")
# a phase named in such a line: the hang line's op and number (a
# collective) or phase, or the phase an agent that ends the job says its
# workers were in (agent_phase.c)
PHASE_WORDS_RE = re.compile(r"has not (?:entered|left|answered) \w+ #\d+|is stuck in |"
                            r"this node was in |checkpoint '[^']*' interrupted")
PHASE_OF = {"startup": progress.PHASE_STARTUP, "rendezvous": progress.PHASE_REFORM,
            "collective": progress.PHASE_COLLECTIVE, "handover": progress.PHASE_HANDOVER,
            "checkpoint": progress.PHASE_CHECKPOINT, "final": progress.PHASE_FINAL,
            "shutdown": progress.PHASE_SHUTDOWN}


class NeverSilent(MultiNodeCase):
    def setUp(self):
        super().setUp()
        self.ref = os.path.join(self.dir, "ref")
        self.results = []

    # ---- the job ---------------------------------------------------------

    def args(self, ckdir, sleep_ms=STEP_SLEEP_MS):
        return [a for a in train_it.synthetic_args(ckdir, 8, STEPS) if a != "--sync_bn"] + [
            "--held_out", "0.1", "--global_batch_size", "48", "--virtual_shards", "8",
            "--device", "cpu", "--checkpoint_every", str(CKPT_EVERY), "--step_sleep_ms",
            str(sleep_ms), "--log_every", "50"]

    def reference(self):
        if os.path.exists(os.path.join(self.ref, "final.safetensors")):
            return
        solo = self.cluster.start("solo", [DDPLAUNCH, "--standalone", "--nproc_per_node=1",
                                           test_inplace.DDP_TRAIN] + self.args(self.ref),
                                  TRAIN_ENV)
        self.assertEqual(solo.wait(300)[0], 0, solo.text())

    def start_node(self, i, port, env):
        conf = fast_conf(keep_alive_interval=KEEPALIVE[0], keep_alive_max_attempt=KEEPALIVE[1],
                         join_timeout=JOIN_TIMEOUT_S)
        base = ["--nproc_per_node=2", "--nnodes=2:3", "--rdzv_backend=c10d", "--rdzv_id=job",
                conf, "--max_restarts=2", "--log_dir=" + os.path.join(self.tdir, "logs%d" % i)]
        prog = [test_inplace.DDP_TRAIN] + self.args(self.run_dir, self.sleep_ms)
        host = self.hosts.addr(0) if self.hosts else addr(0)
        local = self.hosts.addr(i) if self.hosts else addr(i)
        argv = [DDPLAUNCH, "--local_addr=" + local] + base + [
            "--rdzv_endpoint=%s:%d" % (host, port)] + prog
        if self.hosts:
            argv = self.hosts.wrap(i, argv)
        return self.cluster.start("node%d" % i, argv, env)

    # ---- one trial -------------------------------------------------------

    def trial(self, seed):
        fault, target, phase = COMBOS[seed % len(COMBOS)]
        rng = random.Random(seed)
        print("trial seed %d: fault %s, target %s, phase %s (CHAOS_SEED=%d replays it)" %
              (seed, fault, target, phase, seed), flush=True)
        if fault == "cut" and netns.available():
            print("  skipped: the network cut needs namespaces: %s" % netns.available(),
                  flush=True)
            return {"outcome": "skipped"}
        if fault == "spin" and not MN_SPIN:
            print("  skipped: MN_SPIN (the busy loop) is not built", flush=True)
            return {"outcome": "skipped"}
        self.tdir = os.path.join(self.dir, "t%d" % seed)
        self.run_dir = os.path.join(self.tdir, "run")
        os.makedirs(self.tdir)
        self.hosts = None
        if fault == "cut":
            self.hosts = netns.Hosts(3)
        hold = rng.uniform(0.5, 12.0)  # how long a paused agent stays paused
        env = dict(TRAIN_ENV, LD_PRELOAD=MN_SPIN) if MN_SPIN else dict(TRAIN_ENV)
        env["MN_SPIN_HOLD_MS"] = str(int(hold * 1000))
        try:
            return self.run_trial(rng, fault, target, phase, hold, env)
        finally:
            if self.hosts:
                self.hosts.close()

    def run_trial(self, rng, fault, target, phase, hold, env):
        late_join = phase in ("rendezvous", "handover")
        # slower steps where the trial waits for something first (a node's
        # join, the learned deadlines)
        self.sleep_ms = LATE_STEP_SLEEP_MS if late_join or phase == "collective" else STEP_SLEEP_MS
        agents = {}
        pages = Pages(agents, STEPS)
        agents[0] = self.start_node(0, 0, env)
        port = self.host_port(agents[0])
        agents[1] = self.start_node(1, port, env)
        if not late_join:
            agents[2] = self.start_node(2, port, env)
        pages.start()
        res = {"paused": []}
        try:
            res = self.inject(rng, fault, target, phase, hold, env, agents, pages, port)
            res.update(self.check(res, agents, pages))
        finally:
            pages.stop = True
            pages.join(5)
            for pid in res["paused"]:
                self._cont(pid)
        return res

    def step_of(self, pages):
        with pages.lock:
            return max((p["step"] for p in pages.pages.values()), default=0)

    def reach(self, pages, phase, nodes, after_step, deadline, live):
        """Waits for a worker of nodes in the phase (its progress page);
        once past the phase (missed between two reads), the nearest moment
        after it: (pid, page, seen phase name). Fails the trial when every
        agent ended first."""
        want = PHASE_OF[phase]
        while time.monotonic() < deadline:
            if not any(p.alive() for p in pages.agents.values()):
                if phase in ("final", "shutdown"):
                    raise Missed("the job ended before its %s was seen" % phase)
                raise AssertionError("the job ended before it reached %s:\n%s" % (
                    phase, self.tails(pages.agents)))
            if self.step_of(pages) >= after_step or phase in ("startup", "rendezvous",
                                                               "handover"):
                hit = pages.find(lambda p: p["phase"] == want, nodes)
                if hit:
                    return hit[0], hit[1], phase
                near = self.near(pages, phase, nodes, live)
                if near:
                    return near[0], near[1], "after " + phase
            time.sleep(0.0005)
        raise AssertionError("the job never reached %s" % phase)

    def near(self, pages, phase, nodes, live):
        if phase == "startup":
            return pages.find(lambda p: True, nodes)
        if phase == "rendezvous":
            return pages.find(lambda p: p["phase"] == progress.PHASE_HANDOVER or
                              p["world"] == 6, nodes)
        if phase == "handover":
            return pages.find(lambda p: p["world"] == 6 and p["step"] > 0, nodes)
        if phase == "checkpoint":
            return pages.find(lambda p: p["step"] % CKPT_EVERY == 0 and p["step"] > 0, nodes)
        if phase == "final":
            return pages.find(lambda p: p["step"] >= STEPS, nodes)
        if phase == "shutdown" and not live:
            # an agent may be hit after its workers ended (a worker not:
            # its shutdown is seen, or the trial is missed)
            return pages.find(lambda p: p["phase"] == progress.PHASE_SHUTDOWN or (
                p["step"] >= STEPS and gone(p["pid"])), nodes, live=False)
        return None

    def inject(self, rng, fault, target, phase, hold, env, agents, pages, port):
        t_start = time.monotonic()
        late_join = phase in ("rendezvous", "handover")
        if late_join:
            # node 2 joins a job that trains: every worker re-forms, node 2's
            # take the state handed over
            while self.step_of(pages) < 40:
                self.assertLess(time.monotonic() - t_start, 120, "no step 100")
                time.sleep(0.01)
            agents[2] = self.start_node(2, port, env)
        # a hand-over is node 2's (the joiner's workers take the state); a
        # re-formation node 1's (its running workers re-form)
        node = {"handover": 2, "rendezvous": 1}.get(phase) or rng.choice([1, 2])
        if target == "host":
            node = 0
        watch = [2] if phase == "handover" else ([node] if target == "worker" else [0, 1, 2])
        after = {"collective": 100, "checkpoint": CKPT_EVERY, "final": STEPS - 5,
                 "shutdown": STEPS}.get(phase, 0)
        if phase == "collective":
            after += rng.randrange(0, 150)
        if phase == "collective":
            # the deadlines learned: a hang inside a collective is then named
            for p in agents.values():
                p.wait_line(r"hang deadlines? (learned from the job|: )", timeout=120)
        pid, page, seen = self.reach(pages, phase, watch, after, time.monotonic() + 180,
                                     target == "worker")
        victim = pid if target == "worker" else agents[node].pid
        t0 = time.monotonic()
        res = {"fault": fault, "target": target, "phase": phase, "seen": seen,
               "node": node, "victim": victim, "t0": t0, "paused": [], "killed": [],
               "rank": page["rank"] if target == "worker" else -1}
        try:
            self.fault(fault, target, node, victim, res)
        except OSError as e:  # ProcessLookupError, or tgkill's
            if e.errno != errno.ESRCH:
                raise
            raise Missed("the %s had ended when the %s was seen" % (target, seen))
        print("  injected at %s (page phase %s, step %d, round %d) into %s %d of node %d%s" %
              (seen, progress.PHASES[page["phase"]], page["step"], page["round"], target, victim,
               node, " for %.1f s" % hold if res["paused"] or
               (fault == "spin" and target != "worker") else ""), flush=True)
        if res["paused"]:
            threading.Timer(hold, lambda: [self._cont(p) for p in res["paused"]]).start()
        return res

    def fault(self, fault, target, node, victim, res):
        if fault == "stop":
            os.kill(victim, signal.SIGSTOP)
            if target != "worker":
                res["paused"].append(victim)
        elif fault == "spin":
            if target == "worker":
                tgkill(victim, victim, signal.SIGUSR2)
            else:
                tgkill(victim, victim, signal.SIGRTMIN + 7)
        elif fault == "kill":
            os.kill(victim, signal.SIGKILL)
            if target != "worker":
                res["killed"].append(node)
        else:
            self.hosts.partition(node)
            res["cut"] = node

    def tails(self, agents, n=25):
        out = []
        for i, p in sorted(agents.items()):
            with p.cond:
                lines = [line for _, line in p.lines if not re.search(r"step \d+/", line)]
            out.append("  --- node %d (rc %s), last lines:\n    %s" % (
                i, p.p.returncode, "\n    ".join(lines[-n:])))
        return "\n".join(out)

    def _cont(self, pid):
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass

    # ---- the invariant ---------------------------------------------------

    def bound(self, agents, phase):
        """The detection bound: the keep-alive window, or the learned
        deadline (the largest any agent said) inside a collective; outside
        one (start-up, a re-formation, a hand-over, a checkpoint, the final
        save, shutdown: judged by their own measure once seen 3 times) or
        before a deadline is learned, the transport's timeout."""
        if phase != "collective":
            return max(WINDOW_S, DDP_TIMEOUT_S)
        dl = 0.0
        for p in agents.values():
            for _, line in list(p.lines):
                m = re.search(r"hang deadlines? learned from the job.*?([\d.]+) s", line)
                if m:
                    dl = max(dl, float(m.group(1)))
        return max(WINDOW_S, dl if dl else DDP_TIMEOUT_S)

    def culprit_line(self, res, agents, phase=False):
        """The first line after the fault, on any node, that names a
        failure and the culprit (its pid, its node, its address), and with
        phase the phase too: (time, node, line) or None."""
        names = [" %d" % res["victim"], "node %d " % res["node"], "rank %d)" % res["rank"],
                 "rank %d " % res["rank"],
                 (self.hosts.addr if self.hosts else addr)(res["node"]) + ":"]
        named = None
        for i, p in agents.items():
            with p.cond:
                lines = list(p.lines)
            for t, line in lines:
                if t >= res["t0"] and FAIL_RE.search(line) and any(
                        n in line for n in names) and (not phase or PHASE_WORDS_RE.search(line)):
                    if named is None or t < named[0]:
                        named = (t, i, line)
        return named

    def check(self, res, agents, pages):
        t0, problems = res["t0"], []
        ends = {}
        for i, p in sorted(agents.items()):
            try:
                rc, t = p.wait(max(1.0, t0 + END_S - time.monotonic()))
                ends[i] = (rc, t)
            except AssertionError:
                problems.append("node %d still running %.0f s after the fault" % (i, END_S))
                p.p.kill()
                ends[i] = (None, None)
        pages.stop = True
        for pid in res["paused"]:
            self._cont(pid)
        # the culprit's node (an agent or the store's host hit, a node cut
        # off: the others may go on without it) may fail, saying why; every
        # other node's agent must end 0 for the job to have finished
        culprit = set(res["killed"]) | ({res["cut"]} if "cut" in res else set()) | (
            {res["node"]} if res["target"] != "worker" else set())
        finished = all(rc == 0 for i, (rc, _) in ends.items() if i not in culprit)
        for i in culprit:
            if ends[i][0] not in (0, None, -signal.SIGKILL) and not any(
                    t >= t0 and FAIL_RE.search(line) for t, line in list(agents[i].lines)):
                problems.append("node %d (the culprit's) failed without a line saying why" % i)
        final = os.path.join(self.run_dir, "final.safetensors")
        same = finished and os.path.exists(final) and (
            train_it.sha256(final) == train_it.sha256(os.path.join(self.ref, "final.safetensors")))
        res["end_s"] = max((t - t0 for _, t in ends.values() if t), default=0.0)
        if finished and not same:
            problems.append("the job finished without the 1-rank bits")
        named = self.culprit_line(res, agents)
        allowed = 2 * self.bound(agents, res["phase"]) + SLACK_S
        if named is not None:
            res["named_s"] = named[0] - t0
            res["line"] = "node %d: %s" % (named[1], named[2].strip())
        if same:
            res["outcome"] = "bits"
        elif named is None:
            problems.append("the job failed and no line names the culprit")
            res["outcome"] = "silent"
        else:
            res["outcome"] = "named"
            with_phase = self.culprit_line(res, agents, phase=True)
            if with_phase is None:
                problems.append("no line names the phase with the culprit")
            else:
                named = with_phase
                res["named_s"] = named[0] - t0
                res["line"] = "node %d: %s" % (named[1], named[2].strip())
            if named[0] - t0 > allowed:
                problems.append("named %.1f s after the fault (bound %.1f s)" %
                                (named[0] - t0, allowed))
                res["outcome"] = "late"
        # nothing left: every process seen under an agent, every shm name
        left = [pid for pid in pages.seen if not gone(pid)]
        deadline = time.monotonic() + 10
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = [pid for pid in left if not gone(pid)]
        if left:
            problems.append("left running: %s" % ", ".join("%d (%s)" % (p, comm(p))
                                                           for p in left))
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if pages.files and not pages.tags:
            problems.append("the workers had no DDP_JOB_TAG: their /dev/shm names unchecked")
        shm = [n for n in os.listdir("/dev/shm") for tag in pages.tags
               if n.startswith("ddp-%s-" % tag)]
        if shm:
            problems.append("/dev/shm names left: %s" % ", ".join(shm))
            for n in shm:
                try:
                    os.unlink(os.path.join("/dev/shm", n))
                except OSError:
                    pass
        res["problems"] = problems
        if problems:
            res["outcome"] = "BROKEN: " + res["outcome"]
        print("  outcome %s%s, every agent ended %.1f s after the fault%s" % (
            res["outcome"], " (named %.1f s: %s)" % (res["named_s"], res["line"][:400])
            if "named_s" in res else "", res["end_s"],
            "".join("\n  PROBLEM: " + p for p in problems)), flush=True)
        if problems or os.environ.get("NEVER_SILENT_VERBOSE"):
            print(self.tails(agents), flush=True)
        return res

    # ---- the campaign ----------------------------------------------------

    def seeds(self):
        if os.environ.get("CHAOS_SEED"):
            return [int(os.environ["CHAOS_SEED"])]
        base = random.SystemRandom().randrange(1 << 20)
        which = os.environ.get("NEVER_SILENT_SET", "ci")
        if os.environ.get("NEVER_SILENT_TRIALS"):
            rng = random.Random(base)
            return [rng.randrange(1 << 30) for _ in range(int(os.environ["NEVER_SILENT_TRIALS"]))]
        faults = os.environ.get("NEVER_SILENT_FAULTS", ",".join(FAULTS)).split(",")
        idx = CI_SET if which == "ci" else [i for i, c in enumerate(COMBOS) if c[0] in faults]
        return [i + len(COMBOS) * (base + n) for n, i in enumerate(idx)] + (
            REGRESSION_SEEDS if which == "ci" else [])

    def test_campaign(self):
        self.reference()
        results = []
        for seed in self.seeds():
            self.cluster.close()
            self.cluster = type(self.cluster)(self.dir)
            try:
                res = self.trial(seed)
            except Missed as e:
                f, t, ph = COMBOS[seed % len(COMBOS)]
                res = {"outcome": "missed", "fault": f, "target": t, "phase": ph, "seen": "-",
                       "end_s": 0.0}
                print("  missed: %s" % e, flush=True)
            except AssertionError as e:  # the trial could not be run as drawn
                f, t, ph = COMBOS[seed % len(COMBOS)]
                res = {"outcome": "BROKEN: no run", "problems": [str(e)[:3000]],
                       "fault": f, "target": t, "phase": ph, "seen": "-", "end_s": 0.0}
                print("  PROBLEM: %s" % str(e)[:3000], flush=True)
            res["seed"] = seed
            results.append(res)
        print("\nper (fault, target, phase): outcome [seconds to the line or to the end]")
        for r in results:
            if r["outcome"] == "skipped":
                print("  seed %d: skipped" % r["seed"])
                continue
            print("  %-5s %-6s %-10s (%-16s) seed %-11d %-16s %s" % (
                r["fault"], r["target"], r["phase"], r["seen"], r["seed"], r["outcome"],
                "named %.1f s" % r["named_s"] if "named_s" in r else "ended %.1f s" % r["end_s"]))
        broken = [r for r in results if r.get("problems")]
        self.assertEqual(broken, [], "trials broke the invariant: %s" % "; ".join(
            "seed %d (%s %s %s): %s" % (r["seed"], r["fault"], r["target"], r["phase"],
                                         " / ".join(r["problems"])) for r in broken))


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
