"""One round's process group: a TCPStore client to the round's store, a
gloo (CPU) or NCCL (GPU) group on it, and collectives that end when they
fail or when the agent hands out a new round.

The group is built directly (ProcessGroupGloo / ProcessGroupNCCL), not as
torch.distributed's default group, so that nothing but its Group holds it.
A retired group is released in a thread of its own (retire): its
destructor joins its worker threads, which may still wait in a collective
that was abandoned, and that wait ends only when the peers release theirs
(their sockets close) or at the group's timeout; the last reference is
dropped there, with the GIL released by torch, so the training thread goes
on meanwhile and the group's sockets, threads and store client are freed.
"""
import datetime
import threading

import torch
import torch.distributed as dist

from .errors import MembershipChanged, Superseded


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
                raise Superseded("a new round came while %s" % what)
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

    def __init__(self, pg, rank, world, device, chan, backend="gloo", owned=True):
        self.pg, self.rank, self.world, self.device, self.chan = pg, rank, world, device, chan
        self.backend = backend
        self.owned = owned  # False: the script's default group, not ours to release
        self.retired = False
        # a collective that did not end well: its work holds the round's
        # gloo context (the sockets), released with the group, not by the
        # training thread (closing a socket waits a tick of gloo's loop)
        self.abandoned = []

    def _wait(self, work, what):
        self.abandoned.append(work)
        del work  # the traceback of a failure must not hold the last reference
        try:
            if self.chan is not None:
                fut = self.abandoned[-1].get_future()
                _wait_or_round(self.chan, lambda ev: fut.add_done_callback(lambda _: ev.set()),
                               fut.done, what)
            self.abandoned[-1].wait()
        except Superseded:
            raise
        except RuntimeError as e:  # gloo: a closed peer; DistBackendError is one too
            raise MembershipChanged("%s failed: %s" % (what, e)) from e
        self.abandoned.pop()

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
        kernels stop waiting for the dead peer), and the group is released
        in a thread (release_later). The script's own group
        (torch.distributed's default group) is left to the script."""
        if self.pg is None or self.retired:
            return
        self.retired = True
        box = [self.pg] + self.abandoned
        self.pg, self.abandoned = None, []
        if self.backend == "nccl":
            _abort(box[0])
        if self.owned:
            release_later(box)


def _abort(pg):
    for name in ("abort", "_abort"):
        fn = getattr(pg, name, None)
        if callable(fn):
            try:
                fn()
            except RuntimeError:
                pass
            return


def release_later(box):
    """Empties box, a list that holds the only references to a process group
    and to its works that did not end well, in a thread of its own: the
    group's destructor (torch runs it without the GIL) waits for a
    collective still in flight, which ends when the peers release their
    groups or at the group's timeout, then joins its threads and frees its
    store client; the last of them frees the gloo context, whose sockets
    each wait a tick of gloo's loop (up to 10 ms) as they close."""
    threading.Thread(target=box.clear, name="ddplaunch-release-group", daemon=True).start()


def default_timeout():
    return datetime.timedelta(minutes=5)


def device_of(params):
    return params[0].device if params else torch.device("cpu")
