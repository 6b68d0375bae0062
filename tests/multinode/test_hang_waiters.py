"""Who waits on whom (issue 24 section 3): when a hang is named, every node's
agent says what each of its own workers does with respect to it (waits on
rank Q in OP #SEQ for T s, waits without knowing on whom, computes before
it, is done with it), in one line per node that every node prints after the
culprit's line (the "wait1" notice, docs/rendezvous.md), and the hang's
record in summary.json lists the waiters of every node.

ddp-train with a fixed global batch on 3 simulated nodes x 2 ranks
(test_hangs.py's HangCase): a worker in the middle of the ring (node 1:
rank 2 or 3) is stopped (SIGSTOP) while its progress page says it is inside
an all-reduce, so every other rank waits inside that all-reduce on its ring
neighbour, the chain ending at the culprit.
"""
import mmap
import os
import re
import signal
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from job_watch import environ, progress  # noqa: E402
from mnlib import DDPLAUNCH, descendants, fast_conf, wait_for  # noqa: E402
from test_hangs import HangCase  # noqa: E402

WAITERS_RE = re.compile(r"waiters of hang (\d+)\.(\d+)\.(\d+) \(rank (\d+)\) on node (\d+): (.*)$")
WAITS_RE = re.compile(r"rank (\d+) (?:is (?:past|not yet at) #\d+: )?wait(?:s|ed) on rank (\d+) "
                      r"in (\w+) #(\d+) for ([\d.]+) s")
RANK_RE = re.compile(r"(?:^|; )rank (\d+) ")
PAIR_RE = re.compile(r"rank (\d+) (?:is (?:past|not yet at) #\d+: )?wait(?:s|ed) "
                     r"(?:on rank (\d+) )?in ")
GROUP_RE = re.compile(r"node (\d+) of 3 \(ranks")
WORLD, PER_NODE = 6, 2


def proc_state(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(") ", 1)[1][0]


class HangWaiters(HangCase):
    def page_of(self, pid):
        """The progress page of worker pid, mapped (its file is named in
        the environment it was started with)."""
        path = environ(pid).get(progress.ENV)
        self.assertTrue(path, "worker %d has no progress page" % pid)
        with open(path, "rb") as f:
            return mmap.mmap(f.fileno(), progress.SIZE, prot=mmap.PROT_READ)

    def stop_inside_allreduce(self, workers, tries=400):
        """SIGSTOPs a worker of `workers` while its page says it is inside
        an all-reduce (a worker seen leaving it between the read and the
        stop is let go at once, well within any deadline, and tried again):
        (pid, page, time of the stop)."""
        maps = {pid: self.page_of(pid) for pid in workers}
        try:
            for _ in range(tries):
                for pid, m in maps.items():
                    page = progress.read(m)
                    if not page or page["phase"] != progress.PHASE_COLLECTIVE or \
                            page["op"] != progress.OP_ALLREDUCE:
                        continue
                    t = time.monotonic()
                    os.kill(pid, signal.SIGSTOP)
                    wait_for(lambda: proc_state(pid) == "T", 5, "pid %d to stop" % pid)
                    after = progress.read(m)
                    if after and after["phase"] == progress.PHASE_COLLECTIVE and \
                            after["seq"] == page["seq"] and after["left_ns"] < after["entered_ns"]:
                        return pid, after, t
                    os.kill(pid, signal.SIGCONT)
                time.sleep(0.002)
        finally:
            for m in maps.values():
                m.close()
        self.fail("no worker of node 1 was seen inside an all-reduce")

    def group_rank(self, node):
        """The node's rank among the nodes (its agent's last "node N of 3"
        line): the order the rendezvous gave, not the test's."""
        with node.cond:
            found = [m for _, line in node.lines for m in [GROUP_RE.search(line)] if m]
        self.assertTrue(found, node.text())
        return int(found[-1].group(1))

    def waiter_lines(self, p, culprit, seq, t_named, nodes_want):
        """Node p's waiters lines of the hang (culprit, seq), one for each
        node of nodes_want, each after the culprit's line: {node: text}."""
        got, at = {}, {}

        def have():
            with p.cond:
                lines = list(p.lines)
            got.clear()
            for t, line in lines:
                m = WAITERS_RE.search(line)
                if m and int(m.group(2)) == culprit and int(m.group(3)) == seq:
                    node = int(m.group(5))
                    self.assertGreaterEqual(t, t_named, "a waiters line before the hang's")
                    self.assertNotIn(node, got, "node %d's waiters printed twice" % node)
                    got[node], at[node] = m.group(6), t
            return set(got) >= nodes_want or None
        try:
            wait_for(have, 30, "%s: the waiters of nodes %s" % (p.name, sorted(nodes_want)))
        except AssertionError as e:
            raise AssertionError("%s\n%s" % (e, p.text()[-6000:]))
        sys.stderr.write("%s: the waiters of nodes %s %.3f s after the hang's line\n" % (
            p.name, sorted(nodes_want), max(at[k] for k in nodes_want) - t_named))
        return got

    def status(self):
        p = subprocess.run([DDPLAUNCH, "status", "--rdzv_endpoint=127.0.0.2:%d" % self.port,
                            "--rdzv_id=job"], capture_output=True, text=True, timeout=30,
                           env=self.cluster.env(None))
        return p.stdout if p.returncode == 0 else ""

    def test_every_node_names_every_nodes_waiters(self):
        # 6000 steps: the job still runs when `ddplaunch status` is asked
        ref, run, nodes = self.start_train(6000, restarts=1)
        # the node in the middle of the ring: the rendezvous' node 1
        middle = [self.group_rank(p) for p in nodes].index(1)
        workers = self.workers_of(nodes[middle])
        self.assertEqual(len(workers), 2)
        before = {p.name: set(descendants(p.pid)) for p in nodes}
        victim, page, t_fault = self.stop_inside_allreduce(workers)
        culprit, seq = page["rank"], page["seq"]
        self.assertIn(culprit, (2, 3))
        got = self.wait_named(nodes, victim, t_fault)
        m = got[0][1]
        self.assertEqual((int(m.group(2)), m.group(4)), (culprit, "has not left allreduce #%d" %
                                                         seq), m.group(0))
        neighbours = {culprit, (culprit - 1) % WORLD, (culprit + 1) % WORLD}
        waits, pairs = [], {}
        for (t_named, _), p in zip(got, nodes):
            lines = self.waiter_lines(p, culprit, seq, t_named, {0, 1, 2})
            for node, text in sorted(lines.items()):
                # each of the node's workers named once (the culprit is not
                # its own waiter)
                want = {r for r in range(node * PER_NODE, (node + 1) * PER_NODE)} - {culprit}
                ranks = [int(r) for r in RANK_RE.findall(text)]
                self.assertEqual(sorted(ranks), sorted(want), "%s: node %d: %s" %
                                 (p.name, node, text))
                for w in WAITS_RE.finditer(text):
                    # in the collective it is stopped in, or (the ring's data
                    # went through it before it was stopped) the next one
                    self.assertIn(int(w.group(2)), range(WORLD), text)
                    self.assertEqual(w.group(3), "allreduce", text)
                    self.assertIn(int(w.group(4)), (seq, seq + 1), text)
                    waits.append((int(w.group(1)), int(w.group(2))))
                for e in text.split("; "):
                    w = PAIR_RE.match(e)
                    if w:
                        pairs[int(w.group(1))] = "%s>%s" % (w.group(1), w.group(2) or "?")
            sys.stderr.write("%s:\n  %s\n" % (p.name, "\n  ".join(
                "node %d: %s" % kv for kv in sorted(lines.items()))))
        self.assertTrue([w for w in waits if w[1] in neighbours],
                        "no rank waits on the culprit %d or its neighbours: %s" % (culprit, waits))
        # `ddplaunch status` shows them after the hang's line, by rank
        pairs = " ".join(pairs[r] for r in sorted(pairs))
        text = wait_for(lambda: (lambda t: t if "(rank>rank): " + pairs in t else None)(
            self.status()), 20, "who waits on whom (%s) in `ddplaunch status`" % pairs)
        self.assertRegex(text, r"rank %d pid %d has not left allreduce #%d, .*\n +who waits on "
                         r"whom \(rank>rank\): %s\n" % (culprit, victim, seq, pairs))
        sys.stderr.write(text)
        self.check_end(nodes, ref, run, middle, before)
        for p in nodes:  # the end summary too, under the hang's line
            self.assertRegex(p.text(), r"\n.*  hang: node \d+ rank %d pid %d .*\n.*    who waits on "
                             r"whom \(rank>rank\): %s(?:\n|$)" % (culprit, victim, pairs))
        # summary.json: the hang's record lists the waiters of every node
        for i in range(3):
            hang = self.summary(i)["hangs"][0]
            self.assertEqual((hang["rank"], hang["seq"]), (culprit, seq))
            ws = hang["waiters"]
            self.assertEqual(sorted((w["node"], w["rank"]) for w in ws),
                             sorted((r // PER_NODE, r) for r in range(WORLD) if r != culprit), ws)
            for w in ws:
                self.assertEqual(set(w), {"node", "rank", "state", "waits_on", "op", "seq",
                                          "for_s", "phase"}, w)
                self.assertIn(w["state"], ("waits", "waited", "behind", "computing", "done",
                                           "elsewhere", "past", "unknown"), w)
                if w["state"] in ("waits", "waited", "past"):
                    self.assertEqual((w["op"], w["seq"]), ("allreduce", seq + (
                        w["state"] == "past")), w)
                    self.assertGreater(w["for_s"], 0.0, w)
            self.assertTrue([w for w in ws if w["waits_on"] in neighbours], ws)

    def test_frozen_node_says_nothing_the_others_do(self):
        # a node stopped whole (agent and workers): the other two name it
        # ("has not answered") and each prints its own and the other's
        # waiters, their ranks waiting on the frozen node's, without
        # waiting for it, which says nothing while it is stopped; its word
        # after it thaws is printed when it comes
        conf = fast_conf(keep_alive_interval=5, keep_alive_max_attempt=2)
        ref, run, nodes = self.start_train(8000, restarts=1, conf=conf)
        frozen = nodes[2]
        gone, live = self.group_rank(frozen), [self.group_rank(p) for p in nodes[:2]]
        pids = [frozen.pid] + descendants(frozen.pid)
        t_fault = time.monotonic()
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            named = [p.wait_line(r"hang: node %d rank (\d+) has not answered \w+ #(\d+)" %
                                 gone, timeout=60, after=t_fault) for p in nodes[:2]]
            hangs = {(int(m.group(1)), int(m.group(2))) for _, m in named}
            self.assertEqual(len(hangs), 1, "not the same hang on both nodes: %s" % hangs)
            culprit, seq = hangs.pop()
            got = [self.waiter_lines(p, culprit, seq, t, set(live))
                   for (t, _), p in zip(named, nodes[:2])]
        finally:
            time.sleep(1.0)
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:  # ended meanwhile (reaped once its agent ran)
                    pass
        for lines in got:
            self.assertEqual(lines, got[0])
            self.assertNotIn(gone, lines)  # said nothing while stopped
            for node, text in lines.items():
                self.assertEqual(sorted(int(r) for r in RANK_RE.findall(text)),
                                 [node * PER_NODE, node * PER_NODE + 1], text)
        sys.stderr.write("frozen node %d:\n  %s\n" % (gone, "\n  ".join(
            "node %d: %s" % kv for kv in sorted(got[0].items()))))
        on = [int(w.group(2)) for text in got[0].values() for w in WAITS_RE.finditer(text)]
        self.assertTrue(set(on) & {gone * PER_NODE, gone * PER_NODE + 1},
                        "nobody waits on node %d's ranks: %s" % (gone, got[0]))
        # thawed, its agent hears the hang (its session outlived the stop:
        # the keep-alive window is 10 s) and says its own workers' word,
        # which the others print when it comes, before they end
        later = r"waiters of hang \d+\.%d\.%d \(rank %d\) on node %d: " % (culprit, seq, culprit,
                                                                          gone)
        for p in nodes:
            p.wait_line(later, timeout=60, after=t_fault)
        self.assert_all_exit(nodes, timeout=300)
        for p in nodes:
            sys.stderr.write("%s, to the end:\n  %s\n" % (p.name, "\n  ".join(
                line for t, line in list(p.lines) if t >= t_fault and "waiters of" in line)))
        self.assert_same_bits(ref, run)
        for i in (0, 1):
            hang = [h for h in self.summary(i)["hangs"] if (h["rank"], h["seq"]) ==
                    (culprit, seq)]
            self.assertEqual(len(hang), 1, self.summary(i)["hangs"])
            self.assertGreaterEqual({w["node"] for w in hang[0]["waiters"]}, set(live))


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
