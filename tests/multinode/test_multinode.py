"""Multi-node tests: ddplaunch agents as simulated nodes on 127.0.0.2, ...

Run one class: test_multinode.py CLASS. Each timing target of issue 11 is
asserted with its bound (measured from when the agents' lines arrived).
"""
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns  # noqa: E402
from mnlib import (DDP_HELPER, DDP_RDZVD, DDPLAUNCH, FAIL_GRACE_S, ROUND_RE,  # noqa: E402
                   WORKER, MultiNodeCase, addr, fast_conf)


def ranks_of(nodes):
    return sorted(int(w["rank"]) for p in nodes for w in p.workers())


class Formation(MultiNodeCase):
    def check_world(self, nodes, nproc):
        n = len(nodes)
        seen = {}
        for p in nodes:
            ws = p.workers()
            self.assertEqual(len(ws), nproc, p.text())
            for w in ws:
                self.assertEqual(w["world"], str(n * nproc))
                self.assertEqual(w["groups"], str(n))
                self.assertEqual(w["restarts"], "0")
                self.assertEqual(w["run"], "job")
                seen[int(w["rank"])] = w
            self.assertEqual(len({w["master"] for w in ws}), 1)
        self.assertEqual(sorted(seen), list(range(n * nproc)))
        self.assertEqual(len({w["master"] for w in seen.values()}), 1)
        # ranks node by node, local ranks in order, the node's own address
        for r, w in seen.items():
            self.assertEqual(int(w["group"]), r // nproc)
            self.assertEqual(int(w["local"]), r % nproc)
        return seen

    def static(self, n):
        first = self.cluster.agent(0, ["--nnodes=%d" % n, "--node_rank=0", "--nproc_per_node=2",
                                       "--master_addr=" + addr(0), "--master_port=0",
                                       "--rdzv_id=job"])
        port = self.host_port(first)
        nodes = [first] + [self.cluster.agent(
            i, ["--nnodes=%d" % n, "--node_rank=%d" % i, "--nproc_per_node=2",
                "--master_addr=" + addr(0), "--master_port=%d" % port, "--rdzv_id=job"])
            for i in range(1, n)]
        self.assert_all_exit(nodes)
        seen = self.check_world(nodes, 2)
        # static: group rank = --node_rank, and each worker's DDP_LOCAL_ADDR
        for i, p in enumerate(nodes):
            for w in p.workers():
                self.assertEqual(w["group"], str(i))
                self.assertEqual(w["local_addr"], addr(i))
        self.assertEqual(seen[0]["master"].split(":")[0], addr(0))

    def test_static_2(self):
        self.static(2)

    def test_static_4(self):
        self.static(4)

    def dynamic(self, n):
        t0 = time.monotonic()
        nodes, _ = self.start_c10d(n, nproc=2, worker=("run", "0.5"))
        ends = self.assert_all_exit(nodes)
        self.check_world(nodes, 2)
        # agents exit within 200 ms of their last worker (no exit barrier):
        # the workers end 0.5 s after their first line
        for p, t_end in zip(nodes, ends):
            last = max(w["t"] for w in p.workers()) + 0.5
            self.assertLess(t_end - last, 0.2, p.text())
        return time.monotonic() - t0

    def test_dynamic_2(self):
        self.dynamic(2)

    def test_dynamic_4(self):
        self.dynamic(4)

    def test_dynamic_8(self):
        self.dynamic(8)

    def test_fixed_count_closes_at_last_arrival(self):
        # --nnodes=N under c10d: the round closes within 100 ms of the last
        # node's arrival (no last-call wait, no polling)
        nodes, port = self.start_c10d(2, worker=("forever",),
                                      extra=[fast_conf(last_call_timeout=30)])
        t_last = nodes[1].t_start
        t_round = max(p.wait_line(ROUND_RE.pattern)[0] for p in nodes)
        self.assertLess(t_round - t_last, 0.1 + 0.4)  # + the agent's own start-up
        for p in nodes:
            p.wait_line(r"MNW ")
        for p in nodes:
            p.signal(signal.SIGTERM)
        for p in nodes:
            p.wait()

    def test_node_rank_honoured_under_c10d(self):
        first = self.cluster.agent(0, self.c10d(2, 0, extra=["--node_rank=1"]))
        port = self.host_port(first)
        second = self.cluster.agent(1, self.c10d(2, port, extra=["--node_rank=0"]))
        self.assert_all_exit([first, second])
        self.assertEqual(first.workers()[0]["group"], "1")
        self.assertEqual(second.workers()[0]["group"], "0")
        self.assertEqual(first.workers()[0]["master"].split(":")[0], addr(1))


class Failures(MultiNodeCase):
    def three_running(self, worker=("forever",), extra=()):
        nodes, port = self.start_c10d(3, nnodes="2:3", worker=worker,
                                      extra=[fast_conf()] + list(extra))
        for p in nodes:
            p.wait_line(r"MNW .*groups=3")
        return nodes, port

    def test_node_killed_survivors_reform(self):
        # workers never communicate: the death is noticed by the rendezvous
        nodes, _ = self.three_running()
        victim = nodes[2]
        masters = {w["master"] for p in nodes for w in p.workers()}
        t_kill = time.monotonic()
        victim.p.kill()  # the agent, then its workers: the whole node
        for w in victim.workers():
            try:
                os.kill(int(w["pid"]), signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in nodes[:2]:
            t_notice, _ = p.wait_line(r"round 1 of run id 'job' is over", after=t_kill)
            self.assertLess(t_notice - t_kill, 3.0, p.text())
            t_run, _ = p.wait_line(r"MNW .*groups=2", after=t_kill)
            self.assertLess(t_run - t_kill, 5.0, p.text())
        ws = [w for p in nodes[:2] for w in p.workers() if w["groups"] == "2"]
        self.assertEqual(sorted(int(w["rank"]) for w in ws), [0, 1])
        # a fresh store for the new round, and no restart counted for it
        self.assertTrue(all(w["master"] not in masters for w in ws))
        self.assertTrue(all(w["restarts"] == "0" for w in ws))
        for p in nodes[:2]:
            p.signal(signal.SIGTERM)
        for p in nodes[:2]:
            p.wait()

    def test_sigterm_leaves_and_others_reform(self):
        nodes, _ = self.three_running()
        t_stop = time.monotonic()
        nodes[1].signal(signal.SIGTERM)
        rc, _ = nodes[1].wait()
        self.assertEqual(rc, 128 + signal.SIGTERM, nodes[1].text())
        for p in (nodes[0], nodes[2]):
            t_run, _ = p.wait_line(r"MNW .*groups=2", after=t_stop)
            self.assertLess(t_run - t_stop, 2.0, p.text())
            self.assertIn("left", p.text())
        # the survivors keep their ranks: node 0 stays rank 0
        self.assertEqual([w["group"] for w in nodes[0].workers()], ["0", "0"])
        for p in (nodes[0], nodes[2]):
            p.signal(signal.SIGTERM)
            p.wait()

    def test_permanent_failure_ends_a_fixed_size_job(self):
        # --nnodes=3, and global rank 1's worker exits 78 (a full disk, say):
        # its node leaves, and the job cannot go on without it while the
        # failure would repeat. Every agent ends at once with 78, its last
        # line naming that node and the cause (they re-formed without it,
        # waited join_timeout saying "1 more needed (start them)", exited 1)
        nodes, _ = self.start_c10d(3, worker=("fail", "1", "78", "0.5"),
                                   extra=[fast_conf(join_timeout=30)])
        for p in nodes:
            p.wait_line(r"MNW .*groups=3")
        victim = [p for p in nodes if any(w["rank"] == "1" for w in p.workers())][0]
        t_fail, _ = victim.wait_line(r"will repeat", timeout=10)
        node_addr = victim.workers()[0]["local_addr"]
        for p in nodes:
            rc, t_end = p.wait(30)
            self.assertEqual(rc, 78, p.text())
            self.assertLess(t_end - t_fail, 10.0, p.text())
            if p is victim:
                continue
            last = p.text().splitlines()[-1]
            self.assertIn(node_addr, last, p.text())
            self.assertIn("worker rank 1 exited with status 78", last, p.text())
            self.assertNotIn("more needed", p.text())

    def test_store_host_lost(self):
        nodes, port = self.three_running()
        t_kill = time.monotonic()
        nodes[0].p.kill()
        for p in nodes[1:]:
            rc, t_end = p.wait(10)
            self.assertNotEqual(rc, 0)
            self.assertLess(t_end - t_kill, 2.0, p.text())
            self.assertIn("%s:%d" % (addr(0), port), p.text())

    def test_never_comes_c10d(self):
        first = self.cluster.agent(0, self.c10d(3, 0, extra=[fast_conf(join_timeout=2)]))
        port = self.host_port(first)
        second = self.cluster.agent(1, self.c10d(3, port, extra=[fast_conf(join_timeout=2)]))
        for p in (first, second):
            rc, t_end = p.wait(10)
            self.assertNotEqual(rc, 0)
            self.assertLess(abs(t_end - p.t_start - 2.0), 1.0, p.text())
            text = p.text()
            self.assertIn("%s:" % addr(0), text)
            self.assertIn("%s:" % addr(1), text)
            self.assertRegex(text, r"1 (more )?(node|missing)|missing 1|1 node")

    def test_never_comes_static_names_ranks(self):
        common = ["--nnodes=4", "--master_addr=" + addr(0), "--rdzv_conf=join_timeout=2"]
        first = self.cluster.agent(0, common + ["--node_rank=0", "--master_port=0"])
        port = self.host_port(first)
        second = self.cluster.agent(2, common + ["--node_rank=2", "--master_port=%d" % port])
        for p in (first, second):
            rc, t_end = p.wait(10)
            self.assertNotEqual(rc, 0)
            self.assertLess(abs(t_end - p.t_start - 2.0), 1.0, p.text())
            self.assertRegex(p.text(), r"1, 3|1 and 3")

    def test_static_port_taken_refused_naming_owner(self):
        rdzvd = self.cluster.start("rdzvd", [DDP_RDZVD, "--host", addr(0), "--port", "0"])
        _, m = rdzvd.wait_line(r"listening on \S+:(\d+)")
        port = m.group(1)
        p = self.cluster.agent(0, ["--nnodes=2", "--node_rank=0", "--master_addr=" + addr(0),
                                   "--master_port=" + port])
        rc, t = p.wait(10)
        self.assertEqual(rc, 2, p.text())
        self.assertLess(t - p.t_start, 2.0)
        self.assertIn("port %s on %s is in use by pid %d" % (port, addr(0), rdzvd.pid), p.text())


class Elastic(MultiNodeCase):
    def test_join_running_job(self):
        conf = fast_conf(last_call_timeout=1)
        nodes, port = self.start_c10d(2, nnodes="2:4", worker=("forever",), extra=[conf])
        for p in nodes:
            p.wait_line(r"MNW .*groups=2")
        t_join = time.monotonic()
        third = self.cluster.agent(2, self.c10d("2:4", port, extra=[conf]), ("forever",))
        for p in nodes + [third]:
            t_run, _ = p.wait_line(r"MNW .*groups=3", after=t_join)
            self.assertLess(t_run - t_join, 1.0 + 1.0, p.text())
        for p in nodes + [third]:
            p.signal(signal.SIGTERM)
        for p in nodes + [third]:
            p.wait()

    def test_join_at_max_is_immediate(self):
        # 2:3 with a 4 s last call: the first world of 2 forms after it;
        # a third node then makes MAX, so it goes in at once
        conf = fast_conf(last_call_timeout=4, join_timeout=30)
        nodes, port = self.start_c10d(2, nnodes="2:3", worker=("forever",), extra=[conf])
        for p in nodes:
            p.wait_line(r"MNW .*groups=2", timeout=30)
        t_join = time.monotonic()
        third = self.cluster.agent(2, self.c10d("2:3", port, extra=[conf]), ("forever",))
        for p in nodes + [third]:
            t_run, _ = p.wait_line(r"MNW .*groups=3", after=t_join)
            self.assertLess(t_run - t_join, 1.0, p.text())
        for p in nodes + [third]:
            p.signal(signal.SIGTERM)
        for p in nodes + [third]:
            p.wait()


class Restarts(MultiNodeCase):
    def test_budget_is_the_jobs(self):
        # rank 0 fails twice; --max_restarts=2 is for the whole job (3 nodes);
        # the others run past the failure's grace (FAIL_GRACE_S)
        nodes, _ = self.start_c10d(3, worker=("fail-early", "2", "3", str(FAIL_GRACE_S + 2)),
                                   extra=["--max_restarts=2", fast_conf()])
        self.assert_all_exit(nodes, 0, timeout=40)
        last = [w for p in nodes for w in p.workers()]
        self.assertEqual(max(int(w["restarts"]) for w in last), 2)

    def test_budget_spent_fails_every_node(self):
        nodes, _ = self.start_c10d(3, worker=("fail-early", "9", "3", str(FAIL_GRACE_S + 2)),
                                   extra=["--max_restarts=1", fast_conf()])
        for p in nodes:
            rc, _ = p.wait(40)
            self.assertNotEqual(rc, 0, p.text())
        self.assertEqual(max(int(w["restarts"]) for p in nodes for w in p.workers()), 1)
        self.assertEqual(nodes[0].wait()[0], 3)


class Jobs(MultiNodeCase):
    def rdzvd(self):
        d = self.cluster.start("rdzvd", [DDP_RDZVD, "--host", addr(0), "--port", "0"])
        _, m = d.wait_line(r"listening on \S+:(\d+)")
        return d, int(m.group(1))

    def test_endpoint_on_ddp_rdzvd(self):
        _, port = self.rdzvd()
        nodes = [self.cluster.agent(i, self.c10d(2, port, extra=["--rdzv_conf=is_host=0"]))
                 for i in range(2)]
        self.assert_all_exit(nodes)
        self.assertEqual(ranks_of(nodes), [0, 1])

    def test_two_jobs_one_endpoint(self):
        a, port = self.start_c10d(2, run_id="jobA", worker=("run", "0.3"))
        b = [self.cluster.agent(i + 2, self.c10d(2, port, "jobB"), ("run", "2"))
             for i in range(2)]
        # job A ends first; job B goes on with the store A's host kept
        self.assert_all_exit(a)
        self.assertIn("stays up in process", a[0].text())
        self.assert_all_exit(b)
        self.assertEqual(ranks_of(b), [0, 1])

    def test_two_static_jobs_one_host(self):
        # two static jobs on the same addresses, each its own port: never mixed
        jobs = []
        for j in range(2):
            common = ["--nnodes=2", "--master_addr=" + addr(0), "--rdzv_id=static%d" % j]
            first = self.cluster.agent(0, common + ["--node_rank=0", "--master_port=0"],
                                       ("run", "1"), name="job%d-node0" % j)
            port = self.host_port(first)
            jobs.append((first, port, common))
        nodes = []
        for j, (first, port, common) in enumerate(jobs):
            second = self.cluster.agent(1, common + ["--node_rank=1", "--master_port=%d" % port],
                                        ("run", "1"), name="job%d-node1" % j)
            nodes.append([first, second])
        for j, pair in enumerate(nodes):
            self.assert_all_exit(pair)
            self.assertEqual(ranks_of(pair), [0, 1])
            self.assertEqual({w["run"] for p in pair for w in p.workers()}, {"static%d" % j})
            self.assertEqual(len({w["master"] for p in pair for w in p.workers()}), 1)

    def test_same_run_id_again(self):
        _, port = self.rdzvd()
        for attempt in range(2):
            nodes = [self.cluster.agent(i, self.c10d(2, port, extra=["--rdzv_conf=is_host=0"]),
                                        name="run%d-node%d" % (attempt, i)) for i in range(2)]
            self.assert_all_exit(nodes)
            self.assertEqual(ranks_of(nodes), [0, 1])


def served(host, port, bind):
    """A torch-2.x-style VALIDATE + GET from `bind`: True when answered (a
    refused client is disconnected without an answer)."""
    s = socket.socket()
    s.bind((bind, 0))
    s.settimeout(10)
    s.connect((host, port))
    s.sendall(bytes([0x00, 0xCE, 0xF7, 0x85, 0x3C, 0x03]) + (1).to_bytes(8, "little") + b"k")
    data = b""
    try:
        while len(data) < 8:
            chunk = s.recv(64)
            if not chunk:
                break
            data += chunk
    except ConnectionResetError:
        pass
    s.close()
    return len(data) >= 8


def forged(host, port, bind, key):
    """A torch-2.x-style client from `bind` that SETs `key` and GETs it back:
    True when it was served (the value read back), False when the store
    disconnected it."""
    s = socket.socket()
    s.bind((bind, 0))
    s.settimeout(10)
    s.connect((host, port))
    value = b"rdzv2 forged"

    def field(b):
        return len(b).to_bytes(8, "little") + b
    s.sendall(bytes([0x00, 0xCE, 0xF7, 0x85, 0x3C, 0x01]) + field(key) + field(value) +
              bytes([0x03]) + field(key))
    data = b""
    try:
        while len(data) < 8 + len(value):
            chunk = s.recv(64)
            if not chunk:
                break
            data += chunk
    except ConnectionResetError:
        pass
    s.close()
    return data == field(value)


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return int([line.split()[1] for line in f if line.startswith("VmRSS:")][0])


def stranger(host, port, stop, gone):
    """A client without the token from 127.0.0.9 that opens a connection
    every second and keeps the last two open; sets `gone` once the store
    refuses connections."""
    socks = []
    while not stop.is_set():
        s = socket.socket()
        s.bind(("127.0.0.9", 0))
        s.settimeout(5)
        try:
            s.connect((host, port))
        except ConnectionRefusedError:
            s.close()
            gone.set()
            break
        except OSError:
            s.close()
        else:
            socks.append(s)
        while len(socks) > 2:
            socks.pop(0).close()
        stop.wait(1.0)
    for s in socks:
        s.close()


class Security(MultiNodeCase):
    TOKEN = "tok-%d-secret-0123456789" % os.getpid()

    def test_wrong_token_and_no_token_refused(self):
        env = {"DDP_RDZV_TOKEN": self.TOKEN}
        first = self.cluster.agent(0, self.c10d(2, 0, extra=[fast_conf()]), env=env)
        port = self.host_port(first)
        for i, other in ((1, {"DDP_RDZV_TOKEN": "not-the-job-token-0123"}), (2, None)):
            p = self.cluster.agent(i, self.c10d(2, port, extra=[fast_conf()]), env=other)
            rc, t_end = p.wait(10)
            self.assertNotEqual(rc, 0, p.text())
            self.assertLess(t_end - p.t_start, 3.0, p.text())
            self.assertIn("token", p.text())
        right = self.cluster.agent(3, self.c10d(2, port, extra=[fast_conf()]), env=env)
        self.assert_all_exit([first, right])
        self.assertEqual(ranks_of([first, right]), [0, 1])
        for p in self.cluster.procs:
            self.assertNotIn(self.TOKEN, p.text())

    def test_token_on_the_command_line_and_dry_run(self):
        r = subprocess.run([DDPLAUNCH, "--dry_run", "--nnodes=2", "--rdzv_token=" + self.TOKEN,
                            "prog"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("rdzv_token = set (from --rdzv_token; not shown)", r.stdout)
        self.assertNotIn(self.TOKEN, r.stdout + r.stderr)

    def test_stranger_address_refused(self):
        env = {"DDP_RDZV_TOKEN": self.TOKEN}
        first = self.cluster.agent(0, self.c10d(2, 0), ("forever",), env=env)
        port = self.host_port(first)
        second = self.cluster.agent(1, self.c10d(2, port), ("forever",), env=env)
        for p in (first, second):
            p.wait_line(r"MNW ")
        mhost, mport = first.workers()[0]["master"].split(":")
        for host, prt, what in ((addr(0), port, "rendezvous"), (mhost, int(mport), "workers'")):
            self.assertFalse(served(host, prt, "127.0.0.9"), what)
            self.assertTrue(served(host, prt, "127.0.0.1"), what)
            self.assertTrue(served(host, prt, addr(1)), what)
        # the host says whom it refused
        first.wait_line(r"refused a client from 127\.0\.0\.9")
        self.assertNotIn(self.TOKEN, first.text() + second.text())
        for p in (first, second):
            p.signal(signal.SIGTERM)
            p.wait()

    def test_raw_clients_cannot_write_the_agents_keys(self):
        # a local process without the token, on the store's host (127.0.0.1)
        # or on a member's address, cannot forge the rendezvous state (it
        # ended the job in 0.37 s): it is disconnected and the job goes on;
        # it keeps the rest of the store
        env = {"DDP_RDZV_TOKEN": self.TOKEN}
        nodes, port = self.start_c10d(2, worker=("run", "4"), env=env)
        for p in nodes:
            p.wait_line(r"MNW ")
        for bind in ("127.0.0.1", addr(1)):
            for key in (b"ddprdzv/job/state", b"ddprdzv/job/a/" + bind.encode()):
                self.assertFalse(forged(addr(0), port, bind, key), (bind, key))
            self.assertTrue(forged(addr(0), port, bind, b"/default_pg/0//cpu//0/1"), bind)
        nodes[0].wait_line(r"refused a client from 127\.0\.0\.1:\d+: it tried to write the "
                           r"agents' keys")
        self.assert_all_exit(nodes)
        self.assertEqual(ranks_of(nodes), [0, 1])
        for p in nodes:
            self.assertEqual(p.text().count("MNW "), 1, p.text())  # no restart

    def test_token_reaches_no_worker(self):
        # DDP_RDZV_TOKEN was in every worker's /proc/PID/environ
        env = {"DDP_RDZV_TOKEN": self.TOKEN}
        nodes, _ = self.start_c10d(2, nproc=2, worker=("forever",), env=env)
        for p in nodes:
            p.wait_line(r"MNW (?=.*local=0)")
            p.wait_line(r"MNW (?=.*local=1)")
        pids = [int(w["pid"]) for p in nodes for w in p.workers()]
        self.assertEqual(len(pids), 4)
        for pid in pids:
            with open("/proc/%d/environ" % pid, "rb") as f:
                environ = f.read()
            self.assertIn(b"\0RANK=", b"\0" + environ)  # the worker's own
            self.assertNotIn(b"DDP_RDZV_TOKEN", environ)
            self.assertNotIn(self.TOKEN.encode(), environ)
        for p in nodes:
            p.signal(signal.SIGTERM)
        for p in nodes:
            p.wait()

    def test_short_token_refused(self):
        # 15 bytes: refused at once, saying why, run or dry run
        short = "0123456789abcde"
        for dry in ([], ["--dry_run"]):
            r = subprocess.run([DDPLAUNCH] + dry + self.c10d(2, 1) + [WORKER, "run", "0"],
                               capture_output=True, text=True, timeout=30,
                               env=self.cluster.env({"DDP_RDZV_TOKEN": short}))
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertIn("the token from DDP_RDZV_TOKEN is 15 bytes; it must be at least 16",
                          r.stderr)
            self.assertIn("guesses of a short token offline", r.stderr)
            self.assertNotIn(short, r.stdout + r.stderr)

    def test_a_flood_of_strangers_leaves_fds_for_the_workers(self):
        # under ulimit -n 256, 300 silent connections from 3 addresses took
        # the hosting agent's descriptors: loopback clients were no longer
        # served and the restart could not start a worker (127/137)
        env = {"DDP_RDZV_TOKEN": self.TOKEN}
        argv = (["sh", "-c", 'ulimit -n 256 && exec "$0" "$@"', DDPLAUNCH,
                 "--local_addr=" + addr(0), "--max_restarts=1"] +
                self.c10d(1, 0, extra=[fast_conf()]) + [WORKER, "run", "3"])
        first = self.cluster.start("node0", argv, env)
        port = self.host_port(first)
        first.wait_line(r"MNW ")
        flood = []
        self.addCleanup(lambda: [s.close() for s in flood])
        for bind in ("127.0.0.9", "127.0.0.10", "127.0.0.11"):
            for _ in range(100):
                s = socket.socket()
                s.bind((bind, 0))
                s.settimeout(10)
                s.connect((addr(0), port))
                flood.append(s)
        # accepted in order: the flood has been dealt with when this is served
        self.assertTrue(served(addr(0), port, "127.0.0.1"), first.text())
        first.wait_line(r"refused a client from 127\.0\.0\.(9|10|11):\d+: its address has too "
                        r"many connections")
        os.kill(int(first.workers()[0]["pid"]), signal.SIGKILL)
        rc, _ = first.wait(30)
        self.assertEqual(rc, 0, first.text())
        self.assertEqual(first.text().count("MNW "), 2, first.text())

    def test_a_flood_of_idle_loopback_clients_leaves_fds_for_the_workers(self):
        # without a token, loopback is served: 1,000 idle connections at
        # ulimit -n 1024 took every descriptor of the hosting agent, the
        # restart could not start its worker and the agent exited 78 ("will
        # repeat at every restart"). Now a flood from one address stops at
        # its cap, the last descriptors stay the agent's, and silent
        # clients are closed; the restart starts and the job completes
        import resource

        def low_nofile():
            resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < 4096 <= hard or hard == resource.RLIM_INFINITY:
            resource.setrlimit(resource.RLIMIT_NOFILE, (4096, hard))
        argv = ([DDPLAUNCH, "--local_addr=" + addr(0), "--max_restarts=1"] +
                self.c10d(1, 0, extra=[fast_conf()]) + [WORKER, "run", "8"])
        first = self.cluster.start("node0", argv, preexec=low_nofile)
        port = self.host_port(first)
        first.wait_line(r"MNW ")
        flood = []
        self.addCleanup(lambda: [s.close() for s in flood])
        for _ in range(1000):
            s = socket.socket()
            s.settimeout(10)
            s.connect((addr(0), port))  # from 127.0.0.1
            flood.append(s)
        # accepted in order: the flood has been dealt with when this is served
        self.assertTrue(served(addr(0), port, "127.0.0.9"), first.text())
        self.assertEqual(first.text().count("MNW "), 1, first.text())  # still running
        os.kill(int(first.workers()[0]["pid"]), signal.SIGKILL)
        rc, _ = first.wait(30)
        self.assertEqual(rc, 0, first.text())
        self.assertEqual(first.text().count("MNW "), 2, first.text())
        self.assertNotIn("will repeat", first.text())
        first.wait_line(r"refused a client from 127\.0\.0\.1:\d+: (its address has \d+ "
                        r"connections open|this process is near its limit on open files)")

    def test_strangers_do_not_keep_the_kept_store(self):
        # a client without the token that reconnects every second kept the
        # store of a finished job alive forever
        env = {"DDP_RDZV_TOKEN": self.TOKEN}
        first = self.cluster.agent(0, self.c10d(1, 0), ("run", "2"), env=env)
        port = self.host_port(first)
        stop, gone = threading.Event(), threading.Event()
        t = threading.Thread(target=stranger, args=(addr(0), port, stop, gone), daemon=True)
        t.start()
        self.addCleanup(t.join, 10)
        self.addCleanup(stop.set)
        rc, _ = first.wait(30)
        self.assertEqual(rc, 0, first.text())
        self.assertNotIn("stays up in process", first.text())
        self.assertTrue(gone.wait(5), "the store is still up: " + first.text())

    def test_big_frames_of_strangers_are_not_buffered(self):
        # 60 MiB frames from clients without the token drove the host to
        # 1 GiB in 9 s: now the announce alone closes them
        env = {"DDP_RDZV_TOKEN": self.TOKEN}
        first = self.cluster.agent(0, self.c10d(1, 0), ("forever",), env=env)
        port = self.host_port(first)
        first.wait_line(r"MNW ")
        before = rss_kib(first.pid)
        socks = []
        self.addCleanup(lambda: [s.close() for s in socks])
        for i in range(4):
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.9", 0))
            s.settimeout(10)
            s.connect((addr(0), port))
            head = (bytes([0x00, 0xCE, 0xF7, 0x85, 0x3C, 0x01]) + (1).to_bytes(8, "little") +
                    b"k" + (60 << 20).to_bytes(8, "little"))
            try:
                s.sendall(head + bytes(8 << 20))
            except OSError:
                pass  # closed while sending
        first.wait_line(r"refused a client from 127\.0\.0\.9:\d+: it announced a frame over "
                        r"256 bytes")
        self.assertTrue(served(addr(0), port, "127.0.0.1"))  # every frame was read by now
        # open, their 32 MiB would be held (unless closed at the announce)
        self.assertLess(rss_kib(first.pid) - before, 16 << 10, first.text())
        first.signal(signal.SIGTERM)
        first.wait()

    def test_the_limit_on_open_files_is_raised(self):
        argv = (["sh", "-c", 'ulimit -S -n 200 && exec "$0" "$@"', DDPLAUNCH,
                 "--nproc_per_node=1", WORKER, "forever"])
        first = self.cluster.start("node0", argv, {"DDP_LOG_LEVEL": "debug"})
        first.wait_line(r"raised the limit on open files \(ulimit -n\) from 200 to the hard "
                        r"limit")
        first.wait_line(r"MNW ")
        with open("/proc/%d/limits" % first.pid) as f:
            row = [line.split() for line in f if line.startswith("Max open files")][0]
        self.assertEqual(row[3], row[4])  # soft == hard
        first.signal(signal.SIGTERM)
        first.wait()

    def test_no_token_says_so(self):
        first = self.cluster.agent(0, self.c10d(2, 0, extra=[fast_conf(join_timeout=1)]))
        _, m = first.wait_line(r"hosting the rendezvous store at (\S+)")
        self.assertIn("no token", m.string)
        self.assertEqual(m.group(1).rsplit(":", 1)[0], addr(0))  # that address only


class NetnsCase(MultiNodeCase):
    """Nodes in network namespaces of their own (netns.py)."""
    NODES = 3

    def setUp(self):
        super().setUp()
        self.hosts = netns.Hosts(self.NODES)
        self.addCleanup(self.hosts.close)

    def ns_agent(self, i, args, worker=("forever",), env=None):
        argv = [DDPLAUNCH, "--local_addr=" + self.hosts.addr(i)] + list(args)
        if worker is not None:
            argv += [WORKER] + list(worker)
        return self.cluster.start("ns%d" % i, self.hosts.wrap(i, argv), env)

    def ns_c10d(self, nnodes, port, extra=()):
        return ["--nnodes=%s" % nnodes, "--rdzv_backend=c10d",
                "--rdzv_endpoint=%s:%d" % (self.hosts.addr(0), port), "--rdzv_id=job"] + list(extra)


class Partition(NetnsCase):
    def test_partition_caught_by_heartbeats(self):
        conf = fast_conf(keep_alive_interval=0.5, keep_alive_max_attempt=2, join_timeout=6)
        first = self.ns_agent(0, self.ns_c10d("2:3", 0, [conf]))
        port = self.host_port(first)
        nodes = [first] + [self.ns_agent(i, self.ns_c10d("2:3", port, [conf])) for i in (1, 2)]
        for p in nodes:
            p.wait_line(r"MNW .*groups=3")
        t_cut = time.monotonic()
        self.hosts.partition(2)
        # the others: no closed connection tells them; heartbeats do
        for p in nodes[:2]:
            t_run, _ = p.wait_line(r"MNW .*groups=2", after=t_cut, timeout=15)
            self.assertLess(t_run - t_cut, 5.0, p.text())
        # the cut-off node loses the store and says which, tries to rejoin
        # until its join deadline (a pause would have ended), then fails
        t_lost, _ = nodes[2].wait_line(r"lost the store at .*rejoins run id 'job'",
                                       after=t_cut, timeout=10)
        self.assertLess(t_lost - t_cut, 3.0, nodes[2].text())
        rc, t_end = nodes[2].wait(15)
        self.assertNotEqual(rc, 0)
        self.assertLess(t_end - t_lost, 6.0 + 3.0, nodes[2].text())
        self.assertIn("%s:%d" % (self.hosts.addr(0), port), nodes[2].text())
        for p in nodes[:2]:
            p.signal(signal.SIGTERM)
            p.wait()


class Transports(NetnsCase):
    """libddp across hosts that do not share a loopback: the ring and the
    hierarchical transport must publish the node's own address."""
    NODES = 2

    def ddp_job(self, transport):
        env = {"DDP_CPU_TRANSPORT": transport, "DDP_TIMEOUT_MS": "20000"}
        argv = lambda i, port: ([DDPLAUNCH, "--local_addr=" + self.hosts.addr(i),
                                 "--nproc_per_node=2"] + self.ns_c10d(2, port) +
                                [DDP_HELPER])
        first = self.cluster.start("ns0", self.hosts.wrap(0, argv(0, 0)), env)
        port = self.host_port(first)
        second = self.cluster.start("ns1", self.hosts.wrap(1, argv(1, port)), env)
        self.assert_all_exit([first, second], timeout=60)

    def test_ring_across_hosts(self):
        self.ddp_job("ring")

    def test_hierarchical_across_hosts(self):
        self.ddp_job("hier")


if __name__ == "__main__":
    if any(a in ("Partition", "Transports") for a in sys.argv[1:]) and netns.available():
        print("skipped: " + netns.available())
        sys.exit(77)
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
