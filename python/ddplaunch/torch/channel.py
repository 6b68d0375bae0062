"""The worker's end of ddplaunch's agent channel (the socket on the fd that
DDP_AGENT_FD names), as worker/core/agent_chan.c is libddp's. Its lines are
ddplaunch.agent_wire's (docs/protocol.md, "The agent channel"): this side
says "hello 1 resizable" and "took R", and hears "round ..." lines.

The channel is the process's: it is taken once (the first shared() call),
only when the fd is a socket whose peer is the process DDP_AGENT_PID names
(the launcher; a socket of the program's own on that number is left
alone), and kept for the life of the process. Both variables then leave
the environment and the fd is not inherited, so the program's children
never take it. One reader thread hears the rounds; every Elastic object of
the process gets its own view (AgentChannel) of it, and each view sees
every round: two of them never split the rounds between them. A view
that is done is closed (Elastic.close, or when the Elastic is garbage).

A child forked by the worker (a DataLoader worker) inherits the reader's
state but not its thread, and the rounds are its parent's: shared() in
another process than the one that looked returns None (no channel), as
libddp's agent_chan.c does.
"""
import os
import socket
import stat
import struct
import threading

from .. import agent_wire

Round = agent_wire.Round


def _peer_pid(fd):
    s = socket.socket(fileno=fd)
    try:
        cred = s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        return struct.unpack("3i", cred)[0]
    finally:
        s.detach()  # the fd stays ours, open


def fd_from_env(environ=None):
    """The channel's fd from DDP_AGENT_FD, or None where there is none (no
    ddplaunch, torchrun, a plain run), where it is not a socket (a wrapper
    in between reused the number for a file of its own), or where its peer
    is not the agent DDP_AGENT_PID names (a socket of the program's own)."""
    env = environ if environ is not None else os.environ
    try:
        fd = int(env.get("DDP_AGENT_FD", ""))
        pid = int(env.get("DDP_AGENT_PID", ""))
        if fd < 3 or pid < 1 or not stat.S_ISSOCK(os.fstat(fd).st_mode):
            return None
        if _peer_pid(fd) != pid:
            return None
    except (ValueError, OSError):
        return None
    return fd


class _Reader:
    """The process's one reader of the channel: keeps the rounds heard (a
    sequence number and the latest) and wakes every view."""

    def __init__(self, fd):
        self.fd = fd
        self.pid = os.getpid()  # the worker's; a forked child is not it
        self.cond = threading.Condition()
        self.latest = None
        self.seq = 0
        self.last_taken = 0  # the latest round any view took (its seq)
        self.closed = False
        self.views = set()
        os.set_inheritable(fd, False)  # the program's own children do not hold it
        self.send(agent_wire.Hello(agent_wire.VERSION, True))
        self.thread = threading.Thread(target=self._read, name="ddplaunch-agent-channel",
                                       daemon=True)
        self.thread.start()

    def send(self, msg):
        try:
            os.write(self.fd, agent_wire.format(msg))
        except OSError:
            pass  # the agent is gone: the next collective or take() says so

    def _read(self):
        rd = agent_wire.Reader()
        while True:
            try:
                chunk = os.read(self.fd, 4096)
            except InterruptedError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                break
            for msg in rd.feed(chunk):
                if isinstance(msg, agent_wire.Round):
                    self._deliver(msg)
                # other kinds (lines to come) and refused lines: skipped
        with self.cond:
            self.closed = True
            self._wake_all()

    def _deliver(self, r):
        with self.cond:
            self.latest = r
            self.seq += 1
            self._wake_all()

    def _wake_all(self):
        self.cond.notify_all()
        for v in list(self.views):
            for ev in list(v.wakers):
                ev.set()


_lock = threading.Lock()
_reader = None
_looked = False


def shared(environ=None):
    """A view of the process's channel (a new AgentChannel, to close()
    when done), or None where there is none or in a child forked after the
    channel was taken. The first call takes the channel (fd_from_env) and
    removes DDP_AGENT_FD and DDP_AGENT_PID from the environment."""
    global _reader, _looked
    env = environ if environ is not None else os.environ
    with _lock:
        if not _looked:
            _looked = True
            fd = fd_from_env(env)
            env.pop("DDP_AGENT_FD", None)
            env.pop("DDP_AGENT_PID", None)
            if fd is not None:
                _reader = _Reader(fd)
        if _reader is None or _reader.pid != os.getpid():
            return None
        return AgentChannel(_reader)


def _after_fork():
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork


os.register_at_fork(after_in_child=_after_fork)


class AgentChannel:
    """One Elastic's view of the process's channel. pending() is whether a
    round later than the one this view took last has come; take() waits
    for one. A view starts where the process's last taken round left off,
    so a round that came after it and that nobody took is still pending."""

    def __init__(self, reader):
        self._r = reader
        self.wakers = set()
        with reader.cond:
            self._taken = reader.last_taken
            reader.views.add(self)

    @property
    def fd(self):
        return self._r.fd

    def declare(self, resizable):
        """Says "resizable" or "fixed"."""
        self._r.send(agent_wire.Resizable() if resizable else agent_wire.Fixed())

    def took(self, rnd):
        """Says "took R": this process re-forms in round R."""
        self._r.send(agent_wire.Took(rnd))

    def say(self, msg):
        """Tells the agent one of agent_wire's worker lines (Numerics,
        Replica, Straggler: what the launcher's summary.json and /metrics
        list). Raises WireError for a message out of the grammar, OSError
        when the agent is gone."""
        self._r.send(msg)

    def close(self):
        """This view hears no more rounds and is dropped from the reader's
        (the channel stays the process's). Idempotent."""
        with self._r.cond:
            self._r.views.discard(self)

    def pending(self):
        with self._r.cond:
            return self._r.seq != self._taken

    def watch(self, ev):
        """ev is set on every new round (and when the channel closes) until
        unwatch(ev)."""
        with self._r.cond:
            self.wakers.add(ev)

    def unwatch(self, ev):
        with self._r.cond:
            self.wakers.discard(ev)

    def take(self, timeout):
        """The latest round not taken yet by this view, waiting up to
        timeout seconds. Raises TimeoutError, or ConnectionError when the
        agent is gone."""
        r = self._r
        with r.cond:
            if not r.cond.wait_for(lambda: r.seq != self._taken or r.closed, timeout):
                raise TimeoutError("no new round from the launcher in %.0f s" % timeout)
            if r.seq == self._taken:
                raise ConnectionError("the launcher's agent closed the channel")
            self._taken = r.seq
            r.last_taken = max(r.last_taken, r.seq)
            return r.latest
