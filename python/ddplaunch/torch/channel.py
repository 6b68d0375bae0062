"""The worker's end of ddplaunch's agent channel (the socket on the fd that
DDP_AGENT_FD names), as worker/core/agent_chan.c is libddp's.

worker -> agent: "resizable" (this process re-forms in place), "fixed" (it
does not: restart it), "took R" (it has taken round R and re-forms in it).
agent -> worker: "round R RANK WORLD LOCAL_RANK LOCAL_WORLD MASTER_ADDR
MASTER_PORT GROUP_RANK GROUP_WORLD", a new round. A reader thread keeps the
latest round and wakes whoever waits on it.
"""
import collections
import os
import stat
import threading

Round = collections.namedtuple(
    "Round", "round rank world_size local_rank local_world_size master_addr master_port "
    "group_rank group_world_size")


def parse_round(line):
    """A Round from one "round ..." line, or None."""
    f = line.split()
    if len(f) != 10 or f[0] != "round":
        return None
    try:
        nums = [int(x) for x in f[1:6]] + [f[6]] + [int(x) for x in f[7:10]]
    except ValueError:
        return None
    return Round(*nums)


def fd_from_env(environ=None):
    """The channel's fd from DDP_AGENT_FD, or None where there is none (no
    ddplaunch, torchrun, a plain run) or where it is not a socket (a wrapper
    in between reused the number for a file of its own)."""
    s = (environ if environ is not None else os.environ).get("DDP_AGENT_FD", "")
    try:
        fd = int(s)
        if fd < 3 or not stat.S_ISSOCK(os.fstat(fd).st_mode):
            return None
    except (ValueError, OSError):
        return None
    return fd


class AgentChannel:
    """Says "resizable" on fd and hears rounds. pending() is whether a round
    later than the one taken last has come; take() waits for one."""

    def __init__(self, fd):
        self.fd = fd
        self._cond = threading.Condition()
        self._latest = None
        self._seq = self._taken = 0
        self._closed = False
        self._wakers = set()
        os.set_inheritable(fd, False)  # the program's own children do not hold it
        self.say("resizable")
        self._thread = threading.Thread(target=self._read, name="ddplaunch-agent-channel",
                                        daemon=True)
        self._thread.start()

    def say(self, line):
        data = (line + "\n").encode()
        try:
            os.write(self.fd, data)
        except OSError:
            pass  # the agent is gone: the next collective or take() says so

    def _read(self):
        buf = b""
        while True:
            try:
                chunk = os.read(self.fd, 512)
            except InterruptedError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                r = parse_round(line.decode(errors="replace"))
                if r is not None:
                    self._deliver(r)
            if len(buf) > 4096:
                buf = b""  # a line too long for any round: dropped
        with self._cond:
            self._closed = True
            self._wake_all()

    def _deliver(self, r):
        with self._cond:
            self._latest = r
            self._seq += 1
            self._wake_all()

    def _wake_all(self):
        self._cond.notify_all()
        for ev in list(self._wakers):
            ev.set()

    def pending(self):
        with self._cond:
            return self._seq != self._taken

    def watch(self, ev):
        """ev is set on every new round (and when the channel closes) until
        unwatch(ev)."""
        with self._cond:
            self._wakers.add(ev)

    def unwatch(self, ev):
        with self._cond:
            self._wakers.discard(ev)

    def take(self, timeout):
        """The latest round not taken yet, waiting up to timeout seconds.
        Raises TimeoutError, or ConnectionError when the agent is gone."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._seq != self._taken or self._closed,
                                       timeout):
                raise TimeoutError("no new round from the launcher in %.0f s" % timeout)
            if self._seq == self._taken:
                raise ConnectionError("the launcher's agent closed the channel")
            self._taken = self._seq
            return self._latest
