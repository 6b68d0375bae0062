"""The agent channel's grammar: the Python mirror of common/agent_wire.h
(format and parse only, no I/O). docs/protocol.md, "The agent channel",
gives it byte by byte; tests/common/agent_wire_vectors.txt is read by this
module's test and by the C one, so the two sides cannot drift apart.

A line is ASCII, ends with b"\\n", at most MAX_LINE bytes with it; its
first word is its kind. Worker to agent: "hello V DECL" first, then
"resizable", "fixed", "took R", "numerics PROMISE TEXT", "replica STEP RANK
ACTION TENSOR" (a replica whose state differed from the others', "healed" or
"stopped"), "straggler STEP RANK NODE CAUSE SLOWER" (a rank named slow,
"compute" or "link", or cleared, "none"; SLOWER a ratio with two decimals).
Agent to worker: "round R RANK WORLD
LOCAL_RANK LOCAL_WORLD ADDR PORT GROUP_RANK GROUP_WORLD". A kind this side
does not know parses as Unknown (skip it, not an error): new kinds need no
new version, a change to a known kind's fields does.
"""
import collections
import errno

VERSION = 1
MAX_LINE = 1024  # bytes of one line, its b"\n" included
ADDR_MAX = 255
KIND_MAX = 32
TEXT_MAX = 900  # bytes of a line's closing text (Numerics)
LOCAL_RANK_MAX = 65536  # a local rank's bound (the rendezvous' workers on one node)
NUMERICS = ("kept", "dropped", "refused")
INT_MAX = 2 ** 31 - 1

Hello = collections.namedtuple("Hello", "version resizable")
Resizable = collections.namedtuple("Resizable", "")
Fixed = collections.namedtuple("Fixed", "")
Took = collections.namedtuple("Took", "round")
Round = collections.namedtuple(
    "Round", "round rank world_size local_rank local_world_size master_addr master_port "
    "group_rank group_world_size")
# The promise of a 1-rank run's bits (one of NUMERICS) and the rest of the
# line: 1 to TEXT_MAX bytes of 0x20-0x7e, neither first nor last a space.
Numerics = collections.namedtuple("Numerics", "promise text")
Replica = collections.namedtuple("Replica", "step rank healed tensor")
# A rank named slow ("compute", "link") or cleared ("none"); slower_x100:
# how much slower than the others, in hundredths (1.85 -> 185).
Straggler = collections.namedtuple("Straggler", "step rank node cause slower_x100")
Unknown = collections.namedtuple("Unknown", "kind")


class WireError(ValueError):
    """A line refused; errno is errno.EINVAL, ERANGE or EMSGSIZE, as the C
    codec's return codes."""

    def __init__(self, code, why):
        super().__init__(why)
        self.errno = code


def _einval(why):
    return WireError(errno.EINVAL, why)


def _int(f):
    if not f or not f.isdigit() or not f.isascii() or (len(f) > 1 and f[:1] == b"0"):
        raise _einval("not a number: %r" % f)
    v = int(f)
    if v > INT_MAX:
        raise WireError(errno.ERANGE, "number past 2^31-1: %r" % f)
    return v


class _Cursor:
    """The fields after the kind word, taken in order as the C parser takes
    them, so that a line with several faults is refused for the same first
    one on both sides."""

    def __init__(self, rest):
        self.rest = rest

    def field(self):
        if not self.rest:
            raise _einval("missing fields")
        body = self.rest[1:]  # after the space that comes before each field
        i = body.find(b" ")
        f, self.rest = (body, b"") if i < 0 else (body[:i], body[i:])
        if not f:
            raise _einval("an empty field")
        return f

    def int(self):
        return _int(self.field())

    def end(self):
        if self.rest:
            raise _einval("fields after the last one")


def _addr_ok(a):
    return 0 < len(a) <= ADDR_MAX and all(0x21 <= c <= 0x7e for c in a)


def _round_check(r):
    # every number fits the C side's int (its reader refuses more: ERANGE)
    if not (all(v <= INT_MAX for v in r if isinstance(v, int))
            and r.round >= 0 and r.world_size >= 1 and 0 <= r.rank < r.world_size
            and 1 <= r.local_world_size <= r.world_size
            and 0 <= r.local_rank < LOCAL_RANK_MAX and 1 <= r.master_port <= 65535
            and r.group_world_size >= 1 and 0 <= r.group_rank < r.group_world_size
            and _addr_ok(r.master_addr.encode("ascii", "replace"))):
        raise WireError(errno.ERANGE, "a field of the round out of range: %r" % (r,))


def _parse_round(rest):
    c = _Cursor(rest)
    nums = [c.int() for _ in range(5)]
    a = c.field()
    if len(a) > ADDR_MAX:
        raise WireError(errno.ERANGE, "address longer than %d bytes" % ADDR_MAX)
    nums += [c.int() for _ in range(3)]
    c.end()
    r = Round(*nums[:5], a.decode("ascii"), *nums[5:])
    _round_check(r)
    return r


def _decl(f):
    if f == b"resizable":
        return True
    if f == b"fixed":
        return False
    raise _einval("not a declaration: %r" % f)


def _parse_hello(rest):
    c = _Cursor(rest)
    v = c.int()
    if v < 1:
        raise _einval("version 0")
    if v != VERSION:
        return Hello(v, False)  # that version's fields: the caller says so
    resizable = _decl(c.field())
    c.end()
    return Hello(v, resizable)


def _kind_ok(k):
    return (0 < len(k) <= KIND_MAX and 0x61 <= k[0] <= 0x7a
            and all(0x61 <= c <= 0x7a or 0x30 <= c <= 0x39 or c == 0x2d for c in k))


_KNOWN = (b"hello", b"resizable", b"fixed", b"took", b"round", b"numerics", b"replica",
          b"straggler")


def _text_ok(t):
    return (0 < len(t) <= TEXT_MAX and t[:1] != b" " and t[-1:] != b" "
            and all(0x20 <= c <= 0x7e for c in t))


def _parse_numerics(rest):
    c = _Cursor(rest)
    word = c.field()
    if word.decode("ascii") not in NUMERICS or not c.rest:
        raise _einval("not a promise and a text: %r" % rest)
    text = c.rest[1:]
    if len(text) > TEXT_MAX:
        raise WireError(errno.ERANGE, "text longer than %d bytes" % TEXT_MAX)
    if not _text_ok(text):
        raise _einval("not a text: %r" % text)
    return Numerics(word.decode("ascii"), text.decode("ascii"))


def _parse_replica(c):
    step = c.int()
    rank = c.int()
    action = c.field()
    if action not in (b"healed", b"stopped"):
        raise _einval("not an action: %r" % action)
    name = c.field()
    if len(name) > ADDR_MAX:
        raise WireError(errno.ERANGE, "tensor name longer than %d bytes" % ADDR_MAX)
    c.end()
    return Replica(step, rank, action == b"healed", name.decode("ascii"))


CAUSES = ("none", "compute", "link")


def _parse_ratio(f):
    """DIGITS "." two digits, DIGITS canonical: hundredths 0..INT_MAX."""
    whole, dot, frac = f.partition(b".")
    if (not dot or len(frac) != 2 or not whole or (len(whole) > 1 and whole[:1] == b"0")
            or not all(0x30 <= c <= 0x39 for c in whole + frac)):
        raise _einval("not a ratio with two decimals: %r" % f)
    v = int(whole + frac)
    if v > INT_MAX:
        raise WireError(errno.ERANGE, "ratio out of range: %r" % f)
    return v


def _parse_straggler(c):
    step = c.int()
    rank = c.int()
    node = c.int()
    cause = c.field()
    if cause.decode("ascii") not in CAUSES:
        raise _einval("not a cause: %r" % cause)
    slower = _parse_ratio(c.field())
    c.end()
    return Straggler(step, rank, node, cause.decode("ascii"), slower)


def fit_text(s):
    """s made a valid closing TEXT (Numerics): non-printable characters as
    "?", at most TEXT_MAX bytes, no space first or last."""
    t = "".join(ch if 0x20 <= ord(ch) <= 0x7e else "?" for ch in s)[:TEXT_MAX].strip()
    return t or "?"


def fit_name(s):
    """s made a valid name field (Replica's tensor): "?" for what a name
    cannot hold (spaces, controls, non-ASCII), at most ADDR_MAX bytes."""
    return "".join(ch if 0x21 <= ord(ch) <= 0x7e else "?" for ch in s)[:ADDR_MAX] or "?"


def _name_ok(n):
    return 0 < len(n) <= ADDR_MAX and all(0x21 <= ord(ch) <= 0x7e for ch in n)


def parse(line):
    """One line (bytes, without its b"\\n") as Hello, Resizable, Fixed,
    Took, Round or Unknown; raises WireError."""
    if len(line) >= MAX_LINE:
        raise WireError(errno.EMSGSIZE, "line longer than %d bytes" % (MAX_LINE - 1))
    kind, sp, _ = line.partition(b" ")
    rest = line[len(kind):]
    if not _kind_ok(kind):
        raise _einval("not a kind word: %r" % kind)
    if kind not in _KNOWN:
        return Unknown(kind.decode("ascii"))
    if not all(0x20 <= c <= 0x7e for c in line):
        raise _einval("a byte outside 0x20-0x7e")
    if kind == b"hello":
        return _parse_hello(rest)
    c = _Cursor(rest)
    if kind == b"resizable":
        c.end()
        return Resizable()
    if kind == b"fixed":
        c.end()
        return Fixed()
    if kind == b"took":
        r = c.int()
        c.end()
        return Took(r)
    if kind == b"numerics":
        return _parse_numerics(rest)
    if kind == b"replica":
        return _parse_replica(c)
    if kind == b"straggler":
        return _parse_straggler(c)
    return _parse_round(rest)


def format(msg):
    """msg as one line (bytes, with its b"\\n"); raises WireError as the C
    formatter returns -EINVAL / -ERANGE."""
    if isinstance(msg, Hello):
        if msg.version != VERSION:
            raise _einval("this side writes version %d only" % VERSION)
        return b"hello %d %s\n" % (VERSION, b"resizable" if msg.resizable else b"fixed")
    if isinstance(msg, Resizable):
        return b"resizable\n"
    if isinstance(msg, Fixed):
        return b"fixed\n"
    if isinstance(msg, Took):
        if not 0 <= msg.round <= INT_MAX:
            raise WireError(errno.ERANGE, "round out of range: %r" % (msg.round,))
        return b"took %d\n" % msg.round
    if isinstance(msg, Replica):
        if not (0 <= msg.step <= INT_MAX and 0 <= msg.rank <= INT_MAX and
                _name_ok(msg.tensor)):
            raise WireError(errno.ERANGE, "replica out of range: %r" % (msg,))
        return ("replica %d %d %s %s\n" % (msg.step, msg.rank,
                                           "healed" if msg.healed else "stopped",
                                           msg.tensor)).encode("ascii")
    if isinstance(msg, Straggler):
        if msg.cause not in CAUSES:
            raise _einval("not a cause: %r" % (msg.cause,))
        if not all(0 <= v <= INT_MAX for v in (msg.step, msg.rank, msg.node, msg.slower_x100)):
            raise WireError(errno.ERANGE, "straggler out of range: %r" % (msg,))
        return ("straggler %d %d %d %s %d.%02d\n" % (
            msg.step, msg.rank, msg.node, msg.cause, msg.slower_x100 // 100,
            msg.slower_x100 % 100)).encode("ascii")
    if isinstance(msg, Round):
        _round_check(msg)
        return ("round %d %d %d %d %d %s %d %d %d\n" % tuple(msg)).encode("ascii")
    if isinstance(msg, Numerics):
        if msg.promise not in NUMERICS:
            raise _einval("not a promise: %r" % (msg.promise,))
        text = msg.text.encode("ascii", "replace")
        if not _text_ok(text) or not msg.text.isascii():
            raise WireError(errno.ERANGE, "not a text: %r" % (msg.text,))
        return b"numerics %s %s\n" % (msg.promise.encode("ascii"), text)
    raise _einval("cannot write %r" % (msg,))


class Reader:
    """The incremental reader: feed() bytes as they come, any split; it
    returns the lines ended by them, each a message or a WireError."""

    def __init__(self):
        self._buf = b""
        self._overlong = False

    def feed(self, data):
        out = []
        while data:
            head, nl, data = data.partition(b"\n")
            if not self._overlong and len(self._buf) + len(head) >= MAX_LINE:
                self._overlong, self._buf = True, b""  # dropped up to its b"\n"
            if not self._overlong:
                self._buf += head
            if not nl:
                break
            if self._overlong:
                out.append(WireError(errno.EMSGSIZE, "line longer than %d bytes"
                                     % (MAX_LINE - 1)))
            else:
                try:
                    out.append(parse(self._buf))
                except WireError as e:
                    out.append(e)
            self._buf, self._overlong = b"", False
        return out

    def idle(self):
        return not self._buf and not self._overlong
