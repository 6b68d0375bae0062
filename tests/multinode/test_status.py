"""`ddplaunch status` in a real terminal (tmux). Run one class:
test_status.py CLASS.
  Status      a 3-node job on loopback whose store (a ddp-rdzvd) wants a
              token, the screen watched with --watch while the job runs and
              while a node is killed; --json for scripts; a job that is not
              there, and a missing token, each in one line.
  StatusEtcd  the same 3-node job meeting on a real etcd (Debian's
              etcd-server, started on loopback by the test with
              tests/rendezvous/etcd/etcd_cluster.py), read with
              --rdzv_backend=etcd and a list of endpoints (a dead one first,
              one as an http:// URL): the screen while a node is killed (its
              lease expires), --json, no lease or key written by the reader;
              a job that is not there and an etcd that cannot be reached,
              each in one line; etcd's users (the password from
              DDP_ETCD_PASSWORD) and TLS with a client certificate.

tmux runs on a socket of the test's own (-S in its temp dir) and is ended
with kill-server on that socket. Exit 77 without tmux (StatusEtcd: or
without etcd); with CI set, a missing tmux is a failure (exit 1)."""
import json
import os
import shutil
import signal
import select
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "rendezvous", "etcd"))
import etcd_cluster  # noqa: E402
from mnlib import (DDP_RDZVD, DDPLAUNCH, ROUND_RE, MultiNodeCase, addr, fast_conf,  # noqa: E402
                   free_port, wait_for)

TMUX = shutil.which("tmux")
TOKEN = "status-test-token-0123456789abcdef"


class TmuxCase(MultiNodeCase):
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

    def steps(self, s):
        rows = [line.split() for line in s.splitlines() if " running " in line]
        return sorted(int(r[5]) for r in rows if len(r) > 5 and r[5].isdigit())

    def watch_in_tmux(self, cmd, env=()):
        self.sock = os.path.join(self.dir, "tmux.sock")
        extra = [a for k in env for a in ("-e", k)]
        r = self.tmux("new-session", "-d", "-s", "status", "-x", "150", "-y", "30",
                      *extra, cmd)
        self.assertEqual(r.returncode, 0, r.stderr)

    def steps_move(self):
        """Each of the 3 nodes' step shows and grows, with a step rate."""
        first = self.steps(self.wait_screen(lambda s: len(self.steps(s)) == 3,
                                            "a step for each node"))
        self.wait_screen(lambda s: len(self.steps(s)) == 3 and min(self.steps(s)) > max(first),
                         "the steps growing")
        self.wait_screen(lambda s: s.count(" running ") == 3 and
                         all(r.split()[6] != "-" for r in s.splitlines() if " running " in r),
                         "a step rate for each node")

    def stop_watch(self):
        self.tmux("send-keys", "-t", "status", "C-c")
        wait_for(lambda: self.tmux("has-session", "-t", "status").returncode != 0, 10,
                 "status --watch to end on ^C")


class Status(TmuxCase):
    def interrupt_while_the_store_is_stopped(self, rdzvd):
        """^C to `status --watch` while its read waits on a stopped store: it
        ends with 0, quietly, never on a signal (the backend's close cancels
        the read, whose callback ended the reader again: a second close,
        libuv's assertion once, "Operation canceled" and exit 1)."""
        env = self.cluster.env({"DDP_RDZV_TOKEN": TOKEN})
        st = subprocess.Popen([DDPLAUNCH, "status", "--rdzv_endpoint=%s:%d" % (addr(0), self.port),
                               "--rdzv_id=job", "--watch=0.2", "--json"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            self.assertTrue(st.stdout.readline(), "status --watch printed nothing")
            rdzvd.p.send_signal(signal.SIGSTOP)
            try:
                # the next read starts within 0.2 s and cannot be answered
                # while the store is stopped: ^C once status has been silent
                # (stuck in that read) for 0.6 s, three periods
                quiet_since = time.monotonic()
                end = quiet_since + 10
                while time.monotonic() - quiet_since < 0.6:
                    self.assertLess(time.monotonic(), end, "status kept printing")
                    if select.select([st.stdout], [], [], 0.1)[0]:
                        if not os.read(st.stdout.fileno(), 65536):
                            self.fail("status ended before ^C: %s" % st.stderr.read())
                        quiet_since = time.monotonic()
                st.send_signal(signal.SIGINT)
                _, err = st.communicate(timeout=10)
            finally:
                rdzvd.p.send_signal(signal.SIGCONT)
            self.assertEqual((st.returncode, err), (0, ""), "status on ^C")
        finally:
            if st.poll() is None:
                st.kill()
                st.communicate()

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
        cmd = "%s status --rdzv_endpoint=%s:%d --rdzv_id=job --watch=0.5" % (
            DDPLAUNCH, addr(0), self.port)
        self.watch_in_tmux(cmd, ["DDP_RDZV_TOKEN=" + TOKEN])
        scr = self.wait_screen(lambda s: "nodes 3 live of 3 in round 1" in s and
                               s.count(" running ") == 3, "three running nodes")
        self.assertIn("job 'job' at %s:%d: running, round 1 (opened because the job started)"
                      % (addr(0), self.port), scr)
        for i in range(1, 4):
            self.assertIn(addr(i), scr)
        self.steps_move()

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
        self.stop_watch()

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
        # a token too short: the agents' reason and fix, not "Invalid argument"
        r = self.status("--rdzv_id=job", token="short")
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
        self.assertIn("the token from DDP_RDZV_TOKEN is 5 bytes; it must be at least 16",
                      r.stderr)
        self.assertIn("head -c 32 /dev/urandom | base64", r.stderr)
        # --watch's period after a space: the fix named
        r = self.status("--watch", "5", "--json", "--rdzv_id=job")
        self.assertEqual((r.returncode, r.stderr), (2, "ddplaunch: status: unexpected argument "
                                                       "'5' (the period goes after '=': "
                                                       "--watch=5)\n"))
        self.interrupt_while_the_store_is_stopped(rdzvd)
        for n in nodes[:2]:
            n.signal(signal.SIGTERM)
        for n in nodes[:2]:
            n.wait(30)


class EtcdStatusCase(TmuxCase):
    TLS = False

    def setUp(self):
        super().setUp()
        self.etcd = etcd_cluster.EtcdCluster(1, tls=self.TLS)
        self.etcd.start()
        self.addCleanup(self.etcd.stop)

    def status(self, endpoints, *args, env=None):
        return subprocess.run([DDPLAUNCH, "status", "--rdzv_backend=etcd",
                               "--rdzv_endpoint=" + endpoints] + list(args),
                              capture_output=True, text=True, env=self.cluster.env(env),
                              timeout=60)

    def leases(self):
        return len(self.etcd.post(0, "/v3/lease/leases", {}).get("leases", []))

    def revision(self):
        """etcd's revision: every write (put, delete, a lease's keys
        expiring) makes a new one."""
        r = self.etcd.post(0, "/v3/kv/range", {"key": "AA==", "range_end": "AA==",
                                               "count_only": True})
        return int(r["header"]["revision"])


class StatusEtcd(EtcdStatusCase):
    def test_screen_while_a_node_is_killed(self):
        ep = self.etcd.endpoints
        nodes = [self.cluster.agent(
            i, ["--nproc_per_node=2", "--max_restarts=3", "--nnodes=2:3",
                "--rdzv_backend=etcd", "--rdzv_id=job", "--rdzv_endpoint=" + ep, fast_conf()],
            worker=("steps", "20")) for i in range(1, 4)]
        for n in nodes:
            n.wait_line(ROUND_RE.pattern, 30)
        # several endpoints, as the agents take them: a dead one first, the
        # live one as a URL
        dead = "127.0.0.1:%d" % free_port()
        eps = "%s,http://%s" % (dead, ep)

        # --json: every node with its record, once each has written one
        def all_records():
            r = self.status(eps, "--rdzv_id=job", "--json")
            if r.returncode:
                return None
            d = json.loads(r.stdout)
            recs = [n["record"] for n in d["nodes"]]
            return d if len(recs) == 3 and all(recs) else None
        d = wait_for(all_records, 20, "a record from each node")
        self.assertEqual(d["backend"], "etcd")
        self.assertEqual(d["endpoint"], "%s,http://%s" % (dead, ep))
        self.assertEqual(d["phase"], "running")
        self.assertEqual(d["round"], 1)
        self.assertEqual(sorted(n["addr"] for n in d["nodes"]), [addr(i) for i in range(1, 4)])
        self.assertEqual(sorted(n["record"]["rank_base"] for n in d["nodes"]), [0, 2, 4])
        self.assertEqual({n["record"]["world"] for n in d["nodes"]}, {6})
        victim = [n for n in d["nodes"] if n["addr"] == addr(3)][0]["id"]
        # the agents' other spellings: a job file's keys, torchrun's PET_*
        # (below the flags, as for the agents)
        ini = os.path.join(self.dir, "job.ini")
        with open(ini, "w") as f:
            f.write("[launch]\nrdzv_backend = etcd\nrdzv_endpoint = %s\nrdzv_id = job\n" % eps)
        pet = {"PET_RDZV_BACKEND": "etcd", "PET_RDZV_ENDPOINT": ep, "PET_RDZV_ID": "nope"}
        for argv, env in ((["--config", ini, "--json"], None),
                          (["--rdzv-id=job", "--json"], pet)):
            r = subprocess.run([DDPLAUNCH, "status"] + argv, capture_output=True, text=True,
                               env=self.cluster.env(env), timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(json.loads(r.stdout)["backend"], "etcd")
            self.assertEqual(len(json.loads(r.stdout)["nodes"]), 3)

        # the screen, in a real terminal; the reader holds no lease
        leases = self.leases()
        self.assertEqual(leases, 3)
        cmd = "%s status --rdzv_backend=etcd --rdzv_endpoint=%s --rdzv_id=job --watch=0.5" % (
            DDPLAUNCH, eps)
        self.watch_in_tmux(cmd)
        scr = self.wait_screen(lambda s: "nodes 3 live of 3 in round 1" in s and
                               s.count(" running ") == 3, "three running nodes")
        self.assertIn("job 'job' at etcd %s: running, round 1 (opened because the job started)"
                      % eps, scr)
        for i in range(1, 4):
            self.assertIn(addr(i), scr)
        self.steps_move()
        self.assertEqual(self.leases(), leases)

        # node 3 killed: its lease expires, the screen shows the round opened
        # for its death, two nodes, and the re-formation
        nodes[2].p.send_signal(signal.SIGKILL)
        scr = self.wait_screen(lambda s: "nodes 2 live of 2 in round 2" in s and
                               "round 2, 2 nodes: dead" in s,
                               "the job re-formed without the killed node", 40)
        self.assertIn("round 2 (opened because a node died: '%s')" % victim, scr)
        self.assertNotIn(addr(3), [line.split()[2] for line in scr.splitlines()
                                   if " running " in line])
        self.assertIn("round 2, 2 nodes: dead '%s'; the workers started again" % victim, scr)
        self.stop_watch()

        # the reader wrote nothing: etcd's revision stands still over a read
        # while the agents are stopped (for less than their leases' TTL)
        for n in nodes[:2]:
            n.p.send_signal(signal.SIGSTOP)
        try:
            before = self.revision()
            r = self.status(eps, "--rdzv_id=job", "--json")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(self.revision(), before)
        finally:
            for n in nodes[:2]:
                n.p.send_signal(signal.SIGCONT)

        # one line each: a job that is not there, an etcd that cannot be
        # reached (named)
        r = self.status(eps, "--rdzv_id=nope")
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr, "ddplaunch: no job with run id 'nope' at etcd %s (check "
                         "--rdzv_id and --rdzv_endpoint)\n" % eps)
        self.assertEqual(r.stdout, "")
        r = self.status(dead, "--rdzv_id=job", "--rdzv_conf=read_timeout=2")
        self.assertEqual(r.returncode, 1)
        self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
        self.assertIn(dead, r.stderr)
        self.assertEqual(r.stdout, "")
        for n in nodes[:2]:
            n.signal(signal.SIGTERM)
        for n in nodes[:2]:
            n.wait(30)


class StatusEtcdAuth(EtcdStatusCase):
    """etcd's users: the password from DDP_ETCD_PASSWORD, as for the
    agents; a wrong one in one line that names the user, not the password."""

    def test_user_and_password(self):
        self.etcd.enable_auth("root", "rootpw")
        ep = self.etcd.endpoints
        conf = fast_conf(user="root")
        nodes = [self.cluster.agent(
            i, ["--nproc_per_node=1", "--nnodes=2", "--rdzv_backend=etcd", "--rdzv_id=job",
                "--rdzv_endpoint=" + ep, conf], worker=("steps", "200"),
            env={"DDP_ETCD_PASSWORD": "rootpw"}) for i in range(1, 3)]
        for n in nodes:
            n.wait_line(ROUND_RE.pattern, 30)
        ok = {"DDP_ETCD_PASSWORD": "rootpw"}
        d = wait_for(lambda: (lambda r: json.loads(r.stdout) if r.returncode == 0 else None)(
            self.status(ep, "--rdzv_id=job", "--json", "--rdzv_conf=user=root", env=ok)),
            20, "the job's state through etcd's authentication")
        self.assertEqual(len(d["nodes"]), 2)
        r = self.status(ep, "--rdzv_id=job", "--rdzv_conf=user=root",
                        env={"DDP_ETCD_PASSWORD": "not-it"})
        self.assertEqual(r.returncode, 1)
        self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
        self.assertIn("root", r.stderr)
        self.assertNotIn("not-it", r.stderr)
        r = self.status(ep, "--rdzv_id=job", "--rdzv_conf=user=root")
        self.assertEqual(r.returncode, 1)
        self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
        self.assertIn("DDP_ETCD_PASSWORD", r.stderr)
        for n in nodes:
            n.signal(signal.SIGTERM)
        for n in nodes:
            n.wait(30)


class StatusEtcdTls(EtcdStatusCase):
    """TLS with a client certificate, from --rdzv_conf as for the agents."""
    TLS = True

    def test_tls_client_certificate(self):
        c = self.etcd.certs
        ep = self.etcd.endpoints
        tls = "protocol=https,cacert=%s,cert=%s,key=%s" % (c["ca"], c["cert"], c["key"])
        nodes = [self.cluster.agent(
            i, ["--nproc_per_node=1", "--nnodes=2", "--rdzv_backend=etcd", "--rdzv_id=job",
                "--rdzv_endpoint=" + ep, fast_conf(protocol="https", cacert=c["ca"],
                                                   cert=c["cert"], key=c["key"])],
            worker=("steps", "200")) for i in range(1, 3)]
        for n in nodes:
            n.wait_line(ROUND_RE.pattern, 30)
        d = wait_for(lambda: (lambda r: json.loads(r.stdout) if r.returncode == 0 else None)(
            self.status(ep, "--rdzv_id=job", "--json", "--rdzv_conf=" + tls)),
            20, "the job's state over TLS")
        self.assertEqual(sorted(n["addr"] for n in d["nodes"]), [addr(1), addr(2)])
        # without the CA: refused in one line naming the endpoint
        r = self.status(ep, "--rdzv_id=job", "--rdzv_conf=protocol=https,cert=%s,key=%s"
                        % (c["cert"], c["key"]))
        self.assertEqual(r.returncode, 1)
        self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
        self.assertIn(ep, r.stderr)
        for n in nodes:
            n.signal(signal.SIGTERM)
        for n in nodes:
            n.wait(30)


if __name__ == "__main__":
    if not TMUX:
        # CI must run it (issue 27): there a missing tmux is a failure
        print("tmux is not installed (scripts/setup.sh installs it)%s"
              % ("; CI is set, so this fails" if os.environ.get("CI") else ""))
        sys.exit(1 if os.environ.get("CI") else 77)
    # every class, or an etcd one: etcd must run (Status alone needs none)
    why = etcd_cluster.etcd_unavailable() if not sys.argv[1:2] or \
        sys.argv[1].startswith("StatusEtcd") else None
    if why:
        print("SKIP: etcd cannot run here: " + why)
        sys.exit(77)
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
