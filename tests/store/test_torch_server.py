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


def main():
    timeout = datetime.timedelta(seconds=30)
    master = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=timeout)
    run_probe(master.port, "v1", master)
    with Rdzvd() as d:
        s = dist.TCPStore("127.0.0.1", d.port, is_master=False, timeout=timeout)
        run_probe(d.port, "v2", s)
    print("C client against torch 1.13's server and ddp-rdzvd: passed")


if __name__ == "__main__":
    sys.exit(main())
