"""Who hosts the c10d rendezvous store (issue 18, section 3): torchrun's
rule. Every agent on the endpoint's machine (any of its addresses, all of
127.0.0.0/8 included) tries to bind the endpoint; the first wins, the others
join it; is_host in --rdzv_conf overrides; a store already there (ddp-rdzvd)
is joined by all. An agent that cannot reach the store says so within a few
seconds, naming the endpoint, its own address and what to do, and again
later.

Run one class: test_hosting.py CLASS.
"""
import os
import random
import re
import signal
import socket
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mnlib import DDP_RDZVD, HOST_RE, MultiNodeCase, addr, fast_conf  # noqa: E402
from test_multinode import served  # noqa: E402

ENDPOINT = "127.0.0.1"  # on this machine, but no simulated node's --local_addr
WAIT_RE = r"no rendezvous store answers at 127\.0\.0\.1:%d .* node %s keeps trying"


def free_port(host=ENDPOINT):
    """A port free on host right now, below the kernel's ephemeral range
    (ip_local_port_range): these tests name the endpoint's port seconds
    before an agent binds it, and a port from that range may meanwhile be
    taken as the source port of any outgoing connection on the machine."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    for _ in range(100):
        port = random.randrange(max(1024, low - 12000), low)
        s = socket.socket()
        try:
            s.bind((host, port))
            return port
        except OSError:
            continue
        finally:
            s.close()
    raise RuntimeError("no free port below %d on %s" % (low, host))


def ranks_of(nodes):
    return sorted(int(w["rank"]) for p in nodes for w in p.workers())


class Hosting(MultiNodeCase):
    def endpoint_args(self, n, port, **conf):
        return ["--nnodes=%d" % n, "--rdzv_backend=c10d",
                "--rdzv_endpoint=%s:%d" % (ENDPOINT, port), "--rdzv_id=job",
                fast_conf(join_timeout=60, **conf)]

    def test_eight_nodes_endpoint_on_the_machine_one_hosts(self):
        # 8 agents on 127.0.0.2-9, the endpoint 127.0.0.1: before torchrun's
        # rule nobody hosted and all of them waited out the join deadline
        n = 8
        port = free_port()
        nodes = [self.cluster.agent(i, self.endpoint_args(n, port), ("run", "0.3"))
                 for i in range(n)]
        self.assert_all_exit(nodes, timeout=60)
        self.assertEqual(ranks_of(nodes), list(range(n)))
        hosts = [p for p in nodes if HOST_RE.search(p.text())]
        self.assertEqual(len(hosts), 1, "\n\n".join(p.text() for p in nodes))
        _, m = hosts[0].wait_line(HOST_RE.pattern)
        self.assertEqual((m.group(1), int(m.group(2))), (ENDPOINT, port))
        for p in nodes:
            if p is not hosts[0]:
                self.assertRegex(p.text(), r"the rendezvous port 127\.0\.0\.1:%d is taken "
                                 r"\(by pid %d " % (port, hosts[0].pid))
        # every node's workers got the same master and their own address
        self.assertEqual(len({w["master"] for p in nodes for w in p.workers()}), 1)
        for i, p in enumerate(nodes):
            self.assertEqual({w["local_addr"] for w in p.workers()}, {addr(i)})

    def test_with_a_token_the_nodes_are_admitted_and_strangers_not(self):
        # the store an agent hosts on 127.0.0.1 admits the agents on
        # 127.0.0.2-4 (they prove the token) and serves raw clients only
        # from loopback and the nodes that joined: no wider than before
        env = {"DDP_RDZV_TOKEN": "tok-%d-hosting-0123456789" % os.getpid()}
        n = 3
        port = free_port()
        nodes = [self.cluster.agent(i, self.endpoint_args(n, port), ("forever",), env=env)
                 for i in range(n)]
        for p in nodes:
            p.wait_line(r"MNW .*groups=%d" % n, timeout=30)
        hosts = [p for p in nodes if HOST_RE.search(p.text())]
        self.assertEqual(len(hosts), 1, "\n\n".join(p.text() for p in nodes))
        self.assertIn("agents prove the job's token", hosts[0].text())
        self.assertFalse(served(ENDPOINT, port, "127.0.0.9"))
        self.assertTrue(served(ENDPOINT, port, "127.0.0.1"))
        self.assertTrue(served(ENDPOINT, port, addr(1)))
        hosts[0].wait_line(r"refused a client from 127\.0\.0\.9")
        for p in nodes:
            p.signal(signal.SIGTERM)
        for p in nodes:
            p.wait()

    def test_nobody_hosts_each_agent_says_so_and_again(self):
        # is_host=false everywhere and no ddp-rdzvd: each agent says within
        # a few seconds what is wrong, and says it again at the next retry
        n = 3
        port = free_port()
        nodes = [self.cluster.agent(i, self.endpoint_args(n, port, is_host="false"),
                                    ("run", "0.3")) for i in range(n)]
        for i, p in enumerate(nodes):
            t1, m = p.wait_line(WAIT_RE % (port, re.escape(addr(i))), timeout=10)
            self.assertLess(t1 - p.t_start, 3.0 + 2.0, p.text())  # 3 s, + a loaded machine
            line = m.string
            self.assertIn("connection refused", line)
            self.assertIn("is_host=true in --rdzv_conf", line)
            self.assertIn("ddp-rdzvd --host 127.0.0.1 --port %d" % port, line)
            self.assertIn("join_timeout=60 s", line)
            self.assertIn("this node does not host it (is_host=false)", line)
            t2, _ = p.wait_line(WAIT_RE % (port, re.escape(addr(i))), timeout=10,
                                after=t1 + 0.001)
            self.assertGreater(t2 - t1, 2.0, p.text())
        for p in nodes:
            self.assertNotIn("hosting the rendezvous store", p.text())
            self.assertTrue(p.alive(), p.text())
            p.signal(signal.SIGTERM)
            p.wait()

    def test_static_node_waiting_for_node_0_says_so(self):
        # static: node 1 started before node 0 names node 0's address, then
        # node 0 comes and the job runs
        port = free_port(addr(0))
        common = ["--nnodes=2", "--master_addr=" + addr(0), "--master_port=%d" % port,
                  "--rdzv_id=job", fast_conf(join_timeout=60)]
        second = self.cluster.agent(1, common + ["--node_rank=1"])
        t1, m = second.wait_line(r"no rendezvous store answers at %s:%d .* node %s keeps trying"
                                 % (re.escape(addr(0)), port, re.escape(addr(1))), timeout=10)
        self.assertLess(t1 - second.t_start, 3.0 + 2.0, second.text())
        self.assertIn("node 0's agent hosts it (--node_rank=0 on %s)" % addr(0), m.string)
        first = self.cluster.agent(0, common + ["--node_rank=0"])
        self.assert_all_exit([first, second])
        self.assertEqual(ranks_of([first, second]), [0, 1])

    def test_ddp_rdzvd_on_the_endpoint_all_join(self):
        d = self.cluster.start("rdzvd", [DDP_RDZVD, "--host", ENDPOINT, "--port", "0"])
        _, m = d.wait_line(r"listening on \S+:(\d+)")
        port = int(m.group(1))
        n = 3
        nodes = [self.cluster.agent(i, self.endpoint_args(n, port), ("run", "0.3"))
                 for i in range(n)]
        self.assert_all_exit(nodes, timeout=60)
        self.assertEqual(ranks_of(nodes), list(range(n)))
        for p in nodes:
            self.assertNotIn("hosting the rendezvous store", p.text())
            self.assertRegex(p.text(), r"the rendezvous port 127\.0\.0\.1:%d is taken \(by pid "
                             r"%d " % (port, d.pid))
        self.assertTrue(d.alive())
        d.signal(signal.SIGTERM)
        d.wait()

    def test_lost_ddp_rdzvd_is_named_as_the_standalone_store(self):
        # a killed ddp-rdzvd was called "hosted by the endpoint's host"
        d = self.cluster.start("rdzvd", [DDP_RDZVD, "--host", ENDPOINT, "--port", "0"])
        _, m = d.wait_line(r"listening on \S+:(\d+)")
        port = int(m.group(1))
        nodes = [self.cluster.agent(i, self.endpoint_args(2, port), ("forever",))
                 for i in range(2)]
        for p in nodes:
            p.wait_line(r"MNW .*groups=2", timeout=30)
        d.p.kill()
        d.wait()
        want = ("run id 'job' cannot go on without its rendezvous store (the standalone "
                "ddp-rdzvd at %s:%d)" % (ENDPOINT, port))
        for p in nodes:
            rc, _ = p.wait(timeout=30)
            self.assertNotEqual(rc, 0, p.text())
            self.assertIn(want, p.text())
            self.assertNotIn("hosted by the endpoint's host", p.text())

    def test_lost_agent_store_is_named_as_the_endpoint_hosts(self):
        # the same loss of a store an agent hosted still says so
        port = free_port()
        nodes = [self.cluster.agent(i, self.endpoint_args(2, port), ("forever",))
                 for i in range(2)]
        for p in nodes:
            p.wait_line(r"MNW .*groups=2", timeout=30)
        host = [p for p in nodes if HOST_RE.search(p.text())][0]
        other = nodes[1 - nodes.index(host)]
        host.p.kill()
        rc, _ = other.wait(timeout=30)
        self.assertNotEqual(rc, 0, other.text())
        self.assertIn("cannot go on without its rendezvous store (hosted by the endpoint's "
                      "host)", other.text())
        self.assertNotIn("standalone", other.text())

    def test_is_host_false_overrides_the_rule(self):
        # node 0 is on the endpoint's machine but told is_host=false: it
        # waits (and says so) until node 1, by the rule, hosts
        port = free_port()
        first = self.cluster.agent(0, self.endpoint_args(2, port, is_host="false"))
        first.wait_line(WAIT_RE % (port, re.escape(addr(0))), timeout=10)
        self.assertNotIn("hosting the rendezvous store", first.text())
        second = self.cluster.agent(1, self.endpoint_args(2, port))
        _, m = second.wait_line(HOST_RE.pattern)
        self.assertEqual((m.group(1), int(m.group(2))), (ENDPOINT, port))
        self.assert_all_exit([first, second])
        self.assertEqual(ranks_of([first, second]), [0, 1])


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
