"""A pause is not a death (issue 19, section 1): an agent, or the agent
that hosts the rendezvous store, stopped (SIGSTOP) and continued (SIGCONT),
by PID, for 0.5, 1.7, 4 and 20 s, in a two-node job (static, and c10d with a
fixed node count), with a keep-alive window of 3 s (keep_alive_interval=1,
keep_alive_max_attempt=3):

- within the window (0.5, 1.7 s) nothing happens: no round is re-formed,
  the same workers run to their end, every agent exits 0;
- beyond it (4, 20 s) the paused node is declared dead (or, when the host
  is paused, the other node loses the store), the paused node (or the
  other) rejoins as a new node, the job re-forms and finishes, every agent
  exits 0 and no restart is counted (no worker failed).

Run one class: test_pauses.py PausesStatic | PausesC10d.
"""
import os
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mnlib import MultiNodeCase, addr, fast_conf  # noqa: E402

WINDOW_S = 3.0
CONF = fast_conf(keep_alive_interval=1, keep_alive_max_attempt=3, join_timeout=60)
OVER_RE = r"round 1 of run id 'job' is over"
REJOIN_RE = r"rejoins run id 'job' as a new node"


class PauseCase(MultiNodeCase):
    STATIC = False

    def start_job(self, secs):
        worker = ("run", "%g" % secs)
        if not self.STATIC:
            nodes, _ = self.start_c10d(2, worker=worker, extra=[CONF])
            return nodes
        args = ["--nnodes=2", "--nproc_per_node=1", "--master_addr=" + addr(0),
                "--rdzv_id=job", CONF]
        first = self.cluster.agent(0, args + ["--node_rank=0", "--master_port=0"], worker)
        port = self.host_port(first)
        second = self.cluster.agent(1, args + ["--node_rank=1", "--master_port=%d" % port],
                                    worker)
        return [first, second]

    def pause(self, proc, secs):
        """Stops proc's agent (not its workers) for `secs` (the pause under
        test, not a wait for anything); returns (stopped at, continued at)."""
        t_stop = time.monotonic()
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            time.sleep(secs)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        return t_stop, time.monotonic()

    def run_pause(self, which, secs):
        within = secs < WINDOW_S
        # the workers outlast the pause: nobody's part of the job is done
        # before the paused node runs again (or they would finish it alone)
        nodes = self.start_job(secs + 2.5)
        for p in nodes:
            p.wait_line(r"MNW .*groups=2")
        paused, other = nodes[which], nodes[1 - which]
        t_stop, t_cont = self.pause(paused, secs)
        self.assert_all_exit(nodes, timeout=60 + secs)
        text = "\n".join("--- %s\n%s" % (p.name, p.text()) for p in nodes)
        for p in nodes:
            ws = p.workers()
            self.assertTrue(all(w["restarts"] == "0" for w in ws), text)
            self.assertEqual(ws[-1]["groups"], "2", text)
        if within:
            for p in nodes:
                self.assertEqual(len(p.workers()), 1, text)
                self.assertNotIn("is over", p.text(), text)
                self.assertNotIn("lost the store", p.text(), text)
            return
        for p in nodes:
            self.assertEqual(len(p.workers()), 2, text)
        if which == 1:
            # the host declares the paused node dead during the pause; the
            # paused node finds its session ended and rejoins
            t_over, _ = other.wait_line(OVER_RE, timeout=1)
            self.assertLess(t_over, t_cont, text)
            t_rejoin, _ = paused.wait_line(REJOIN_RE, timeout=1)
            self.assertGreaterEqual(t_rejoin, t_cont, text)
        elif secs > WINDOW_S + 2.0:
            # the other node loses the silent store during the pause and
            # rejoins it once its host runs again
            t_lost, _ = other.wait_line(REJOIN_RE, timeout=1)
            self.assertLess(t_lost - t_stop, WINDOW_S + 2.0, text)
            self.assertLess(t_lost, t_cont, text)
            paused.wait_line(OVER_RE, timeout=1)
        else:
            # a pause just past the window: the other node's ping deadline
            # (the window after the ping the host left unanswered) and the
            # host's heartbeat, judged after the thaw, race; either way the
            # round is over for both and the next has both nodes (above)
            other.wait_line("(%s|%s)" % (REJOIN_RE, OVER_RE), timeout=1)
            paused.wait_line(OVER_RE, timeout=1)

    def test_pause_said_as_long_as_it_was(self):
        # a 2 s SIGSTOP of the agent was reported as "did not run for 0.9 s"
        # (the lateness of its timer, not the time since it last ran)
        nodes = self.start_job(2.0 + 3.0)
        for p in nodes:
            p.wait_line(r"MNW .*groups=2")
        t_stop, t_cont = self.pause(nodes[1], 2.0)
        _, m = nodes[1].wait_line(r"this agent did not run for ([\d.]+) s", after=t_cont - 0.1)
        said, paused = float(m.group(1)), t_cont - t_stop
        # at least the pause (the line rounds to 0.1 s); at most the pause and
        # the wait before it, under one keep-alive interval (1 s) plus slack
        self.assertGreaterEqual(said, paused - 0.1, nodes[1].text())
        self.assertLessEqual(said, paused + 1.0 + 0.3, nodes[1].text())
        self.assert_all_exit(nodes, timeout=60)


def add_cases(cls):
    for who, which in (("agent", 1), ("host", 0)):
        for secs in (0.5, 1.7, 4, 20):
            name = "test_%s_%s" % (who, str(secs).replace(".", "_"))
            setattr(cls, name, lambda self, w=which, s=secs: self.run_pause(w, s))
    return cls


@add_cases
class PausesStatic(PauseCase):
    STATIC = True


@add_cases
class PausesC10d(PauseCase):
    STATIC = False


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
