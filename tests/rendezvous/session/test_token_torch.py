"""torch clients at a store with a token (ddp-rdzvd --token-file, or
DDP_RDZV_TOKEN): served as always from loopback (127.0.0.1) and from --allow
addresses; from any other address (127.0.0.2 stands for another node) a
client that cannot prove the token is disconnected, and the refusal logged.
Bad token files are refused with a message.

Run by meson under each torch (with_torch.sh); $DDP_RDZVD is the daemon."""
import datetime
import os
import socket
import subprocess
import sys
import tempfile

import torch
import torch.distributed as dist

from rdzvd_fixture import Rdzvd


def served(port, bind):
    """A torch-2.x-style VALIDATE + GET from `bind`: True when answered."""
    s = socket.socket()
    s.bind((bind, 0))
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    s.sendall(bytes([0x00, 0xCE, 0xF7, 0x85, 0x3C, 0x03]) + (1).to_bytes(8, "little") + b"k")
    data = b""
    try:
        while len(data) < 8:
            chunk = s.recv(64)
            if not chunk:
                break
            data += chunk
    except ConnectionResetError:
        pass
    s.close()
    return len(data) >= 8


def torch_client(port):
    store = dist.TCPStore("127.0.0.1", port, 1, False, datetime.timedelta(seconds=10))
    store.set("a", "1")
    assert store.get("a") == b"1"
    assert store.add("n", 5) == 5
    assert store.compare_set("a", "1", "2") == b"2"
    store.wait(["a"], datetime.timedelta(seconds=5))
    assert store.num_keys() >= 2


def check(cond, what, log=""):
    if not cond:
        print("FAIL:", what, "\n" + log, file=sys.stderr)
        sys.exit(1)
    print("ok:", what)


def main():
    tmp = tempfile.TemporaryDirectory(prefix="tok-")
    tok = os.path.join(tmp.name, "token")
    with open(tok, "w") as f:
        f.write("0123456789abcdef-job-token\n")
    os.chmod(tok, 0o600)
    os.environ.pop("DDP_RDZV_TOKEN", None)
    with Rdzvd("--token-file", tok, "--allow", "127.0.0.3") as d:
        torch_client(d.port)
        check(True, f"torch {torch.__version__} client from 127.0.0.1 served with a token set")
        check(served(d.port, "127.0.0.1"), "a raw client from 127.0.0.1 is served")
        check(served(d.port, "127.0.0.3"), "a raw client from --allow 127.0.0.3 is served")
        check(not served(d.port, "127.0.0.2"), "a raw client from 127.0.0.2 is disconnected")
        log = d.log_text()
        check("refused a client from 127.0.0.2" in log, "the refusal is logged", log)
        check("token from " + tok in log, "the daemon says where its token came from", log)
    os.environ["DDP_RDZV_TOKEN"] = "from-the-environment"
    with Rdzvd() as d:
        torch_client(d.port)
        check("token from DDP_RDZV_TOKEN" in d.log_text(), "DDP_RDZV_TOKEN is used")
        check(not served(d.port, "127.0.0.2"), "and strangers are refused")
    del os.environ["DDP_RDZV_TOKEN"]
    empty = os.path.join(tmp.name, "empty")
    open(empty, "w").close()
    short = os.path.join(tmp.name, "short")
    with open(short, "w") as f:
        f.write("0123456789abcde\n")
    os.chmod(short, 0o600)
    for args, want in (
        (["--token-file", empty], "is empty"),
        (["--token-file", short], "is 15 bytes; it must be at least 16, because whoever "
         "records one handshake can test guesses of a short token offline"),
        (["--token-file", os.path.join(tmp.name, "missing")], "cannot read the token file"),
        (["--allow", "node7"], "is not an IPv4 or IPv6 address"),
    ):
        p = subprocess.run([os.environ["DDP_RDZVD"], "--port", "0"] + args,
                           capture_output=True, text=True, timeout=10)
        check(p.returncode != 0 and want in p.stderr, f"{args[0]}: '{want}'", p.stderr)


if __name__ == "__main__":
    main()
