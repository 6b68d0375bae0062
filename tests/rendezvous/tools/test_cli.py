"""ddp-store and ddp-rdzvd as a shell user sees them: every ddp-store command,
exit codes, --help of both programs, usage errors, an unreachable store."""
import os
import subprocess
import time

from rdzvd_fixture import Rdzvd

STORE = os.environ["DDP_STORE"]
RDZVD = os.environ["DDP_RDZVD"]


def run(*args, env=None, timeout=30):
    return subprocess.run([STORE, *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


def ok(addr, *args):
    r = run("--addr", addr, *args)
    assert r.returncode == 0, (args, r.returncode, r.stderr)
    return r.stdout


def main():
    with Rdzvd() as d:
        addr = f"127.0.0.1:{d.port}"
        assert ok(addr, "ping") == ""
        assert ok(addr, "set", "greeting", "hello world") == ""
        assert ok(addr, "get", "greeting") == "hello world\n"
        assert ok(addr, "add", "n", "5") == "5\n"
        assert ok(addr, "add", "n", "-7") == "-2\n"
        assert ok(addr, "keys") == "2\n"
        assert sorted(ok(addr, "list").splitlines()) == ["greeting", "n"]
        assert ok(addr, "wait", "greeting", "n") == ""
        assert ok(addr, "check", "greeting", "n") == ""
        assert run("--addr", addr, "check", "greeting", "nope").returncode == 4
        assert ok(addr, "delete", "n") == "1\n"
        assert ok(addr, "delete", "n") == "0\n"

        # get/wait time out with exit 3, naming the missing key.
        t0 = time.monotonic()
        r = run("--addr", addr, "--timeout", "0.5", "wait", "greeting", "absent/key")
        assert r.returncode == 3, r
        assert "absent/key" in r.stderr and "timed out" in r.stderr, r.stderr
        assert 0.4 < time.monotonic() - t0 < 10
        r = run("--addr", addr, "--timeout", "0.3", "get", "absent")
        assert r.returncode == 3, r

        # A waiting get returns once another client sets the key.
        waiter = subprocess.Popen([STORE, "--addr", addr, "--timeout", "20", "get", "later"],
                                  stdout=subprocess.PIPE, text=True)
        ok(addr, "set", "later", "now")
        out, _ = waiter.communicate(timeout=30)
        assert waiter.returncode == 0 and out == "now\n", (waiter.returncode, out)

        # MASTER_ADDR / MASTER_PORT are the default address.
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(d.port))
        r = run("get", "greeting", env=env)
        assert r.returncode == 0 and r.stdout == "hello world\n", r

        # Usage errors: exit 2 with a hint.
        for bad in (["--addr", addr], ["--addr", addr, "frob"], ["--addr", addr, "get"],
                    ["--addr", "nocolon", "ping"], ["--addr", addr, "add", "n", "x"],
                    ["--timeout", "-1", "ping"]):
            r = run(*bad)
            assert r.returncode == 2, (bad, r.returncode, r.stderr)
            assert r.stderr.startswith("ddp-store: "), r.stderr
        port = d.port

    # The daemon is gone: exit 1, naming the address.
    r = run("--addr", f"127.0.0.1:{port}", "--timeout", "0.3", "ping")
    assert r.returncode == 1, r
    assert f"127.0.0.1:{port}" in r.stderr, r.stderr

    for prog in (STORE, RDZVD):
        r = subprocess.run([prog, "--help"], capture_output=True, text=True, timeout=10)
        assert r.returncode == 0 and "usage:" in r.stdout, r
    h = subprocess.run([RDZVD, "--help"], capture_output=True, text=True).stdout
    for flag in ("--host", "--port", "--port-file", "--max-key-len", "--max-value-len",
                 "--max-keys-per-request", "--max-total-bytes", "--max-connections",
                 "--max-barrier-world", "--max-list-keys", "-v"):
        assert flag in h, flag
    r = subprocess.run([RDZVD, "--port", "70000"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "--port" in r.stderr, r
    r = subprocess.run([RDZVD, "--max-key-len", "0"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2, r

    # A listing over --max-list-keys is refused (the client is disconnected,
    # the daemon serves on); under it, every key is listed.
    with Rdzvd("--max-list-keys", "2") as d:
        addr = f"127.0.0.1:{d.port}"
        ok(addr, "set", "a", "1")
        ok(addr, "set", "b", "2")
        assert sorted(ok(addr, "list").splitlines()) == ["a", "b"]
        ok(addr, "set", "c", "3")
        r = run("--addr", addr, "list")
        assert r.returncode == 1 and "connection reset" in r.stderr.lower(), r
        assert ok(addr, "keys") == "3\n"

    # SIGINT (Ctrl-C) stops the daemon cleanly too.
    import signal
    with Rdzvd() as d:
        d.proc.send_signal(signal.SIGINT)
        assert d.proc.wait(timeout=10) == 0
        assert "stopped" in d.log_text()

    # A port held by another daemon: a one-line error naming the fix.
    with Rdzvd() as d:
        r = subprocess.run([RDZVD, "--port", str(d.port)], capture_output=True, text=True,
                           timeout=10)
        assert r.returncode == 1 and "--port 0" in r.stderr, r
    print("ddp-store / ddp-rdzvd command lines: all checks passed")


if __name__ == "__main__":
    main()
