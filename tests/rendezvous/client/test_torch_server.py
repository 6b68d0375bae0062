"""Our C client against torch's own TCPStore server (the server the launcher
replaces) in that torch's framing (1.13, or 2.x under a torch 2.x
interpreter), and against ddp-rdzvd in 2.x framing; a torch client reads what
the C client stored. ddp-store looks into the store torch hosts."""
import datetime
import os
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


def main():
    timeout = datetime.timedelta(seconds=30)
    master = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=timeout)
    run_probe(master.port, TORCH_PROTO, master)

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
    print("C client against torch %s's server and ddp-rdzvd: passed" % torch.__version__)


if __name__ == "__main__":
    sys.exit(main())
