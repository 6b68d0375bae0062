"""The etcd v3 rendezvous backend: ddplaunch agents as simulated nodes
(127.0.0.2, ...) meeting on real etcd from Debian's etcd-server, started on
loopback by the test (tests/rendezvous/etcd/etcd_cluster.py).

Run one class: test_etcd_rdzv.py CLASS. Exits 77 (skip) only where etcd cannot
run at all.
  EtcdOne      one member: 2 and 4 nodes form and run; a run id reused at once
               (the session leases are revoked: no key of the first job is left
               that would hold it); a node killed (its lease expires);
               --dry_run's lines; an etcd agent has as many threads as a c10d
               agent (the etcd client runs on the agent's loop)
  EtcdTls      TLS with a client certificate; a CA that does not know the
               members' certificate refused at once
  EtcdAuth     etcd's authentication (the password from DDP_ETCD_PASSWORD; a
               wrong or missing one refused at once)
  EtcdThree    three members: one killed during formation, one killed during a
               scale-down (a node leaves), the job goes on; all three killed:
               every agent fails within its deadline naming every endpoint
"""
import base64
import os
import signal
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "rendezvous", "etcd"))
import etcd_cluster  # noqa: E402
from mnlib import DDPLAUNCH, MultiNodeCase, fast_conf  # noqa: E402

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


if __name__ == "__main__":
    why = etcd_cluster.etcd_unavailable()
    if why:
        print("SKIP: etcd cannot run here: " + why)
        sys.exit(77)
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
