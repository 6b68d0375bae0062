"""The Python mirror of the agent channel's grammar
(python/ddplaunch/agent_wire.py) against the vectors the C codec's test
reads too (tests/common/agent_wire_vectors.txt, its path the first
argument): each line parsed alone and formatted again, then all of them as
one stream fed whole, byte by byte and split at every offset. No torch."""
import errno
import os
import re
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

from ddplaunch import agent_wire as aw  # noqa: E402

VECTORS = os.path.join(HERE, "..", "common", "agent_wire_vectors.txt")


def unescape(s):
    r""""\xHH", "\\" and "{C*N}" (the vectors file's header) as bytes."""
    out, i = bytearray(), 0
    while i < len(s):
        m = re.match(r"\\\\|\\x([0-9a-fA-F]{2})|\{(.)\*(\d+)\}", s[i:])
        if m and m.group(0) == "\\\\":
            out += b"\\"
        elif m and m.group(1):
            out.append(int(m.group(1), 16))
        elif m and m.group(2):
            out += m.group(2).encode() * int(m.group(3))
        else:
            out += s[i].encode()
            i += 1
            continue
        i += len(m.group(0))
    return bytes(out)


def load():
    vecs = []
    with open(VECTORS, encoding="ascii") as f:
        for n, raw in enumerate(f, 1):
            raw = raw.rstrip("\n")
            if not raw or raw.startswith("#"):
                continue
            expect, line = raw.split("\t", 1)
            vecs.append((n, unescape(expect).decode("ascii"), unescape(line)))
    return vecs


def dump(msg):
    """The message as the vectors write it (the C test's dump())."""
    if isinstance(msg, aw.WireError):
        return "error " + errno.errorcode[msg.errno]
    if isinstance(msg, aw.Hello):
        return "hello version=%d resizable=%d" % (msg.version, msg.resizable)
    if isinstance(msg, aw.Resizable):
        return "resizable"
    if isinstance(msg, aw.Fixed):
        return "fixed"
    if isinstance(msg, aw.Took):
        return "took round=%d" % msg.round
    if isinstance(msg, aw.Replica):
        return "replica step=%d rank=%d healed=%d tensor=%s" % (
            msg.step, msg.rank, msg.healed, msg.tensor)
    if isinstance(msg, aw.Straggler):
        return "straggler step=%d rank=%d node=%d cause=%s slower_x100=%d" % tuple(msg)
    if isinstance(msg, aw.Round):
        return ("round round=%d rank=%d world=%d local_rank=%d local_world=%d addr=%s "
                "port=%d group_rank=%d group_world=%d" % tuple(msg))
    if isinstance(msg, aw.Numerics):
        return "numerics promise=%s text=%s" % (msg.promise, msg.text)
    return "unknown"


def parse(line):
    try:
        return aw.parse(line)
    except aw.WireError as e:
        return e


class Vectors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.vecs = load()

    def test_enough_vectors(self):
        self.assertGreater(len(self.vecs), 50)

    def test_each_vector(self):
        for n, expect, line in self.vecs:
            msg = parse(line)
            self.assertEqual(dump(msg), expect, "vector at line %d" % n)
            if isinstance(msg, (aw.WireError, aw.Unknown)) or (
                    isinstance(msg, aw.Hello) and msg.version != aw.VERSION):
                continue
            self.assertEqual(aw.format(msg), line + b"\n", "vector at line %d" % n)

    def feed(self, stream, cuts):
        rd, got, pos = aw.Reader(), [], 0
        for c in cuts + [len(stream)]:
            got += rd.feed(stream[pos:c])
            pos = c
        self.assertEqual([dump(m) for m in got], [e for _, e, _ in self.vecs])
        self.assertTrue(rd.idle())

    def test_stream_whole_bytewise_and_split_everywhere(self):
        stream = b"".join(line + b"\n" for _, _, line in self.vecs)
        self.feed(stream, [])
        self.feed(stream, list(range(1, len(stream))))
        for cut in range(1, len(stream)):
            self.feed(stream, [cut])

    def test_format_refuses(self):
        ok = aw.Round(1, 0, 2, 0, 1, "h" * 255, 80, 0, 2)
        self.assertEqual(len(aw.format(ok)), len("round 1 0 2 0 1  80 0 2\n") + 255)
        for bad in (ok._replace(master_addr="h" * 256), ok._replace(master_addr=""),
                    ok._replace(master_addr="has space"), ok._replace(rank=2),
                    ok._replace(master_port=0),
                    # above the C side's int: it could not read the line back
                    ok._replace(round=aw.INT_MAX + 1), ok._replace(world_size=aw.INT_MAX + 1),
                    ok._replace(group_world_size=aw.INT_MAX + 1)):
            with self.assertRaises(aw.WireError) as cm:
                aw.format(bad)
            self.assertEqual(cm.exception.errno, errno.ERANGE)
        top = ok._replace(round=aw.INT_MAX, group_world_size=aw.INT_MAX)
        self.assertEqual(aw.parse(aw.format(top)[:-1]), top)
        with self.assertRaises(aw.WireError):
            aw.format(aw.Hello(2, True))
        self.assertEqual(aw.format(aw.Hello(aw.VERSION, True)), b"hello 1 resizable\n")
        for bad in (aw.Numerics("kept", ""), aw.Numerics("kept", " x"),
                    aw.Numerics("kept", "t" * 901), aw.Numerics("kept", "caf\u00e9")):
            with self.assertRaises(aw.WireError) as cm:
                aw.format(bad)
            self.assertEqual(cm.exception.errno, errno.ERANGE)
        with self.assertRaises(aw.WireError):
            aw.format(aw.Numerics("held", "x"))

    def test_fit_makes_any_text_and_name_valid(self):
        # what ddplaunch.torch tells its agent comes from exception texts
        # and tensor names: fitted, never refused
        for s in ("", " ", " x ", "t" * 2000, "caf\u00e9\tline\nnext", "a  b"):
            line = aw.format(aw.Numerics("dropped", aw.fit_text(s)))
            self.assertEqual(aw.parse(line[:-1]).text, aw.fit_text(s))
            self.assertLessEqual(len(aw.fit_text(s)), aw.TEXT_MAX)
            line = aw.format(aw.Replica(1, 0, True, aw.fit_name(s)))
            self.assertEqual(aw.parse(line[:-1]).tensor, aw.fit_name(s))
        self.assertEqual(aw.fit_text(" keep  inner spaces "), "keep  inner spaces")
        self.assertEqual(aw.fit_name("param 0.weight"), "param?0.weight")


if __name__ == "__main__":
    if len(sys.argv) > 1 and os.path.exists(sys.argv[1]):
        VECTORS = sys.argv.pop(1)
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
