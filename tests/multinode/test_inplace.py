"""Workers resized in place (issue 16, section 1): a libddp worker tells its
agent in ddp_init that it can be resized; when a node dies, the survivors'
agents join the next round without stopping their workers and hand them the
new round over the agent channel; the workers re-form (ddp_next_round,
ddp_reform) and go on in the same processes.

Simulated nodes on 127.0.0.2-5 (mnlib.py), mn_inplace as the worker, or
ddp-train with a fixed global batch (the final model byte-identical to a
1-rank run). Plain workers are still restarted: test_mixed_job here (one
worker of a node), test_multinode.py's Failures and Elastic (mn_worker).
"""
import json
import os
import re
import signal
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "worker", "train"))
import train_it  # noqa: E402
from mnlib import (DDP_RDZVD, DDPLAUNCH, MultiNodeCase, children, descendants,  # noqa: E402
                   fast_conf, wait_for)

INPLACE = os.environ.get("MN_INPLACE", "mn_inplace")
DDP_TRAIN = os.environ.get("DDP_TRAIN", "ddp-train")
TRAIN_ENV = {"OPENBLAS_NUM_THREADS": "1", "DDP_TIMEOUT_MS": "60000", "DDP_BACKEND": "cpu"}
LINE_RE = re.compile(r"INPLACE (\w+) (.*)$")


def inplace_lines(proc, kind):
    out = []
    with proc.cond:
        for t, line in proc.lines:
            m = LINE_RE.search(line)
            if m and m.group(1) == kind:
                d = dict(kv.split("=", 1) for kv in m.group(2).split())
                d["t"] = t
                d["line"] = line
                out.append(d)
    return out


class InPlace(MultiNodeCase):
    STEPS = 400
    STEP_MS = 20

    def start_job(self, prog, n=3, nproc=2, env=None, envs=None, restarts=0, max_nodes=None,
                  endpoint=None):
        """The job on n nodes; node 0 hosts the store, or every node meets
        at `endpoint` (a standalone ddp-rdzvd's host:port)."""
        base = ["--nproc_per_node=%d" % nproc, "--nnodes=2:%d" % (max_nodes or n),
                "--rdzv_backend=c10d",
                "--rdzv_id=job", fast_conf(), "--max_restarts=%d" % restarts]

        def logs(i):
            return ["--log_dir=" + os.path.join(self.dir, "logs%d" % i)]
        envs = envs or [env] * n
        if endpoint:
            return [self.cluster.agent(i, base + logs(i) + ["--rdzv_endpoint=" + endpoint] +
                                       prog, worker=None, env=envs[i]) for i in range(n)]
        first = self.cluster.agent(0, base + logs(0) + ["--rdzv_endpoint=127.0.0.2:0"] + prog,
                                   worker=None, env=envs[0])
        port = self.host_port(first)
        self.port = port
        return [first] + [
            self.cluster.agent(i, base + logs(i) + ["--rdzv_endpoint=127.0.0.2:%d" % port] +
                               prog, worker=None, env=envs[i]) for i in range(1, n)]

    def summary(self, i):
        found = [os.path.join(d, "summary.json")
                 for d, _, files in os.walk(os.path.join(self.dir, "logs%d" % i))
                 if "summary.json" in files]
        self.assertEqual(len(found), 1, found)
        with open(found[0]) as f:
            return json.load(f)

    def kill_node(self, node, pids):
        node.p.kill()  # the agent, then its workers: the whole node
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def start_nodes(self, n=3, nproc=2, envs=None):
        nodes = self.start_job([INPLACE, str(self.STEPS), str(self.STEP_MS)], n, nproc,
                               envs=envs)
        for p in nodes:
            wait_for(lambda: len([d for d in inplace_lines(p, "start")
                                  if d["world"] == str(n * nproc)]) == nproc, 30,
                     "%s's workers" % p.name)
        return nodes

    def wait_running(self, nodes, nproc=2):
        """Until every node's nproc workers started and node 0's went past
        its first steps (INPLACE progress)."""
        for p in nodes:
            wait_for(lambda: len(inplace_lines(p, "start")) == nproc, 30,
                     "%s's workers" % p.name)
        nodes[0].wait_line(r"INPLACE progress", timeout=30)

    def test_node_killed_survivors_stay(self):
        nodes = self.start_nodes()
        # mid-run: the job has made an eighth of its steps
        nodes[0].wait_line(r"INPLACE progress", timeout=30)
        # the middle node: the last node's workers get new ranks
        victim, survivors = nodes[1], [nodes[0], nodes[2]]
        victim_pids = [int(d["pid"]) for d in inplace_lines(victim, "start")]
        t_kill = time.monotonic()
        self.kill_node(victim, victim_pids)
        for p in survivors:
            rc, _ = p.wait(timeout=60)
            self.assertEqual(rc, 0, p.text())
        for p in survivors:
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
            print("%s: re-formed in place %.3f s after the kill" % (p.name, t_re - t_kill))
            self.assertLess(t_re - t_kill, 8.0, text)
            # the console prefix follows the new rank
            for d in reformed + done:
                self.assertIn("[rank %s]: INPLACE" % d["rank"], d["line"])
        ranks = sorted(int(d["rank"]) for p in survivors for d in inplace_lines(p, "done"))
        self.assertEqual(ranks, [0, 1, 2, 3])
        # the end summary and summary.json list the re-formation; it used
        # no restart (--max_restarts=0 and the job succeeded)
        for i, p in ((0, nodes[0]), (2, nodes[2])):
            self.assertIn("1 re-formation(s) in place", p.text())
            s = self.summary(i)
            self.assertEqual(s["exit_code"], 0)
            self.assertEqual(len(s["reformations"]), 1, s)
            r = s["reformations"][0]
            self.assertEqual((r["world_before"], r["world_after"], r["nodes"]), (6, 4, 2), r)
            self.assertIn("is gone", r["why"])
            self.assertLess(r["waited_s"], 8.0)

    def test_two_nodes_killed_one_after_the_other(self):
        # 4 nodes x 1 rank, two killed in turn: two re-formations in place, 4 -> 3 -> 2
        self.STEPS = 600
        nodes = self.start_nodes(n=4, nproc=1)
        nodes[0].wait_line(r"INPLACE progress", timeout=30)
        pids = {p.name: inplace_lines(p, "start")[0]["pid"] for p in nodes}
        for victim, world in ((nodes[3], "3"), (nodes[1], "2")):
            t_kill = time.monotonic()
            self.kill_node(victim, [int(pids[victim.name])])
            for p in (nodes[0], nodes[2]):
                p.wait_line(r"INPLACE reformed .*world=%s " % world, timeout=30, after=t_kill)
        self.assert_all_exit([nodes[0], nodes[2]], timeout=60)
        for i in (0, 2):
            p = nodes[i]
            self.assertEqual([d["pid"] for d in inplace_lines(p, "done")], [pids[p.name]],
                             p.text())
            self.assertEqual(inplace_lines(p, "done")[0]["reforms"], "2", p.text())
            s = self.summary(i)
            self.assertEqual([(r["world_before"], r["world_after"])
                              for r in s["reformations"]], [(4, 3), (3, 2)], s)

    def test_node_joins_in_place(self):
        # a node that joins: the running workers stay and re-form with the
        # new node's fresh process, which catches up (mn_inplace agrees on
        # the step by a MAX all-reduce; ddp-train hands its state over)
        self.STEPS = 300
        prog = [INPLACE, str(self.STEPS), str(self.STEP_MS)]
        nodes = self.start_job(prog, n=2, nproc=1, max_nodes=3)
        for p in nodes:
            p.wait_line(r"INPLACE start .*world=2 ", timeout=30)
        nodes[0].wait_line(r"INPLACE progress", timeout=30)
        pids = {p.name: inplace_lines(p, "start")[0]["pid"] for p in nodes}
        base = ["--nproc_per_node=1", "--nnodes=2:3", "--rdzv_backend=c10d", "--rdzv_id=job",
                fast_conf(), "--max_restarts=0", "--rdzv_endpoint=127.0.0.2:%d" % self.port,
                "--log_dir=" + os.path.join(self.dir, "logs2")]
        nodes.append(self.cluster.agent(2, base + prog, worker=None))
        self.assert_all_exit(nodes, timeout=60)
        for i, p in enumerate(nodes[:2]):
            text = p.text()
            self.assertNotIn("stopping this node's workers", text)
            self.assertEqual([d["pid"] for d in inplace_lines(p, "start")], [pids[p.name]],
                             text)
            self.assertEqual([d["world"] for d in inplace_lines(p, "reformed")], ["3"], text)
            done = inplace_lines(p, "done")
            self.assertEqual([(d["pid"], d["world"], d["steps"]) for d in done],
                             [(pids[p.name], "3", str(self.STEPS))], text)
            r = self.summary(i)["reformations"]
            self.assertEqual([(x["world_before"], x["world_after"]) for x in r], [(2, 3)], r)
            self.assertIn("joined", r[0]["why"])
        new = nodes[2]
        self.assertEqual([d["world"] for d in inplace_lines(new, "start")], ["3"], new.text())
        self.assertEqual([d["steps"] for d in inplace_lines(new, "done")], [str(self.STEPS)])

    def test_worker_killed_replaced_alone(self):
        # one worker killed on a node that is otherwise fine: only it is
        # started again; every other worker of the job re-forms in place
        # without it at once (a round of 5), and with the new process once
        # it is ready (issue 24: a round of 6 that it joins); the
        # replacement is counted against --max_restarts on its node only
        self.STEPS = 500
        nodes = self.start_job([INPLACE, str(self.STEPS), str(self.STEP_MS)], restarts=1)
        self.wait_running(nodes)
        before = {p.name: {d["pid"] for d in inplace_lines(p, "start")} for p in nodes}
        victim = inplace_lines(nodes[1], "start")[0]
        t_kill = time.monotonic()
        os.kill(int(victim["pid"]), signal.SIGKILL)
        self.assert_all_exit(nodes, timeout=60)
        text = "\n".join(p.text() for p in nodes)
        self.assertIn("replacing it alone", nodes[1].text())
        self.assertNotIn("stopping this node's workers", text)
        for p in nodes:
            kept = before[p.name] - {victim["pid"]}
            done = {d["pid"] for d in inplace_lines(p, "done")}
            self.assertTrue(kept <= done, p.text())
            self.assertEqual({d["pid"] for d in inplace_lines(p, "reformed")
                              if d["t"] >= t_kill}, kept, p.text())
            self.assertTrue(all(d["world"] == "6" and d["steps"] == str(self.STEPS)
                                for d in inplace_lines(p, "done")), p.text())
        fresh = [d for d in inplace_lines(nodes[1], "start") if d["t"] >= t_kill]
        self.assertEqual(len(fresh), 1, nodes[1].text())
        self.assertEqual(fresh[0]["rank"], victim["rank"])
        self.assertNotEqual(fresh[0]["pid"], victim["pid"])
        self.assertIn("its replacement starts outside the rounds", nodes[1].text())
        r = self.summary(1)["reformations"]
        self.assertEqual([(x["world_before"], x["world_after"], x["replaced"]) for x in r],
                         [(6, 5, 0), (5, 6, 1)], r)
        self.assertIn("replaced alone", r[0]["why"])
        self.assertIn("replacement is ready", r[1]["why"])
        r = self.summary(0)["reformations"]
        self.assertEqual([(x["world_after"], x["replaced"]) for x in r], [(5, 0), (6, 0)], r)
        self.assertIn("is replaced", r[0]["why"])

    def test_worker_replaced_once_per_restart_allowed(self):
        # --max_restarts=1: the first death on a node is replaced alone; the
        # replacement's own death finds the node's replacements spent and is
        # a failure as before: the job's group restarts (restart 1 of 1)
        self.STEPS = 400
        nodes = self.start_job([INPLACE, str(self.STEPS), str(self.STEP_MS)], n=2, nproc=1,
                               restarts=1)
        for p in nodes:
            p.wait_line(r"INPLACE start", timeout=30)
        nodes[1].wait_line(r"INPLACE progress", timeout=30)
        first = inplace_lines(nodes[1], "start")[0]
        t1 = time.monotonic()
        os.kill(int(first["pid"]), signal.SIGKILL)
        nodes[1].wait_line(r"INPLACE start", timeout=30, after=t1)
        second = [d for d in inplace_lines(nodes[1], "start") if d["t"] >= t1][0]
        self.assertNotEqual(second["pid"], first["pid"])
        t2 = time.monotonic()
        os.kill(int(second["pid"]), signal.SIGKILL)
        self.assert_all_exit(nodes, timeout=60)
        text = nodes[1].text()
        self.assertEqual(text.count("replacing it alone"), 1, text)
        self.assertIn("stopping the other workers", text)
        self.assertIn("restart 1 of 1", nodes[0].text() + text)
        for p in nodes:
            fresh = [d for d in inplace_lines(p, "start") if d["t"] >= t2]
            self.assertEqual(len(fresh), 1, p.text())
            self.assertEqual([d["pid"] for d in inplace_lines(p, "done")], [fresh[0]["pid"]])

    def join_node(self, prog, nproc=2, max_nodes=3):
        """A node started on 127.0.0.4 that joins the running job."""
        base = ["--nproc_per_node=%d" % nproc, "--nnodes=2:%d" % max_nodes,
                "--rdzv_backend=c10d", "--rdzv_id=job", fast_conf(), "--max_restarts=0",
                "--rdzv_endpoint=127.0.0.2:%d" % self.port,
                "--log_dir=" + os.path.join(self.dir, "logs2")]
        return self.cluster.agent(2, base + prog, worker=None)

    def start_dying_job(self, sig, restarts):
        """2 nodes x 2 ranks; node 0's local rank 1 dies by `sig` at its first
        collective error, which a third node's join causes: it was handed the
        join's round and never took it. (nodes, pids at start)"""
        self.STEPS = 400
        die = {"MN_INPLACE_DIE": "1:%d" % sig, "MN_INPLACE_ONCE": os.path.join(self.dir, "died")}
        prog = [INPLACE, str(self.STEPS), str(self.STEP_MS)]
        nodes = self.start_job(prog, n=2, nproc=2, restarts=restarts, max_nodes=3,
                               envs=[die, None])
        self.wait_running(nodes)
        before = {p.name: {d["pid"] for d in inplace_lines(p, "start")} for p in nodes}
        nodes.append(self.join_node(prog))
        nodes[0].wait_line(r"INPLACE dies", timeout=30)
        return nodes, before

    def test_worker_killed_as_round_comes_replaced_alone(self):
        # issue 23: a worker killed while its agent hands out a round (here
        # a join's) was taken for a program that does not re-form, and its
        # healthy sibling was restarted with it. A death by signal is a
        # death: it alone is replaced, its sibling and the other node stay
        nodes, before = self.start_dying_job(signal.SIGKILL, restarts=1)
        self.assert_all_exit(nodes, timeout=90)
        text = nodes[0].text()
        dead = inplace_lines(nodes[0], "dies")
        self.assertEqual(len(dead), 1, text)
        self.assertIn("replacing it alone", text)
        self.assertNotIn("instead of re-forming", text)
        self.assertNotIn("stopping this node's workers", text)
        for p in nodes[:2]:
            kept = before[p.name] - {dead[0]["pid"]}
            done = {d["pid"] for d in inplace_lines(p, "done")}
            self.assertTrue(kept <= done, p.text())
            self.assertTrue(all(d["world"] == "6" and d["steps"] == str(self.STEPS)
                                for d in inplace_lines(p, "done")), p.text())
        fresh = [d for d in inplace_lines(nodes[0], "start") if d["t"] >= dead[0]["t"]]
        self.assertEqual(len(fresh), 1, text)

    def test_worker_crash_as_round_comes_charged(self):
        # issue 23: a crash while the agent hands out a round was charged as
        # nothing (taken for a worker that left instead of re-forming). With
        # no replacement left (--max_restarts=0) it is a failure: the node
        # stops its other workers for it, and the job fails (it succeeded,
        # uncharged, before)
        nodes, before = self.start_dying_job(signal.SIGSEGV, restarts=0)
        rcs = [p.wait(timeout=90)[0] for p in nodes]
        text = nodes[0].text()
        # no restart left: the job fails, the crashed rank's node with its status
        self.assertEqual(rcs[0], 128 + signal.SIGSEGV, text)
        self.assertTrue(all(rc != 0 for rc in rcs), rcs)
        self.assertEqual(self.summary(0)["exit_code"], 128 + signal.SIGSEGV)
        self.assertNotIn("instead of re-forming", text)
        self.assertNotIn("replacing it alone", text)
        self.assertRegex(text, r"rank \d+ \(local rank 1\) [^\n]*SIGSEGV[^\n]*; stopping the "
                         r"other workers")

    def test_two_workers_killed_at_once_replaced_alone(self):
        # issue 23: two nodes each losing a worker at once: each death
        # overlaps the round the other's asks for; each is replaced alone
        self.STEPS = 500
        nodes = self.start_job([INPLACE, str(self.STEPS), str(self.STEP_MS)], restarts=1)
        self.wait_running(nodes)
        before = {p.name: {d["pid"] for d in inplace_lines(p, "start")} for p in nodes}
        victims = [inplace_lines(nodes[1], "start")[0], inplace_lines(nodes[2], "start")[1]]
        for v in victims:
            os.kill(int(v["pid"]), signal.SIGKILL)
        self.assert_all_exit(nodes, timeout=90)
        for p in nodes:
            text = p.text()
            self.assertNotIn("stopping this node's workers", text)
            self.assertNotIn("instead of re-forming", text)
            kept = before[p.name] - {v["pid"] for v in victims}
            self.assertTrue(kept <= {d["pid"] for d in inplace_lines(p, "done")}, text)
            self.assertTrue(all(d["world"] == "6" and d["steps"] == str(self.STEPS)
                                for d in inplace_lines(p, "done")), text)
        for p in nodes[1:]:
            self.assertEqual(p.text().count("replacing it alone"), 1, p.text())

    def test_replacement_slow_to_start_does_not_stop_its_node(self):
        # issue 23: a replacement that has not said "resizable" yet when the
        # next round comes (a Python worker importing torch) made its node
        # stop all its workers. Since issue 24 it starts outside the rounds:
        # its sibling re-forms without it in every round until it says
        # "resizable", then it joins one
        self.STEPS = 500
        slow = os.path.join(self.dir, "slow")
        env = {"MN_INPLACE_SLOW": slow + ":4000"}
        nodes = self.start_job([INPLACE, str(self.STEPS), str(self.STEP_MS)], restarts=1,
                               env=env)
        self.wait_running(nodes)
        before = {p.name: {d["pid"] for d in inplace_lines(p, "start")} for p in nodes}
        open(slow, "w").close()  # processes started from now on wait 4 s
        victim = inplace_lines(nodes[1], "start")[0]
        t_kill = time.monotonic()
        os.kill(int(victim["pid"]), signal.SIGKILL)
        nodes[1].wait_line(r"its replacement starts outside the rounds", timeout=30,
                           after=t_kill)
        self.kill_node(nodes[2], [int(x) for x in before[nodes[2].name]])
        self.assert_all_exit(nodes[:2], timeout=90)
        text = nodes[1].text()
        self.assertNotIn("stopping this node's workers", text)
        # the node's round without its node 2 counted its sibling alone...
        self.assertRegex(text, r"re-form in place as ranks \d+-\d+ of 3 \(0 of them replaced "
                         r"alone, 0 joining from outside the rounds, 1 outside")
        # ...and a later one took the replacement in
        self.assertRegex(text, r"re-form in place as ranks \d+-\d+ of 4 \(0 of them replaced "
                         r"alone, 1 joining from outside the rounds")
        kept = before[nodes[1].name] - {victim["pid"]}
        done = {d["pid"] for d in inplace_lines(nodes[1], "done")}
        self.assertTrue(kept <= done, text)
        self.assertEqual(len(done), 2, text)
        for p in nodes[:2]:
            self.assertTrue(all(d["world"] == "4" and d["steps"] == str(self.STEPS)
                                for d in inplace_lines(p, "done")), p.text())
        self.assertEqual(before[nodes[0].name],
                         {d["pid"] for d in inplace_lines(nodes[0], "done")})

    def test_one_node_worker_replaced_alone(self):
        # one node (--standalone): the same, with the node's own store
        self.STEPS = 400
        logs = os.path.join(self.dir, "solo")
        solo = self.cluster.start("solo", [DDPLAUNCH, "--standalone", "--nproc_per_node=3",
                                           "--max_restarts=1", "--log_dir=" + logs, INPLACE,
                                           str(self.STEPS), str(self.STEP_MS)])
        wait_for(lambda: len(inplace_lines(solo, "progress")) == 3, 30, "solo's progress")
        before = {d["pid"] for d in inplace_lines(solo, "start")}
        victim = inplace_lines(solo, "start")[1]
        t_kill = time.monotonic()
        os.kill(int(victim["pid"]), signal.SIGKILL)
        self.assertEqual(solo.wait(60)[0], 0, solo.text())
        text = solo.text()
        self.assertIn("replacing it alone", text)
        fresh = [d for d in inplace_lines(solo, "start") if d["t"] >= t_kill]
        self.assertEqual([d["rank"] for d in fresh], [victim["rank"]], text)
        done = {d["pid"] for d in inplace_lines(solo, "done")}
        self.assertEqual(done, (before - {victim["pid"]}) | {fresh[0]["pid"]}, text)
        self.assertTrue(all(d["world"] == "3" and d["steps"] == str(self.STEPS)
                            for d in inplace_lines(solo, "done")), text)
        self.assertIn("1 re-formation(s) in place", text)

    def test_one_node_long_master_addr(self):
        # the store's address as the round hands it is 187 bytes (a long
        # spelling of 127.0.0.1, as a Kubernetes headless-service name is
        # long), with digits past byte 63: the survivor hears the round
        # whole (the old channel cut the address at 63 bytes and shifted
        # the fields after it) and re-forms in place
        addr = "0177." + "0" * 60 + "." + "0" * 60 + "." + "0" * 58 + "01"
        self.STEPS = 300
        solo = self.cluster.start("solo", [DDPLAUNCH, "--nnodes=1", "--nproc_per_node=2",
                                           "--master_addr=" + addr, "--master_port=0",
                                           "--max_restarts=1", INPLACE, str(self.STEPS),
                                           str(self.STEP_MS)])
        wait_for(lambda: len(inplace_lines(solo, "progress")) == 2, 30, "solo's progress")
        victim = inplace_lines(solo, "start")[0]
        os.kill(int(victim["pid"]), signal.SIGKILL)
        self.assertEqual(solo.wait(60)[0], 0, solo.text())
        self.assertIn("1 re-formation(s) in place", solo.text())
        self.assertEqual(len(inplace_lines(solo, "reformed")), 1, solo.text())
        self.assertTrue(all(d["world"] == "2" and d["steps"] == str(self.STEPS)
                            for d in inplace_lines(solo, "done")), solo.text())

    def test_failure_that_repeats_not_replaced(self):
        # a worker that exits 78 (its failure would repeat) is not replaced:
        # its node leaves the job (exit 78), and the others re-form in place
        # without it, as for any node that leaves
        self.STEPS = 400
        nodes = self.start_job([INPLACE, str(self.STEPS), str(self.STEP_MS)], n=3, nproc=1,
                               restarts=2, envs=[{"MN_INPLACE_PERMANENT": "1"}] * 3)
        for p in nodes:  # group ranks go by arrival: find the node of rank 1
            p.wait_line(r"INPLACE start", timeout=30)
        victim = [p for p in nodes if inplace_lines(p, "start")[0]["rank"] == "1"][0]
        others = [p for p in nodes if p is not victim]
        rc, _ = victim.wait(timeout=60)
        self.assertEqual(rc, 78, victim.text())
        self.assertNotIn("replacing it alone", victim.text())
        self.assertIn("will repeat", victim.text())
        self.assert_all_exit(others, timeout=60)
        for p in others:
            self.assertEqual([(d["world"], d["steps"]) for d in inplace_lines(p, "done")],
                             [("2", str(self.STEPS))], p.text())
            self.assertEqual(len({d["pid"] for d in inplace_lines(p, "start")}), 1, p.text())

    def test_program_without_next_round_restarted_uncharged(self):
        # a libddp program that exits on a collective error (it never calls
        # ddp_next_round) although libddp said "resizable": its node's
        # workers start again in the next round, as before, and no restart
        # is charged (--max_restarts=0, and the job succeeds)
        exiting = {"MN_INPLACE_EXIT": "1"}
        nodes = self.start_nodes(envs=[exiting, exiting, exiting])
        nodes[0].wait_line(r"INPLACE progress", timeout=30)
        before = {p.name: {d["pid"] for d in inplace_lines(p, "start")} for p in nodes}
        t_kill = time.monotonic()
        self.kill_node(nodes[2], [int(x) for x in before[nodes[2].name]])
        self.assert_all_exit(nodes[:2], timeout=60)
        for p in nodes[:2]:
            text = p.text()
            self.assertIn("instead of re-forming in place", text)
            fresh = {d["pid"] for d in inplace_lines(p, "start") if d["t"] >= t_kill}
            self.assertEqual(len(fresh), 2, text)
            self.assertEqual({d["pid"] for d in inplace_lines(p, "done")}, fresh, text)
            self.assertTrue(all(d["world"] == "4" for d in inplace_lines(p, "done")), text)

    def test_bogus_took_not_believed(self):
        # every worker says "took 2147483647" (a round never sent) at its
        # start, then exits on a collective error: the agent believes only
        # the round it sent, so these are still workers that skipped their
        # round: restarted in the next round, uncharged (--max_restarts=0,
        # and the job succeeds); before, the bogus round counted as taken
        # and the exits were charged failures
        bogus = {"MN_INPLACE_EXIT": "1", "MN_INPLACE_BOGUS_TOOK": "1"}
        nodes = self.start_nodes(envs=[bogus, bogus, bogus])
        nodes[0].wait_line(r"INPLACE progress", timeout=30)
        before = {p.name: {d["pid"] for d in inplace_lines(p, "start")} for p in nodes}
        t_kill = time.monotonic()
        self.kill_node(nodes[2], [int(x) for x in before[nodes[2].name]])
        self.assert_all_exit(nodes[:2], timeout=60)
        for p in nodes[:2]:
            text = p.text()
            self.assertIn("instead of re-forming in place", text)
            self.assertNotIn("restarting the worker group", text)
            fresh = {d["pid"] for d in inplace_lines(p, "start") if d["t"] >= t_kill}
            self.assertEqual(len(fresh), 2, text)
            self.assertEqual({d["pid"] for d in inplace_lines(p, "done")}, fresh, text)

    def test_mixed_job(self):
        # node 1 runs one worker that never says it can be resized: that
        # node's group is restarted as before, node 0's stays, and the new
        # processes meet the survivors in the same round
        plain = {"MN_INPLACE_PLAIN": "1"}  # local rank 1
        nodes = self.start_nodes(envs=[None, plain, None])
        said = sorted(d["resizable"] for d in inplace_lines(nodes[1], "start"))
        self.assertEqual(said, ["0", "1"])
        nodes[0].wait_line(r"INPLACE progress", timeout=30)
        before = {p.name: {d["pid"] for d in inplace_lines(p, "start")} for p in nodes}
        t_kill = time.monotonic()
        self.kill_node(nodes[2], [int(x) for x in before[nodes[2].name]])
        self.assert_all_exit(nodes[:2], timeout=60)
        keep, redo = nodes[0], nodes[1]
        self.assertIn("re-form in place", keep.text())
        self.assertEqual({d["pid"] for d in inplace_lines(keep, "done")}, before[keep.name],
                         keep.text())
        self.assertIn("stopping this node's workers for the next round", redo.text())
        fresh = {d["pid"] for d in inplace_lines(redo, "start") if d["t"] >= t_kill}
        self.assertEqual(len(fresh), 2, redo.text())
        self.assertFalse(fresh & before[redo.name])
        self.assertEqual({d["pid"] for d in inplace_lines(redo, "done")}, fresh, redo.text())
        self.assertTrue(all(d["world"] == "4" for p in nodes[:2]
                            for d in inplace_lines(p, "done")))

    def start_train(self, steps, restarts=0, endpoint=None, extra=()):
        """ddp-train with a fixed global batch (train_it.shard_jobs' synthetic
        job) run by 1 rank undisturbed, then started on 3 nodes x 2 ranks and
        waited for until step 100: (reference dir, run dir, nodes)."""
        ref, run = os.path.join(self.dir, "ref"), os.path.join(self.dir, "run")
        metrics = self.metrics = os.path.join(self.dir, "metrics.jsonl")

        def args(ckdir):
            return [a for a in train_it.synthetic_args(ckdir, 8, steps) if a != "--sync_bn"] + [
                "--held_out", "0.1", "--global_batch_size", "48", "--virtual_shards", "8",
                "--device", "cpu"] + list(extra)
        solo = self.cluster.start("solo", [DDPLAUNCH, "--standalone", "--nproc_per_node=1",
                                           DDP_TRAIN] + args(ref), TRAIN_ENV)
        self.assertEqual(solo.wait(300)[0], 0, solo.text())
        prog = self.train_prog = [DDP_TRAIN] + args(run) + ["--metrics", metrics,
                                                            "--log_every", "25"]
        nodes = self.start_job(prog, env=TRAIN_ENV, restarts=restarts, endpoint=endpoint)

        def step_reached():
            try:
                with open(metrics) as f:
                    recs = [json.loads(line) for line in f if line.endswith("\n")]
            except FileNotFoundError:
                return False
            return any(r.get("kind") == "train" and r.get("step", 0) >= 100 for r in recs)

        wait_for(step_reached, 120, "step 100 of the 6-rank run")
        return ref, run, nodes

    def assert_same_bits(self, ref, run):
        self.assertEqual(train_it.sha256(os.path.join(run, "final.safetensors")),
                         train_it.sha256(os.path.join(ref, "final.safetensors")),
                         "final checkpoints differ")

    def test_train_worker_killed_replaced_same_bits(self):
        # one ddp-train worker killed on a node that is otherwise fine: it
        # alone is started again, takes the training state from a peer's
        # memory (no checkpoint read), every other worker re-forms in place,
        # and the job ends with the 1-rank run's bits
        ref, run, nodes = self.start_train(600, restarts=1)
        shims = children(nodes[1].pid)
        workers = [w for s in shims for w in children(s)]
        self.assertEqual(len(workers), 2, (shims, workers))
        before = {p.name: set(descendants(p.pid)) for p in nodes}
        os.kill(workers[0], signal.SIGKILL)
        self.assert_all_exit(nodes, timeout=300)
        text = "\n".join(p.text() for p in nodes)
        self.assertIn("replacing it alone", text)
        self.assertNotIn("resumed from", text)
        self.assertNotIn("stopping this node's workers", text)
        pids = [int(m) for m in re.findall(r"re-formed in place as rank \d+ of 6 "
                                           r"\(round \d+, pid (\d+)\)", text)]
        self.assertEqual(len(pids), 5, text)
        self.assertTrue(set(pids) <= set().union(*before.values()), text)
        self.assert_same_bits(ref, run)

    def test_train_node_killed_same_bits(self):
        # ddp-train with a fixed global batch: 3 nodes x 2 ranks, one node
        # killed mid-run; the survivors redo the interrupted step as 4 ranks
        # and end with the bits of an undisturbed 1-rank run
        ref, run, nodes = self.start_train(1500)
        before = {p.name: set(descendants(p.pid)) for p in nodes}
        self.kill_node(nodes[2], before[nodes[2].name])
        self.assert_all_exit(nodes[:2], timeout=300)
        for p in nodes[:2]:
            text = p.text()
            self.assertIn("re-form in place", text)
            self.assertNotIn("stopping this node's workers", text)
            self.assertNotIn("resumed from", text)
            # the same worker processes go on: each says so with its pid
            pids = [int(m) for m in re.findall(r"re-formed in place as rank \d+ of 4 "
                                               r"\(round \d+, pid (\d+)\)", text)]
            self.assertEqual(len(pids), 2, text)
            self.assertTrue(set(pids) <= before[p.name], text)
        self.assert_same_bits(ref, run)

    def test_train_node_started_again_from_its_checkpoint_same_bits(self):
        # a checkpoint every 50 steps in the job's checkpoint_dir: node 2 is
        # killed, then started again; its workers take the survivors' state
        # from memory (a live group holds one), not the older checkpoint on
        # disk, so ddp-train's hand-over, which refuses ranks that hold
        # states more than one step apart, never meets a stale one here (a
        # guard: it passed before that refusal too)
        ref, run, nodes = self.start_train(4000, extra=("--checkpoint_every", "50"))
        before = {p.name: set(descendants(p.pid)) for p in nodes}
        self.kill_node(nodes[2], before[nodes[2].name])
        for p in nodes[:2]:
            wait_for(lambda: "re-formed in place as rank" in p.text(), 60,
                     "%s's workers re-formed without node 2" % p.name)
        base = ["--nproc_per_node=2", "--nnodes=2:3", "--rdzv_backend=c10d", "--rdzv_id=job",
                fast_conf(), "--max_restarts=0", "--log_dir=" + os.path.join(self.dir, "logs2b"),
                "--rdzv_endpoint=127.0.0.2:%d" % self.port]
        again = self.cluster.agent(2, base + self.train_prog, worker=None, env=TRAIN_ENV,
                                   name="node2-again")
        self.assert_all_exit(nodes[:2] + [again], timeout=300)
        text = again.text()
        self.assertNotIn("resumed from", text)
        self.assertIn("took the training state from rank", text)
        self.assertNotIn("a hand-over takes at most one step", text)
        self.assert_same_bits(ref, run)

    def test_train_rank0_node_killed_same_bits(self):
        # the store on a standalone ddp-rdzvd (no node hosts it), and the
        # node whose worker is rank 0 killed: a survivor becomes rank 0 in
        # place and takes up its duties (the metrics file, the checkpoints,
        # the final save); the job ends with the 1-rank run's bits, and no
        # restart is charged (--max_restarts=0 and the job succeeds)
        d = self.cluster.start("rdzvd", [DDP_RDZVD, "--host", "127.0.0.1", "--port", "0"])
        _, m = d.wait_line(r"listening on \S+:(\d+)")
        ref, run, nodes = self.start_train(1500, endpoint="127.0.0.1:" + m.group(1))
        rank0 = [p for p in nodes if "[rank 0]:" in p.text()]
        self.assertEqual(len(rank0), 1, [p.text() for p in nodes])
        survivors = [p for p in nodes if p is not rank0[0]]
        before = {p.name: set(descendants(p.pid)) for p in nodes}
        self.kill_node(rank0[0], before[rank0[0].name])
        t_kill = time.time()  # after: the old rank 0 writes nothing later
        self.assert_all_exit(survivors, timeout=300)
        text = "\n".join(p.text() for p in survivors)
        self.assertIn("re-form in place", text)
        self.assertNotIn("stopping this node's workers", text)
        self.assertNotIn("resumed from", text)
        self.assertNotIn("restart 1", text)
        pids = re.findall(r"re-formed in place as rank (\d+) of 4 \(round \d+, pid (\d+)\)",
                          text)
        self.assertEqual(sorted(r for r, _ in pids), ["0", "1", "2", "3"], text)
        self.assertTrue({int(p) for _, p in pids} <= set().union(*before.values()), text)
        # the new rank 0 wrote the metrics from the re-formation to the end
        with open(self.metrics) as f:
            recs = [json.loads(line) for line in f]
        after = [r for r in recs if r["kind"] == "train" and r["time"] > t_kill]
        self.assertTrue(after and all(r["world"] == 4 for r in after), recs[-5:])
        self.assertEqual(after[-1]["step"], 1500)
        self.assert_same_bits(ref, run)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
