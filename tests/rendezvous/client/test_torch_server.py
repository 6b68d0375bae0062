"""Our C client in torch 1.13 framing against torch 1.13's own TCPStore server
(the server the launcher replaces), and against ddp-rdzvd in 2.x framing; a
torch client reads what the C client stored."""
import datetime
import os
import subprocess
import sys
import threading

import torch.distributed as dist

from rdzvd_fixture import Rdzvd

PROBE = os.environ["DDP_CLIENT_PROBE"]


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
    r = subprocess.run([os.environ["DDP_STORE"], "--torch113", "--addr", f"127.0.0.1:{port}",
                        "--timeout", "5", *args], capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


def main():
    timeout = datetime.timedelta(seconds=30)
    master = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=timeout)
    run_probe(master.port, "v1", master)

    # ddp-store looking into a store hosted by torch 1.13 itself.
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
    with Rdzvd() as d:
        s = dist.TCPStore("127.0.0.1", d.port, is_master=False, timeout=timeout)
        run_probe(d.port, "v2", s)
    print("C client against torch 1.13's server and ddp-rdzvd: passed")


if __name__ == "__main__":
    sys.exit(main())
