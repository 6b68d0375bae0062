"""Workers resized in place (issue 16, section 1): a libddp worker tells its
agent in ddp_init that it can be resized; when a node dies, the survivors'
agents join the next round without stopping their workers and hand them the
new round over the agent channel; the workers re-form (ddp_next_round,
ddp_reform) and go on in the same processes.

Simulated nodes on 127.0.0.2-4 (mnlib.py), 2 ranks each, mn_inplace as the
worker. Plain workers (mn_worker) are still restarted: test_multinode.py's
Failures and Elastic cover that path.
"""
import os
import re
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mnlib import MultiNodeCase, fast_conf  # noqa: E402

INPLACE = os.environ.get("MN_INPLACE", "mn_inplace")
LINE_RE = re.compile(r"INPLACE (\w+) (.*)$")


def inplace_lines(proc, kind):
    out = []
    with proc.cond:
        for t, line in proc.lines:
            m = LINE_RE.search(line)
            if m and m.group(1) == kind:
                d = dict(kv.split("=", 1) for kv in m.group(2).split())
                d["t"] = t
                out.append(d)
    return out


class InPlace(MultiNodeCase):
    STEPS = 400
    STEP_MS = 20

    def start_nodes(self, n=3, nproc=2):
        base = ["--nproc_per_node=%d" % nproc, "--nnodes=2:%d" % n, "--rdzv_backend=c10d",
                "--rdzv_id=job", fast_conf(), "--max_restarts=0"]
        prog = [INPLACE, str(self.STEPS), str(self.STEP_MS)]
        first = self.cluster.agent(0, base + ["--rdzv_endpoint=127.0.0.2:0"] + prog,
                                   worker=None)
        port = self.host_port(first)
        nodes = [first] + [
            self.cluster.agent(i, base + ["--rdzv_endpoint=127.0.0.2:%d" % port] + prog,
                               worker=None) for i in range(1, n)]
        for p in nodes:
            for _ in range(nproc):
                p.wait_line(r"INPLACE start .*world=%d resizable=1" % (n * nproc), timeout=30)
        return nodes

    def test_node_killed_survivors_stay(self):
        nodes = self.start_nodes()
        # mid-run: the job has made an eighth of its steps
        nodes[0].wait_line(r"INPLACE progress", timeout=30)
        victim = nodes[2]
        victim_pids = [int(d["pid"]) for d in inplace_lines(victim, "start")]
        t_kill = time.monotonic()
        victim.p.kill()  # the agent, then its workers: the whole node
        for pid in victim_pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in nodes[:2]:
            rc, _ = p.wait(timeout=60)
            self.assertEqual(rc, 0, p.text())
        for p in nodes[:2]:
            text = p.text()
            started = {d["pid"] for d in inplace_lines(p, "start")}
            reformed = [d for d in inplace_lines(p, "reformed") if d["t"] >= t_kill]
            done = inplace_lines(p, "done")
            # the same two processes from start to end: none restarted
            self.assertEqual(len(started), 2, text)
            self.assertEqual({d["pid"] for d in reformed}, started, text)
            self.assertEqual({d["pid"] for d in done}, started, text)
            self.assertTrue(all(d["world"] == "4" for d in reformed + done), text)
            self.assertTrue(all(int(d["steps"]) == self.STEPS for d in done), text)
            self.assertIn("re-form in place", text)
            self.assertNotIn("stopping this node's workers", text)
            # the survivors re-formed promptly: the death noticed by the
            # rendezvous (keep-alive window 1.5 s) and the round joined
            t_re = min(d["t"] for d in reformed)
            self.assertLess(t_re - t_kill, 8.0, text)
        ranks = sorted(int(d["rank"]) for p in nodes[:2] for d in inplace_lines(p, "done"))
        self.assertEqual(ranks, [0, 1, 2, 3])


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
