"""ddplaunch.torch's Elastic on simulated nodes (issue 17): 3 nodes x 2
ranks of real torch (gloo), one node killed with kill -9 mid-run. The
survivors keep their processes, commit their first step in the smaller
world within 1 s of the kill, and end with the state of the same script run
undisturbed by 1 rank (SHA-256 of the state's tensors).

Run under the torch to test (with_torch.sh MAJOR PYTHON this-file CLASS);
the workers run under the same interpreter (PYTHON_EXEC) and find the
package through PYTHONPATH (python/ of the source tree).
"""
import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "multinode"))  # mnlib, slowdown
sys.path.insert(0, os.path.join(SRC, "python"))
from mnlib import MultiNodeCase, fast_conf  # noqa: E402

WORKER = os.path.join(HERE, "elastic_worker.py")
TORCH_PYTHON = sys.executable
LINE_RE = re.compile(r"ELASTIC (\w+) (.*)$")
# one process group's worth of steps: 4 epochs of 100 steps, 10 ms each
JOB = ["--n", "4800", "--g", "48", "--v", "8", "--epochs", "4", "--seed", "11"]


def worker_env():
    path = os.path.join(SRC, "python")
    old = os.environ.get("PYTHONPATH")
    env = {"PYTHON_EXEC": TORCH_PYTHON, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": path + (os.pathsep + old if old else "")}
    # the workers leave with os._exit once their work is printed, past
    # torch's C++ teardown, which crashed now and then in a process that
    # re-formed while retired groups were kept (python/README.md, Limits;
    # ELASTIC_PLAIN_EXIT=1 in the environment tries the plain exit)
    return env


def elastic_lines(proc, kind):
    out = []
    with proc.cond:
        for _, line in proc.lines:
            m = LINE_RE.search(line)
            if m and m.group(1) == kind:
                out.append(dict(kv.split("=", 1) for kv in m.group(2).split()))
    return out


def reference(tmpdir, job=None):
    """The digest of an undisturbed 1-rank run: no launcher, no channel."""
    out = os.path.join(tmpdir, "ref.sha")
    env = dict(os.environ, **worker_env())
    subprocess.run([TORCH_PYTHON, WORKER] + (job or JOB) + ["--out", out], env=env, check=True,
                   stdout=subprocess.DEVNULL, timeout=300)
    with open(out) as f:
        return f.read().strip()


def summary_in(log_dir):
    """The summary.json ddplaunch wrote under --log_dir=log_dir."""
    found = [os.path.join(d, "summary.json") for d, _, files in os.walk(log_dir)
             if "summary.json" in files]
    if len(found) != 1:
        raise AssertionError("%d summary.json under %s" % (len(found), log_dir))
    with open(found[0]) as f:
        return json.load(f)


class ElasticCase(MultiNodeCase):
    def log_dir(self, i):
        return os.path.join(self.dir, "logs%d" % i)

    def start_job(self, n, nproc, args, max_nodes=None, restarts=0, prog=None):
        base = ["--nproc_per_node=%d" % nproc, "--nnodes=2:%d" % (max_nodes or n),
                "--rdzv_backend=c10d", "--rdzv_id=job", fast_conf(),
                "--max_restarts=%d" % restarts]
        prog = (prog or [WORKER]) + args
        env = dict(worker_env(), **getattr(self, "extra_env", {}))
        first = self.cluster.agent(0, base + ["--log_dir=" + self.log_dir(0),
                                              "--rdzv_endpoint=127.0.0.2:0"] + prog,
                                   worker=None, env=env)
        self.port = self.host_port(first)
        ep = ["--rdzv_endpoint=127.0.0.2:%d" % self.port]
        return [first] + [self.cluster.agent(i, base + ["--log_dir=" + self.log_dir(i)] + ep +
                                             prog, worker=None, env=env)
                          for i in range(1, n)]

    def kill_node(self, node):
        pids = [int(d["pid"]) for d in elastic_lines(node, "start")]
        t_kill = time.time()
        node.p.kill()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return t_kill


class ElasticNodes(ElasticCase):
    def test_node_killed_same_bits(self):
        ref = reference(self.dir)
        out = os.path.join(self.dir, "run.sha")
        nodes = self.start_job(3, 2, JOB + ["--pace_ms", "10", "--out", out])
        nodes[0].wait_line(r"ELASTIC step step=100 ", timeout=120)
        before = {p.name: {d["pid"] for d in elastic_lines(p, "start")} for p in nodes}
        # the middle node: the last node's workers change rank
        t_kill = self.kill_node(nodes[1])
        survivors = [nodes[0], nodes[2]]
        self.assert_all_exit(survivors, timeout=240)
        firsts = []
        for p in survivors:
            text = p.text()
            done = elastic_lines(p, "done")
            self.assertEqual({d["pid"] for d in done}, before[p.name], text)
            self.assertTrue(all(d["world"] == "4" and d["reforms"] == "1" for d in done), text)
            self.assertNotIn("stopping this node's workers", text)
            steps = [d for d in elastic_lines(p, "step") if d["world"] == "4"]
            self.assertTrue(steps, text)
            firsts.append(float(steps[0]["t"]) - t_kill)
        print("first committed step of the 4-rank world %.3f s after the kill" % max(firsts))
        self.assertLess(max(firsts), 1.0)
        with open(out) as f:
            self.assertEqual(f.read().strip(), ref, "the final state differs from 1 rank's")
        shas = {d["sha"] for p in survivors for d in elastic_lines(p, "done")}
        self.assertEqual(shas, {ref})

    def test_node_joins_next_step(self):
        ref = reference(self.dir)
        nodes = self.start_job(2, 1, JOB + ["--pace_ms", "10"], max_nodes=3)
        nodes[0].wait_line(r"ELASTIC step step=50 ", timeout=120)
        before = {p.name: {d["pid"] for d in elastic_lines(p, "start")} for p in nodes}
        t_join = time.time()
        base = ["--nproc_per_node=1", "--nnodes=2:3", "--rdzv_backend=c10d", "--rdzv_id=job",
                fast_conf(), "--max_restarts=0", "--rdzv_endpoint=127.0.0.2:%d" % self.port]
        nodes.append(self.cluster.agent(2, base + [WORKER] + JOB + ["--pace_ms", "10"],
                                        worker=None, env=worker_env()))
        self.assert_all_exit(nodes, timeout=240)
        for p in nodes[:2]:
            self.assertEqual({d["pid"] for d in elastic_lines(p, "done")}, before[p.name])
        joined = elastic_lines(nodes[2], "step")
        self.assertTrue(joined and joined[0]["world"] == "3", nodes[2].text())
        # it takes part from the step boundary the survivors re-formed at:
        # their first step computed by 3 ranks is its first step (a step a
        # survivor was rolled forward past, cw=-, was committed at 2 ranks)
        for p in nodes[:2]:
            first3 = [d for d in elastic_lines(p, "step") if d["cw"] == "3"]
            self.assertEqual(first3[0]["step"], joined[0]["step"], p.text())
        print("the new node's first step %.3f s after it was started" %
              (float(joined[0]["t"]) - t_join))
        shas = {d["sha"] for p in nodes for d in elastic_lines(p, "done")}
        self.assertEqual(shas, {ref})


    def test_worker_killed_replaced_alone(self):
        # one worker of a node that is otherwise fine: its agent starts one
        # new process for that rank, which takes the state from a peer; the
        # other five processes stay (a replacement counts against
        # --max_restarts). They step without it until it has imported torch
        # (issue 24): a job long enough for it to join before the end
        job = JOB[:6] + ["--epochs", "12", "--seed", "11"]
        ref = reference(self.dir, job)
        nodes = self.start_job(3, 2, job + ["--pace_ms", "10"], restarts=1)
        nodes[0].wait_line(r"ELASTIC step step=100 ", timeout=120)
        before = {p.name: {d["pid"] for d in elastic_lines(p, "start")} for p in nodes}
        victim = sorted(before[nodes[1].name])[0]
        t_kill = time.time()
        os.kill(int(victim), signal.SIGKILL)
        self.assert_all_exit(nodes, timeout=240)
        for p in nodes:
            done = {d["pid"] for d in elastic_lines(p, "done")}
            if p is nodes[1]:
                self.assertEqual(len(done), 2, p.text())
                self.assertEqual(done & before[p.name], before[p.name] - {victim}, p.text())
            else:
                self.assertEqual(done, before[p.name], p.text())
        new = [d for d in elastic_lines(nodes[1], "step") if d["pid"] not in before[nodes[1].name]]
        self.assertTrue(new, nodes[1].text())
        print("the replacement's first step %.3f s after the kill" % (float(new[0]["t"]) - t_kill))
        shas = {d["sha"] for p in nodes for d in elastic_lines(p, "done")}
        self.assertEqual(shas, {ref})


    def test_without_the_channel_restarted_as_before(self):
        # the same script with no agent channel (as under torchrun): nothing
        # re-forms in place; the launcher restarts the workers as it does any
        # plain script (its notice stops them, or the collective's failure
        # raises first, saying so) and they start again from step 0
        prog = ["/usr/bin/env", "-u", "DDP_AGENT_FD", TORCH_PYTHON, WORKER]
        nodes = self.start_job(3, 1, JOB + ["--pace_ms", "10"], restarts=1, prog=prog)
        nodes[0].wait_line(r"ELASTIC step step=50 ", timeout=120)
        before = {d["pid"] for d in elastic_lines(nodes[0], "start")}
        self.kill_node(nodes[2])
        self.assert_all_exit(nodes[:2], timeout=240)
        text = nodes[0].text() + nodes[1].text()
        self.assertIn("stopping this node's workers for the next round", text)
        self.assertNotIn("re-form in place", text)
        done = {d["pid"] for d in elastic_lines(nodes[0], "done")}
        self.assertTrue(done and not done & before, text)
        self.assertTrue(all(d["world"] == "2" and d["reforms"] == "0"
                            for d in elastic_lines(nodes[0], "done")), text)


class ElasticBits(ElasticCase):
    """Issue 25: every state that changes the next step travels (an LR
    scheduler), the ranks' numeric identities are compared, and a replica
    that went wrong (DDP_TEST_FLIP) is caught, named and healed or stops
    the job."""
    SCHED = JOB[:6] + ["--epochs", "3", "--seed", "11", "--sched_step", "40"]
    SHORT = JOB[:6] + ["--epochs", "1", "--seed", "11"]

    def standalone(self, nproc, args, env=None, code=0):
        e = dict(os.environ, **worker_env())
        e.update(env or {})
        p = subprocess.run([os.environ.get("DDPLAUNCH", "ddplaunch"), "--standalone",
                            "--log_dir=" + self.log_dir(0), "--nproc_per_node=%d" % nproc,
                            WORKER] + args, env=e,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=240)
        if code == 0:
            self.assertEqual(p.returncode, 0, p.stdout)
        else:
            self.assertNotEqual(p.returncode, 0, p.stdout)
        return p.stdout

    def test_scheduler_worker_killed_same_bits(self):
        # one worker of 3 killed mid-run and replaced alone: the new process
        # takes the StepLR's state with the model's (before, the scheduler
        # was the script's own and the joiner's restarted at 0: its learning
        # rate, and so the bits, differed from the survivors')
        ref = reference(self.dir, self.SCHED)
        nodes = self.start_job(3, 1, self.SCHED + ["--pace_ms", "10"], restarts=1)
        nodes[0].wait_line(r"ELASTIC step step=100 ", timeout=120)
        victim = elastic_lines(nodes[1], "start")[0]["pid"]
        os.kill(int(victim), signal.SIGKILL)
        self.assert_all_exit(nodes, timeout=240)
        done = [d for p in nodes for d in elastic_lines(p, "done")]
        self.assertEqual(len(done), 3, "".join(p.text() for p in nodes))
        self.assertNotIn(victim, {d["pid"] for d in done})
        self.assertEqual({d["lr"] for d in done}, {repr(0.1 * 0.5 ** 7)})
        self.assertEqual({d["sha"] for d in done}, {ref})
        self.assertEqual({d["healed"] for d in done}, {"0"})

    def test_flip_caught_named_healed_three_ranks(self):
        ref = reference(self.dir, self.SHORT)
        out = self.standalone(3, self.SHORT, {"DDP_TEST_FLIP": "1:30"})
        for r in range(3):
            self.assertRegex(out, r"rank %d: replica check at step 30: rank 1 first in param "
                             r"0.weight differs from the majority \(ranks 0, 2\); healed from "
                             r"rank 0's memory in (\S+) s" % r)
        heal = max(float(x) for x in re.findall(r"healed from rank 0's memory in (\S+) s", out))
        print("heal (3 ranks: one hand-over of the whole state, 874 parameters and momenta): "
              "%.4f s" % heal)
        done = [dict(kv.split("=", 1) for kv in m.split())
                for m in re.findall(r"ELASTIC done (.*)", out)]
        self.assertEqual(len(done), 3, out)
        self.assertEqual({d["healed"] for d in done}, {"1"}, out)
        self.assertEqual({d["sha"] for d in done}, {ref}, out)
        # the launcher heard it: summary.json lists it once
        got = summary_in(self.log_dir(0))["replicas"]
        self.assertEqual(got, [{"step": 30, "rank": 1, "tensor": "0.weight",
                                "action": "healed"}], got)

    def test_flip_unchecked_changes_the_bits(self):
        # the flip is real: with the check off the job ends with other bits
        ref = reference(self.dir, self.SHORT)
        out = self.standalone(3, self.SHORT + ["--check_every", "0"], {"DDP_TEST_FLIP": "1:30"})
        self.assertIn("DDP_TEST_FLIP flipped one bit of param 0.weight after step 30", out)
        shas = set(re.findall(r"ELASTIC done .* sha=(\w+)", out))
        self.assertEqual(len(shas), 2, out)  # rank 1's and the others'
        self.assertNotIn(re.search(r"rank=1 .* sha=(\w+)", out).group(1), {ref})

    def test_flip_stops_two_ranks(self):
        out = self.standalone(2, self.SHORT, {"DDP_TEST_FLIP": "1:30"}, code=1)
        # every rank names it (the package's line, said before any leaves);
        # the script's own error line may be cut on the rank that the first
        # exit's group stop reaches first
        why = (r"replica check at step 30: rank 1 first in param 0.weight differs from rank 0, "
               r"and no strict majority of the 2 replicas agrees")
        for r in range(2):
            self.assertRegex(out, r"ddplaunch.torch: rank %d: %s; stopping" % (r, why))
        self.assertRegex(out, r"ELASTIC error kind=ReplicaMismatch rank=\d: " + why)
        self.assertNotIn("ELASTIC done", out)
        got = summary_in(self.log_dir(0))["replicas"]
        self.assertEqual([(g["rank"], g["action"]) for g in got], [(1, "stopped")], got)

    def test_numeric_identity_mismatch_refused(self):
        for what, key, a, b in (("threads", "threads", "1", "2"),
                                ("tf32", "matmul_tf32", "False", "True")):
            out = self.standalone(2, self.SHORT, {"ELASTIC_SKEW": "1:" + what}, code=1)
            # every rank says it (the package's line, said before any
            # leaves); the script's own error line may be cut on the rank
            # that the first exit's group stop reaches first
            why = ("numeric identity differs: rank 0 has %s=%s, rank 1 has %s=%s: " %
                   (key, a, key, b))
            for r in range(2):
                self.assertIn("ddplaunch.torch: rank %d: %s" % (r, why), out)
            self.assertRegex(out, r"ELASTIC error kind=NumericMismatch rank=\d: " + re.escape(why))
            self.assertIn("allow_numeric_mismatch=True", out)
            self.assertNotIn("ELASTIC step", out)
            got = summary_in(self.log_dir(0))["numerics"]
            self.assertEqual(got["promise"], "refused", got)
            self.assertIn("rank 1 has %s=%s" % (key, b), got["why"])
            shutil.rmtree(self.log_dir(0))

    def test_numeric_identity_mismatch_refused_at_a_join(self):
        # a node that joins a running job with another thread count: the
        # join's comparison refuses it on every rank, naming both sides
        nodes = self.start_job(2, 1, self.SHORT + ["--pace_ms", "10", "--epochs", "3"],
                               max_nodes=3)
        nodes[0].wait_line(r"ELASTIC step step=25 ", timeout=120)
        base = ["--nproc_per_node=1", "--nnodes=2:3", "--rdzv_backend=c10d", "--rdzv_id=job",
                fast_conf(), "--max_restarts=0", "--rdzv_endpoint=127.0.0.2:%d" % self.port]
        nodes.append(self.cluster.agent(2, base + [WORKER] + self.SHORT + ["--epochs", "3"],
                                        worker=None,
                                        env=dict(worker_env(), ELASTIC_SKEW="*:threads")))
        for p in nodes:
            _, m = p.wait_line(r"ELASTIC error kind=NumericMismatch rank=\d+: numeric identity "
                               r"differs: rank 0 has threads=1, rank (\d) has threads=2: ",
                               timeout=120)
        self.assertTrue(elastic_lines(nodes[0], "step"))  # it had trained before the join
        for p in nodes:
            self.assertNotIn("ELASTIC done", p.text())

    def test_numeric_identity_mismatch_accepted(self):
        out = self.standalone(2, self.SHORT + ["--allow_mismatch"], {"ELASTIC_SKEW": "1:threads"})
        self.assertIn("numeric identity differs: rank 0 has threads=1, rank 1 has threads=2", out)
        self.assertIn("accepted (allow_numeric_mismatch=True)", out)
        done = re.findall(r"ELASTIC done .* promise=(\d)", out)
        self.assertEqual(done, ["0", "0"], out)
        got = summary_in(self.log_dir(0))["numerics"]
        self.assertEqual(got["promise"], "dropped", got)
        self.assertIn("rank 1 has threads=2", got["why"])


class ElasticLeaks(ElasticCase):
    """A survivor's open fds and threads do not grow with re-formations:
    each retired process group (its sockets to every peer, its threads, its
    store client) is released, not kept."""

    def res_after(self, node, pid, t):
        _, m = node.wait_line(r"ELASTIC res reforms=(\d+) fds=(\d+) tasks=(\d+) threads=(\d+) "
                              r"pid=%s" % pid, timeout=120, after=t)
        return tuple(int(x) for x in m.groups())

    def test_twenty_reformations_leak_nothing(self):
        # 3 nodes x 1 rank; the worker of node 2 is killed 20 times, each
        # time replaced alone by its agent: the two survivors re-form each
        # time (20 or more re-formations) and report their counts 5 steps
        # after each
        nodes = self.start_job(3, 1, JOB[:6] + ["--epochs", "10000", "--pace_ms", "10",
                                                "--report_res"], restarts=30)
        nodes[0].wait_line(r"ELASTIC step step=25 ", timeout=120)
        survivors = [(p, elastic_lines(p, "start")[0]["pid"]) for p in nodes[:2]]
        seen = {pid: [] for _, pid in survivors}
        while min(len(v) and v[-1][0] for v in seen.values()) < 20:
            victim = int(elastic_lines(nodes[2], "start")[-1]["pid"])
            t_kill = time.monotonic()
            os.kill(victim, signal.SIGKILL)
            for p, pid in survivors:
                seen[pid].append(self.res_after(p, pid, t_kill))
        for pid, res in seen.items():
            first, last = res[0], res[-1]
            print("survivor %s: after re-formation %d fds=%d tasks=%d threads=%d, after %d "
                  "fds=%d tasks=%d threads=%d" % ((pid,) + first + last))
            for i, what in ((1, "open fds"), (2, "threads (kernel)"), (3, "Python threads")):
                self.assertLessEqual(last[i] - first[i], 5, "%s grew from %d to %d over %d "
                                     "re-formations (pid %s): %s" % (what, first[i], last[i],
                                                                     last[0], pid, res))
        for p, _ in survivors:
            self.assertNotIn("Traceback", p.text())
        for p in nodes:
            self.kill_node(p)


class ElasticStraggler(ElasticCase):
    """Issue 26 for the PyTorch package: 2 nodes x 1 rank, node 1's worker
    capped at 5 ms of CPU per 10 ms from outside mid-run
    (tests/multinode/slowdown.py: a cgroup quota, else SIGSTOP/SIGCONT):
    both ranks print the one line that names it (rank, node 1, host
    127.0.0.3, how much slower, compute) within 10 steps of the cap, and
    the final state is the undisturbed 1-rank run's."""
    ARGS = ["--n", "12288", "--g", "768", "--v", "8", "--epochs", "2", "--seed", "5",
            "--features", "1024", "--hidden", "2048", "--every", "1"]

    def test_slow_rank_named(self):
        import slowdown
        out = os.path.join(self.dir, "ref.sha")
        env = dict(os.environ, **worker_env())
        subprocess.run([TORCH_PYTHON, WORKER] + self.ARGS + ["--out", out], env=env,
                       check=True, stdout=subprocess.DEVNULL, timeout=300)
        with open(out) as f:
            ref = f.read().strip()
        nodes = self.start_job(2, 1, self.ARGS)
        nodes[0].wait_line(r"ELASTIC step step=8 ", timeout=120)
        victim = int(elastic_lines(nodes[1], "start")[0]["pid"])
        shield = slowdown.Shield([int(elastic_lines(p, "start")[0]["pid"]) for p in nodes])
        self.addCleanup(shield.release)
        capped_after = int(elastic_lines(nodes[0], "step")[-1]["step"])
        cap = slowdown.Throttle(victim, shield.dir)
        self.addCleanup(cap.release)
        print("cap: %s after step %d" % (cap.how, capped_after))
        for p in nodes:
            _, m = p.wait_line(r"step (\d+): straggler: rank (\d+) \(node 1, host 127\.0\.0\.3\) "
                               r"is ([\d.]+)x slower than the others \(compute\)", timeout=120)
            self.assertLessEqual(int(m.group(1)) - capped_after, 10, m.group(0))
            self.assertGreater(float(m.group(3)), 1.5, m.group(0))
        cap.release()
        for p in nodes:
            rc, _ = p.wait(300)
            self.assertEqual(rc, 0, p.text()[-3000:])
        done = [d for p in nodes for d in elastic_lines(p, "done")]
        self.assertEqual({d["sha"] for d in done}, {ref})
        self.assertTrue(all(int(d["stragglers"]) >= 1 for d in done), done)
        for i in range(2):  # the launcher heard it: every node's summary.json
            got = [g for g in summary_in(self.log_dir(i))["stragglers"] if g["node"] == 1]
            self.assertTrue(got and got[0]["cause"] == "compute" and got[0]["slower"] > 1.5,
                            summary_in(self.log_dir(i))["stragglers"])


HANG_RE = re.compile(r"hang: node (\d+) rank (\d+) pid (\d+) (has not (?:entered|left) "
                     r"(\w+) #(\d+)): ([\d.]+) s past its deadline of ([\d.]+) s.*"
                     r"its process is ([^;]+)")


def page_of(pid):
    """The progress page's path in a worker's environment."""
    with open("/proc/%d/environ" % pid, "rb") as f:
        for kv in f.read().split(b"\0"):
            if kv.startswith(b"DDP_PROGRESS_FILE="):
                return kv.split(b"=", 1)[1].decode()
    return None


class ElasticHangs(ElasticCase):
    """Issue 24 with ddplaunch.torch: one worker of an Elastic job
    SIGSTOPped inside an all-reduce (its progress page says so, read as the
    agent reads it), or its main thread spinning before or inside one, is
    named on every node in the same line within its deadline + 1 s (+ slack),
    cut out and replaced alone, and the final weights are the 1-rank run's
    bits. The survivors re-form without it at once (a round of 5) and
    commit steps; its replacement, once it has imported torch and says it
    can re-form, is taken in by a later round (6 again). The first step
    committed without it is measured and reported (the issue's target is
    3 s, asserted within FIRST_S)."""
    SLACK_S = 6.0
    # the first step without it no longer waits for the replacement's
    # interpreter and import torch (2.8 s for torch 2.15 at a load of 6 on
    # this 2-core machine, 8-14 s at a load of 11): the target, 3 s, with
    # the slack of a loaded machine
    FIRST_S = 3.0 + SLACK_S
    # long enough (1200 paced steps, 12 s and more) for the replacement to
    # import torch on a loaded machine and join before the end
    JOB = ["--n", "4800", "--g", "48", "--v", "8", "--epochs", "12", "--seed", "11"]

    def without_it_first(self, nodes, t_wall):
        """Every node's ranks, after t_wall: at most the step in flight in
        the round of 6, then steps in a round of 5 (without the culprit),
        then a round of 6 again (its replacement in). The time from t_wall
        to the first step of 5, the latest over the nodes."""
        firsts = []
        for p in nodes:
            steps = [(float(d["t"]), int(d["world"]), int(d["step"]))
                     for d in elastic_lines(p, "step") if float(d["t"]) > t_wall]
            worlds = [w for _, w, _ in steps]
            self.assertIn(5, worlds, "%s: no step in a round of 5 after the fault: %s\n%s"
                          % (p.name, steps[:6], p.text()[-3000:]))
            i = worlds.index(5)
            self.assertLessEqual(set(worlds[:i]), {6}, steps[:i + 1])
            self.assertIn(6, worlds[i:], "%s: never back to 6: %s" % (p.name, steps[-4:]))
            self.assertEqual(worlds[-1], 6, steps[-4:])
            firsts.append(steps[i][0] - t_wall)
        return max(firsts)

    def stop_inside_allreduce(self, pid, fault=None, timeout=30):
        from ddplaunch.torch import progress as prog
        path = page_of(pid)
        self.assertTrue(path, "no DDP_PROGRESS_FILE for pid %d" % pid)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pg = prog.read_file(path)
            if (pg and pg["op"] == prog.OP_ALLREDUCE and pg["phase"] == prog.PHASE_COLLECTIVE
                    and pg["entered_ns"] > pg["left_ns"]):
                t = time.monotonic()
                if fault:
                    fault(pid)
                else:
                    os.kill(pid, signal.SIGSTOP)
                return t, time.time(), pg
        self.fail("pid %d never seen inside an all-reduce" % pid)

    def wait_phase(self, pid, phase, timeout=30):
        from ddplaunch.torch import progress as prog
        path = page_of(pid)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pg = prog.read_file(path)
            if pg and pg["phase"] == phase:
                return pg
        self.fail("pid %d never seen in phase %d" % (pid, phase))

    @unittest.skipUnless(os.environ.get("MN_SPIN"), "MN_SPIN (the spinning fault) is not built")
    def test_worker_spinning_before_allreduce_named_cut_out_same_bits(self):
        # the main thread of one worker caught in a busy loop (mn_spin's
        # SIGUSR2 handler, armed in Python's processes by MN_SPIN_COMM)
        # between two all-reduces: named "running on a CPU", has not entered
        # the next one, cut out and replaced alone, the 1-rank bits
        self.spin_case(inside=False)

    @unittest.skipUnless(os.environ.get("MN_SPIN"), "MN_SPIN (the spinning fault) is not built")
    def test_worker_spinning_inside_allreduce_named_cut_out_same_bits(self):
        # the same busy loop caught inside an all-reduce: gloo's own threads
        # finish the op, its main thread never leaves it, the others wait in
        # the next one (the transport names no rank): the spinning one is
        # named "has not left", not a waiter
        self.spin_case(inside=True)

    def spin_case(self, inside):
        from ddplaunch.torch import progress as prog
        ref = reference(self.dir, self.JOB)
        self.extra_env = {"LD_PRELOAD": os.environ["MN_SPIN"], "MN_SPIN_COMM": "python"}
        nodes = self.start_job(3, 2, self.JOB + ["--pace_ms", "10", "--every", "1"],
                               restarts=1)
        nodes[0].wait_line(r"ELASTIC step step=100 ", timeout=120)
        for p in nodes:
            p.wait_line(r"hang deadlines? (learned from the job|: )", timeout=60)
        before = {p.name: {d["pid"] for d in elastic_lines(p, "start")} for p in nodes}
        victim = int(sorted(before[nodes[2].name])[1])
        libc = ctypes.CDLL(None, use_errno=True)
        if inside:
            t_mono, t_wall, pg = self.stop_inside_allreduce(
                victim, lambda pid: self.assertEqual(libc.syscall(234, pid, pid,
                                                                  signal.SIGUSR2), 0))
        else:
            self.wait_phase(victim, prog.PHASE_COMPUTE)
            t_mono, t_wall = time.monotonic(), time.time()
            self.assertEqual(libc.syscall(234, victim, victim, signal.SIGUSR2), 0)  # tgkill
        got = []
        for p in nodes:
            t, m = p.wait_line(r"hang: node \d+ rank \d+ pid %d " % victim, timeout=60,
                               after=t_mono)
            got.append((t, HANG_RE.search(m.string)))
        self.assertEqual(len({m.group(0) for _, m in got}), 1, [m.group(0) for _, m in got])
        m = got[0][1]
        # a spin sent while the page showed it inside may land just after it
        # left: then it has not entered the next one (the judge's rule for a
        # spin inside gloo's op is table-tested in launcher_hang_judge)
        self.assertRegex(m.group(4), "has not (left|entered)" if inside else "has not entered")
        self.assertIn("running on a CPU", m.group(9))
        named = max(t for t, _ in got) - t_mono
        self.assertLess(named, float(m.group(8)) + 1.0 + self.SLACK_S)
        self.assert_all_exit(nodes, timeout=240)
        text = "\n".join(p.text() for p in nodes)
        self.assertIn("replacing it alone", text)
        # the first step committed once it was named (inside: gloo's threads
        # finished the op it spins in, so the others committed that step)
        first = self.without_it_first(nodes, t_wall)
        sys.stderr.write("ddplaunch.torch, a worker spinning %s allreduce #%s: named %.2f s "
                         "after the signal (deadline %s s), first step committed without it "
                         "%.2f s after: %s\n" % ("inside" if inside else "before", m.group(6),
                                                  named, m.group(8), first, m.group(0)))
        self.assertLess(first, self.FIRST_S)
        for p in nodes:
            done = {d["pid"] for d in elastic_lines(p, "done")}
            if p is nodes[2]:
                self.assertEqual(done & before[p.name], before[p.name] - {str(victim)})
            else:
                self.assertEqual(done, before[p.name], p.text())
        shas = {d["sha"] for p in nodes for d in elastic_lines(p, "done")}
        self.assertEqual(shas, {ref})

    def test_worker_stopped_in_allreduce_named_cut_out_same_bits(self):
        ref = reference(self.dir, self.JOB)
        nodes = self.start_job(3, 2, self.JOB + ["--pace_ms", "10", "--every", "1"],
                               restarts=1)
        nodes[0].wait_line(r"ELASTIC step step=100 ", timeout=120)
        for p in nodes:
            p.wait_line(r"hang deadlines? (learned from the job|: )", timeout=60)
        before = {p.name: {d["pid"] for d in elastic_lines(p, "start")} for p in nodes}
        victim = int(sorted(before[nodes[1].name])[0])
        t_mono, t_stop, pg = self.stop_inside_allreduce(victim)
        got = []
        for p in nodes:
            t, m = p.wait_line(r"hang: node \d+ rank \d+ pid %d " % victim, timeout=60,
                               after=t_mono)
            got.append((t, HANG_RE.search(m.string)))
        lines = {m.group(0) for _, m in got}
        self.assertEqual(len(lines), 1, "not the same line on every node: %s" % lines)
        m = got[0][1]
        self.assertEqual(m.group(9).strip(), "stopped", m.group(0))
        self.assertEqual(m.group(5), "allreduce", m.group(0))
        self.assertEqual(int(m.group(6)), pg["seq"], m.group(0))
        named = max(t for t, _ in got) - t_mono
        self.assertLess(named, float(m.group(8)) + 1.0 + self.SLACK_S)
        self.assert_all_exit(nodes, timeout=240)
        text = "\n".join(p.text() for p in nodes)
        if os.environ.get("ELASTIC_HANG_DUMP"):  # the nodes' lines, timed from the stop
            with open(os.environ["ELASTIC_HANG_DUMP"], "w") as f:
                for p in nodes:
                    with p.cond:
                        f.writelines("%s %+.3f %s\n" % (p.name, t - t_mono, line)
                                     for t, line in p.lines if t >= t_mono - 0.5)
        self.assertIn("replacing it alone", text)
        self.assertNotIn("stopping this node's workers", text)
        # the first step the survivors commit without the culprit (the step
        # in flight may still commit in the round of 6: gloo's threads may
        # have finished the op the stopped rank's page shows it in), then a
        # round of 6 again with its replacement
        first = self.without_it_first(nodes, t_stop)
        sys.stderr.write("ddplaunch.torch, a worker stopped inside allreduce #%d: named %.2f s "
                         "after the stop (deadline %s s), first step committed without it "
                         "%.2f s after the stop: %s\n" % (pg["seq"], named, m.group(8), first,
                                                           m.group(0)))
        self.assertLess(first, self.FIRST_S)
        # the survivors kept their processes, the culprit alone was replaced
        for p in nodes:
            done = {d["pid"] for d in elastic_lines(p, "done")}
            if p is nodes[1]:
                self.assertEqual(len(done), 2, p.text())
                self.assertEqual(done & before[p.name], before[p.name] - {str(victim)})
            else:
                self.assertEqual(done, before[p.name], p.text())
        shas = {d["sha"] for p in nodes for d in elastic_lines(p, "done")}
        self.assertEqual(shas, {ref})


class Example(unittest.TestCase):
    """configs/elastic_digits.py, the README's example: 2 ranks under
    ddplaunch end with the bits of 1 rank run by plain python."""
    SCRIPT = os.path.join(SRC, "configs", "elastic_digits.py")
    DONE_RE = r"elastic_digits: (\d+) ranks at the end, loss \S+, accuracy (\S+), sha256 (\w+)"

    def run_it(self, argv, done_re=None):
        env = dict(os.environ, **worker_env())
        p = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=240)
        self.assertEqual(p.returncode, 0, p.stdout)
        m = re.search(done_re or self.DONE_RE, p.stdout)
        self.assertIsNotNone(m, p.stdout)
        return m

    def test_rank_0s_initial_weights_win(self):
        # each rank initialises its model differently: the start hands rank
        # 0's weights to all, as DDP does, so 3 ranks end as 1 rank does
        out = os.path.join(tempfile.mkdtemp(prefix="elastic_init_"), "run.sha")
        try:
            m = self.run_it([os.environ.get("DDPLAUNCH", "ddplaunch"), "--standalone",
                             "--nproc_per_node=3", WORKER, "--init_by_rank", "--out", out] +
                            JOB[:6] + ["--epochs", "1"], done_re=r"ELASTIC done .*")
            shas = set(re.findall(r"ELASTIC done .* sha=(\w+)", m.string))
            self.assertEqual(len(shas), 1, m.string)
            ref = subprocess.run([TORCH_PYTHON, WORKER] + JOB[:6] + ["--epochs", "1"],
                                 env=dict(os.environ, **worker_env()), stdout=subprocess.PIPE,
                                 text=True, timeout=240, check=True).stdout
            self.assertEqual(shas, set(re.findall(r"sha=(\w+)", ref)))
        finally:
            shutil.rmtree(os.path.dirname(out))

    def test_resume_from_disk_same_bits(self):
        # a whole job that ends after its last disk checkpoint (2 ranks,
        # el.state_dict() saved at step 150 of 400) and a new job that
        # loads it (3 ranks) end with the undisturbed 1-rank run's bits:
        # the ledger comes with the model and the optimizer
        tmp = tempfile.mkdtemp(prefix="elastic_resume_")
        try:
            ck, out = os.path.join(tmp, "ck.pt"), os.path.join(tmp, "run.sha")
            launch = [os.environ.get("DDPLAUNCH", "ddplaunch"), "--standalone"]
            self.run_it(launch + ["--nproc_per_node=2", WORKER, "--save", ck,
                                  "--stop_after", "150"] + JOB, done_re=r"ELASTIC done .*")
            self.assertTrue(os.path.exists(ck))
            m = self.run_it(launch + ["--nproc_per_node=3", WORKER, "--resume", ck,
                                      "--out", out] + JOB, done_re=r"ELASTIC done .*")
            self.assertNotIn("step=0 ", m.string)
            with open(out) as f:
                self.assertEqual(f.read().strip(), reference(tmp))
        finally:
            shutil.rmtree(tmp)

    def test_two_ranks_same_bits_as_one(self):
        args = [self.SCRIPT, "--epochs", "3"]
        one = self.run_it([TORCH_PYTHON] + args)
        two = self.run_it([os.environ.get("DDPLAUNCH", "ddplaunch"), "--standalone",
                           "--nproc_per_node=2"] + args)
        self.assertEqual((one.group(1), two.group(1)), ("1", "2"))
        self.assertGreater(float(one.group(2)), 0.8)
        self.assertEqual(one.group(3), two.group(3))


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
