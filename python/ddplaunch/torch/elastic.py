"""Elastic: the training loop of a fixed global batch that survives a
membership change in place (issue 17). See ddplaunch/torch/__init__.py and
python/README.md."""
import contextlib
import os
import sys
import time
import weakref

import torch
import torch.distributed as dist

from .. import agent_wire
from . import group as grp
from . import handover
from . import channel
from . import progress as prog
from . import straggler
from . import numerics
from . import replicas
from .carry import Carried
from .errors import (AgentGone, MembershipChanged, NotResizable, NumericMismatch,
                     ReplicaMismatch, RoundTimeout, Superseded)
from .exact import ExactSum
from .plan import Ledger
from . import state_codec


def _close_view(view):
    if view is not None:
        view.close()


class Elastic:
    """model and optimizer: the script's own (the same initial weights on
    every rank, or not: rank 0's are handed to all at the start, as DDP
    does). dataset_size N, global_batch_size G (a multiple of
    virtual_shards V), seed: the ledger. backend: "gloo" or "nccl" (default:
    nccl when the parameters are on a GPU). timeout: of a collective and of
    a group's formation. round_timeout: how long a survivor waits for the
    launcher's next round after a failure, in seconds.

    Every state that changes the next step travels in the hand-over and
    sits in state_dict() (carry.py): scheduler (an LR scheduler, stepped by
    Elastic once per committed step: do not step it yourself), scaler (a
    GradScaler: Elastic calls scaler.step(optimizer) and scaler.update()),
    the RNG states (torch's CPU generator, the CUDA ones on a GPU, Python's
    random), and extra={"name": obj} or register(name, obj) for anything
    else with state_dict()/load_state_dict(). What cannot travel is refused
    here with the reason (TypeError).

    threads: torch.set_num_threads(threads) now, and OpenBLAS's threads
    where torch uses it (default 1: a shard's bits must not depend on the
    machine's cores, and a 1-rank run by hand then gives the job's bits;
    None leaves the process's setting). The ranks'
    numeric identities (numerics.py: torch build, threads, deterministic
    algorithms, TF32, BLAS, CPU kernels, GPU and CUDA/cuDNN/NCCL) are
    compared at the start and at every join: a difference raises
    NumericMismatch naming both sides, unless allow_numeric_mismatch=True
    (then it is printed and self.numerics says the promise is dropped).

    check_every: the replica check's period in committed steps (0: off;
    replicas.py): the ranks' parameters and optimizer state are compared by
    digest; a rank that differs is named on every rank and healed from a
    majority rank's memory (3 or more replicas), or every rank raises
    ReplicaMismatch (no strict majority, e.g. 2 replicas). self.replica_events
    lists what was found, self.check_seconds the checks' own time so far.

    A membership change is re-joined in place (_rejoin); what ends it is one
    of errors.py's classes: NotResizable, AgentGone, RoundTimeout,
    HandoverRefused, NumericMismatch, ReplicaMismatch, all ReformError."""

    def __init__(self, model, optimizer, dataset_size, global_batch_size, virtual_shards,
                 seed=0, backend=None, timeout=None, round_timeout=300.0, scheduler=None,
                 scaler=None, extra=None, threads=1, allow_numeric_mismatch=False,
                 check_every=1):
        self.model, self.optimizer = model, optimizer
        self.ledger = Ledger(dataset_size, global_batch_size, virtual_shards, seed)
        self._params = [p for p in model.parameters() if p.requires_grad]
        self._exact = ExactSum(self._params)
        self._device = grp.device_of(self._params)
        state_codec.check(model.state_dict(), "model.state_dict()")
        state_codec.check(optimizer.state_dict(), "optimizer.state_dict()")
        self._carry = Carried(self._device, scheduler, scaler, extra)
        if threads is not None:
            numerics.set_threads(threads)
        self._allow_numeric = bool(allow_numeric_mismatch)
        self.numerics = {"promise": True, "why": None}
        if int(check_every) < 0:
            raise ValueError("check_every=%s: give a period in steps, or 0 for no replica "
                             "check" % check_every)
        self._check_every = int(check_every)
        self._flip = replicas.parse_flip(os.environ.get("DDP_TEST_FLIP"))
        self.replica_events = []
        self.check_seconds = 0.0  # the replica checks' own time so far
        self._pending = None  # a replica check digested and not yet compared
        self._backend = backend or ("nccl" if self._device.type == "cuda" else "gloo")
        self._timeout = timeout or grp.default_timeout()
        self._round_timeout = round_timeout
        self._has_state = False
        self._trained = False  # the state came from a group (a step or a hand-over)
        self._synced = False
        self.last_loss = None
        # the world size the step step() last returned was computed at by
        # this process; None when it was rolled forward (a peer committed it
        # before a re-formation, maybe at another world size)
        self.step_world = None
        self.reformations = 0
        # stragglers (straggler.py): every rank named, as dicts (rank, node,
        # host, slower, cause, from, to: steps, to None while named)
        self.stragglers = []
        self._detector = None  # made per group (its world), afresh after a re-formation
        self._last_timing = None  # (compute_s, wait_s, shards) of this rank's last step
        self._ident = straggler.identity()
        self._chan = channel.shared()  # the process's channel, this object's view
        # the view is closed by close(), or when this object is garbage
        self._close_chan = weakref.finalize(self, _close_view, self._chan)
        self._page = prog.shared()  # the progress page, or None
        self._set_phase(prog.PHASE_STARTUP)
        self._group = grp.Group(None, 0, 1, self._device, self._chan)
        try:
            self._group = self._first_group()
        except MembershipChanged as e:
            self._rejoin(e)

    def register(self, name, obj):
        """Carries obj's state (state_dict()/load_state_dict()) under name,
        as extra={name: obj} does; before the first step only (every rank
        registers the same names). Raises TypeError when it cannot travel."""
        if self._synced:
            raise RuntimeError("register(%r) after the first step: register every state "
                               "before training, on every rank" % name)
        self._carry.register(name, obj)

    def close(self):
        """Lets this object's view of the launcher's channel go (it is let go
        when the object is garbage, too): no round wakes its waits any more.
        Call it when the training is done and the object is kept; train no
        more with it after. Idempotent."""
        self._set_phase(prog.PHASE_SHUTDOWN)
        self._close_chan()

    _PHASES = {"checkpoint": prog.PHASE_CHECKPOINT, "eval": prog.PHASE_EVAL,
               "final": prog.PHASE_FINAL}

    @contextlib.contextmanager
    def phase(self, name):
        """with el.phase("checkpoint"): ... -- tells the launcher's agent
        (the progress page) that the script saves ("checkpoint"), evaluates
        ("eval") or writes its final state ("final") until the block ends,
        so that the time is not taken for a stuck step. Nothing without
        ddplaunch."""
        if name not in self._PHASES:
            raise ValueError("phase %r: one of %s" % (name, ", ".join(sorted(self._PHASES))))
        self._set_phase(self._PHASES[name])
        try:
            yield
        finally:
            self._set_phase(prog.PHASE_COMPUTE)

    def _set_phase(self, phase):
        if self._page is not None:
            self._page.phase(phase)

    def _group_of(self, pg, rank, world, attempt, backend=None, owned=True):
        """This round's Group; the progress page starts counting its
        collectives (round = attempt + 1, as libddp's)."""
        if self._page is not None:
            self._page.round(attempt + 1, rank, world)
        if pg is None:
            return grp.Group(None, 0, 1, self._device, self._chan, page=self._page)
        return grp.Group(pg, rank, world, self._device, self._chan, backend or self._backend,
                         owned=owned, page=self._page)

    # -- membership ----------------------------------------------------

    @property
    def rank(self):
        return self._group.rank

    @property
    def world_size(self):
        return self._group.world

    @property
    def process_group(self):
        """This round's torch.distributed process group (None in a world of
        one); it changes on every re-formation."""
        return self._group.pg

    def _first_group(self):
        """The launcher's first round: torch.distributed's default group if
        the script made one, else a group of our own on the env:// store."""
        env = os.environ
        if env.get("DDP_AWAIT_ROUND") == "1":
            # started outside any round, replacing a worker while the
            # others re-form without it (libddp's ddp_init does the same):
            # saying "resizable" (the channel did, when it was taken) asks
            # the launcher for the round that takes it in; _rejoin takes it
            env.pop("DDP_AWAIT_ROUND", None)
            raise MembershipChanged("started to replace a worker: waiting for its round")
        # libddp's rule (worker/ddp.h, attempt): a process started into a
        # later round meets the survivors under that round's keys
        attempt = max(int(env.get("TORCHELASTIC_RESTART_COUNT", "0") or 0),
                      int(env.get("DDP_ROUND", "0") or 0) - 1)
        if dist.is_available() and dist.is_initialized():
            pg = dist.distributed_c10d._get_default_group()
            return self._group_of(pg, dist.get_rank(), dist.get_world_size(), attempt,
                                  str(dist.get_backend()).lower(), owned=False)
        world = int(env.get("WORLD_SIZE", "1"))
        rank = int(env.get("RANK", "0"))
        if world == 1:
            return self._group_of(None, 0, 1, attempt)
        return self._form(env["MASTER_ADDR"], env["MASTER_PORT"], rank, world, attempt)

    def _form(self, addr, port, rank, world, attempt):
        def build():
            # keys per attempt: a store kept from one round to the next (one
            # node replacing a worker) never serves an earlier round's
            store = grp.new_store(addr, port, world, self._timeout)
            store = dist.PrefixStore("ddplaunch.torch/attempt_%d/" % attempt, store)
            return grp.new_pg(store, rank, world, self._backend, self._timeout)
        if world == 1:
            return self._group_of(None, 0, 1, attempt)
        pg = grp.in_thread(self._chan, build, "forming the process group")
        return self._group_of(pg, rank, world, attempt)

    def _take_round(self):
        try:
            r = self._chan.take(self._round_timeout)
        except TimeoutError as e:
            raise RoundTimeout("step %d: %s; stopping" % (self.ledger.step, e)) from e
        except ConnectionError as e:
            raise AgentGone("step %d: %s; stopping" % (self.ledger.step, e)) from e
        self._chan.took(r.round)
        for k, v in (("RANK", r.rank), ("WORLD_SIZE", r.world_size),
                     ("LOCAL_RANK", r.local_rank), ("LOCAL_WORLD_SIZE", r.local_world_size),
                     ("MASTER_ADDR", r.master_addr), ("MASTER_PORT", r.master_port),
                     ("GROUP_RANK", r.group_rank), ("GROUP_WORLD_SIZE", r.group_world_size),
                     ("DDP_ROUND", r.round)):
            os.environ[k] = str(v)
        return r

    def _rejoin(self, cause):
        """The re-join loop, libddp's ddp_rejoin in Python: the next round
        from the agent, a fresh group in its store, the state agreed and
        handed over; again while a later round supersedes it or a collective
        of the re-formation fails. Raises NotResizable (no channel),
        AgentGone, RoundTimeout or HandoverRefused."""
        if self._chan is None:
            raise NotResizable("step %d: %s (not under ddplaunch, so no re-formation in "
                               "place: restart the job)" % (self.ledger.step, cause)) from cause
        self._pending = None  # its group is gone; the hand-over makes the replicas one
        while True:
            self._set_phase(prog.PHASE_REFORM)
            self._group.retire()
            r = self._take_round()
            try:
                self._group = self._form(r.master_addr, r.master_port, r.rank, r.world_size,
                                         max(r.round - 1, 0))
                self._sync()
                if self._chan.pending():
                    raise Superseded("a round after round %d came while it formed" % r.round)
                break
            except MembershipChanged as e:  # Superseded is one
                cause = e
        self.reformations += 1
        # a new membership: every rank's history starts afresh alike
        self._detector, self._last_timing = None, None
        for h in self.stragglers:
            if h["to"] is None:
                h["to"] = self.ledger.step

    def _sync(self):
        """At the start and after each re-formation: every rank at the
        highest step held, with that step's state (handover.py)."""
        self._check_numerics()
        step = self.ledger.step if self._has_state else -1
        self._set_phase(prog.PHASE_HANDOVER)
        _, hi, src = handover.agree(self._group, step, self._trained)
        if src is not None:
            got = handover.hand_over(self._group, src, self.state_dict, step,
                                     self._trained)
            # a rank at the highest step holds those bits already; when none
            # holds state yet, everyone takes the source's initial weights
            if got is not None and (step != hi or hi < 0):
                self._load(got)
        self._has_state = self._trained = True
        self._synced = True
        self._set_phase(prog.PHASE_COMPUTE)

    def _check_numerics(self):
        """The ranks' numeric identities compared (numerics.py): refused
        unless allowed, and then said once per difference; the launcher's
        summary hears where the promise stands (as ddp-train's)."""
        mine = numerics.identity(self._device)
        found = numerics.compare(self._group, mine, handover.share)
        try:
            line = numerics.refuse_or_accept(found, self._allow_numeric)
        except NumericMismatch as e:
            self._tell(agent_wire.Numerics("refused", agent_wire.fit_text(str(e))))
            print("ddplaunch.torch: rank %d: %s; refusing to train" % (self.rank, e),
                  file=sys.stderr, flush=True)
            # every rank has said it before any leaves (a rank's exit ends
            # its peers' group), as for a replica mismatch
            self._group.allreduce(torch.zeros(1, device=self._device))
            raise
        if line is not None:
            if line != self.numerics["why"]:
                print("ddplaunch.torch: rank %d: %s" % (self.rank, line), file=sys.stderr,
                      flush=True)
            self.numerics = {"promise": False, "why": line}
        if self.numerics["promise"]:
            self._tell(agent_wire.Numerics("kept", numerics.describe(mine)))
        else:
            self._tell(agent_wire.Numerics("dropped", agent_wire.fit_text(self.numerics["why"])))

    def _tell(self, msg):
        """One line to the launcher's agent (summary.json, /metrics); not
        under ddplaunch, or with the agent gone, nothing: what it says is
        also on stderr."""
        if self._chan is None:
            return
        try:
            self._chan.say(msg)
        except (OSError, agent_wire.WireError) as e:
            print("ddplaunch.torch: rank %d: could not tell the launcher %r: %s"
                  % (self.rank, msg, e), file=sys.stderr, flush=True)

    def _start(self):
        while not self._synced:
            try:
                self._sync()
            except MembershipChanged as e:
                self._rejoin(e)

    # -- the step --------------------------------------------------------

    def steps(self, epochs):
        """The global steps still to do until `epochs` epochs are done (a
        resumed or rolled-forward process starts later)."""
        self._start()
        total = int(epochs) * self.ledger.steps_per_epoch
        while self.ledger.step < total:
            yield self.ledger.step
        pending, self._pending = self._pending, None
        if pending is not None:  # the last step's check: no next step carries it
            try:
                self._settle(pending, None)
            except MembershipChanged:
                pass  # the state is committed; the group is gone

    def step(self, closure):
        """One committed step: closure(indices) once per virtual shard this
        rank owns (forward and backward; its return value is the shard's
        loss), the exact mean of the shards' gradients over the group, the
        optimizer's step. A membership change meanwhile re-forms the group
        and redoes the step with the same samples. Returns the global
        batch's loss (the mean of the V shards' losses)."""
        self._start()
        target = self.ledger.step
        while True:
            try:
                if self._chan is not None and self._chan.pending():
                    raise Superseded("a new round from the launcher")
                if self.ledger.step != target:
                    self.step_world = None
                    return self.last_loss  # committed elsewhere: rolled forward
                return self._try_step(closure)
            except MembershipChanged as e:
                self._rejoin(e)

    def _shards(self, closure, step, slots):
        """This rank's shards of `step`: their flattened gradients, one row
        each; each shard's loss into column 0 of its row of slots."""
        flats = []
        mine = self.ledger.plan(self.rank, self.world_size)
        for v in mine:
            for p in self._params:
                p.grad = None
            loss = closure(self.ledger.shard_indices(step, v))
            if loss is None:
                raise TypeError("the closure returned None: return the shard's loss (after "
                                "loss.backward())")
            flats.append(self._exact.flatten())
            slots[v, 0] = float(loss.detach() if torch.is_tensor(loss) else loss)
        for p in self._params:
            p.grad = None
        if not flats:
            return None
        rows = torch.stack(flats)
        slots[mine.start:mine.stop, 1:] = self._exact.maxabs_rows(rows)
        return rows

    def _timings_row(self):
        row = [0.0] * straggler.ROW
        straggler.pack(row, self._last_timing, *self._ident)
        return torch.tensor(row, dtype=torch.float32)

    def _stragglers(self, timing, step):
        """Every rank's row of the step's first all-reduce to the detector;
        a line on stderr (every rank) for each rank named or cleared."""
        world = self.world_size
        if world < 2:
            return
        if self._detector is None or self._detector.world != world:
            self._detector = straggler.Detector(world)
        rows = [straggler.unpack(r) for r in timing.cpu().tolist()]
        for r in self._detector.update([x[0] for x in rows]):
            q, (_, node, host) = self._detector.r[r], rows[r]
            for h in self.stragglers:
                if h["rank"] == r and h["to"] is None:
                    h["to"] = step + 1
            if q.named != straggler.NONE:
                self.stragglers.append({"rank": r, "node": node, "host": host,
                                        "slower": q.slower, "cause": q.named,
                                        "from": step + 1, "to": None})
            print("ddplaunch.torch: " + straggler.line(step + 1, r, node, host, q),
                  file=sys.stderr, flush=True)
            # every rank tells its agent; the agents keep one of each
            self._tell(agent_wire.Straggler(step + 1, r, max(int(node), 0), q.named,
                                            min(int(round(q.slower * 100)), agent_wire.INT_MAX)))

    def _try_step(self, closure):
        start_ns, wait0 = time.monotonic_ns(), self._group.wait_ns
        v, step = self.ledger.virtual_shards, self.ledger.step
        # one row per shard: its loss and its max |grad| per tensor, written
        # by the rank that computed it and 0 elsewhere (the sum is a copy:
        # x + 0 is exact); then one row of timings per rank, the same way
        nslot = v * (1 + len(self._params))
        flat = torch.zeros(nslot + self.world_size * straggler.ROW, dtype=torch.float32,
                           device=self._device)
        slots = flat[:nslot].view(v, 1 + len(self._params))
        timing = flat[nslot:].view(self.world_size, straggler.ROW)
        t0 = time.monotonic()
        rows = self._shards(closure, step, slots)
        t1 = time.monotonic()
        timing[self.rank] = self._timings_row().to(self._device)
        # the pending replica check rides on this all-reduce too
        # (replicas.block; the float32 slots and timings are exact in
        # float64, and x + 0 there too)
        pending, self._pending = self._pending, None
        both = torch.cat([flat.to(torch.float64),
                          pending.block() if pending is not None else
                          torch.zeros(replicas.BLOCK, dtype=torch.float64, device=self._device)])
        self._group.allreduce(both)
        t2 = time.monotonic()
        slots = both[:nslot].view(slots.shape).to(torch.float32)
        if pending is not None and self._settle(pending, both[flat.numel():]):
            return self._try_step(closure)  # a replica was healed: the shards are redone
        self._stragglers(both[nslot:flat.numel()].view(timing.shape), step)
        maxima = slots[:, 1:].max(dim=0).values
        wait = t2 - t1
        if self._carry.scaler is not None and not bool(torch.isfinite(maxima).all()):
            # every rank sees the same maxima, so every rank skips the sum:
            # gradients of inf make the scaler skip the step and back off
            grads = [torch.full_like(p, float("inf")) for p in self._params]
        else:
            exps = self._exact.exponents(maxima.cpu(), v)
            if rows is None:
                q = torch.zeros(self._exact.total, dtype=torch.int64, device=self._device)
            else:
                q = self._exact.quantize_sum(rows, exps)
            t3 = time.monotonic()
            self._group.allreduce(q)
            wait += time.monotonic() - t3
            grads = self._exact.dequantize(q, exps, v)
        for p, g in zip(self._params, grads):
            p.grad = g
        self._carry.optimizer_step(self.optimizer)
        for p in self._params:
            p.grad = None
        self.last_loss = float(slots[:, 0].to(torch.float64).sum()) / v
        self._carry.scheduler_step(self.last_loss)
        self.ledger.step += 1
        self.step_world = self.world_size
        self._has_state = True
        self._last_timing = (t1 - t0, wait, len(self.ledger.plan(self.rank, self.world_size)))
        if self._page is not None:
            step_ns = time.monotonic_ns() - start_ns
            wait_ns = min(self._group.wait_ns - wait0, step_ns)
            self._page.step(self.ledger.step, step_ns, step_ns - wait_ns, wait_ns,
                            len(self.ledger.plan(self.rank, self.world_size)))
        self._after_commit(step)
        return self.last_loss

    def _after_commit(self, step):
        """The test flip (DDP_TEST_FLIP), then the replica check of the step
        just committed (every check_every steps): its digests now, its
        comparison in the next step's first all-reduce (_try_step) or, after
        the last step, in one of its own (steps)."""
        pairs = None
        if self._flip is not None and self._flip == (self.rank, step):
            pairs = replicas.named_tensors(self.model, self.optimizer)
            replicas.flip(pairs)
            print("ddplaunch.torch: rank %d: DDP_TEST_FLIP flipped one bit of %s after step %d"
                  % (self.rank, pairs[0][0], step), file=sys.stderr, flush=True)
        if not self._check_every or (step + 1) % self._check_every or self.world_size == 1:
            return
        t0 = time.perf_counter()
        pairs = pairs or replicas.named_tensors(self.model, self.optimizer)
        # digested now, compared in the next step's first all-reduce
        self._pending = replicas.Pending(self._group, step, pairs)
        self.check_seconds += time.perf_counter() - t0

    def _settle(self, pending, summed):
        """The pending check's outcome from the summed blocks (None: in an
        all-reduce of its own): True when a bad replica was healed (the
        caller redoes the step's shards); raises ReplicaMismatch when it
        cannot be."""
        t0 = time.perf_counter()
        if summed is None:
            verdict = pending.finish(handover.share)
        else:
            verdict = pending.settle(summed, handover.share)
        self.check_seconds += time.perf_counter() - t0
        if verdict is None:
            return False
        self._heal(verdict)
        return True

    def _heal(self, verdict):
        """Every rank names the bad ranks; the majority's lowest rank hands
        its state to all (the bad ranks take it), or, with no strict
        majority, every rank raises ReplicaMismatch."""
        event = {"step": verdict.step, "bad": verdict.bad, "source": verdict.source,
                 "healed": False}
        self.replica_events.append(event)
        line = verdict.line()
        for r, tensor in verdict.bad:  # every rank tells its agent (one each is kept)
            self._tell(agent_wire.Replica(verdict.step, r, verdict.source is not None,
                                          replicas.summary_name(tensor)))
        if verdict.source is None:
            print("ddplaunch.torch: rank %d: %s; stopping" % (self.rank, line),
                  file=sys.stderr, flush=True)
            # every rank has said it before any leaves (a rank's exit ends
            # its peers' group), as ddp-train's barrier before its stop
            self._group.allreduce(torch.zeros(1, device=self._device))
            raise ReplicaMismatch(
                "%s: with %d replicas no state can be trusted over another; restart the job "
                "from its last checkpoint (and check the named rank's machine)"
                % (line, self.world_size), step=verdict.step,
                ranks=[r for r, _ in verdict.bad], tensor=verdict.bad[0][1])
        t0 = time.monotonic()
        step = self.ledger.step
        got = handover.hand_over(self._group, verdict.source, self.state_dict, step)
        if self.rank in {r for r, _ in verdict.bad} and got is not None:
            self._load(got)
        event["healed"] = True
        event["heal_s"] = time.monotonic() - t0
        print("ddplaunch.torch: rank %d: %s; healed from rank %d's memory in %.3f s"
              % (self.rank, line, verdict.source, event["heal_s"]), file=sys.stderr, flush=True)

    # -- state -----------------------------------------------------------

    def state_dict(self):
        """The model, the optimizer state, the ledger (epoch, step, seed) and
        the carried states (carry.py: "rng", and "scheduler", "scaler",
        "extra" where given): what a disk checkpoint holds to resume into
        the same bits, and what a hand-over sends."""
        sd = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
              "ledger": self.ledger.state_dict(), "loss": self.last_loss}
        sd.update(self._carry.state_dict())
        return sd

    def _load(self, sd):
        self.model.load_state_dict(sd["model"])
        self.optimizer.load_state_dict(sd["optimizer"])
        self.ledger.load_state_dict(sd["ledger"])
        self._carry.load_state_dict(sd)
        self.last_loss = sd.get("loss")

    def load_state_dict(self, sd):
        """Resumes from state_dict()'s output (a disk checkpoint); call it
        before the first step. The process then counts as holding that
        step's state when the group agrees on one."""
        self._load(sd)
        self._has_state = True
        self._trained = False  # a newcomer's state: the group's wins, whatever its step
