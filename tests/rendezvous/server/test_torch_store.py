"""torch 1.13's own TCPStore client (Debian python3-torch) against ddp-rdzvd:
every operation its Python API has, each result checked."""
import datetime
import sys
import time

import torch.distributed as dist

from rdzvd_fixture import Rdzvd

TIMEOUT = datetime.timedelta(seconds=20)


def client(port):
    return dist.TCPStore("127.0.0.1", port, is_master=False, timeout=TIMEOUT)


def main():
    with Rdzvd() as d:
        s = client(d.port)
        s.set("k", b"v")
        assert s.get("k") == b"v"
        s.set("k", "text value")
        assert s.get("k") == b"text value"
        s.set("bin", bytes(range(256)))
        assert s.get("bin") == bytes(range(256))

        assert s.add("c", 5) == 5
        assert s.add("c", -7) == -2
        assert s.get("c") == b"-2"

        assert s.compare_set("cs", "", "x") == b"x"      # missing + empty expected: stored
        assert s.compare_set("cs", "y", "z") == b"x"     # present, not equal: unchanged
        assert s.compare_set("cs", "x", "w") == b"w"     # present, equal: replaced
        assert s.compare_set("none", "e", "d") == b"e"   # missing + expected: nothing stored

        s.wait(["k", "c"])
        s.wait(["k"], datetime.timedelta(seconds=5))
        # num_keys counts every key, including the constructor's none here.
        assert s.num_keys() == 4, s.num_keys()
        assert s.delete_key("k") is True
        assert s.delete_key("k") is False
        assert s.num_keys() == 3

        # A second client sees the first one's keys; a waiter is woken.
        s2 = client(d.port)
        assert s2.get("cs") == b"w"
        s3 = client(d.port)
        t0 = time.monotonic()
        import threading
        th = threading.Thread(target=lambda: s3.wait(["late"], datetime.timedelta(seconds=15)))
        th.start()
        s2.set("late", b"1")
        th.join(20)
        assert not th.is_alive()
        assert time.monotonic() - t0 < 10

        # wait with a timeout: it must fire.
        s4 = client(d.port)
        t0 = time.monotonic()
        try:
            s4.wait(["never"], datetime.timedelta(seconds=1))
        except RuntimeError as e:
            took = time.monotonic() - t0
            assert 0.9 <= took < 10, took
            assert "timeout" in str(e).lower(), e
        else:
            raise AssertionError("wait did not time out")

        # PrefixStore (what init_process_group wraps the agent store in).
        p = dist.PrefixStore("/worker/attempt_0", client(d.port))
        p.set("x", b"1")
        assert s.get("/worker/attempt_0/x") == b"1"
        assert p.add("n", 2) == 2

        # A constructor with world_size joins through "init/".
        a = dist.TCPStore("127.0.0.1", d.port, world_size=2, is_master=False, timeout=TIMEOUT)
        b = dist.TCPStore("127.0.0.1", d.port, world_size=2, is_master=False, timeout=TIMEOUT)
        a.set("from_a", b"1")
        assert b.get("from_a") == b"1"
        print("torch TCPStore against ddp-rdzvd: all checks passed")


if __name__ == "__main__":
    sys.exit(main())
