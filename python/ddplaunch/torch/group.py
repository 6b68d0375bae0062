"""One round's process group: a TCPStore client to the round's store, a
gloo (CPU) or NCCL (GPU) group on it, and collectives that end when they
fail or when the agent hands out a new round.

The group is built directly (ProcessGroupGloo / ProcessGroupNCCL), not as
torch.distributed's default group, so that a dead round's group can be
dropped without destroy_process_group: its destructor would join a thread
still blocked in the abandoned collective. A retired group is aborted
(NCCL) and pinned, so its destructor never runs, neither now nor at exit.
"""
import ctypes
import datetime
import threading

import torch
import torch.distributed as dist


class MembershipChanged(Exception):
    """A collective failed (a peer is gone) or the launcher handed out a new
    round while it waited: the step is redone in the next round."""


def _wait_or_round(chan, started, is_done, what):
    """Waits until is_done() or a new round on chan; `started` is called
    with an Event that must be set when is_done may have become true."""
    ev = threading.Event()
    chan.watch(ev)
    try:
        started(ev)
        while True:
            ev.clear()
            if is_done():
                return
            if chan.pending():
                raise MembershipChanged("a new round came while %s" % what)
            ev.wait(1.0)
    finally:
        chan.unwatch(ev)


def in_thread(chan, fn, what):
    """fn() run in a thread that is left behind if a new round comes first
    (a group's formation blocks in C++ until its peers come or its timeout
    passes). Without a channel, fn() here."""
    if chan is None:
        return fn()
    box = {}

    def run(ev):
        def body():
            try:
                box["value"] = fn()
            except Exception as e:  # noqa: BLE001 - handed to the caller
                box["error"] = e
            ev.set()
        threading.Thread(target=body, name="ddplaunch-" + what, daemon=True).start()

    _wait_or_round(chan, run, lambda: "value" in box or "error" in box, what)
    if "error" in box:
        raise MembershipChanged("%s failed: %s" % (what, box["error"])) from box["error"]
    return box["value"]


def new_store(addr, port, world, timeout):
    """A client of the round's store (ddplaunch hosts it; nothing binds)."""
    return dist.TCPStore(addr, int(port), int(world), False, timeout)


def new_pg(store, rank, world, backend, timeout):
    if backend == "nccl":
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, world, opts)
    return dist.ProcessGroupGloo(store, rank, world, timeout)


class Group:
    """rank, world, and the round's pg (None for a world of one: no
    collective) of backend "gloo" or "nccl". chan: the agent channel whose
    new round ends a wait, or None (a failure then raises)."""

    def __init__(self, pg, rank, world, device, chan, backend="gloo"):
        self.pg, self.rank, self.world, self.device, self.chan = pg, rank, world, device, chan
        self.backend = backend
        self.retired = False

    def _wait(self, work, what):
        try:
            if self.chan is not None:
                fut = work.get_future()
                _wait_or_round(self.chan, lambda ev: fut.add_done_callback(lambda _: ev.set()),
                               fut.done, what)
            work.wait()
        except RuntimeError as e:  # gloo: a closed peer; DistBackendError is one too
            raise MembershipChanged("%s failed: %s" % (what, e)) from e

    def allreduce(self, t, op=dist.ReduceOp.SUM):
        """t reduced in place over the group."""
        if self.pg is None or self.world == 1:
            return t
        opts = dist.AllreduceOptions()
        opts.reduceOp = op
        self._wait(self.pg.allreduce([t], opts), "an all-reduce")
        return t

    def broadcast(self, t, root):
        if self.pg is None or self.world == 1:
            return t
        opts = dist.BroadcastOptions()
        opts.rootRank, opts.rootTensor = root, 0
        self._wait(self.pg.broadcast([t], opts), "a broadcast")
        return t

    def retire(self):
        """Done with this round's group: NCCL's communicator is aborted (its
        kernels stop waiting for the dead peer); the group is pinned so
        that its destructor, which would join threads that may still wait
        on the dead round, never runs."""
        if self.pg is None or self.retired:
            return
        self.retired = True
        # gloo's abort (torch 2.x) is left alone: the process then dies in
        # its teardown at exit (SIGSEGV); its threads end on their own, on
        # the closed peers or their timeout
        for name in ("abort", "_abort") if self.backend == "nccl" else ():
            fn = getattr(self.pg, name, None)
            if callable(fn):
                try:
                    fn()
                except RuntimeError:
                    pass
                break
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(self.pg))


def default_timeout():
    return datetime.timedelta(minutes=5)


def device_of(params):
    return params[0].device if params else torch.device("cpu")
