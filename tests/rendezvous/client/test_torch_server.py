"""Our C client against torch's own TCPStore server (the server the launcher
replaces) in that torch's framing (1.13, or 2.x under a torch 2.x
interpreter), and against ddp-rdzvd in 2.x framing; a torch client reads what
the C client stored. ddp-store looks into the store torch hosts."""
import datetime
import os
import socket
import struct
import subprocess
import sys
import threading

import torch
import torch.distributed as dist

from rdzvd_fixture import Rdzvd

PROBE = os.environ["DDP_CLIENT_PROBE"]
V2 = int(torch.__version__.split(".")[0]) >= 2
TORCH_PROTO = "v2" if V2 else "v1"


def run_probe(port, proto, store):
    # The probe waits for "/from_python" (set here once it is running).
    p = subprocess.Popen([PROBE, "127.0.0.1", str(port), proto], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    timer = threading.Timer(0.2, lambda: store.set("from_python", b"py"))
    timer.start()
    out, _ = p.communicate(timeout=60)
    timer.join()
    print(out, end="")
    assert p.returncode == 0, f"client_probe {proto} exited {p.returncode}"
    assert store.get("from_c") == b"hello"
    assert store.get("counter") == b"2"


def store_cli(port, *args):
    framing = [] if V2 else ["--torch113"]
    r = subprocess.run([os.environ["DDP_STORE"], *framing, "--addr", f"127.0.0.1:{port}",
                        "--timeout", "5", *args], capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


def check_reply_order(port, v2):
    """docs/protocol.md: a WAIT whose key is missing is answered when the key
    appears; queries pipelined behind it are run and answered at once (a
    SET behind it is stored at once). Raw frames, the same for torch's
    servers and ours."""
    op = dict(SET=1, GET=3, WAIT=6, NUM=7) if v2 else dict(SET=0, GET=2, WAIT=5, NUM=6)

    def bs(b):
        return struct.pack("<Q", len(b)) + b

    def conn():
        c = socket.create_connection(("127.0.0.1", port), timeout=10)
        if v2:
            c.sendall(b"\x00" + struct.pack("<I", 0x3C85F7CE))
        return c

    def recv_exact(c, n):
        out = b""
        while len(out) < n:
            d = c.recv(n - len(out))
            assert d, "the server closed the connection"
            out += d
        return out

    tag = os.urandom(4).hex().encode()
    w, a, s = b"/order_w_" + tag, b"/order_a_" + tag, b"/order_s_" + tag
    other = conn()
    other.sendall(bytes([op["SET"]]) + bs(a) + bs(b"AAA"))
    c = conn()
    c.sendall(bytes([op["WAIT"]]) + struct.pack("<Q", 1) + bs(w) + bytes([op["GET"]]) + bs(a) +
              bytes([op["SET"]]) + bs(s) + bs(b"S") + bytes([op["GET"]]) + bs(s) +
              bytes([op["NUM"]]))
    # The GETs and GETNUMKEYS come first, the SET behind the wait is stored.
    assert recv_exact(c, 8 + 3) == bs(b"AAA")
    assert recv_exact(c, 8 + 1) == bs(b"S")
    recv_exact(c, 8)
    c.settimeout(0.2)
    try:
        early = c.recv(1)
    except socket.timeout:
        early = None
    assert early is None, f"the wait was answered before its key was set: {early!r}"
    c.settimeout(10)
    other.sendall(bytes([op["SET"]]) + bs(w) + bs(b"x"))
    assert recv_exact(c, 1) == b"\x00"  # STOP_WAITING
    c.close()
    other.close()


def main():
    timeout = datetime.timedelta(seconds=30)
    master = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=timeout)
    run_probe(master.port, TORCH_PROTO, master)
    check_reply_order(master.port, V2)

    # ddp-store looking into a store hosted by torch itself.
    assert store_cli(master.port, "ping")[0] == 0
    assert store_cli(master.port, "set", "/cli", "from shell")[0] == 0
    assert master.get("cli") == b"from shell"
    master.set("py", "from python")
    assert store_cli(master.port, "get", "/py")[1] == "from python\n"
    assert store_cli(master.port, "add", "/counter", "10")[1] == "12\n"
    rc, out, _ = store_cli(master.port, "keys")
    assert rc == 0 and int(out) >= 5, out
    rc, _, err = store_cli(master.port, "--timeout", "0.3", "wait", "/absent")
    assert rc == 3 and "/absent" in err, (rc, err)
    if V2:
        rc, out, _ = store_cli(master.port, "list")
        assert rc == 0 and {"/cli", "/py", "/counter"} <= set(out.split()), out
    with Rdzvd() as d:
        s = dist.TCPStore("127.0.0.1", d.port, is_master=False, timeout=timeout)
        run_probe(d.port, "v2", s)
        check_reply_order(d.port, True)
        check_reply_order(d.port, False)
    print("C client against torch %s's server and ddp-rdzvd: passed" % torch.__version__)


if __name__ == "__main__":
    sys.exit(main())
