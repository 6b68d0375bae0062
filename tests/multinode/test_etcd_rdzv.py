"""The etcd v3 rendezvous backend: ddplaunch agents as simulated nodes
(127.0.0.2, ...) meeting on real etcd from Debian's etcd-server, started on
loopback by the test (tests/rendezvous/etcd/etcd_cluster.py).

Run one class: test_etcd_rdzv.py CLASS. Exits 77 (skip) only where etcd cannot
run at all.
  EtcdOne      one member: 2 and 4 nodes form and run; a run id reused at once
               (the session leases are revoked: no key of the first job is left
               that would hold it); a node killed (its lease expires);
               --dry_run's lines; an etcd agent has as many threads as a c10d
               agent (the etcd client runs on the agent's loop); a libddp
               worker killed on a node of 3 x 2: the others re-form as 5 at
               once, its replacement joins a round of 6 (issue 24)
  EtcdTls      TLS with a client certificate; a CA that does not know the
               members' certificate refused at once
  EtcdAuth     etcd's authentication (the password from DDP_ETCD_PASSWORD; a
               wrong or missing one refused at once)
  EtcdThree    three members: one killed during formation, one killed during a
               scale-down (a node leaves), the job goes on; all three killed:
               every agent fails within its deadline naming every endpoint
  EtcdUnreachable  (no etcd needed) endpoints that never answer, faked by the
               test on loopback: a closed port, one that accepts and closes,
               one that accepts and never answers, one that never accepts (a
               full backlog), one that sends its headers and stalls the body;
               each is named with its cause within 3 s and again while the
               agent retries; a name that does not exist ends the agent at once
"""
import base64
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "rendezvous", "etcd"))
import etcd_cluster  # noqa: E402
from mnlib import DDPLAUNCH, MultiNodeCase, fast_conf, wait_for  # noqa: E402

LEASE_TTL_S = 3  # rdzv_etcd_int.h
DEBUG = {"DDP_LOG_LEVEL": "debug"}


def b64(s):
    return base64.b64encode(s.encode()).decode()


class EtcdCase(MultiNodeCase):
    MEMBERS = 1
    TLS = False

    def setUp(self):
        super().setUp()
        self.etcd = etcd_cluster.EtcdCluster(self.MEMBERS, tls=self.TLS)
        self.etcd.start()
        self.addCleanup(self.etcd.stop)

    def etcd_args(self, nnodes, run_id="job", conf=None, extra=()):
        return ["--nnodes=%s" % nnodes, "--rdzv_backend=etcd",
                "--rdzv_endpoint=" + self.etcd.endpoints, "--rdzv_id=" + run_id,
                conf or fast_conf()] + list(extra)

    def start_etcd(self, n, nnodes=None, nproc=1, worker=("run", "0.3"), run_id="job",
                   conf=None, env=None, first=0):
        base = ["--nproc_per_node=%d" % nproc]
        return [self.cluster.agent(i, base + self.etcd_args(nnodes or n, run_id, conf),
                                   worker, env, name="%s-node%d" % (run_id, i))
                for i in range(first, first + n)]

    def check_world(self, nodes, nproc):
        seen = {}
        for p in nodes:
            ws = p.workers()
            self.assertEqual(len(ws), nproc, p.text())
            for w in ws:
                self.assertEqual(w["world"], str(len(nodes) * nproc), p.text())
                self.assertEqual(w["groups"], str(len(nodes)))
                seen[int(w["rank"])] = w
        self.assertEqual(sorted(seen), list(range(len(nodes) * nproc)))
        self.assertEqual(len({w["master"] for w in seen.values()}), 1)

    def keys(self, prefix, member=0):
        """The keys under prefix, read from etcd (linearizable)."""
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        r = self.etcd.post(member, "/v3/kv/range", {"key": b64(prefix), "range_end": b64(end),
                                                    "keys_only": True})
        return [base64.b64decode(kv["key"]).decode() for kv in r.get("kvs", [])]

    def stop_all(self, nodes):
        for p in nodes:
            p.signal(signal.SIGTERM)
        for p in nodes:
            p.wait()


class EtcdOne(EtcdCase):
    def form(self, n):
        nodes = self.start_etcd(n, nproc=2, worker=("run", "0.5"))
        self.assert_all_exit(nodes)
        self.check_world(nodes, 2)
        # no agent hosts a store: etcd is the rendezvous
        for p in nodes:
            self.assertNotIn("hosting the rendezvous store", p.text())

    def test_two_nodes(self):
        self.form(2)

    def test_four_nodes(self):
        self.form(4)

    def test_run_id_reused_at_once(self):
        first = self.start_etcd(2, run_id="again")
        self.assert_all_exit(first)
        t_end = time.monotonic()
        # the leases were revoked: no session key of the job is left (a
        # torchrun etcd backend's run id stays blocked for 7,200 s)
        self.assertEqual(self.keys("ddprdzv/again/a/"), [])
        second = self.start_etcd(2, run_id="again", worker=("run", "0.1"), first=2)
        ends = self.assert_all_exit(second)
        self.check_world(second, 1)
        self.assertLess(max(ends) - t_end, 5.0)
        for p in second:
            self.assertNotIn("finished", p.text().split("round 1")[0])

    def test_worker_replaced_after_the_others_step_without_it(self):
        # issue 24 on etcd's path (the same machine over etcd's lease,
        # watch and transaction): a libddp worker killed on a node of 3 x 2
        # is replaced alone; the others re-form at once as 5 (its node
        # counts one worker fewer), and its new process, started outside
        # the rounds, joins a later round of 6
        import test_inplace
        prog = [test_inplace.INPLACE, "600", "20"]
        nodes = [self.cluster.agent(i, ["--nproc_per_node=2", "--max_restarts=1"] +
                                    self.etcd_args("3") + prog, worker=None,
                                    name="node%d" % i) for i in range(3)]
        for p in nodes:
            wait_for(lambda: len(test_inplace.inplace_lines(p, "start")) == 2, 60,
                     "%s's workers" % p.name)
        nodes[0].wait_line(r"INPLACE progress", timeout=60)
        before = {p.name: {d["pid"] for d in test_inplace.inplace_lines(p, "start")}
                  for p in nodes}
        victim = test_inplace.inplace_lines(nodes[1], "start")[0]
        t_kill = time.monotonic()
        os.kill(int(victim["pid"]), signal.SIGKILL)
        for p in nodes:
            self.assertEqual(p.wait(120)[0], 0, p.text())
        text = nodes[1].text()
        self.assertIn("its replacement starts outside the rounds", text)
        for p in nodes:
            kept = before[p.name] - {victim["pid"]}
            worlds = [d["world"] for d in test_inplace.inplace_lines(p, "reformed")
                      if d["t"] >= t_kill and d["pid"] in kept]
            self.assertIn("6", worlds, p.text())
            done = test_inplace.inplace_lines(p, "done")
            self.assertTrue(kept <= {d["pid"] for d in done}, p.text())
            self.assertEqual({d["world"] for d in done}, {"6"}, p.text())
        # the round of 5 (without it) came first, everywhere
        for p in nodes:
            self.assertRegex(p.text(), r"re-form in place as ranks \d+-\d+ of 5 ")
        fresh = [d for d in test_inplace.inplace_lines(nodes[1], "start") if d["t"] >= t_kill]
        self.assertEqual(len(fresh), 1, text)

    def test_node_killed_lease_expires(self):
        nodes = self.start_etcd(3, nnodes="2:3", worker=("forever",))
        for p in nodes:
            p.wait_line(r"MNW .*groups=3")
        victim = nodes[2]
        t_kill = time.monotonic()
        victim.p.kill()
        for w in victim.workers():
            try:
                os.kill(int(w["pid"]), signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in nodes[:2]:
            t_run, _ = p.wait_line(r"MNW .*groups=2", after=t_kill, timeout=30)
            # the lease's TTL, then a re-formation
            self.assertLess(t_run - t_kill, LEASE_TTL_S + 3.0, p.text())
        self.stop_all(nodes[:2])

    def test_threads_as_many_as_c10d(self):
        """The etcd client runs on the agent's loop (issue 15): no worker
        thread, no thread per watch. Counted in /proc/PID/task while each
        job's workers run and its agents watch the round."""
        def threads(nodes):
            return [len(os.listdir("/proc/%d/task" % p.pid)) for p in nodes]

        c10d, _ = self.start_c10d(2, worker=("forever",), run_id="threads-c10d")
        etcd = self.start_etcd(2, worker=("forever",), run_id="threads-etcd", first=2)
        for p in c10d + etcd:
            p.wait_line(r"MNW .*groups=2")
        # the c10d host's agent and its joiner may differ (the host serves
        # the store); every etcd agent has as many as the fewer of them
        want, seen = min(threads(c10d)), threads(etcd)
        self.assertEqual(seen, [want] * len(etcd),
                         "threads: c10d agents %s, etcd agents %s" % (threads(c10d), seen))
        self.stop_all(c10d + etcd)

    def test_dry_run(self):
        r = subprocess.run([DDPLAUNCH, "--dry_run", "--nnodes=2", "--rdzv_backend=etcd",
                            "--rdzv_endpoint=e1,e2:2400",
                            "--rdzv_conf=user=root,password=pw-%d" % os.getpid(), "prog"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("rdzv_store = etcd at e1:2379,e2:2400", r.stdout)
        self.assertIn("rdzv_etcd_user = root (password from --rdzv_conf; not shown)", r.stdout)
        self.assertNotIn("pw-%d" % os.getpid(), r.stdout + r.stderr)


class EtcdTls(EtcdCase):
    TLS = True

    def test_tls_client_certificate(self):
        c = self.etcd.certs
        conf = fast_conf(protocol="https", cacert=c["ca"], cert=c["cert"], key=c["key"])
        nodes = self.start_etcd(2, conf=conf)
        self.assert_all_exit(nodes)
        self.check_world(nodes, 1)

    def test_tls_unknown_ca_refused(self):
        # the system's CAs do not know the test's: refused at once, named
        c = self.etcd.certs
        p = self.cluster.agent(0, self.etcd_args(2, conf=fast_conf(
            protocol="https", cert=c["cert"], key=c["key"])))
        rc, t = p.wait(30)
        self.assertNotEqual(rc, 0, p.text())
        self.assertLess(t - p.t_start, 10.0, p.text())
        self.assertIn(self.etcd.endpoints, p.text())


class EtcdAuth(EtcdCase):
    """etcd's users (over plain HTTP: etcd 3.4's gateway refuses to
    authenticate a client that also shows a certificate to a member with
    --client-cert-auth)."""

    def test_authentication(self):
        self.etcd.enable_auth("root", "rootpw")
        conf = fast_conf(user="root")
        wrong = self.cluster.agent(0, self.etcd_args(2, conf=conf),
                                   env={"DDP_ETCD_PASSWORD": "not-it"})
        rc, t = wrong.wait(30)
        self.assertNotEqual(rc, 0, wrong.text())
        self.assertLess(t - wrong.t_start, 3.0, wrong.text())
        self.assertIn("root", wrong.text())
        self.assertNotIn("not-it", wrong.text())
        nodes = self.start_etcd(2, conf=conf, env={"DDP_ETCD_PASSWORD": "rootpw"}, first=1)
        self.assert_all_exit(nodes)
        self.check_world(nodes, 1)
        for p in nodes:
            self.assertNotIn("rootpw", p.text())
        # a user without a password: said at once, naming where it goes
        nopw = self.cluster.agent(3, self.etcd_args(2, conf=conf))
        rc, _ = nopw.wait(30)
        self.assertNotEqual(rc, 0, nopw.text())
        self.assertIn("DDP_ETCD_PASSWORD", nopw.text())


class EtcdThree(EtcdCase):
    MEMBERS = 3

    def slot_written(self, p):
        """Waits until node p has its ticket's slot written (it is in the
        open round)."""
        _, m = p.wait_line(r"rdzv set #(\d+) ddprdzv/job/s/")
        p.wait_line(r"rdzv answer #%s: 0" % m.group(1))

    def test_member_killed_during_formation(self):
        # two of three nodes are in the open round when member 0 (where
        # every client starts) dies; the third comes after
        nodes = self.start_etcd(2, nnodes=3, worker=("run", "0.5"), env=DEBUG)
        for p in nodes:
            self.slot_written(p)
        self.etcd.kill(0)
        nodes += self.start_etcd(1, nnodes=3, worker=("run", "0.5"), env=DEBUG, first=2)
        self.assert_all_exit(nodes, timeout=60)
        self.check_world(nodes, 1)

    def test_member_killed_during_scale_down(self):
        nodes = self.start_etcd(3, nnodes="2:3", worker=("forever",))
        for p in nodes:
            p.wait_line(r"MNW .*groups=3", timeout=30)
        leader = self.etcd.leader()
        t0 = time.monotonic()
        nodes[2].signal(signal.SIGTERM)  # it leaves: the others re-form
        self.etcd.kill(leader)
        rc, _ = nodes[2].wait(30)
        self.assertEqual(rc, 128 + signal.SIGTERM, nodes[2].text())
        for p in nodes[:2]:
            t_run, _ = p.wait_line(r"MNW .*groups=2", after=t0, timeout=30)
            # an election (about 1 s), then the re-formation
            self.assertLess(t_run - t0, 10.0, p.text())
        self.stop_all(nodes[:2])

    def test_all_members_killed(self):
        read_timeout = 2
        nodes = self.start_etcd(2, worker=("forever",),
                                conf=fast_conf(read_timeout=read_timeout))
        for p in nodes:
            p.wait_line(r"MNW .*groups=2", timeout=30)
        t_kill = time.monotonic()
        for i in range(3):
            self.etcd.kill(i)
        # the next renewal of the lease (within a third of its TTL) fails
        # after read_timeout, trying every endpoint
        deadline = LEASE_TTL_S / 3 + read_timeout
        for p in nodes:
            rc, t_end = p.wait(30)
            self.assertNotEqual(rc, 0, p.text())
            self.assertLess(t_end - t_kill, deadline + 3.0, p.text())
            for port in self.etcd.client_ports:
                self.assertIn("127.0.0.1:%d" % port, p.text())
            self.assertIn("cannot go on without etcd", p.text())


class FakeEndpoint:
    """A loopback port that is not etcd (a thread of the test process):
    'closed' (bound to 0, then closed: nothing listens), 'close' (accepts and
    closes), 'silent' (accepts, never answers), 'backlog' (never accepts: its
    backlog is full), 'stall' (sends an answer's headers, then stalls the
    body)."""

    def __init__(self, kind):
        self.kind = kind
        self.conns = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        if kind == "closed":
            self.sock.close()
            return
        self.sock.listen(0 if kind == "backlog" else 16)
        if kind == "backlog":
            # connections nobody accepts fill the queue: later SYNs are dropped
            for _ in range(3):
                c = socket.socket()
                c.setblocking(False)
                c.connect_ex(("127.0.0.1", self.port))
                self.conns.append(c)
            return
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            if self.kind == "close":
                c.close()
                continue
            if self.kind == "stall":
                c.settimeout(2)
                try:
                    c.recv(65536)
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                              b"Content-Length: 100\r\n\r\n{")
                except OSError:
                    pass
            self.conns.append(c)

    def close(self):
        if self.kind != "closed":
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.sock.close()
        for c in self.conns:
            c.close()


class EtcdUnreachable(MultiNodeCase):
    """Endpoints that never answer used to be silent until join_timeout (600 s
    by default), then say "within 5000 ms" (issue 28)."""

    FIRST_S = 3.0 + 3.0  # the first word after 3 s, slack for a loaded machine
    WAIT_RE = (r"no etcd endpoint answers at 127\.0\.0\.1:%d \(127\.0\.0\.1:%d: %s[^)]*\) "
               r"after \d+ s; node \S+ keeps trying until the join deadline \(join_timeout=30 s, "
               r"\d+ s left\): check that etcd runs there and that --rdzv_endpoint lists its "
               r"client URLs")

    def agent(self, endpoint, join_timeout=30):
        return self.cluster.agent(0, ["--nnodes=2", "--rdzv_backend=etcd",
                                      "--rdzv_endpoint=" + endpoint, "--rdzv_id=job",
                                      fast_conf(join_timeout=join_timeout)])

    def named_and_repeated(self, kind, cause):
        ep = FakeEndpoint(kind)
        self.addCleanup(ep.close)
        p = self.agent("127.0.0.1:%d" % ep.port)
        pattern = self.WAIT_RE % (ep.port, ep.port, cause)
        t1, _ = p.wait_line(pattern, timeout=self.FIRST_S + 2)
        self.assertLess(t1 - p.t_start, self.FIRST_S, p.text())
        t2, _ = p.wait_line(pattern, timeout=10, after=t1 + 0.001)
        self.assertGreater(t2 - t1, 2.0, p.text())
        self.assertTrue(p.alive(), p.text())
        p.signal(signal.SIGTERM)
        p.wait()

    def test_closed_port(self):
        self.named_and_repeated("closed", "connection refused")

    def test_accepts_and_closes(self):
        self.named_and_repeated("close", "it accepted the connection and closed it without "
                                "an answer")

    def test_accepts_and_never_answers(self):
        self.named_and_repeated("silent", r"it accepted the connection but sent no answer "
                                r"within \d+ ms")

    def test_never_accepts(self):
        self.named_and_repeated("backlog", r"nothing accepted the connection within \d+ ms")

    def test_stalled_body(self):
        self.named_and_repeated("stall", r"its answer stalled: HTTP 200 headers, then 1 of 100 "
                                r"body bytes within \d+ ms")

    def test_deadline_names_the_join_timeout(self):
        # it said "within 5000 ms" (one request's deadline) after join_timeout
        ep = FakeEndpoint("closed")
        p = self.agent("127.0.0.1:%d" % ep.port, join_timeout=4)
        rc, t = p.wait(timeout=20)
        self.assertEqual(rc, 1, p.text())
        self.assertIn("no etcd endpoint answered within the join deadline (4 s): "
                      "127.0.0.1:%d: connection refused" % ep.port, p.text())
        self.assertNotIn("5000 ms", p.text())
        # a grant in flight at the deadline (its own deadline is 5 s) ends
        # there too: it ended up to 5 s late
        silent = FakeEndpoint("silent")
        self.addCleanup(silent.close)
        p = self.agent("127.0.0.1:%d" % silent.port, join_timeout=2.5)
        rc, t = p.wait(timeout=20)
        self.assertEqual(rc, 1, p.text())
        self.assertLess(t - p.t_start, 2.5 + 1.5, p.text())
        self.assertIn("no etcd endpoint answered within the join deadline (2.5 s): "
                      "127.0.0.1:%d: it accepted the connection but sent no answer"
                      % silent.port, p.text())

    def test_name_that_does_not_exist_ends_at_once(self):
        p = self.agent("nosuchhost.invalid:2379,other.invalid:2379")
        rc, t = p.wait(timeout=20)
        self.assertEqual(rc, 1, p.text())
        self.assertLess(t - p.t_start, 5.0, p.text())
        self.assertIn("no etcd endpoint's name exists: 'nosuchhost.invalid', 'other.invalid' "
                      "(the resolver says no such host; retrying cannot help): correct "
                      "--rdzv_endpoint", p.text())


if __name__ == "__main__":
    # EtcdUnreachable fakes its endpoints: it runs where etcd cannot
    why = None if sys.argv[1:2] == ["EtcdUnreachable"] else etcd_cluster.etcd_unavailable()
    if why:
        print("SKIP: etcd cannot run here: " + why)
        sys.exit(77)
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
