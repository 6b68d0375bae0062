"""ddp-train and PyTorch across simulated nodes (ddplaunch agents on
127.0.0.2, 127.0.0.3 with --local_addr; c10d, node 0 hosting):

  Train.test_equivalence_2x2     2 nodes x 2 ranks == 1 node x 4 ranks within
                                 1e-5 after 100 steps (train_it.py's check)
  Train.test_agent_killed_resumes  kill -9 of node 1's agent in the middle of
                                 training; a new agent on that node joins, the
                                 group resumes from the last checkpoint and
                                 ends with a final checkpoint byte-identical
                                 to an uninterrupted 2 x 2 run
  Torch.test_gloo_2_nodes        a gloo job (init, all-reduce, DDP steps)
  Torch.test_gloo_after_node_death  3 nodes; one dies; the smaller world's
                                 fresh workers get through process-group
                                 set-up and all-reduce (torchrun's do not)
  Torch.test_node_killed_not_charged_c10d, _etcd  3 nodes, --max_restarts=0,
                                 one killed with kill -9 (agent and workers;
                                 on c10d the workers first, the agent frozen
                                 until a survivor's worker has failed): the
                                 survivors' gloo workers fail on the dead peer
                                 before the store tells, that failure is not
                                 charged, and the job goes on in a world of 2
                                 within the backend's delay in telling a death
                                 (etcd: the lease's TTL), not
                                 last_call_timeout (30 s here)

  test_train_nodes.py CLASS   (Torch: under the interpreter whose torch to test)
"""
import os
import re
import signal
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "worker", "train"))
sys.path.insert(0, os.path.join(HERE, "..", "rendezvous", "etcd"))
import etcd_cluster  # noqa: E402
import train_it  # noqa: E402
from mnlib import DDPLAUNCH, MultiNodeCase, fast_conf, wait_for  # noqa: E402

DDP_TRAIN = os.environ.get("DDP_TRAIN", "ddp-train")
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))
TORCH_PYTHON = sys.executable  # with_torch.sh runs this file under the torch to test
TRAIN_ENV = {"OPENBLAS_NUM_THREADS": "1", "DDP_TIMEOUT_MS": "60000"}
LEASE_TTL_S = 3  # rendezvous/driver/rdzv_etcd_int.h
WORKER_FAILED = r"rank \d+ \(local rank 0\) .*stopping the other workers"


class Train(MultiNodeCase):
    def start_train(self, i, port, base, env, train_args, name):
        argv = base + self.c10d(2, port) + [DDP_TRAIN] + train_args + ["--device", "cpu"]
        return self.cluster.agent(i, argv, None, env, name=name)

    def run_two(self, train_args, extra=(), tag="run"):
        env = dict(TRAIN_ENV)
        base = ["--nproc_per_node=2", "--grace_period=5"] + list(extra)
        first = self.start_train(0, 0, base, env, train_args, tag + "0")
        port = self.host_port(first)
        second = self.start_train(1, port, base, env, train_args, tag + "1")
        return [first, second], port, base, env

    def test_equivalence_2x2(self):
        one, many = os.path.join(self.dir, "one"), os.path.join(self.dir, "many")
        solo = self.cluster.start("solo", [DDPLAUNCH, "--standalone", "--nproc_per_node=4",
                                           DDP_TRAIN] + train_it.synthetic_args(one, 8) +
                                  ["--device", "cpu"], TRAIN_ENV)
        self.assertEqual(solo.wait(300)[0], 0, solo.text())
        nodes, _, _, _ = self.run_two(train_it.synthetic_args(many, 8))
        self.assert_all_exit(nodes, timeout=300)
        ta, ma = train_it.read_st(os.path.join(many, "final.safetensors"))
        tb, mb = train_it.read_st(os.path.join(one, "final.safetensors"))
        self.assertEqual(set(ta), set(tb))
        self.assertEqual((ma["step"], mb["step"]), ("100", "100"))
        name, rel = train_it.max_rel_diff(ta, tb, "optimizer.")
        print("2 nodes x 2 ranks vs 1 node x 4 ranks: max relative difference %.3g (%s)" %
              (rel, name))
        self.assertLessEqual(rel, 1e-5, name)

    def test_agent_killed_resumes(self):
        steps, every = 150, 10
        extra = ["--max_steps", str(steps), "--checkpoint_every", str(every)]
        base_dir, faulty_dir = os.path.join(self.dir, "base"), os.path.join(self.dir, "faulty")
        nodes, _, _, _ = self.run_two(train_it.digits_args(self, base_dir, extra), tag="base")
        self.assert_all_exit(nodes, timeout=300)
        nodes, port, base, env = self.run_two(train_it.digits_args(self, faulty_dir, extra),
                                              extra=["--max_restarts=1"], tag="faulty")
        # after the first checkpoint, at a moment of the test's choosing
        latest = os.path.join(faulty_dir, "latest.safetensors")
        wait_for(lambda: os.path.exists(latest) or not nodes[0].alive(), 120,
                 "the first checkpoint")
        self.assertTrue(nodes[0].alive(), nodes[0].text())
        os.kill(nodes[1].pid, signal.SIGKILL)
        nodes[1].wait(30)
        again = self.start_train(1, port, base, env,
                                 train_it.digits_args(self, faulty_dir, extra), "again1")
        self.assert_all_exit([nodes[0], again], timeout=300)
        self.assertIn("resumed from", nodes[0].text() + again.text())
        with open(os.path.join(base_dir, "final.safetensors"), "rb") as f:
            a = f.read()
        with open(os.path.join(faulty_dir, "final.safetensors"), "rb") as f:
            b = f.read()
        self.assertEqual(a, b, "final checkpoints differ")

    # train_it.digits_args reads env.source
    source = SOURCE


class Torch(MultiNodeCase):
    SCRIPT = os.path.join(HERE, "mn_torch.py")

    def torch_agent(self, i, port, nnodes, extra=(), name=None, args=()):
        argv = (["--nproc_per_node=1"] + self.c10d(nnodes, port) + list(extra) + [self.SCRIPT] +
                list(args))
        env = {"PYTHON_EXEC": TORCH_PYTHON, "GLOO_SOCKET_IFNAME": "lo"}
        return self.cluster.agent(i, argv, None, env, name=name)

    def test_gloo_2_nodes(self):
        first = self.torch_agent(0, 0, 2)
        port = self.host_port(first)
        second = self.torch_agent(1, port, 2)
        self.assert_all_exit([first, second], timeout=240)
        for p in (first, second):
            self.assertRegex(p.text(), r"TORCH ok rank=\d world=2")

    def test_gloo_after_node_death(self):
        conf = fast_conf(last_call_timeout=1, join_timeout=120)
        first = self.torch_agent(0, 0, "2:3", [conf], args=["--forever"])
        port = self.host_port(first)
        nodes = [first] + [self.torch_agent(i, port, "2:3", [conf], args=["--forever"])
                           for i in (1, 2)]
        for p in nodes:
            p.wait_line(r"TORCH ready world=3", timeout=180)
        t_kill = time.monotonic()
        nodes[2].p.kill()
        for p in nodes[:2]:
            t_ok, _ = p.wait_line(r"TORCH ready world=2", after=t_kill, timeout=180)
            print("%s: world of 2 all-reducing %.1f s after the kill" % (p.name, t_ok - t_kill))
        for p in nodes[:2]:
            p.signal(signal.SIGTERM)
            p.wait(60)

    def kill_node(self, p, survivors, workers_first):
        """kill -9 of node p's agent and of its workers (PIDs from their
        TORCH ready lines); the moment of the kill. workers_first: the agent
        is frozen (SIGSTOP) first and killed only once a survivor's worker
        has failed on the dead peer, so the failure comes before the store
        can tell (on c10d a killed agent's session closes at once)."""
        pids = [int(x) for x in re.findall(r"TORCH ready .*pid=(\d+)", p.text())]
        t_kill = time.monotonic()
        if workers_first:
            p.signal(signal.SIGSTOP)
        else:
            p.p.kill()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if workers_first:
            # either survivor's worker may be the one that fails
            deadline = t_kill + 60
            while not any(re.search(WORKER_FAILED, s.text()) for s in survivors):
                self.assertLess(time.monotonic(), deadline, "no survivor's worker failed")
                try:
                    survivors[0].wait_line(WORKER_FAILED, after=t_kill, timeout=0.1)
                except AssertionError:
                    pass
            p.p.kill()
        return t_kill

    def node_killed_not_charged(self, start, bound, workers_first, **conf):
        """Three nodes, --max_restarts=0; node 2 killed. The survivors' gloo
        workers fail on the dead peer (the failure that was charged: the
        job ended with exit 1 on every node); the job must go on in a world
        of 2 within `bound` seconds of the kill."""
        # last_call_timeout stays torchrun's 30 s: a shrink must not wait it
        nodes = start(fast_conf(last_call_timeout=30, join_timeout=120, **conf))
        for p in nodes:
            p.wait_line(r"TORCH ready world=3", timeout=180)
        survivors = nodes[:2]
        t_kill = self.kill_node(nodes[2], survivors, workers_first)
        for p in survivors:
            t_round, _ = p.wait_line(r"round \d+ of run id '[^']*': node \d of 2 ", after=t_kill,
                                     timeout=60)
            t_ok, _ = p.wait_line(r"TORCH ready world=2", after=t_kill, timeout=180)
            print("%s: round of 2 formed %.1f s, its workers all-reducing %.1f s after the "
                  "kill" % (p.name, t_round - t_kill, t_ok - t_kill))
            self.assertLess(t_round - t_kill, bound, p.text())
            self.assertTrue(p.alive(), p.text())
            self.assertNotIn("no restarts left", p.text())
        # the case that was charged happened: a survivor's worker failed
        fails = [p for p in survivors if re.search(WORKER_FAILED, p.text())]
        self.assertTrue(fails, "no survivor's worker failed on the dead peer:\n" +
                        "\n".join(p.text() for p in survivors))
        for p in survivors:
            p.signal(signal.SIGTERM)
        for p in survivors:
            rc, _ = p.wait(60)
            self.assertEqual(rc, 128 + signal.SIGTERM, p.text())

    def test_node_killed_not_charged_c10d(self):
        def start(conf):
            extra = [conf, "--max_restarts=0"]
            first = self.torch_agent(0, 0, "2:3", extra, args=["--forever"])
            port = self.host_port(first)
            return [first] + [self.torch_agent(i, port, "2:3", extra, args=["--forever"])
                              for i in (1, 2)]
        # the workers die first; the frozen agent's session would last the
        # keep-alive window (2 s x 3: longer than gloo takes to fail on the
        # dead peer) but is killed once a survivor's worker has failed
        self.node_killed_not_charged(start, 10.0, True, keep_alive_interval=2)

    def test_node_killed_not_charged_etcd(self):
        why = etcd_cluster.etcd_unavailable()
        if why:
            self.skipTest("etcd cannot run here: " + why)
        etcd = etcd_cluster.EtcdCluster(1)
        etcd.start()
        self.addCleanup(etcd.stop)

        def start(conf):
            argv = ["--nproc_per_node=1", "--nnodes=2:3", "--rdzv_backend=etcd",
                    "--rdzv_endpoint=" + etcd.endpoints, "--rdzv_id=job", conf,
                    "--max_restarts=0", self.SCRIPT, "--forever"]
            env = {"PYTHON_EXEC": TORCH_PYTHON, "GLOO_SOCKET_IFNAME": "lo"}
            return [self.cluster.agent(i, argv, None, env) for i in range(3)]
        # torchrun's keep-alive (5 s x 3): the lease's TTL tells the death,
        # then a re-formation
        self.node_killed_not_charged(start, LEASE_TTL_S + 5.0, False, keep_alive_interval=5)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
