"""Unit tests of ddplaunch.torch's pure parts: the shard plan, the ledger
(no sample skipped or repeated across any re-planning), the exact sum (its
bits independent of order and of how the shards are spread), the agent
channel as a process's (the test plays the agent on a socket pair), the
hand-over's bytes; and the hand-over's refusals between two ranks of a real
gloo group in this process (threads, a TCPStore on port 0). Issue 25: the
carried states (scheduler, scaler, RNG, registered), the numeric identity
and the replica check (their pure parts, and their collectives between two
ranks). No launcher."""
import datetime
import itertools
import json
import os
import pickle
import random
import select
import socket
import subprocess
import sys
import tempfile
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import torch  # noqa: E402

import torch.distributed as dist  # noqa: E402

from ddplaunch import agent_wire  # noqa: E402
from ddplaunch.torch import Elastic, ExactSum, Ledger, shards_range  # noqa: E402
from ddplaunch.torch import channel  # noqa: E402
from ddplaunch.torch import group as grp  # noqa: E402
from ddplaunch.torch import handover  # noqa: E402
from ddplaunch.torch import errors, state_codec  # noqa: E402
from ddplaunch.torch import straggler  # noqa: E402
from ddplaunch.torch import numerics, replicas  # noqa: E402
from ddplaunch.torch.errors import HandoverRefused  # noqa: E402


class Plan(unittest.TestCase):
    def test_shards_cover_once_contiguously(self):
        for v in range(1, 17):
            for w in range(1, 20):
                seen = []
                for r in range(w):
                    first, count = shards_range(v, w, r)
                    self.assertEqual(first, len(seen), (v, w, r))
                    seen += range(first, first + count)
                self.assertEqual(seen, list(range(v)), (v, w))
                counts = [shards_range(v, w, r)[1] for r in range(w)]
                self.assertLessEqual(max(counts) - min(counts), 1)

    def test_same_split_as_c(self):
        # worker/train/shards.c: the first v % w ranks take one more
        self.assertEqual([shards_range(8, 3, r) for r in range(3)], [(0, 3), (3, 3), (6, 2)])
        self.assertEqual(shards_range(2, 4, 3), (2, 0))

    def test_bad_sizes_are_refused_naming_the_fix(self):
        with self.assertRaisesRegex(ValueError, "multiple of virtual_shards"):
            Ledger(100, 10, 3)
        with self.assertRaisesRegex(ValueError, "lower global_batch_size"):
            Ledger(5, 10, 2)


class LedgerTest(unittest.TestCase):
    def epoch_samples(self, led, epoch, worlds):
        """Every index a whole epoch uses when the world changes at random
        steps (the shards re-planned each time)."""
        rng = random.Random(epoch)
        used = []
        for s in range(epoch * led.steps_per_epoch, (epoch + 1) * led.steps_per_epoch):
            w = rng.choice(worlds)
            for r in range(w):
                for v in led.plan(r, w):
                    used += led.shard_indices(s, v).tolist()
        return used

    def test_no_sample_skipped_or_repeated_across_replanning(self):
        led = Ledger(1000, 48, 8, seed=3)
        for epoch in range(3):
            used = self.epoch_samples(led, epoch, [1, 2, 3, 5, 8, 11])
            self.assertEqual(len(used), len(set(used)))
            self.assertEqual(len(used), led.steps_per_epoch * 48)
            self.assertEqual(len(used), 1000 - 1000 % 48)

    def test_a_step_uses_the_same_samples_whatever_the_world(self):
        led = Ledger(500, 40, 8, seed=9)
        for s in (0, 7, 12, 13, 30):
            ref = torch.cat([led.shard_indices(s, v) for v in range(8)])
            for w in (1, 3, 4, 8, 10):
                got = torch.cat([led.shard_indices(s, v) for r in range(w)
                                 for v in led.plan(r, w)])
                self.assertTrue(torch.equal(got, ref), (s, w))

    def test_epochs_differ_and_the_seed_decides(self):
        a, b = Ledger(300, 30, 3, seed=1), Ledger(300, 30, 3, seed=1)
        self.assertTrue(torch.equal(a.permutation(2), b.permutation(2)))
        self.assertFalse(torch.equal(a.permutation(0), a.permutation(1)))
        self.assertFalse(torch.equal(a.permutation(0), Ledger(300, 30, 3, 2).permutation(0)))

    def test_state_round_trip_and_mismatch(self):
        a = Ledger(300, 30, 3, seed=1)
        a.step = 25
        sd = a.state_dict()
        self.assertEqual((sd["epoch"], sd["step"], sd["seed"]), (2, 25, 1))
        b = Ledger(300, 30, 3, seed=1)
        b.load_state_dict(sd)
        self.assertEqual(b.step, 25)
        with self.assertRaisesRegex(ValueError, "seed"):
            Ledger(300, 30, 3, seed=2).load_state_dict(sd)


class Exact(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.params = [torch.nn.Parameter(torch.zeros(n)) for n in (7, 33, 1)]
        self.ex = ExactSum(self.params)
        # shard gradients of very different magnitudes, with cancellation
        self.shards = [torch.randn(self.ex.total, dtype=torch.float32).double() *
                       (10.0 ** random.Random(v).randint(-6, 3)) for v in range(8)]

    def reduce(self, spread, order):
        """The sum as ranks would do it: each rank sums its shards, the
        ranks' sums are added in `order`."""
        maxima = torch.stack([self.ex.maxabs(f) for f in self.shards]).max(dim=0).values
        exps = self.ex.exponents(maxima, len(self.shards))
        per_rank = []
        for shards in spread:
            q = torch.zeros(self.ex.total, dtype=torch.int64)
            for v in shards:
                q += self.ex.quantize(self.shards[v], exps)
            per_rank.append(q)
        total = torch.zeros(self.ex.total, dtype=torch.int64)
        for r in order:
            total += per_rank[r]
        return torch.cat([g.reshape(-1) for g in self.ex.dequantize(total, exps, 8)])

    def test_bits_independent_of_spread_and_order(self):
        ref = self.reduce([range(8)], [0])
        for w in (2, 3, 5, 8):
            spread = [range(*(lambda f, c: (f, f + c))(*shards_range(8, w, r)))
                      for r in range(w)]
            for order in itertools.islice(itertools.permutations(range(w)), 24):
                got = self.reduce(spread, order)
                self.assertTrue(torch.equal(got.view(torch.int32), ref.view(torch.int32)),
                                (w, order))

    def test_precision_against_float64_mean(self):
        got = self.reduce([range(8)], [0]).double()
        exact = torch.stack(self.shards).mean(dim=0)
        # within float32's rounding of the result
        err = (got - exact).abs() / exact.abs().clamp_min(1e-30)
        self.assertLess(float(err.max()), 2 ** -23)

    def test_a_float_sum_would_depend_on_the_order(self):
        # why the exact sum: a plain float32 sum of the same shards is not
        # the same in every order (this test guards the test above)
        f = [s.float() for s in self.shards]
        sums = {tuple(sum(f[v] for v in order).tolist())
                for order in itertools.islice(itertools.permutations(range(8)), 50)}
        self.assertGreater(len(sums), 1)

    def test_non_finite_is_refused(self):
        bad = torch.tensor([1.0, float("inf"), 0.0])
        with self.assertRaisesRegex(FloatingPointError, "lower the learning rate"):
            self.ex.exponents(bad, 8)
        with self.assertRaises(FloatingPointError):
            self.ex.exponents(torch.tensor([float("nan"), 1.0, 1.0]), 8)

    def test_zero_and_missing_gradients(self):
        self.params[1].grad = torch.ones(33)
        flat = self.ex.flatten()
        self.assertEqual(float(flat[:7].abs().sum()), 0.0)
        exps = self.ex.exponents(self.ex.maxabs(flat), 1)
        self.assertEqual(exps[0], 0)
        out = self.ex.dequantize(self.ex.quantize(flat, exps), exps, 1)
        self.assertTrue(torch.equal(out[1], torch.ones(33)))


class Channel(unittest.TestCase):
    """The process's agent channel, the test as its agent: a socket pair
    whose creator (this process) is DDP_AGENT_PID, as ddplaunch is a
    worker's. Each test starts as a fresh process would (the module's
    once-per-process state reset)."""

    def setUp(self):
        channel._looked, channel._reader = False, None
        self.ours, self.theirs = socket.socketpair()
        self.env = {k: os.environ.get(k) for k in
                    ("DDP_AGENT_FD", "DDP_AGENT_PID", "WORLD_SIZE", "RANK")}
        os.environ.update(DDP_AGENT_FD=str(self.theirs.fileno()),
                          DDP_AGENT_PID=str(os.getpid()), WORLD_SIZE="1", RANK="0")

    def tearDown(self):
        self.ours.close()
        self.theirs.close()
        for k, v in self.env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        channel._looked, channel._reader = False, None

    def heard(self, timeout=2.0):
        got = b""
        while select.select([self.ours], [], [], timeout)[0]:
            b = self.ours.recv(4096)
            if not b:
                break
            got += b
            timeout = 0.2
        return got

    def elastic(self):
        model = torch.nn.Linear(2, 1)
        return Elastic(model, torch.optim.SGD(model.parameters(), lr=0.1), 8, 4, 2)

    def test_two_elastic_objects_both_hear_every_round(self):
        first, second = self.elastic(), self.elastic()
        self.assertEqual(self.heard(), b"hello 1 resizable\n")  # once per process
        r = agent_wire.Round(3, 0, 1, 0, 1, "h" * 200, 29400, 0, 1)
        self.ours.sendall(agent_wire.format(r))
        got = [e._chan.take(5.0) for e in (first, second)]
        self.assertEqual(got, [r, r])
        self.assertFalse(first._chan.pending() or second._chan.pending())

    def test_replacement_outside_the_rounds_waits_for_its_round(self):
        # DDP_AWAIT_ROUND=1 (issue 24): a replacement started while the
        # others re-form without it says "resizable" and forms nothing
        # until the agent hands it a round; then it takes that one
        keys = ("DDP_AWAIT_ROUND", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT", "GROUP_RANK", "GROUP_WORLD_SIZE", "DDP_ROUND")
        saved = {k: os.environ.get(k) for k in keys}
        os.environ.update(DDP_AWAIT_ROUND="1", WORLD_SIZE="6", RANK="3")
        try:
            made = []
            t = threading.Thread(target=lambda: made.append(self.elastic()), daemon=True)
            t.start()
            # (the thread makes its Elastic: seconds on a loaded machine)
            self.assertEqual(self.heard(timeout=60), b"hello 1 resizable\n")
            self.assertTrue(t.is_alive())  # no round yet: it waits
            self.ours.sendall(agent_wire.format(
                agent_wire.Round(3, 0, 1, 1, 1, "127.0.0.1", 29400, 0, 1)))
            t.join(60)
            self.assertEqual(len(made), 1)
            # it took round 3; then (one rank: nothing compared) where the
            # promise of a 1-rank run's bits stands, for the summary
            lines = self.heard().splitlines()
            self.assertEqual(lines[0], b"took 3")
            self.assertEqual([agent_wire.parse(x).promise for x in lines[1:]], ["kept"], lines)
            self.assertEqual((made[0].rank, made[0].world_size), (0, 1))
            self.assertNotIn("DDP_AWAIT_ROUND", os.environ)
            self.assertEqual(os.environ["DDP_ROUND"], "3")
            made[0].close()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def test_taken_once_and_hidden_from_children(self):
        view = channel.shared()
        self.assertIsNotNone(view)
        self.assertNotIn("DDP_AGENT_FD", os.environ)
        self.assertNotIn("DDP_AGENT_PID", os.environ)
        self.assertFalse(os.get_inheritable(self.theirs.fileno()))
        self.assertIs(channel.shared()._r, view._r)  # one reader
        view.took(3)
        self.assertEqual(self.heard(), b"hello 1 resizable\ntook 3\n")

    def test_own_socket_is_not_taken(self):
        mine, peer = socket.socketpair()
        try:
            os.environ.update(DDP_AGENT_FD=str(mine.fileno()), DDP_AGENT_PID=str(os.getppid()))
            self.assertIsNone(channel.shared())
            self.assertFalse(select.select([peer], [], [], 0.2)[0],
                             "wrote on the program's socket")
        finally:
            mine.close()
            peer.close()

    def test_a_later_view_sees_a_round_nobody_took(self):
        channel.shared()
        self.ours.sendall(agent_wire.format(agent_wire.Round(2, 0, 1, 0, 1, "a", 1, 0, 1)))
        late = channel.shared()
        self.assertEqual(late.take(5.0).round, 2)

    def test_a_forked_child_has_no_channel(self):
        # a DataLoader worker forked from the worker: the reader's thread is
        # the parent's, so the child gets no channel and writes nothing
        self.assertIsNotNone(channel.shared())
        self.assertEqual(self.heard(), b"hello 1 resizable\n")
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                view, el = channel.shared(), self.elastic()
                if view is None and el._chan is None:
                    code = 0
                else:
                    (view or el._chan).took(9)  # what the parent's channel must not hear
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0, "the child got a channel")
        self.assertEqual(self.heard(0.3), b"")

    def test_views_do_not_accumulate(self):
        import gc
        view = channel.shared()
        reader = view._r
        view.close()
        for _ in range(20):
            self.elastic()
        gc.collect()
        self.assertEqual(reader.views, set())
        kept = self.elastic()
        kept.close()
        kept.close()
        self.assertNotIn(kept._chan, reader.views)


def two_ranks(body0, body1, timeout=60):
    """body0(group) and body1(group) on the two ranks of a gloo group of
    this process, each in a thread; their results or exceptions, by rank."""
    t = datetime.timedelta(seconds=timeout)
    server = dist.TCPStore("127.0.0.1", 0, None, True, t, wait_for_workers=False)
    out = {}

    def run(rank, body):
        try:
            store = dist.TCPStore("127.0.0.1", server.port, 2, False, t)
            pg = grp.new_pg(store, rank, 2, "gloo", t)
            out[rank] = ("ok", body(grp.Group(pg, rank, 2, torch.device("cpu"), None)))
        except Exception as e:  # noqa: BLE001 - the test looks at it
            out[rank] = ("error", e)

    threads = [threading.Thread(target=run, args=(r, b), daemon=True)
               for r, b in enumerate((body0, body1))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout + 10)
    return out


class Marker:
    """A pickle that, loaded, writes a file: what an intruder in the round's
    group would send."""
    path = None

    def __reduce__(self):
        return (open, (self.path, "w"))


def send_raw(group, data):
    """A sender that speaks hand_over's transport (the length, then the
    bytes) with bytes of its own choosing."""
    n = torch.tensor([len(data)], dtype=torch.int64)
    group.broadcast(n, group.rank)
    group.broadcast(torch.frombuffer(bytearray(data), dtype=torch.uint8), group.rank)


class Handover(unittest.TestCase):
    def state(self):
        torch.manual_seed(3)
        model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.LayerNorm(4),
                                    torch.nn.Linear(4, 2))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.8, 0.95))
        model(torch.randn(3, 5)).sum().backward()
        opt.step()
        extra = {"bf16": torch.randn(3).to(torch.bfloat16), "empty": torch.zeros(0, 3),
                 "mask": torch.tensor([True, False]), 7: [1, 2.5, None, "x", (3, -4)],
                 "big": 1 << 70, "inf": float("inf")}
        return {"model": model.state_dict(), "optimizer": opt.state_dict(), "extra": extra,
                "ledger": {"step": 12}, "loss": None}

    def assert_same(self, a, b, path="state"):
        self.assertIs(type(a), type(b), path)
        if torch.is_tensor(a):
            self.assertEqual((a.dtype, a.shape), (b.dtype, b.shape), path)
            self.assertTrue(torch.equal(a.reshape(-1).view(torch.uint8),
                                        b.reshape(-1).view(torch.uint8)) if a.numel() else
                            True, path)
        elif isinstance(a, dict):
            self.assertEqual(list(a.keys()), list(b.keys()), path)
            for k in a:
                self.assert_same(a[k], b[k], "%s[%r]" % (path, k))
            self.assertEqual(getattr(a, "_metadata", None), getattr(b, "_metadata", None), path)
        elif isinstance(a, (list, tuple)):
            self.assertEqual(len(a), len(b), path)
            for i, (x, y) in enumerate(zip(a, b)):
                self.assert_same(x, y, "%s[%d]" % (path, i))
        else:
            self.assertEqual(a, b, path)

    def test_state_bytes_round_trip(self):
        sd = self.state()
        step, got = state_codec.decode(state_codec.encode(sd, 12))
        self.assertEqual(step, 12)
        self.assert_same(sd, got)

    def test_what_cannot_travel_is_named(self):
        with self.assertRaisesRegex(TypeError, r"state\['opt'\] is a Marker"):
            state_codec.encode({"opt": Marker()}, 0)

    def test_every_truncation_and_bad_prefix_refused(self):
        wire = state_codec.encode({"w": torch.arange(6.0).reshape(2, 3), "n": [1, 2]}, 3)
        full = state_codec.decode(wire)
        self.assertEqual(full[0], 3)
        data_start = wire.numel() - 64  # the one tensor's bytes, padded to 64
        for cut in range(data_start):
            with self.assertRaises(HandoverRefused, msg=cut):
                state_codec.decode(wire[:cut].clone())
        for i in range(16):
            bad = wire.clone()
            bad[i] ^= 0xFF
            with self.assertRaises(HandoverRefused, msg=i):
                state_codec.decode(bad)

    def test_a_header_of_wrong_types_refused(self):
        # a dtype that is no string (a list cannot even be looked up: it
        # raised TypeError, not HandoverRefused, before)
        for meta in ([], {"dtype": []}, {"dtype": {"a": 1}}, {"dtype": None}):
            header = json.dumps({"step": 1, "tree": {"w": {"t": 0}},
                                 "tensors": [meta]}).encode()
            head = state_codec.PREFIX.pack(state_codec.MAGIC, state_codec.VERSION, len(header))
            wire = torch.frombuffer(bytearray(head + header + bytes(64)), dtype=torch.uint8)
            with self.assertRaises(HandoverRefused, msg=meta):
                state_codec.decode(wire.clone())

    def test_a_pickle_is_not_run(self):
        # the intruder's bytes go through the whole hand-over: before, the
        # receiver unpickled them (torch.load, weights_only=False) and the
        # marker file appeared
        d = tempfile.mkdtemp(prefix="handover_")
        Marker.path = os.path.join(d, "pwned")
        payload = pickle.dumps({"model": Marker()})
        out = two_ranks(lambda g: send_raw(g, payload),
                        lambda g: handover.hand_over(g, 0, lambda: {}))
        self.assertFalse(os.path.exists(Marker.path), "a peer's pickle ran on the receiver")
        self.assertEqual(out[0][0], "ok", out)
        self.assertIsInstance(out[1][1], HandoverRefused, out)
        self.assertIn("hand-over refused", str(out[1][1]))

    def test_a_step_gap_is_refused_on_both_ranks(self):
        out = two_ranks(lambda g: handover.agree(g, 5), lambda g: handover.agree(g, 9))
        for r in (0, 1):
            self.assertEqual(out[r][0], "error", out)
            self.assertIsInstance(out[r][1], HandoverRefused, out)
            self.assertRegex(str(out[r][1]), r"steps 5 and 9, more than one step apart")

    def test_one_step_apart_and_a_checkpoint_newcomer_agree(self):
        out = two_ranks(lambda g: handover.agree(g, 5), lambda g: handover.agree(g, 6))
        self.assertEqual([out[r] for r in (0, 1)], [("ok", (5, 6, 1))] * 2)
        # rank 1 loaded an old checkpoint from disk: it takes the group's state
        out = two_ranks(lambda g: handover.agree(g, 40),
                        lambda g: handover.agree(g, 9, trained=False))
        self.assertEqual([out[r] for r in (0, 1)], [("ok", (9, 40, 0))] * 2)

    def test_the_receiver_refuses_a_far_step(self):
        # a sender that skips the agreement and claims step 9 to a rank at 5
        out = two_ranks(lambda g: send_raw(g, state_codec.tensor_bytes(
                            state_codec.encode({"w": torch.ones(2)}, 9))),
                        lambda g: handover.hand_over(g, 0, lambda: {}, 5))
        self.assertIsInstance(out[1][1], HandoverRefused, out)
        self.assertRegex(str(out[1][1]), r"steps 5 and 9")

    def test_hand_over_between_two_ranks(self):
        sd = self.state()
        out = two_ranks(lambda g: handover.hand_over(g, 0, lambda: sd, 12),
                        lambda g: handover.hand_over(g, 0, lambda: {}, 11))
        self.assertEqual(out[0], ("ok", None))
        self.assert_same(sd, out[1][1])


REJOIN_CHILD = """
import sys, torch
sys.path.insert(0, sys.argv[1])
from ddplaunch.torch import Elastic, ReformError
from ddplaunch.torch.errors import MembershipChanged
model = torch.nn.Linear(2, 1)
el = Elastic(model, torch.optim.SGD(model.parameters(), lr=0.1), dataset_size=8,
             global_batch_size=4, virtual_shards=2, round_timeout=0.3)
try:
    el._rejoin(MembershipChanged("a collective failed"))
except ReformError as e:
    print("ENDED", type(e).__name__, e)
"""


class Rejoin(unittest.TestCase):
    """The re-join loop's ends, told apart by class, in a process of one
    rank whose agent channel (DDP_AGENT_FD) is a socketpair held here (this
    process, the pair's creator, is its DDP_AGENT_PID)."""

    def run_child(self, close_agent_end=False, channel=True):
        env = dict(os.environ, WORLD_SIZE="1", RANK="0")
        env.pop("DDP_AGENT_FD", None)
        env.pop("DDP_AGENT_PID", None)
        argv = [sys.executable, "-c", REJOIN_CHILD, os.path.join(HERE, "..", "..", "python")]
        if not channel:
            return subprocess.run(argv, env=env, stdout=subprocess.PIPE, text=True,
                                  timeout=120).stdout
        agent, worker = socket.socketpair()
        with agent, worker:
            env["DDP_AGENT_FD"] = str(worker.fileno())
            env["DDP_AGENT_PID"] = str(os.getpid())
            p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True,
                                 pass_fds=[worker.fileno()])
            worker.close()
            if close_agent_end:
                self.assertTrue(agent.recv(64))  # the worker has said its first line
                agent.close()
            out = p.communicate(timeout=120)[0]
        return out

    def test_no_channel_is_not_resizable(self):
        self.assertRegex(self.run_child(channel=False), r"ENDED NotResizable .*restart the job")

    def test_no_round_in_time(self):
        self.assertRegex(self.run_child(), r"ENDED RoundTimeout ")

    def test_agent_gone(self):
        self.assertRegex(self.run_child(close_agent_end=True), r"ENDED AgentGone ")


class Errors(unittest.TestCase):
    def test_one_base_and_distinct_classes(self):
        import ddplaunch.torch as pkg
        names = ("NotResizable", "AgentGone", "RoundTimeout", "Superseded", "HandoverRefused",
                 "NumericMismatch", "ReplicaMismatch")
        classes = [getattr(pkg, n) for n in names]
        self.assertEqual(len(set(classes)), len(names))
        for c in classes:
            self.assertTrue(issubclass(c, pkg.ReformError), c)
        # a superseded round is a membership change: the re-join loop takes it
        self.assertTrue(issubclass(pkg.Superseded, errors.MembershipChanged))
        self.assertFalse(issubclass(pkg.RoundTimeout, errors.MembershipChanged))

    def test_no_control_flow_by_message(self):
        # errors are told apart by class: no "... in str(e)" in the package
        root = os.path.join(HERE, "..", "..", "python", "ddplaunch")
        for d, _, files in os.walk(root):
            for f in files:
                if f.endswith(".py"):
                    with open(os.path.join(d, f)) as fh:
                        text = fh.read()
                    self.assertNotRegex(text, r"in str\(|str\(\w+\)\.(find|startswith)",
                                        os.path.join(d, f))


class Straggler(unittest.TestCase):
    """The detector, with the cases of tests/worker/train/test_straggler.c:
    noise and short spikes name nobody, half speed is named (compute) after
    5 to 7 samples and cleared after recovering, a transfer that grows is
    named (link); and a rank's row of the exchange round-trips through
    float32 (what the all-reduce carries)."""
    W = 3

    def feed(self, det, rnd, per, shards, jit, xfer, extra=None):
        comp = [per[r] * shards[r] * (1 + jit * (2 * rnd.random() - 1)) for r in range(self.W)]
        slowest = max(comp)
        return det.update([(comp[r], slowest - comp[r] + xfer + (extra[r] if extra else 0),
                            shards[r]) for r in range(self.W)])

    def test_noise_names_nobody(self):
        det, rnd = straggler.Detector(self.W), random.Random(1)
        for i in range(500):
            per = [0.05 if r == (i // 25) % self.W and i % 25 < 2 else 0.01
                   for r in range(self.W)]
            self.assertEqual(self.feed(det, rnd, per, [8] * 3, 0.2, 0.005), [])

    def test_half_speed_named_then_cleared(self):
        det, rnd = straggler.Detector(self.W), random.Random(2)
        per = [0.01] * 3
        for _ in range(20):
            self.feed(det, rnd, per, [8] * 3, 0.1, 0.005)
        per[1] = 0.02
        named = next(i for i in range(40) if self.feed(det, rnd, per, [8] * 3, 0.1, 0.005))
        self.assertTrue(5 <= named <= 7, named)
        self.assertEqual(det.r[1].named, straggler.COMPUTE)
        self.assertTrue(1.7 < det.r[1].slower < 2.3, det.r[1].slower)
        self.assertIn("rank 1 (node 1, host h1) is 2.", straggler.line(30, 1, 1, "h1", det.r[1]))
        per[1] = 0.01
        cleared = next(i for i in range(40) if self.feed(det, rnd, per, [10, 5, 9], 0.1, 0.005))
        self.assertLessEqual(cleared, 7)
        self.assertEqual(det.r[1].named, straggler.NONE)

    def test_short_steps_need_half_a_second(self):
        det, rnd = straggler.Detector(self.W), random.Random(4)
        per = [0.000125] * 3
        for _ in range(20):
            self.feed(det, rnd, per, [8] * 3, 0.1, 0.0001)
        per[0] = 0.00025
        for _ in range(20):
            self.assertEqual(self.feed(det, rnd, per, [8] * 3, 0.1, 0.0001), [])
        named = next(i for i in range(20, 1000) if self.feed(det, rnd, per, [8] * 3, 0.1, 0.0001))
        self.assertTrue(200 <= named <= 300, named)

    def test_link(self):
        det, rnd = straggler.Detector(self.W), random.Random(3)
        for _ in range(10):
            self.feed(det, rnd, [0.01] * 3, [8] * 3, 0.1, 0.005)
        named = next(i for i in range(30)
                     if self.feed(det, rnd, [0.01] * 3, [8] * 3, 0.1, 0.005, [0, 0, 0.02]))
        self.assertLessEqual(named, 7)
        self.assertEqual([q.named for q in det.r], [straggler.NONE, straggler.NONE,
                                                    straggler.LINK])

    def test_row_round_trip(self):
        row = torch.zeros(straggler.ROW, dtype=torch.float32)
        vals = [0.0] * straggler.ROW
        straggler.pack(vals, (0.125, 0.0625, 7), 2, "127.0.0.4")
        row += torch.tensor(vals, dtype=torch.float32)
        self.assertEqual(straggler.unpack(row.tolist()), ((0.125, 0.0625, 7), 2, "127.0.0.4"))
        long = "n" * 60
        vals = [0.0] * straggler.ROW
        straggler.pack(vals, None, -1, long)
        self.assertEqual(straggler.unpack(vals)[1:], (-1, "n" * straggler.HOST_MAX))


class Counter:
    """A state the script registers: a count and a tensor."""

    def __init__(self):
        self.n, self.t = 0, torch.zeros(2)

    def state_dict(self):
        return {"n": self.n, "t": self.t.clone()}

    def load_state_dict(self, sd):
        self.n, self.t = sd["n"], sd["t"].clone()


def small_job(**kw):
    """A 1-rank Elastic (no launcher) on a linear model, its closure."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(32, 4), torch.randint(0, 3, (32,))
    kw = dict(kw)
    sched = kw.pop("sched", None)
    el = Elastic(model, opt, dataset_size=32, global_batch_size=8, virtual_shards=2,
                 scheduler=sched(opt) if sched else None, **kw)

    def closure(idx):
        loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        return loss
    return el, closure


class Carry(unittest.TestCase):
    def test_scheduler_rng_and_extra_travel_and_resume(self):
        import random as pyrandom
        step_lr = (lambda opt: torch.optim.lr_scheduler.StepLR(opt, 3, 0.5))
        el, closure = small_job(sched=step_lr, extra={"counter": Counter()})
        for _ in el.steps(epochs=2):  # 8 steps: Elastic steps the scheduler
            el.step(closure)
        self.assertEqual(el.optimizer.param_groups[0]["lr"], 0.1 * 0.5 ** 2)
        el._carry.extra["counter"].n = 5
        _, sd = state_codec.decode(state_codec.encode(el.state_dict(), 8))
        ahead = (torch.rand(3), pyrandom.random())
        other, _ = small_job(sched=step_lr, extra={"counter": Counter()})
        other.load_state_dict(sd)
        self.assertEqual(other._carry.scheduler.state_dict(), el._carry.scheduler.state_dict())
        self.assertEqual(other.optimizer.param_groups[0]["lr"], 0.1 * 0.5 ** 2)
        self.assertEqual(other._carry.extra["counter"].n, 5)
        self.assertEqual(other.ledger.step, 8)
        # the generators are where the sender's were
        self.assertTrue(torch.equal(torch.rand(3), ahead[0]))
        self.assertEqual(pyrandom.random(), ahead[1])

    def test_what_cannot_be_carried_is_refused_at_construction(self):
        with self.assertRaisesRegex(TypeError, r"extra\['x'\] is a object without "
                                    r"state_dict\(\)"):
            small_job(extra={"x": object()})

        class Code(Counter):
            def state_dict(self):
                return {"fn": len}
        with self.assertRaisesRegex(TypeError, r"extra\['c'\].state_dict\(\)\['fn'\] is a "
                                    r"builtin_function_or_method; only tensors"):
            small_job(extra={"c": Code()})
        with self.assertRaisesRegex(TypeError, r"scheduler is a int without"):
            small_job(sched=lambda opt: 3)
        el, closure = small_job()
        el.register("late", Counter())
        for _ in el.steps(epochs=1):
            el.step(closure)
        with self.assertRaisesRegex(RuntimeError, "after the first step"):
            el.register("later", Counter())
        # a checkpoint without the scheduler's state
        sd = small_job()[0].state_dict()
        el, _ = small_job(sched=lambda opt: torch.optim.lr_scheduler.StepLR(opt, 3))
        with self.assertRaisesRegex(ValueError, "no scheduler"):
            el.load_state_dict(sd)

    def test_scaler_carried_and_a_non_finite_step_skipped(self):
        amp = getattr(torch, "amp", None)
        if amp is None or not hasattr(amp, "GradScaler"):
            self.skipTest("torch %s has no CPU GradScaler" % torch.__version__)
        try:
            scaler = amp.GradScaler("cpu", init_scale=2.0 ** 127, growth_interval=1)
        except (TypeError, RuntimeError) as e:
            self.skipTest("no CPU GradScaler: %s" % e)
        el, closure = small_job(scaler=scaler)
        w0 = el.model.weight.detach().clone()
        model = el.model
        x, y = torch.randn(32, 4), torch.randint(0, 3, (32,))

        def closure2(idx):
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            scaler.scale(loss * 4).backward()  # float32 overflows at 2^128
            return loss
        el.step(closure2)
        self.assertTrue(torch.equal(el.model.weight, w0))  # skipped on every rank alike
        self.assertEqual(scaler.get_scale(), 2.0 ** 126)
        self.assertEqual(el.state_dict()["scaler"]["scale"], 2.0 ** 126)
        self.assertEqual(el.ledger.step, 1)
        # a finite step goes through the scaler (unscaled: the weights move)
        scaler.update(2.0 ** 4)

        def closure3(idx):
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            scaler.scale(loss).backward()
            return loss
        el.step(closure3)
        self.assertFalse(torch.equal(el.model.weight, w0))
        other, _ = small_job(scaler=amp.GradScaler("cpu"))
        other.load_state_dict(el.state_dict())
        self.assertEqual(other._carry.scaler.get_scale(), scaler.get_scale())


class Numerics(unittest.TestCase):
    A = {"torch": "2.15.0", "threads": "1", "matmul_tf32": "False"}

    def test_differences_and_the_line_name_both_sides_and_the_fix(self):
        b = dict(self.A, threads="4", matmul_tf32="True")
        self.assertEqual(numerics.differences(self.A, b), ["threads", "matmul_tf32"])
        line = numerics.message(0, self.A, 3, b)
        self.assertIn("rank 0 has threads=1, rank 3 has threads=4: pass the same threads=", line)
        self.assertIn("rank 0 has matmul_tf32=False, rank 3 has matmul_tf32=True: set "
                      "torch.backends.cuda.matmul.allow_tf32", line)
        self.assertEqual(numerics.fingerprint(dict(self.A)), numerics.fingerprint(self.A))
        self.assertNotEqual(numerics.fingerprint(b), numerics.fingerprint(self.A))

    def test_identity_holds_what_changes_bits(self):
        ident = numerics.identity(torch.device("cpu"))
        for k in ("torch", "torch_build", "threads", "deterministic", "matmul_tf32",
                  "cudnn_tf32", "float32_matmul_precision", "cpu_capability", "blas"):
            self.assertIn(k, ident)
        self.assertEqual(ident["threads"], str(torch.get_num_threads()))

    def test_openblas_core_is_part_of_it(self):
        # where torch calls OpenBLAS (Debian's), its kernel is named
        code = ("import sys, torch; sys.path.insert(0, sys.argv[1]); from ddplaunch.torch "
                "import numerics; print(numerics.identity(torch.device('cpu'))"
                ".get('openblas_core'))")
        cores = []
        for core in ("Haswell", "Sandybridge"):
            env = dict(os.environ, OPENBLAS_CORETYPE=core)
            cores.append(subprocess.run([sys.executable, "-c", code,
                                         os.path.join(HERE, "..", "..", "python")], env=env,
                                        stdout=subprocess.PIPE, text=True, check=True,
                                        timeout=120).stdout.strip())
        if cores[0] == "None":
            self.skipTest("this torch does not use OpenBLAS")
        self.assertEqual(cores, ["Haswell", "Sandybridge"])

    def test_compare_between_two_ranks(self):
        b = dict(self.A, threads="2")
        out = two_ranks(lambda g: numerics.compare(g, self.A, handover.share),
                        lambda g: numerics.compare(g, b, handover.share))
        self.assertEqual(out[0], ("ok", (0, self.A, 1, b)))
        self.assertEqual(out[1], out[0])
        with self.assertRaises(errors.NumericMismatch) as cm:
            numerics.refuse_or_accept(out[0][1], False)
        self.assertEqual((cm.exception.key, cm.exception.ranks, cm.exception.values),
                         ("threads", (0, 1), ("1", "2")))
        self.assertIn("accepted", numerics.refuse_or_accept(out[0][1], True))
        same = two_ranks(lambda g: numerics.compare(g, self.A, handover.share),
                         lambda g: numerics.compare(g, dict(self.A), handover.share))
        self.assertEqual([same[0], same[1]], [("ok", None)] * 2)


class Replicas(unittest.TestCase):
    def test_majority(self):
        self.assertEqual(replicas.majority([5, 5, 7]), (5, [0, 1]))
        self.assertEqual(replicas.majority([7, 5, 5]), (5, [1, 2]))
        self.assertIsNone(replicas.majority([5, 7]))
        self.assertIsNone(replicas.majority([5, 5, 7, 7]))
        self.assertIsNone(replicas.majority([1, 2, 3]))
        self.assertEqual(replicas.majority([4, 4, 4]), (4, [0, 1, 2]))

    def test_blocks_summed_agree_only_when_every_digest_is_one(self):
        rng = random.Random(5)
        for world in (2, 3, 7, 1000):
            h = rng.getrandbits(62)
            same = sum(replicas.block(h, "cpu") for _ in range(world))
            self.assertTrue(replicas.agree(same, world))
            for other in (h ^ 1, h ^ (1 << 61), rng.getrandbits(62)):
                blocks = [replicas.block(h, "cpu")] * (world - 1) + [replicas.block(other, "cpu")]
                self.assertFalse(replicas.agree(sum(blocks), world), (world, h, other))
        # 1 and 3 sum to 2 + 2 in every piece, but not in the squares
        self.assertFalse(replicas.agree(replicas.block(1, "cpu") + replicas.block(3, "cpu"), 2))
        self.assertTrue(replicas.agree(replicas.block(2, "cpu") * 2, 2))

    def test_a_large_state_digested_beside_the_compute_gives_the_same_block(self):
        big = [("w", torch.randn(1 << 19)), ("m", torch.randn(300))]  # 2 MiB
        p = replicas.Pending(grp.Group(None, 0, 1, torch.device("cpu"), None), 4, big)
        self.assertEqual(p._future is not None, replicas.ALGORITHM == "xxh3")
        self.assertTrue(torch.equal(p.block(), replicas.block(
            replicas.whole(replicas.tensor_digests(big)), "cpu")))
        self.assertEqual(p.digests, replicas.tensor_digests(big))

    def test_flip_parse(self):
        self.assertEqual(replicas.parse_flip("2:17"), (2, 17))
        self.assertIsNone(replicas.parse_flip(""))
        for bad in ("2", "a:1", "1:-1", "1:2:3"):
            with self.assertRaisesRegex(ValueError, "DDP_TEST_FLIP"):
                replicas.parse_flip(bad)

    def pairs(self):
        torch.manual_seed(1)
        m = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 2))
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        m(torch.randn(2, 3)).sum().backward()
        opt.step()
        return replicas.named_tensors(m, opt)

    def test_either_digest_sees_one_ulp(self):
        # XXH3 (libxxhash through ctypes) where it loads, else BLAKE2b: both
        # see the test flip's one bit, and the identity names which is used
        self.assertEqual(numerics.identity(torch.device("cpu"))["replica_digest"],
                         replicas.ALGORITHM)
        saved = replicas._XXH3
        try:
            for fn in [saved, None]:
                replicas._XXH3 = fn
                a, b = self.pairs(), self.pairs()
                before = replicas.tensor_digests(a)
                self.assertEqual(before, replicas.tensor_digests(b))
                replicas.flip(a)
                after = replicas.tensor_digests(a)
                self.assertNotEqual(after[0], before[0], fn)
                self.assertEqual(after[1:], before[1:], fn)
                empty = [("e", torch.zeros(0)), ("f", torch.zeros(0, 2))]
                d = replicas.tensor_digests(empty)
                self.assertNotEqual(d[0], d[1])  # the shape is part of it
        finally:
            replicas._XXH3 = saved

    def test_a_flip_in_one_tensor_is_named(self):
        a, b = self.pairs(), self.pairs()
        self.assertEqual(replicas.tensor_digests(a), replicas.tensor_digests(b))
        b[6][1].view(-1)[1] += 1.0  # the momentum of the second layer's weight
        out = two_ranks(lambda g: replicas.check(g, 9, a, handover.share),
                        lambda g: replicas.check(g, 9, b, handover.share))
        for r in (0, 1):
            self.assertEqual(out[r][0], "ok", out)
            v = out[r][1]
            self.assertEqual((v.step, v.majority, v.source), (9, None, None))
            self.assertEqual(v.bad, [(1, "optimizer state[1.weight].momentum_buffer")])
        same = two_ranks(lambda g: replicas.check(g, 9, a, handover.share),
                         lambda g: replicas.check(g, 9, self.pairs(), handover.share))
        self.assertEqual([same[0], same[1]], [("ok", None)] * 2)
        replicas.flip(a)
        self.assertNotEqual(replicas.tensor_digests(a)[0], replicas.tensor_digests(b)[0])


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
