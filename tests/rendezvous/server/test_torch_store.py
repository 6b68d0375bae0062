"""torch's own TCPStore client against ddp-rdzvd: every method of its Python
API, each named as it is checked. It runs under whichever torch the
interpreter has: Debian's 1.13 (the 1.13 numbering) or 2.x from the venv
(the 2.x numbering and the methods 1.13 lacks). Under 2.x every 2.x check
runs first against torch's own libuv server, then against ddp-rdzvd, so
the expected results are torch's own."""
import datetime
import sys
import threading
import time

import torch
import torch.distributed as dist

from rdzvd_fixture import Rdzvd

TIMEOUT = datetime.timedelta(seconds=20)
V2 = int(torch.__version__.split(".")[0]) >= 2
BIG = 64 * 1024 * 1024  # the largest value ddp-rdzvd takes by default


def short(v):
    r = repr(v)
    return r if len(r) < 70 else r[:60] + "... (%d)" % len(v)


def check(name, got, want):
    if got != want:
        raise AssertionError("%s: got %s, want %s" % (name, short(got), short(want)))
    print("ok  %-34s %s" % (name, short(got)), flush=True)


def raises(name, fn, words, within=None):
    """fn() must raise an error whose text holds every word; with `within`,
    after about that many seconds."""
    t0 = time.monotonic()
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - torch raises several types
        took = time.monotonic() - t0
        text = str(e).lower()
        assert all(w in text for w in words), "%s: %s" % (name, e)
        if within is not None:
            assert within * 0.9 <= took < within + 9, "%s took %.2f s" % (name, took)
        print("ok  %-34s raised %s after %.2f s" % (name, type(e).__name__, took), flush=True)
        return e
    raise AssertionError("%s did not raise" % name)


def client(port):
    return dist.TCPStore("127.0.0.1", port, is_master=False, timeout=TIMEOUT)


def in_thread(fn):
    box = {}

    def run():
        try:
            box["value"] = fn()
        except Exception as e:  # noqa: BLE001
            box["error"] = e

    t = threading.Thread(target=run)
    t.start()
    return t, box


def joined(t, box, what):
    t.join(30)
    assert not t.is_alive(), what + " never returned"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def common_checks(port):
    """What both generations' Python APIs have."""
    s = client(port)
    s.set("k", b"v")
    check("set/get", s.get("k"), b"v")
    s.set("k", "text value")
    check("set str/get", s.get("k"), b"text value")
    s.set("bin", bytes(range(256)))
    check("set/get 256 byte values", s.get("bin"), bytes(range(256)))
    check("add", s.add("c", 5), 5)
    check("add negative", s.add("c", -7), -2)
    check("get after add", s.get("c"), b"-2")
    check("compare_set missing, empty exp", s.compare_set("cs", "", "x"), b"x")
    check("compare_set present, unequal", s.compare_set("cs", "y", "z"), b"x")
    check("compare_set present, equal", s.compare_set("cs", "x", "w"), b"w")
    check("compare_set missing, expected", s.compare_set("none", "e", "d"), b"e")
    s.wait(["k", "c"])
    s.wait(["k"], datetime.timedelta(seconds=5))
    print("ok  wait (present keys)", flush=True)
    base = s.num_keys()
    check("delete_key present", s.delete_key("k"), True)
    check("delete_key missing", s.delete_key("k"), False)
    check("num_keys after delete", s.num_keys(), base - 1)

    # A second client sees the first one's keys; a waiter is woken.
    s2 = client(port)
    check("get from a second client", s2.get("cs"), b"w")
    s3 = client(port)
    t, box = in_thread(lambda: s3.wait(["late"], datetime.timedelta(seconds=15)))
    s2.set("late", b"1")
    joined(t, box, "wait for a key set later")
    print("ok  wait woken by another client", flush=True)

    # PrefixStore (what init_process_group wraps the agent store in).
    p = dist.PrefixStore("/worker/attempt_0", client(port))
    p.set("x", b"1")
    check("PrefixStore set, plain get", s.get("/worker/attempt_0/x"), b"1")
    check("PrefixStore add", p.add("n", 2), 2)

    # A constructor with world_size joins through "init/".
    a = dist.TCPStore("127.0.0.1", port, world_size=2, is_master=False, timeout=TIMEOUT)
    b = dist.TCPStore("127.0.0.1", port, world_size=2, is_master=False, timeout=TIMEOUT)
    a.set("from_a", b"1")
    check("world_size constructors", b.get("from_a"), b"1")
    return s


def wait_timeout_checks(port):
    s4 = client(port)
    raises("wait timeout", lambda: s4.wait(["never"], datetime.timedelta(seconds=1)),
           ["timeout"], within=1.0)
    return s4


def v1_checks(port):
    s = common_checks(port)
    # "k" deleted; c, cs, bin, late, /worker/attempt_0/{x,n}, from_a, init/
    check("num_keys (1.13 counts init/)", s.num_keys(), 8)
    wait_timeout_checks(port)
    # 1.13 cannot cancel a wait: the timed-out store is not reused.


def v2_checks(port, ours):
    """The 2.x numbering and the methods 1.13 lacks, on a fresh server."""
    s = common_checks(port)
    check("has_extended_api", s.has_extended_api(), True)
    keys = ["/worker/attempt_0/n", "/worker/attempt_0/x", "bin", "c", "cs", "from_a", "late"]
    check("list_keys", sorted(s.list_keys()), sorted(keys))
    # The client lists only keys under its "/" (init/ has none).
    check("num_keys = list_keys + init/", s.num_keys(), len(s.list_keys()) + 1)
    p = dist.PrefixStore("/worker/attempt_0", client(port))
    check("PrefixStore list_keys", sorted(p.list_keys()), ["n", "x"])

    # wait with a timeout, then the same store object is used again.
    s4 = wait_timeout_checks(port)
    check("get after a wait timeout", s4.get("c"), b"-2")
    t, box = in_thread(lambda: s4.wait(["later"], datetime.timedelta(seconds=15)))
    s.set("later", b"1")
    joined(t, box, "wait after a timed-out wait")
    print("ok  wait again after a timeout", flush=True)

    # append, check, multi_set / multi_get.
    s.append("ap", b"x")
    s.append("ap", b"yz")
    check("append creates, then extends", s.get("ap"), b"xyz")
    check("check present", s.check(["ap", "c"]), True)
    check("check missing", s.check(["ap", "missing"]), False)
    s.multi_set(["m1", "m2", "m3"], [b"1", b"", b"three"])
    check("multi_set/multi_get", s.multi_get(["m1", "m2", "m3"]), [b"1", b"", b"three"])
    t, box = in_thread(lambda: client(port).multi_get(["m1", "mlate"]))
    s.set("mlate", b"L")
    check("multi_get waits for a missing key", joined(t, box, "multi_get"), [b"1", b"L"])

    # Queues.
    check("queue_len empty", s.queue_len("q"), 0)
    s.queue_push("q", b"a")
    s.queue_push("q", "b")
    check("queue_len", s.queue_len("q"), 2)
    check("queue_pop oldest", s.queue_pop("q"), b"a")
    check("queue_pop next", s.queue_pop("q", block=False), b"b")
    raises("queue_pop empty, no block", lambda: s.queue_pop("q", block=False), ["empty"])
    q2 = client(port)
    t, box = in_thread(lambda: q2.queue_pop("q"))
    s.queue_push("q", b"late item")
    check("blocking queue_pop", joined(t, box, "queue_pop"), b"late item")
    check("queue_len after pops", s.queue_len("q"), 0)

    # Barriers: world 1; two callers; a timeout, then reuse of the store.
    s.barrier("b1", 1, datetime.timedelta(seconds=5))
    print("ok  barrier world 1", flush=True)
    c2 = client(port)
    t, box = in_thread(lambda: c2.barrier("b2", 2, datetime.timedelta(seconds=15)))
    s.barrier("b2", 2, datetime.timedelta(seconds=15))
    joined(t, box, "barrier world 2")
    print("ok  barrier world 2, two clients", flush=True)
    check("barrier key counts callers", s.get("b2"), b"2")
    bt = client(port)
    raises("barrier timeout", lambda: bt.barrier("bt", 2, datetime.timedelta(seconds=1)),
           ["timeout"], within=1.0)
    check("get after a barrier timeout", bt.get("c"), b"-2")
    # The timed-out arrival still counts (as in torch), so one more caller
    # completes it, and the store object that timed out takes part again.
    t0 = time.monotonic()
    bt.barrier("bt", 2, datetime.timedelta(seconds=5))
    check("barrier after its timeout", (s.get("bt"), time.monotonic() - t0 < 3), (b"2", True))
    t, box = in_thread(lambda: bt.barrier("bt2", 2, datetime.timedelta(seconds=15)))
    c2.barrier("bt2", 2, datetime.timedelta(seconds=15))
    joined(t, box, "barrier reused after a timeout")
    print("ok  new barrier by the store that timed out", flush=True)
    # A key past its world size releases at once (torch's counter).
    t0 = time.monotonic()
    s.barrier("b2", 2, datetime.timedelta(seconds=5))
    check("barrier key reused: at once", time.monotonic() - t0 < 3, True)
    pb = dist.PrefixStore("pre", client(port))
    pb.barrier("pb", 1, datetime.timedelta(seconds=5))
    print("ok  PrefixStore barrier", flush=True)

    # add past INT64_MAX wraps around and keeps the connection.
    s.set("ov", str(2**63 - 1))
    check("add past INT64_MAX wraps", s.add("ov", 1), -2**63)
    check("store usable after the wrap", s.get("ov"), str(-2**63).encode())

    if ours:  # torch's libuv server takes at most 8 MiB per value
        big = bytes(range(256)) * (BIG // 256)
        s.set("big", big)
        check("64 MiB value set/get", client(port).get("big") == big, True)
        check("64 MiB value multi_get", s.multi_get(["big", "m1"])[0] == big, True)
        s.append("big2", big[: BIG // 2])
        s.append("big2", big[BIG // 2:])
        check("64 MiB value by append", s.get("big2") == big, True)
    check("delete_key (2.x)", s.delete_key("ov"), True)


def main():
    print("torch %s (%s numbering)" % (torch.__version__, "2.x" if V2 else "1.13"), flush=True)
    if V2:
        print("-- against torch's own libuv TCPStore server", flush=True)
        master = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                               timeout=TIMEOUT)
        v2_checks(master.port, ours=False)
        del master
    print("-- against ddp-rdzvd", flush=True)
    with Rdzvd() as d:
        if V2:
            v2_checks(d.port, ours=True)
        else:
            v1_checks(d.port)
    print("torch %s TCPStore against ddp-rdzvd: all checks passed" % torch.__version__)


if __name__ == "__main__":
    sys.exit(main())
