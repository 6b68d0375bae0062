"""Unit tests of ddplaunch.torch's pure parts: the shard plan, the ledger
(no sample skipped or repeated across any re-planning), the exact sum (its
bits independent of order and of how the shards are spread), the agent
channel as a process's (the test plays the agent on a socket pair), the
hand-over's bytes; and the hand-over's refusals between two ranks of a real
gloo group in this process (threads, a TCPStore on port 0). No launcher."""
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
        names = ("NotResizable", "AgentGone", "RoundTimeout", "Superseded", "HandoverRefused")
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


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
