"""`ddplaunch status` in a real terminal (tmux): a 3-node job on loopback
whose store (a ddp-rdzvd) wants a token, the screen watched with --watch
while the job runs and while a node is killed; --json for scripts; a job
that is not there, and a missing token, each in one line.

tmux runs on a socket of the test's own (-S in its temp dir) and is ended
with kill-server on that socket. Exit 77 without tmux."""
import json
import os
import shutil
import signal
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mnlib import (DDP_RDZVD, DDPLAUNCH, ROUND_RE, MultiNodeCase, addr, fast_conf,  # noqa: E402
                   wait_for)

TMUX = shutil.which("tmux")
TOKEN = "status-test-token-0123456789abcdef"


class Status(MultiNodeCase):
    def tmux(self, *args):
        return subprocess.run([TMUX, "-S", self.sock] + list(args), capture_output=True,
                              text=True, timeout=10)

    def screen(self):
        return self.tmux("capture-pane", "-p", "-t", "status").stdout

    def wait_screen(self, pred, what, timeout=30):
        return wait_for(lambda: (lambda s: s if pred(s) else None)(self.screen()), timeout,
                        "%s on the screen; it shows:\n%s" % (what, self.screen()))

    def tearDown(self):
        if getattr(self, "sock", None) and os.path.exists(self.sock):
            self.tmux("kill-server")
        super().tearDown()

    def status(self, *args, token=TOKEN):
        env = self.cluster.env({"DDP_RDZV_TOKEN": token} if token else None)
        return subprocess.run([DDPLAUNCH, "status", "--rdzv_endpoint=%s:%d" % (addr(0), self.port)]
                              + list(args), capture_output=True, text=True, env=env, timeout=30)

    def test_screen_while_a_node_is_killed(self):
        tok = {"DDP_RDZV_TOKEN": TOKEN}
        rdzvd = self.cluster.start("rdzvd", [DDP_RDZVD, "--host", addr(0), "--port", "0"], tok)
        _, m = rdzvd.wait_line(r"listening on \S+:(\d+)")
        self.port = int(m.group(1))
        nodes = [self.cluster.agent(
            i, ["--nproc_per_node=2", "--max_restarts=3", "--nnodes=2:3",
                "--rdzv_backend=c10d", "--rdzv_id=job", "--rdzv_endpoint=%s:%d" % (addr(0),
                                                                                   self.port),
                fast_conf(is_host=0)], worker=("steps", "20"), env=tok) for i in range(1, 4)]
        for n in nodes:
            n.wait_line(ROUND_RE.pattern, 30)

        # --json: every node with its record, once each has written one
        def all_records():
            r = self.status("--rdzv_id=job", "--json")
            if r.returncode:
                return None
            d = json.loads(r.stdout)
            recs = [n["record"] for n in d["nodes"]]
            return d if len(recs) == 3 and all(recs) else None
        d = wait_for(all_records, 20, "a record from each node")
        self.assertEqual(d["phase"], "running")
        self.assertEqual(d["round"], 1)
        self.assertEqual(sorted(n["addr"] for n in d["nodes"]), [addr(i) for i in range(1, 4)])
        self.assertEqual(sorted(n["record"]["rank_base"] for n in d["nodes"]), [0, 2, 4])
        self.assertEqual({n["record"]["world"] for n in d["nodes"]}, {6})
        victim = [n for n in d["nodes"] if n["addr"] == addr(3)][0]["id"]

        # the screen, in a real terminal
        self.sock = os.path.join(self.dir, "tmux.sock")
        cmd = "%s status --rdzv_endpoint=%s:%d --rdzv_id=job --watch=0.5" % (
            DDPLAUNCH, addr(0), self.port)
        r = self.tmux("new-session", "-d", "-s", "status", "-x", "150", "-y", "30",
                      "-e", "DDP_RDZV_TOKEN=" + TOKEN, cmd)
        self.assertEqual(r.returncode, 0, r.stderr)
        scr = self.wait_screen(lambda s: "nodes 3 live of 3 in round 1" in s and
                               s.count(" running ") == 3, "three running nodes")
        self.assertIn("job 'job' at %s:%d: running, round 1 (opened because the job started)"
                      % (addr(0), self.port), scr)
        for i in range(1, 4):
            self.assertIn(addr(i), scr)
        # steps move on the screen
        def steps(s):
            rows = [line.split() for line in s.splitlines() if " running " in line]
            return sorted(int(r[5]) for r in rows if len(r) > 5 and r[5].isdigit())
        first = steps(self.wait_screen(lambda s: len(steps(s)) == 3, "a step for each node"))
        self.wait_screen(lambda s: len(steps(s)) == 3 and min(steps(s)) > max(first),
                         "the steps growing")
        self.wait_screen(lambda s: s.count(" running ") == 3 and
                         all(r.split()[6] != "-" for r in s.splitlines() if " running " in r),
                         "a step rate for each node")

        # node 3 killed: the screen shows the round opened for its death,
        # two nodes, and the re-formation
        nodes[2].p.send_signal(signal.SIGKILL)
        scr = self.wait_screen(lambda s: "nodes 2 live of 2 in round 2" in s and
                               "round 2, 2 nodes: dead" in s,
                               "the job re-formed without the killed node", 40)
        self.assertIn("round 2 (opened because a node died: '%s')" % victim, scr)
        self.assertNotIn(addr(3), [line.split()[2] for line in scr.splitlines()
                                   if " running " in line])
        self.assertIn("round 2, 2 nodes: dead '%s'; the workers started again" % victim, scr)
        self.tmux("send-keys", "-t", "status", "C-c")
        wait_for(lambda: self.tmux("has-session", "-t", "status").returncode != 0, 10,
                 "status --watch to end on ^C")

        # one line each: a job that is not there, a missing token
        r = self.status("--rdzv_id=nope")
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr, "ddplaunch: no job with run id 'nope' at %s:%d (check "
                         "--rdzv_id and --rdzv_endpoint)\n" % (addr(0), self.port))
        self.assertEqual(r.stdout, "")
        r = self.status("--rdzv_id=job", token=None)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
        self.assertIn("token", r.stderr)
        for n in nodes[:2]:
            n.signal(signal.SIGTERM)
        for n in nodes[:2]:
            n.wait(30)


if __name__ == "__main__":
    if not TMUX:
        print("tmux is not installed (scripts/setup.sh installs it)")
        sys.exit(77)
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
